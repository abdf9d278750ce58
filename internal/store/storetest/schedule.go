package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// schedEpoch is the time of the schedules the suite writes: fixed, with
// nanoseconds, so a backend that rounds times fails the round trip.
var schedEpoch = time.Date(2031, 5, 6, 7, 8, 9, 987654321, time.UTC)

// newSchedule is a schedule with every field set, state included.
func newSchedule(ns, id string) store.Schedule {
	return store.Schedule{
		Namespace: ns,
		ID:        id,
		Spec: store.ScheduleSpec{Cron: "*/5 * * * * *", TimeZone: "Europe/Berlin", Jitter: 1500 * time.Millisecond,
			StartAt: schedEpoch, EndAt: schedEpoch.Add(48 * time.Hour)},
		Action: store.ScheduleAction{Kind: store.ActionActivity, Type: "report", TaskQueue: "cpu", Node: "n1",
			Input:    []byte(`{"report":"` + id + `"}`),
			Timeouts: store.Timeouts{StartToClose: time.Minute, Heartbeat: 5 * time.Second},
			Retry:    store.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 1.5, MaximumAttempts: 4, NonRetryableErrorTypes: []string{"bad"}},
			Priority: 2},
		Policy: store.SchedulePolicy{Overlap: store.OverlapBufferOne, CatchUp: store.CatchUpAll, CatchUpWindow: 90 * time.Second},
		Paused: true,
		Note:   "waiting for the quarter's close",
		State: store.ScheduleState{
			LastTick: schedEpoch.Add(time.Minute),
			Buffered: schedEpoch.Add(2 * time.Minute),
			Running:  []string{id + "@a", id + "@b"},
			Pending: []store.PendingFire{{Nominal: schedEpoch.Add(3 * time.Minute), ActionID: id + "@c", FireAt: schedEpoch.Add(3*time.Minute + time.Second),
				Origin: "tick", Cancel: []string{id + "@a"}, Decider: "d1", DecidedAt: schedEpoch.Add(4 * time.Minute), Attempts: 2,
				RetryAt: schedEpoch.Add(5 * time.Minute)}},
			Backfills: []store.Backfill{{Start: schedEpoch.Add(-time.Hour), End: schedEpoch, Overlap: store.OverlapAllowAll,
				Done: schedEpoch.Add(-30 * time.Minute)}},
			Recent: []store.ScheduleRecord{{Nominal: schedEpoch, First: schedEpoch.Add(-time.Minute), Count: 3, At: schedEpoch.Add(time.Second),
				Outcome: store.RecordMissed, Origin: "tick", ActionID: id + "@x", RunID: "r1", Detail: "late"}},
			Fired: 7, Skipped: 2, Missed: 3,
		},
		NextDue:   schedEpoch.Add(10 * time.Minute),
		CreatedAt: schedEpoch,
		UpdatedAt: schedEpoch.Add(time.Second),
	}
}

// sameSchedule fails the test unless got is want as stored: times compared
// as instants, version as given.
func sameSchedule(t *testing.T, what string, got, want store.Schedule) {
	t.Helper()
	norm := func(s store.Schedule) string {
		// Times are compared as instants whatever their location.
		return fmt.Sprintf("%+v", utcSchedule(s))
	}
	if !reflect.DeepEqual(utcSchedule(got), utcSchedule(want)) {
		t.Fatalf("%s:\n got %s\nwant %s", what, norm(got), norm(want))
	}
}

// utcSchedule returns s with every time in UTC.
func utcSchedule(s store.Schedule) store.Schedule {
	u := func(t *time.Time) {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	u(&s.Spec.StartAt)
	u(&s.Spec.EndAt)
	u(&s.NextDue)
	u(&s.CreatedAt)
	u(&s.UpdatedAt)
	st := &s.State
	u(&st.LastTick)
	u(&st.Buffered)
	for i := range st.Pending {
		p := &st.Pending[i]
		u(&p.Nominal)
		u(&p.FireAt)
		u(&p.DecidedAt)
		u(&p.RetryAt)
	}
	for i := range st.Backfills {
		b := &st.Backfills[i]
		u(&b.Start)
		u(&b.End)
		u(&b.Done)
	}
	for i := range st.Recent {
		r := &st.Recent[i]
		u(&r.Nominal)
		u(&r.First)
		u(&r.At)
	}
	return s
}

func runSchedule(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("CreateRoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		want := newSchedule("ns", "nightly")
		want.Version = 42 // ignored: a new schedule is version 1
		rec, created, err := s.CreateSchedule(ctx, want)
		if err != nil || !created {
			t.Fatalf("create: created=%v err=%v", created, err)
		}
		want.Version = 1
		sameSchedule(t, "create returned", rec, want)
		got, err := s.GetSchedule(ctx, "ns", "nightly")
		if err != nil {
			t.Fatal(err)
		}
		sameSchedule(t, "read back", got, want)
	})

	t.Run("EmptyInputAndStateRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		want := store.Schedule{Namespace: "ns", ID: "bare", Spec: store.ScheduleSpec{Every: time.Minute},
			Action:    store.ScheduleAction{Kind: store.ActionWorkflow, Type: "sync"},
			Policy:    store.SchedulePolicy{Overlap: store.OverlapSkip, CatchUp: store.CatchUpOne, CatchUpWindow: time.Minute},
			CreatedAt: schedEpoch, UpdatedAt: schedEpoch}
		if _, created, err := s.CreateSchedule(ctx, want); err != nil || !created {
			t.Fatalf("create: created=%v err=%v", created, err)
		}
		got, err := s.GetSchedule(ctx, "ns", "bare")
		if err != nil {
			t.Fatal(err)
		}
		want.Version = 1
		sameSchedule(t, "read back", got, want)
	})

	t.Run("CreateOfATakenIDChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		first := newSchedule("ns", "dup")
		if _, _, err := s.CreateSchedule(ctx, first); err != nil {
			t.Fatal(err)
		}
		other := newSchedule("ns", "dup")
		other.Action.Type = "something-else"
		rec, created, err := s.CreateSchedule(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if created {
			t.Fatal("second create of one id: created = true")
		}
		first.Version = 1
		sameSchedule(t, "second create returned", rec, first)
		got, err := s.GetSchedule(ctx, "ns", "dup")
		if err != nil {
			t.Fatal(err)
		}
		sameSchedule(t, "after second create", got, first)
	})

	t.Run("IDsAreScopedByNamespace", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, ns := range []string{"a", "b"} {
			if _, created, err := s.CreateSchedule(ctx, newSchedule(ns, "same")); err != nil || !created {
				t.Fatalf("create in %s: created=%v err=%v", ns, created, err)
			}
		}
		if err := s.DeleteSchedule(ctx, "a", "same"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSchedule(ctx, "b", "same"); err != nil {
			t.Fatalf("deleting a's schedule touched b's: %v", err)
		}
		if _, err := s.GetSchedule(ctx, "a", "same"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get deleted: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, err := s.GetSchedule(ctx, "ns", "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get: err = %v, want ErrNotFound", err)
		}
		if err := s.DeleteSchedule(ctx, "ns", "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete: err = %v, want ErrNotFound", err)
		}
		ghost := newSchedule("ns", "ghost")
		ghost.Version = 1
		if _, _, err := s.UpdateSchedule(ctx, ghost); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update: err = %v, want ErrNotFound", err)
		}
		if _, err := s.GetSchedule(ctx, "ns", "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update of a missing schedule created it: %v", err)
		}
	})

	t.Run("UpdateIsACompareAndSetOnTheVersion", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		rec, _, err := s.CreateSchedule(ctx, newSchedule("ns", "cas"))
		if err != nil {
			t.Fatal(err)
		}
		next := rec
		next.Paused, next.Note = false, ""
		next.Spec = store.ScheduleSpec{Every: time.Hour, Offset: time.Minute}
		next.Action.Input = []byte("new input")
		next.State.LastTick = schedEpoch.Add(time.Hour)
		next.State.Pending = nil
		next.NextDue = schedEpoch.Add(2 * time.Hour)
		next.UpdatedAt = schedEpoch.Add(time.Hour)
		next.CreatedAt = schedEpoch.Add(99 * time.Hour) // kept as first stored
		got, ok, err := s.UpdateSchedule(ctx, next)
		if err != nil || !ok {
			t.Fatalf("update over version 1: ok=%v err=%v", ok, err)
		}
		want := next
		want.Version, want.CreatedAt = 2, rec.CreatedAt
		sameSchedule(t, "update returned", got, want)

		stale := rec // still version 1
		stale.Note = "stale writer"
		if _, ok, err := s.UpdateSchedule(ctx, stale); err != nil || ok {
			t.Fatalf("update over a stale version: ok=%v err=%v, want refused", ok, err)
		}
		read, err := s.GetSchedule(ctx, "ns", "cas")
		if err != nil {
			t.Fatal(err)
		}
		sameSchedule(t, "after the refused update", read, want)
	})

	t.Run("ConcurrentUpdatesOverOneVersionApplyOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		rec, _, err := s.CreateSchedule(ctx, newSchedule("ns", "race"))
		if err != nil {
			t.Fatal(err)
		}
		const racers = 8
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []int
			errs []error
		)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				mine := rec
				mine.Note = fmt.Sprintf("racer %d", i)
				_, ok, err := s.UpdateSchedule(ctx, mine)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					won = append(won, i)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("concurrent updates failed: %v", errs)
		}
		if len(won) != 1 {
			t.Fatalf("%d of %d updates over one version applied (%v), want exactly 1", len(won), racers, won)
		}
		got, err := s.GetSchedule(ctx, "ns", "race")
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 2 || got.Note != fmt.Sprintf("racer %d", won[0]) {
			t.Fatalf("after the race: version %d note %q, want 2 and racer %d's", got.Version, got.Note, won[0])
		}
	})

	t.Run("ListIsOrderedByIDAndPages", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, id := range []string{"b", "a", "C", "c"} {
			if _, _, err := s.CreateSchedule(ctx, newSchedule("ns", id)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.CreateSchedule(ctx, newSchedule("other", "a0")); err != nil {
			t.Fatal(err)
		}
		ids := func(f store.ScheduleFilter) string {
			t.Helper()
			got, err := s.ListSchedules(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, sc := range got {
				out = append(out, sc.ID)
			}
			return fmt.Sprint(out)
		}
		for _, c := range []struct {
			f    store.ScheduleFilter
			want string
		}{
			{store.ScheduleFilter{Namespace: "ns"}, "[C a b c]"},
			{store.ScheduleFilter{Namespace: "ns", Limit: 2}, "[C a]"},
			{store.ScheduleFilter{Namespace: "ns", After: "a", Limit: 2}, "[b c]"},
			{store.ScheduleFilter{Namespace: "ns", After: "c"}, "[]"},
			{store.ScheduleFilter{Namespace: "none"}, "[]"},
		} {
			if got := ids(c.f); got != c.want {
				t.Errorf("list %+v = %s, want %s", c.f, got, c.want)
			}
		}
	})

	t.Run("DueSchedulesAreThoseDueByNowEarliestFirst", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if next, err := s.NextScheduleDue(ctx); err != nil || !next.IsZero() {
			t.Fatalf("next due of an empty store = %v, %v; want zero", next, err)
		}
		for id, due := range map[string]time.Time{
			"late":   schedEpoch.Add(-time.Minute),
			"now":    schedEpoch,
			"later":  schedEpoch.Add(time.Minute),
			"never":  {},
			"oldest": schedEpoch.Add(-time.Hour),
		} {
			sc := newSchedule("ns", id)
			sc.NextDue = due
			if _, _, err := s.CreateSchedule(ctx, sc); err != nil {
				t.Fatal(err)
			}
		}
		due, err := s.DueSchedules(ctx, schedEpoch, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sc := range due {
			got = append(got, sc.ID)
		}
		if fmt.Sprint(got) != "[oldest late now]" {
			t.Fatalf("due at epoch = %v, want [oldest late now]", got)
		}
		if due, err := s.DueSchedules(ctx, schedEpoch, 1); err != nil || len(due) != 1 || due[0].ID != "oldest" {
			t.Fatalf("due with limit 1 = %v, %v; want the oldest", due, err)
		}
		next, err := s.NextScheduleDue(ctx)
		if err != nil || !next.Equal(schedEpoch.Add(-time.Hour)) {
			t.Fatalf("next due = %v, %v; want %v", next, err, schedEpoch.Add(-time.Hour))
		}
	})
}
