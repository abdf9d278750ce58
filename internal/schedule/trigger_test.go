package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/store"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

func compile(t *testing.T, spec store.ScheduleSpec) *schedule.Trigger {
	t.Helper()
	trig, err := schedule.Compile(spec)
	if err != nil {
		t.Fatalf("compile %+v: %v", spec, err)
	}
	return trig
}

// ticks returns the ticks in [from, to).
func ticks(trig *schedule.Trigger, from, to time.Time) []time.Time {
	var out []time.Time
	after := from.Add(-time.Nanosecond)
	for {
		n, ok := trig.Next(after)
		if !ok || !n.Before(to) {
			return out
		}
		out = append(out, n)
		after = n
	}
}

func TestCompileRefusesBadSpecsNamingFieldAndValue(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		spec store.ScheduleSpec
		want []string // substrings of the error
	}{
		{"NoTrigger", store.ScheduleSpec{}, []string{"cron:", "required"}},
		{"CronAndEvery", store.ScheduleSpec{Cron: "* * * * *", Every: time.Minute}, []string{"every:", "1m0s", "* * * * *"}},
		{"BadCron", store.ScheduleSpec{Cron: "every tuesday"}, []string{"cron:", `"every tuesday"`}},
		{"CronOutOfRange", store.ScheduleSpec{Cron: "0 61 * * *"}, []string{"cron:", `"0 61 * * *"`}},
		{"CronNeverMatches", store.ScheduleSpec{Cron: "0 0 30 2 *"}, []string{"cron:", "matches no date"}},
		{"CronEvery", store.ScheduleSpec{Cron: "@every 5s"}, []string{"cron:", "@every"}},
		{"CronZoneWithoutFields", store.ScheduleSpec{Cron: "CRON_TZ=UTC"}, []string{"cron:", "no fields"}},
		{"CronUnknownZone", store.ScheduleSpec{Cron: "CRON_TZ=Mars/Olympus 0 * * * *"}, []string{"cron:", `"Mars/Olympus"`, "time zone"}},
		{"CronZoneDisagrees", store.ScheduleSpec{Cron: "CRON_TZ=Europe/Berlin 0 * * * *", TimeZone: "America/New_York"},
			[]string{"cron:", "Europe/Berlin", "America/New_York"}},
		{"UnknownZone", store.ScheduleSpec{Cron: "0 * * * *", TimeZone: "Mars/Olympus"}, []string{"time_zone:", `"Mars/Olympus"`}},
		{"LocalZone", store.ScheduleSpec{Cron: "0 * * * *", TimeZone: "Local"}, []string{"time_zone:", `"Local"`}},
		{"ZoneWithInterval", store.ScheduleSpec{Every: time.Hour, TimeZone: "UTC"}, []string{"time_zone:", "interval"}},
		{"NegativeEvery", store.ScheduleSpec{Every: -time.Second}, []string{"every:", "-1s"}},
		{"TinyEvery", store.ScheduleSpec{Every: 10 * time.Millisecond}, []string{"every:", "10ms"}},
		{"NegativeOffset", store.ScheduleSpec{Every: time.Hour, Offset: -time.Minute}, []string{"offset:", "-1m0s"}},
		{"OffsetIsInterval", store.ScheduleSpec{Every: time.Hour, Offset: time.Hour}, []string{"offset:", "1h0m0s"}},
		{"OffsetPastInterval", store.ScheduleSpec{Every: time.Hour, Offset: 2 * time.Hour}, []string{"offset:", "2h0m0s"}},
		{"OffsetWithCron", store.ScheduleSpec{Cron: "0 * * * *", Offset: time.Minute}, []string{"offset:", "1m0s"}},
		{"NegativeJitter", store.ScheduleSpec{Every: time.Hour, Jitter: -time.Second}, []string{"jitter:", "-1s"}},
		{"EndBeforeStart", store.ScheduleSpec{Every: time.Hour, StartAt: at, EndAt: at.Add(-time.Hour)},
			[]string{"end_at:", "2025-12-31T23:00:00Z", "2026-01-01T00:00:00Z"}},
		{"EndAtStart", store.ScheduleSpec{Every: time.Hour, StartAt: at, EndAt: at}, []string{"end_at:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := schedule.Compile(c.spec)
			if !errors.Is(err, schedule.ErrInvalid) {
				t.Fatalf("compile %+v: err = %v, want ErrInvalid", c.spec, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCheckPolicyRefusesUnknownPolicies(t *testing.T) {
	t.Parallel()
	good := store.SchedulePolicy{Overlap: store.OverlapSkip, CatchUp: store.CatchUpOne, CatchUpWindow: time.Minute}
	if err := schedule.CheckPolicy(good); err != nil {
		t.Fatalf("good policy refused: %v", err)
	}
	for _, c := range []struct {
		p    store.SchedulePolicy
		want string
	}{
		{store.SchedulePolicy{Overlap: "sometimes", CatchUp: store.CatchUpOne}, `overlap: "sometimes"`},
		{store.SchedulePolicy{Overlap: store.OverlapSkip, CatchUp: "most"}, `catch_up: "most"`},
		{store.SchedulePolicy{Overlap: store.OverlapSkip, CatchUp: store.CatchUpOne, CatchUpWindow: -time.Second}, "catch_up_window: -1s"},
	} {
		err := schedule.CheckPolicy(c.p)
		if !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("policy %+v: err = %v, want ErrInvalid mentioning %q", c.p, err, c.want)
		}
	}
}

func TestTicksOfCronAndIntervalSpecs(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		spec store.ScheduleSpec
		to   time.Duration
		want []string
	}{
		{"FiveFieldsInUTC", store.ScheduleSpec{Cron: "15 */6 * * *"}, 24 * time.Hour,
			[]string{"00:15", "06:15", "12:15", "18:15"}},
		{"SixFieldsWithSeconds", store.ScheduleSpec{Cron: "*/20 0 0 * * *"}, 2 * time.Minute,
			[]string{"00:00:00", "00:00:20", "00:00:40"}},
		{"DescriptorInZone", store.ScheduleSpec{Cron: "@daily", TimeZone: "Asia/Tokyo"}, 48 * time.Hour,
			[]string{"06-01T15:00", "06-02T15:00"}},
		{"CronTZPrefix", store.ScheduleSpec{Cron: "CRON_TZ=America/New_York 0 9 * * *"}, 48 * time.Hour,
			[]string{"06-01T13:00", "06-02T13:00"}},
		{"IntervalWithOffset", store.ScheduleSpec{Every: time.Hour, Offset: 15 * time.Minute}, 3 * time.Hour,
			[]string{"00:15", "01:15", "02:15"}},
		{"IntervalOfNinetySeconds", store.ScheduleSpec{Every: 90 * time.Second}, 5 * time.Minute,
			[]string{"00:00:00", "00:01:30", "00:03:00", "00:04:30"}},
		{"StartAndEndBound", store.ScheduleSpec{Every: time.Hour, StartAt: from.Add(2 * time.Hour), EndAt: from.Add(4 * time.Hour)}, 24 * time.Hour,
			[]string{"02:00", "03:00"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := ticks(compile(t, c.spec), from, from.Add(c.to))
			if len(got) != len(c.want) {
				t.Fatalf("ticks = %v, want %d like %v", got, len(c.want), c.want)
			}
			for i, g := range got {
				if s := g.Format(time.RFC3339); !strings.Contains(s, c.want[i]) {
					t.Errorf("tick %d = %s, want one at %s", i, s, c.want[i])
				}
			}
		})
	}
}

func TestIntervalTicksBeforeTheEpochAreOnTheGrid(t *testing.T) {
	t.Parallel()
	trig := compile(t, store.ScheduleSpec{Every: 7 * time.Second, Offset: 3 * time.Second})
	for _, after := range []time.Time{time.Unix(-100, 0), time.Unix(-4, 0), time.Unix(0, 0), time.Unix(3, 0), time.Unix(1e9, 5)} {
		n, ok := trig.Next(after)
		if !ok || !n.After(after) || n.Sub(after) > 7*time.Second || (n.Unix()-3)%7 != 0 || n.Nanosecond() != 0 {
			t.Errorf("next after %v = %v (ok %v): not the first tick of the grid 3s + k*7s after it", after.Unix(), n.Unix(), ok)
		}
	}
}

// TestDaylightSavingChanges pins the DST rule: a wall-clock time skipped
// by the spring change does not fire; one repeated by the autumn change
// fires once (at its first occurrence) when the spec names hours, on both
// occurrences when its hour field is *.
func TestDaylightSavingChanges(t *testing.T) {
	t.Parallel()
	ny, berlin := mustZone(t, "America/New_York"), mustZone(t, "Europe/Berlin")
	day := func(loc *time.Location, y int, m time.Month, d int) (time.Time, time.Time) {
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	for _, c := range []struct {
		name  string
		spec  store.ScheduleSpec
		loc   *time.Location
		y     int
		m     time.Month
		d     int
		count int
		first string // the first tick's UTC time, when count > 0
	}{
		{"NewYorkSpringDailyAtMissingTimeDoesNotFire", store.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "America/New_York"}, ny, 2026, 3, 8, 0, ""},
		{"NewYorkSpringDailyNextDayFires", store.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "America/New_York"}, ny, 2026, 3, 9, 1, "2026-03-09T06:30:00Z"},
		{"NewYorkSpringHourlyFires23Times", store.ScheduleSpec{Cron: "0 * * * *", TimeZone: "America/New_York"}, ny, 2026, 3, 8, 23, "2026-03-08T05:00:00Z"},
		{"NewYorkAutumnDailyAtRepeatedTimeFiresOnce", store.ScheduleSpec{Cron: "30 1 * * *", TimeZone: "America/New_York"}, ny, 2026, 11, 1, 1, "2026-11-01T05:30:00Z"},
		{"NewYorkAutumnEveryMinuteOfHourOneFires60Times", store.ScheduleSpec{Cron: "* 1 * * *", TimeZone: "America/New_York"}, ny, 2026, 11, 1, 60, "2026-11-01T05:00:00Z"},
		{"NewYorkAutumnHourlyFires25Times", store.ScheduleSpec{Cron: "0 * * * *", TimeZone: "America/New_York"}, ny, 2026, 11, 1, 25, "2026-11-01T04:00:00Z"},
		{"BerlinSpringDailyAtMissingTimeDoesNotFire", store.ScheduleSpec{Cron: "CRON_TZ=Europe/Berlin 30 2 * * *"}, berlin, 2026, 3, 29, 0, ""},
		{"BerlinAutumnDailyAtRepeatedTimeFiresOnce", store.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, berlin, 2026, 10, 25, 1, "2026-10-25T00:30:00Z"},
		{"BerlinAutumnHalfHourlyFires50Times", store.ScheduleSpec{Cron: "*/30 * * * *", TimeZone: "Europe/Berlin"}, berlin, 2026, 10, 25, 50, "2026-10-24T22:00:00Z"},
		{"BerlinOrdinaryDayDailyFiresOnce", store.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, berlin, 2026, 7, 1, 1, "2026-07-01T00:30:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			from, to := day(c.loc, c.y, c.m, c.d)
			got := ticks(compile(t, c.spec), from, to)
			if len(got) != c.count {
				t.Fatalf("%d ticks on %d-%02d-%02d in %s, want %d: %v", len(got), c.y, c.m, c.d, c.loc, c.count, got)
			}
			if c.count > 0 && got[0].Format(time.RFC3339) != c.first {
				t.Fatalf("first tick %s, want %s", got[0].Format(time.RFC3339), c.first)
			}
			for i := 1; i < len(got); i++ {
				if !got[i].After(got[i-1]) {
					t.Fatalf("ticks out of order: %v", got)
				}
			}
		})
	}
}

func TestJitterIsDeterministicAndWithinItsBound(t *testing.T) {
	t.Parallel()
	const bound = 30 * time.Second
	trig := compile(t, store.ScheduleSpec{Every: time.Minute, Jitter: bound})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		nominal := start.Add(time.Duration(i) * time.Minute)
		at := trig.FireAt(schedule.Key("ns", "s"), nominal)
		d := at.Sub(nominal)
		if d < 0 || d >= bound {
			t.Fatalf("tick %v fires %v after its nominal time, outside [0, %v)", nominal, d, bound)
		}
		if again := trig.FireAt(schedule.Key("ns", "s"), nominal); !again.Equal(at) {
			t.Fatalf("tick %v: fire instant %v then %v; every server must compute the same", nominal, at, again)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Fatalf("1000 ticks drew only %d distinct delays: the jitter does not spread them", len(seen))
	}
	if a, b := schedule.Jitter("ns/a", start, bound), schedule.Jitter("ns/b", start, bound); a == b {
		t.Fatalf("two schedules' ticks at one nominal time got the same delay %v; their fires would not spread", a)
	}
	if d := schedule.Jitter("ns/a", start, 0); d != 0 {
		t.Fatalf("no jitter bound drew %v", d)
	}
}

func TestActionIDIsTheScheduleIDAndTheNominalTimeInUTC(t *testing.T) {
	t.Parallel()
	berlin := mustZone(t, "Europe/Berlin")
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), "nightly@2026-03-08T07:00:00Z"},
		{time.Date(2026, 3, 8, 8, 0, 0, 0, berlin), "nightly@2026-03-08T07:00:00Z"},
		{time.Date(2026, 3, 8, 7, 0, 1, 500_000_000, time.UTC), "nightly@2026-03-08T07:00:01.5Z"},
	} {
		if got := schedule.ActionID("nightly", c.at); got != c.want {
			t.Errorf("ActionID(%v) = %s, want %s", c.at, got, c.want)
		}
	}
	if n := len("@" + time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC).Format(time.RFC3339Nano)); n > schedule.ActionIDLen {
		t.Fatalf("an action id suffix is %d bytes, more than ActionIDLen %d", n, schedule.ActionIDLen)
	}
}
