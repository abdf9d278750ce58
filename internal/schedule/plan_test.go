package schedule_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/store"
)

// monday is where the simulated weeks start: 2026-03-02, a Monday, so the
// week holds the New York spring change on Sunday 2026-03-08.
var monday = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// start is one action a simulated schedule started.
type start struct {
	nominal, at time.Time
	origin      string
}

// sim is a scheduler in miniature over a fake clock: it looks at the
// schedule when NextDue says, decides, and carries out what was decided at
// once. Each action it starts runs for dur, unless canceled.
type sim struct {
	t      *testing.T
	clk    *clock.Fake
	trig   *schedule.Trigger
	sc     store.Schedule
	tm     schedule.Timing
	dur    time.Duration
	closes map[string]time.Time // when each started action closes
	starts []start
	cancel int // actions canceled while open
	skip   int
	missed int
	down   bool // no pass runs: the server is down
}

func newSim(t *testing.T, spec store.ScheduleSpec, policy store.SchedulePolicy, dur time.Duration) *sim {
	t.Helper()
	s := &sim{t: t, clk: clock.NewFake(monday), trig: compile(t, spec), dur: dur, closes: map[string]time.Time{},
		tm: schedule.Timing{Poll: time.Second, Grace: 5 * time.Second}}
	if err := schedule.CheckPolicy(policy); err != nil {
		t.Fatal(err)
	}
	s.sc = store.Schedule{Namespace: "ns", ID: "s", Spec: spec, Policy: policy,
		State: store.ScheduleState{LastTick: monday.Add(-time.Nanosecond)}}
	return s
}

// open reports whether action id is open now.
func (s *sim) open(id string) bool {
	end, ok := s.closes[id]
	return ok && end.After(s.clk.Now())
}

// pass looks at the schedule once, as the scheduler does.
func (s *sim) pass() {
	now := s.clk.Now()
	s.sc.State.Running = slices.DeleteFunc(slices.Clone(s.sc.State.Running), func(id string) bool { return !s.open(id) })
	plan := schedule.Decide(s.trig, s.sc, schedule.Pass{Now: now, Decider: "sim"})
	s.skip += plan.Skipped
	s.missed += plan.Missed
	s.sc.State = plan.State
	s.carryOut()
}

// carryOut starts every pending fire, canceling what it says first.
func (s *sim) carryOut() {
	now := s.clk.Now()
	for _, f := range slices.Clone(s.sc.State.Pending) {
		for _, c := range f.Cancel {
			if s.open(c) {
				s.closes[c] = now
				s.cancel++
			}
		}
		if _, dup := s.closes[f.ActionID]; dup {
			s.t.Fatalf("tick %v fired twice (action %s)", f.Nominal, f.ActionID)
		}
		s.closes[f.ActionID] = now.Add(s.dur)
		s.starts = append(s.starts, start{nominal: f.Nominal, at: now, origin: f.Origin})
		if !schedule.Settle(&s.sc.State, f.ActionID, store.ScheduleRecord{Nominal: f.Nominal, At: now, Outcome: store.RecordStarted}) {
			s.t.Fatalf("fire %s was not pending", f.ActionID)
		}
	}
}

// runUntil advances the fake clock from one due time to the next up to
// end, passing over the schedule at each (unless the server is down).
func (s *sim) runUntil(end time.Time) {
	s.t.Helper()
	for range 1_000_000 {
		due := schedule.NextDue(s.trig, s.sc, s.clk.Now(), s.tm)
		if s.down || due.IsZero() || due.After(end) {
			s.clk.AdvanceTo(end)
			return
		}
		s.clk.AdvanceTo(due)
		s.pass()
	}
	s.t.Fatal("the simulation did not reach its end: a pass made no progress")
}

func (s *sim) nominals() []time.Time {
	var out []time.Time
	for _, st := range s.starts {
		out = append(out, st.nominal)
	}
	return out
}

// hourly is every hour on the hour, in UTC.
var hourly = store.ScheduleSpec{Every: time.Hour}

func policy(o store.Overlap) store.SchedulePolicy {
	return store.SchedulePolicy{Overlap: o, CatchUp: store.CatchUpOne, CatchUpWindow: time.Minute}
}

func TestAWeekOfHourlyTicksUnderEachOverlapPolicy(t *testing.T) {
	t.Parallel()
	week := monday.Add(7*24*time.Hour - time.Second) // 168 ticks, 00:00 Monday to 23:00 Sunday
	for _, c := range []struct {
		name    string
		overlap store.Overlap
		dur     time.Duration // each action runs this long
		starts  int
		skipped int
		cancels int
	}{
		{"ShortActionsAllFireUnderSkip", store.OverlapSkip, 30 * time.Minute, 168, 0, 0},
		{"AllowAllFiresEveryTick", store.OverlapAllowAll, 90 * time.Minute, 168, 0, 0},
		{"SkipDropsTicksWhileTheLastRuns", store.OverlapSkip, 90 * time.Minute, 84, 84, 0},
		{"CancelPreviousFiresEveryTickAndCancelsTheOpenOne", store.OverlapCancelPrevious, 90 * time.Minute, 168, 0, 167},
		// Starts at 0h, 1.5h, 3h, …: each close releases the buffered
		// tick; a week of 168h holds 112 of them, the tick of 167h is
		// still buffered at its end, and the rest are skipped.
		{"BufferOneFiresTheBufferedTickWhenTheLastCloses", store.OverlapBufferOne, 90 * time.Minute, 112, 55, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, hourly, policy(c.overlap), c.dur)
			s.runUntil(week)
			if len(s.starts) != c.starts || s.skip != c.skipped || s.cancel != c.cancels {
				t.Fatalf("%d starts, %d skipped, %d canceled; want %d, %d, %d", len(s.starts), s.skip, s.cancel, c.starts, c.skipped, c.cancels)
			}
			for i, st := range s.starts {
				if i > 0 && !st.nominal.After(s.starts[i-1].nominal) {
					t.Fatalf("start %d: nominal %v not after the previous %v", i, st.nominal, s.starts[i-1].nominal)
				}
				if st.at.Before(st.nominal) {
					t.Fatalf("start %d fired at %v, before its nominal time %v", i, st.at, st.nominal)
				}
				if st.nominal.Sub(monday)%time.Hour != 0 {
					t.Fatalf("start %d has nominal time %v, not a tick of the schedule", i, st.nominal)
				}
				if c.overlap != store.OverlapBufferOne && !st.at.Equal(st.nominal) {
					t.Fatalf("start %d fired at %v, want on time at %v", i, st.at, st.nominal)
				}
			}
			if c.overlap == store.OverlapBufferOne {
				// A buffered tick keeps its nominal time and starts within a
				// poll of the previous action's close.
				for i := 1; i < len(s.starts); i++ {
					prevClose := s.starts[i-1].at.Add(c.dur)
					if st := s.starts[i]; st.at.Before(prevClose) || st.at.Sub(prevClose) > s.tm.Poll {
						t.Fatalf("buffered start %d at %v; the previous closed at %v (poll %v)", i, st.at, prevClose, s.tm.Poll)
					}
				}
			}
		})
	}
}

// TestCatchUpAfterAThreeHourOutage stops passes for three hours of a
// quarter-hourly schedule: the ticks later than the one-minute window are
// missed, and the policy decides which fire when the server is back.
func TestCatchUpAfterAThreeHourOutage(t *testing.T) {
	t.Parallel()
	every15 := store.ScheduleSpec{Every: 15 * time.Minute}
	downAt := monday.Add(10*time.Hour + time.Second) // just after the 10:00 tick fired
	upAt := downAt.Add(3 * time.Hour)                // 13:00:01: the 13:00 tick is a second late, within the window
	q := func(h, m int) time.Time { return monday.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	for _, c := range []struct {
		catchUp store.CatchUp
		// fired in the pass when the server is back
		want   []time.Time
		missed int
	}{
		{store.CatchUpAll, []time.Time{q(10, 15), q(10, 30), q(10, 45), q(11, 0), q(11, 15), q(11, 30), q(11, 45), q(12, 0), q(12, 15), q(12, 30), q(12, 45), q(13, 0)}, 0},
		{store.CatchUpOne, []time.Time{q(12, 45), q(13, 0)}, 10},
		{store.CatchUpSkip, []time.Time{q(13, 0)}, 11},
	} {
		t.Run(string(c.catchUp), func(t *testing.T) {
			t.Parallel()
			s := newSim(t, every15, store.SchedulePolicy{Overlap: store.OverlapAllowAll, CatchUp: c.catchUp, CatchUpWindow: time.Minute}, time.Second)
			s.runUntil(downAt)
			before := len(s.starts)
			if before != 41 { // 00:00 … 10:00
				t.Fatalf("%d starts before the outage, want 41", before)
			}
			s.down = true
			s.runUntil(upAt)
			if len(s.starts) != before {
				t.Fatalf("%d starts while down", len(s.starts)-before)
			}
			s.down = false
			s.pass()
			got := s.nominals()[before:]
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("fired when back: %v\nwant %v", got, c.want)
			}
			for _, st := range s.starts[before:] {
				if !st.at.Equal(upAt) {
					t.Fatalf("caught-up tick %v fired at %v, want at once when back (%v)", st.nominal, st.at, upAt)
				}
			}
			if s.missed != c.missed || s.sc.State.Missed != int64(c.missed) {
				t.Fatalf("missed %d (state %d), want %d", s.missed, s.sc.State.Missed, c.missed)
			}
			if c.missed > 0 {
				r := s.sc.State.Recent[len(s.sc.State.Recent)-1-len(got)]
				if r.Outcome != store.RecordMissed || r.Count != int64(c.missed) || !r.First.Equal(q(10, 15)) {
					t.Fatalf("missed record %+v, want %d ticks from 10:15", r, c.missed)
				}
			}
			// Afterwards the schedule is back on time.
			s.runUntil(q(14, 0).Add(time.Second))
			if last := s.starts[len(s.starts)-1]; !last.nominal.Equal(q(14, 0)) || !last.at.Equal(q(14, 0)) {
				t.Fatalf("last start %+v, want 14:00 on time", last)
			}
		})
	}
}

func TestOneMissedTickIsTheLatestEvenPastAPassesScan(t *testing.T) {
	t.Parallel()
	// A one-second schedule down for two days: more ticks than one pass
	// steps over; the one that fires is still the latest missed.
	s := newSim(t, store.ScheduleSpec{Every: time.Second}, store.SchedulePolicy{Overlap: store.OverlapAllowAll, CatchUp: store.CatchUpOne, CatchUpWindow: 0}, time.Millisecond)
	s.down = true
	s.runUntil(monday.Add(48*time.Hour + 500*time.Millisecond))
	s.down = false
	for len(s.starts) == 0 {
		s.pass()
	}
	if got := s.starts[0].nominal; !got.Equal(monday.Add(48 * time.Hour)) {
		t.Fatalf("fired %v, want the latest missed tick %v", got, monday.Add(48*time.Hour))
	}
	if s.missed != 48*3600 { // 00:00:00 … 47:59:59
		t.Fatalf("missed %d, want %d", s.missed, 48*3600)
	}
}

func TestPauseStopsTicksAndResumeDoesNotCatchUp(t *testing.T) {
	t.Parallel()
	s := newSim(t, hourly, store.SchedulePolicy{Overlap: store.OverlapAllowAll, CatchUp: store.CatchUpAll, CatchUpWindow: 24 * time.Hour}, time.Minute)
	s.runUntil(monday.Add(2*time.Hour + time.Minute)) // 00:00, 01:00, 02:00
	s.sc.Paused = true
	s.runUntil(monday.Add(26 * time.Hour))
	if len(s.starts) != 3 {
		t.Fatalf("%d starts, want 3: a paused schedule fired", len(s.starts))
	}
	if due := schedule.NextDue(s.trig, s.sc, s.clk.Now(), s.tm); !due.IsZero() {
		t.Fatalf("paused schedule due at %v, want never", due)
	}
	s.sc.Paused = false
	s.sc.State = schedule.Resumed(s.sc.State, s.clk.Now())
	s.runUntil(monday.Add(28*time.Hour + time.Minute))
	if got := fmt.Sprint(s.nominals()[3:]); got != fmt.Sprint([]time.Time{monday.Add(27 * time.Hour), monday.Add(28 * time.Hour)}) {
		t.Fatalf("after resume fired %s, want only 27:00 and 28:00 (no catch-up of the pause, even within the window)", got)
	}
}

func TestBackfillFiresEachTickOfTheRangeWithItsNominalTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		overlap store.Overlap
		want    int
	}{
		{store.OverlapAllowAll, 6},
		{store.OverlapSkip, 1}, // the first one's action is open when the others come
	} {
		t.Run(string(c.overlap), func(t *testing.T) {
			t.Parallel()
			s := newSim(t, hourly, policy(store.OverlapSkip), time.Minute)
			s.clk.AdvanceTo(monday.Add(30 * 24 * time.Hour))
			s.sc.State.LastTick = s.clk.Now()
			s.sc.State.Backfills = []store.Backfill{{Start: monday.Add(2 * time.Hour), End: monday.Add(8 * time.Hour), Overlap: c.overlap}}
			s.pass()
			if len(s.starts) != c.want {
				t.Fatalf("%d backfilled starts, want %d", len(s.starts), c.want)
			}
			for i, st := range s.starts {
				if want := monday.Add(time.Duration(2+i) * time.Hour); !st.nominal.Equal(want) || st.origin != schedule.OriginBackfill {
					t.Fatalf("backfill start %d: %+v, want nominal %v from a backfill", i, st, want)
				}
			}
			if len(s.sc.State.Backfills) != 0 {
				t.Fatalf("backfill still waiting after its range was worked through: %+v", s.sc.State.Backfills)
			}
		})
	}
}

func TestBackfillLongerThanAPassContinuesInTheNext(t *testing.T) {
	t.Parallel()
	s := newSim(t, store.ScheduleSpec{Every: time.Minute}, policy(store.OverlapAllowAll), time.Second)
	s.clk.AdvanceTo(monday.Add(24 * time.Hour))
	s.sc.State.LastTick = s.clk.Now()
	s.sc.State.Backfills = []store.Backfill{{Start: monday, End: monday.Add(5 * time.Hour), Overlap: store.OverlapAllowAll}}
	s.pass()
	if len(s.starts) != 100 {
		t.Fatalf("first pass started %d, want the cap of 100", len(s.starts))
	}
	if due := schedule.NextDue(s.trig, s.sc, s.clk.Now(), s.tm); !due.Equal(s.clk.Now()) {
		t.Fatalf("with backfill left the schedule is due at %v, want now", due)
	}
	for range 2 {
		s.pass()
	}
	if len(s.starts) != 300 || len(s.sc.State.Backfills) != 0 {
		t.Fatalf("after three passes %d starts and %d backfills left, want 300 and none", len(s.starts), len(s.sc.State.Backfills))
	}
}

func TestDailyScheduleThroughTheSpringChangeWeekInNewYork(t *testing.T) {
	t.Parallel()
	spec := store.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "America/New_York"}
	s := newSim(t, spec, policy(store.OverlapSkip), time.Minute)
	s.runUntil(monday.Add(8 * 24 * time.Hour))
	// Mon 2 … Mon 9 March: 8 days, minus Sunday the 8th when 02:30 does
	// not exist.
	if len(s.starts) != 7 {
		t.Fatalf("%d starts, want 7: %v", len(s.starts), s.nominals())
	}
	ny := mustZone(t, "America/New_York")
	for _, st := range s.starts {
		local := st.nominal.In(ny)
		if local.Hour() != 2 || local.Minute() != 30 || local.Day() == 8 {
			t.Fatalf("started at local %v", local)
		}
	}
}

func TestJitteredTicksFireWithinTheBoundInNominalOrder(t *testing.T) {
	t.Parallel()
	spec := store.ScheduleSpec{Every: time.Minute, Jitter: 20 * time.Second}
	s := newSim(t, spec, policy(store.OverlapAllowAll), time.Second)
	s.runUntil(monday.Add(24 * time.Hour))
	if len(s.starts) != 24*60 {
		t.Fatalf("%d starts in a day, want %d", len(s.starts), 24*60)
	}
	late := 0
	for _, st := range s.starts {
		d := st.at.Sub(st.nominal)
		if d < 0 || d >= spec.Jitter {
			t.Fatalf("tick %v fired %v after its nominal time, outside [0, %v)", st.nominal, d, spec.Jitter)
		}
		if d > 0 {
			late++
		}
	}
	if late < len(s.starts)/2 {
		t.Fatalf("only %d of %d ticks were delayed: the jitter is not applied", late, len(s.starts))
	}
}

func TestTriggerNowMeetsTheOverlapPolicy(t *testing.T) {
	t.Parallel()
	s := newSim(t, hourly, policy(store.OverlapSkip), 2*time.Hour)
	s.runUntil(monday.Add(time.Minute)) // 00:00 fired and runs until 02:00
	now := s.clk.Now()
	for _, c := range []struct {
		overlap store.Overlap
		fires   bool
	}{
		{store.OverlapSkip, false},
		{store.OverlapAllowAll, true},
	} {
		plan := schedule.TriggerNow(s.trig, s.sc, schedule.Pass{Now: now, Decider: "sim"}, now, c.overlap)
		if got := len(plan.Fired) == 1; got != c.fires {
			t.Fatalf("trigger under %s: fired %v, want %v", c.overlap, got, c.fires)
		}
		if c.fires && (plan.Fired[0].ActionID != schedule.ActionID("s", now) || plan.Fired[0].Origin != schedule.OriginTrigger) {
			t.Fatalf("trigger fire %+v", plan.Fired[0])
		}
	}
}

func TestRecentOutcomesKeepTheLatest(t *testing.T) {
	t.Parallel()
	var st store.ScheduleState
	for i := range schedule.MaxRecent + 5 {
		schedule.Record(&st, store.ScheduleRecord{Nominal: monday.Add(time.Duration(i) * time.Hour)})
	}
	if len(st.Recent) != schedule.MaxRecent || !st.Recent[0].Nominal.Equal(monday.Add(5*time.Hour)) {
		t.Fatalf("recent holds %d from %v, want %d from the 6th", len(st.Recent), st.Recent[0].Nominal, schedule.MaxRecent)
	}
}
