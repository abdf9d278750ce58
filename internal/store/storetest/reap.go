package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// reapEpoch is when the closed work of the reaping tests closed: minutes
// apart, so a cutoff between two splits them.
var reapEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// closeActivity inserts activity id of ns and closes it completed at
// closedAt after one attempt.
func closeActivity(t *testing.T, s store.Store, ns, id string, closedAt time.Time) {
	t.Helper()
	apply(t, s, store.InsertActivity{Activity: newActivity(ns, id)})
	got := apply(t, s, store.EndAttempt{Namespace: ns, ID: id, StartedAt: closedAt.Add(-time.Second),
		Attempt: &store.Attempt{Number: 1, WorkerID: 1, StartedAt: closedAt.Add(-time.Second), EndedAt: closedAt,
			Outcome: store.OutcomeCompleted},
		State: store.StateCompleted, Result: []byte(`"ok"`), ClosedAt: closedAt})
	if !got[0] {
		t.Fatalf("close activity %s/%s: refused", ns, id)
	}
}

// closeScheduled inserts activity id of ns scheduled at scheduledAt and
// closes it in state at closedAt after one attempt.
func closeScheduled(t *testing.T, s store.Store, ns, id string, scheduledAt, closedAt time.Time, state store.ActivityState) {
	t.Helper()
	a := newActivity(ns, id)
	a.ScheduledAt = scheduledAt
	apply(t, s, store.InsertActivity{Activity: a})
	outcome := store.OutcomeCompleted
	if state != store.StateCompleted {
		outcome = store.OutcomeFailed
	}
	got := apply(t, s, store.EndAttempt{Namespace: ns, ID: id, StartedAt: scheduledAt,
		Attempt: &store.Attempt{Number: 1, WorkerID: 1, StartedAt: scheduledAt, EndedAt: closedAt, Outcome: outcome},
		State:   state, ClosedAt: closedAt})
	if !got[0] {
		t.Fatalf("close activity %s/%s: refused", ns, id)
	}
}

// closeRunAt starts run id of ns with two events and closes it at closedAt.
func closeRunAt(t *testing.T, s store.Store, ns, id string, closedAt time.Time) {
	t.Helper()
	startRun(t, s, newRun(ns, "wf-"+id, id), 2)
	got := apply(t, s, store.AppendEvents{Namespace: ns, RunID: id, After: 2, Events: evs(3, 3),
		Update: store.RunUpdate{Status: store.RunCompleted, ClosedAt: closedAt}})
	if !got[0] {
		t.Fatalf("close run %s/%s: refused", ns, id)
	}
}

func activityExists(t *testing.T, s store.Store, ns, id string) bool {
	t.Helper()
	_, err := s.GetActivity(context.Background(), ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("get activity %s/%s: %v", ns, id, err)
	}
	return true
}

func runExists(t *testing.T, s store.Store, ns, id string) bool {
	t.Helper()
	_, err := s.GetRun(context.Background(), ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("get run %s/%s: %v", ns, id, err)
	}
	return true
}

func runRetention(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("RetentionDefaultsToZeroAndRoundTrips", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ns, _, err := s.RegisterNamespace(ctx, "orders", store.OriginExplicit)
		if err != nil {
			t.Fatal(err)
		}
		if ns.Retention != 0 || ns.Retention.Effective() != store.DefaultRetention {
			t.Fatalf("new namespace retention = %v (effective %v), want 0 (effective %v)",
				ns.Retention, ns.Retention.Effective(), store.DefaultRetention)
		}
		for _, r := range []store.Retention{store.MinRetention, store.Retention(72 * time.Hour), store.MaxRetention, 0} {
			got, err := s.SetRetention(ctx, "orders", r)
			if err != nil {
				t.Fatalf("set retention %v: %v", r, err)
			}
			if got.Retention != r {
				t.Fatalf("set retention %v: returned %v", r, got.Retention)
			}
			read, err := s.GetNamespace(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			all, err := s.ListNamespaces(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if read.Retention != r || len(all) != 1 || all[0].Retention != r {
				t.Fatalf("set retention %v: read back %v, listed %+v", r, read.Retention, all)
			}
		}
	})

	t.Run("SetRetentionRefusesBadValuesAndMissingNamespaces", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, _, err := s.RegisterNamespace(ctx, "orders", store.OriginExplicit); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetRetention(ctx, "orders", store.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, r := range []store.Retention{-1, store.Retention(time.Second), store.MinRetention - 1, store.MaxRetention + 1} {
			if _, err := s.SetRetention(ctx, "orders", r); !errors.Is(err, store.ErrBadRetention) {
				t.Errorf("set retention %v: err = %v, want ErrBadRetention", r, err)
			}
		}
		if read, err := s.GetNamespace(ctx, "orders"); err != nil || read.Retention != store.Retention(time.Hour) {
			t.Fatalf("refused retentions changed the record: %v, %v", read.Retention, err)
		}
		if _, err := s.SetRetention(ctx, "never", store.Retention(time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("set retention of a missing namespace: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ReapActivitiesDeletesOnlyClosedOlderThanCutoffInTheNamespace", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i := range 5 {
			closeActivity(t, s, "ns", fmt.Sprintf("old-%d", i), reapEpoch.Add(time.Duration(i)*time.Minute))
		}
		closeActivity(t, s, "ns", "young", reapEpoch.Add(time.Hour))
		closeActivity(t, s, "other", "old-0", reapEpoch)
		// Open work older than any cutoff stays: scheduled and running.
		old := newActivity("ns", "waiting")
		old.ScheduledAt = reapEpoch.Add(-24 * time.Hour)
		apply(t, s, store.InsertActivity{Activity: old})
		running := newActivity("ns", "running")
		running.ScheduledAt = reapEpoch.Add(-24 * time.Hour)
		running.State = store.StateRunning
		running.Attempt = 1
		running.StartedAt = running.ScheduledAt
		apply(t, s, store.InsertActivity{Activity: running})

		cutoff := reapEpoch.Add(30 * time.Minute)
		n, err := s.ReapActivities(ctx, "ns", cutoff, 2)
		if err != nil || n != 2 {
			t.Fatalf("first batch of 2: reaped %d, %v; want 2", n, err)
		}
		// Oldest close first.
		if activityExists(t, s, "ns", "old-0") || activityExists(t, s, "ns", "old-1") || !activityExists(t, s, "ns", "old-2") {
			t.Fatal("first batch did not take the two oldest closes")
		}
		if got := listAttempts(t, s, "ns", "old-0"); len(got) != 0 {
			t.Fatalf("attempts of a reaped activity remain: %+v", got)
		}
		if got := listAttempts(t, s, "ns", "old-2"); len(got) != 1 {
			t.Fatalf("attempts of a kept activity: %+v, want 1", got)
		}
		n, err = s.ReapActivities(ctx, "ns", cutoff, 100)
		if err != nil || n != 3 {
			t.Fatalf("second batch: reaped %d, %v; want the 3 left", n, err)
		}
		n, err = s.ReapActivities(ctx, "ns", cutoff, 100)
		if err != nil || n != 0 {
			t.Fatalf("third batch: reaped %d, %v; want 0 (idempotent)", n, err)
		}
		for _, id := range []string{"young", "waiting", "running"} {
			if !activityExists(t, s, "ns", id) {
				t.Errorf("activity %s was reaped; only closed activities closed before the cutoff may be", id)
			}
		}
		if !activityExists(t, s, "other", "old-0") {
			t.Error("another namespace's activity was reaped")
		}
	})

	// Work scheduled in order, as a server schedules it, but closed out of
	// order: a long-running activity scheduled first closes after the
	// cutoff and stays, while everything behind it that closed before the
	// cutoff, in any closed state, is reaped.
	t.Run("ReapActivitiesFindsEveryExpiredCloseWhateverItsStateAndKeepsLongRunners", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		at := func(d time.Duration) time.Time { return reapEpoch.Add(d) }
		closeScheduled(t, s, "ns", "long", at(-2*time.Hour), at(time.Hour), store.StateCompleted)
		closeScheduled(t, s, "ns", "done-0", at(-time.Hour), at(-time.Hour+time.Second), store.StateCompleted)
		closeScheduled(t, s, "ns", "failed", at(-50*time.Minute), at(-49*time.Minute), store.StateFailed)
		closeScheduled(t, s, "ns", "done-1", at(-40*time.Minute), at(20*time.Minute), store.StateCompleted)
		closeScheduled(t, s, "ns", "timed-out", at(-30*time.Minute), at(-29*time.Minute), store.StateTimedOut)
		closeScheduled(t, s, "ns", "canceled", at(10*time.Minute), at(11*time.Minute), store.StateCanceled)
		closeScheduled(t, s, "ns", "later", at(40*time.Minute), at(41*time.Minute), store.StateCompleted)

		cutoff := at(30 * time.Minute)
		total := 0
		for range 10 {
			n, err := s.ReapActivities(ctx, "ns", cutoff, 2)
			if err != nil {
				t.Fatal(err)
			}
			if total += n; n < 2 {
				break
			}
		}
		if total != 5 {
			t.Fatalf("reaped %d, want the 5 closed before the cutoff", total)
		}
		for id, kept := range map[string]bool{"long": true, "done-0": false, "failed": false, "done-1": false,
			"timed-out": false, "canceled": false, "later": true} {
			if activityExists(t, s, "ns", id) != kept {
				t.Errorf("activity %s: kept %v, want %v", id, !kept, kept)
			}
		}
	})

	t.Run("ReapRunsDeletesOnlyClosedOlderThanCutoffWithTheirHistories", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i := range 3 {
			closeRunAt(t, s, "ns", fmt.Sprintf("old-%d", i), reapEpoch.Add(time.Duration(i)*time.Minute))
		}
		closeRunAt(t, s, "ns", "young", reapEpoch.Add(time.Hour))
		closeRunAt(t, s, "other", "old-0", reapEpoch)
		open := newRun("ns", "wf-open", "open")
		open.StartedAt = reapEpoch.Add(-24 * time.Hour)
		startRun(t, s, open, 2)

		cutoff := reapEpoch.Add(30 * time.Minute)
		n, err := s.ReapRuns(ctx, "ns", cutoff, 2)
		if err != nil || n != 2 {
			t.Fatalf("first batch of 2: reaped %d, %v; want 2", n, err)
		}
		if runExists(t, s, "ns", "old-0") || runExists(t, s, "ns", "old-1") || !runExists(t, s, "ns", "old-2") {
			t.Fatal("first batch did not take the two oldest closes")
		}
		if h, err := s.ReadHistory(ctx, "ns", "old-0", 0, 100); err == nil && len(h) != 0 {
			t.Fatalf("history of a reaped run remains: %d events", len(h))
		}
		if got := readHistory(t, s, "ns", "old-2", 0, 100); len(got) != 3 {
			t.Fatalf("history of a kept run: %d events, want 3", len(got))
		}
		n, err = s.ReapRuns(ctx, "ns", cutoff, 100)
		if err != nil || n != 1 {
			t.Fatalf("second batch: reaped %d, %v; want the 1 left", n, err)
		}
		for _, id := range []string{"young", "open"} {
			if !runExists(t, s, "ns", id) {
				t.Errorf("run %s was reaped; only closed runs closed before the cutoff may be", id)
			}
		}
		if !runExists(t, s, "other", "old-0") {
			t.Error("another namespace's run was reaped")
		}
		// The workflow id of a reaped run starts afresh.
		startRun(t, s, newRun("ns", "wf-old-0", "again"), 1)
	})

	t.Run("ConcurrentReapersDeleteEachRowOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const n = 20
		for i := range n {
			closeActivity(t, s, "ns", fmt.Sprintf("a%02d", i), reapEpoch.Add(time.Duration(i)*time.Millisecond))
		}
		counts := make(chan int, 4)
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				total := 0
				for {
					got, err := s.ReapActivities(ctx, "ns", reapEpoch.Add(time.Hour), 3)
					if err != nil {
						errs <- err
						counts <- total
						return
					}
					total += got
					if got == 0 {
						counts <- total
						return
					}
				}
			}()
		}
		sum := 0
		for range 4 {
			sum += <-counts
		}
		close(errs)
		for err := range errs {
			t.Errorf("concurrent reap: %v", err)
		}
		if sum != n {
			t.Fatalf("concurrent reapers reported %d deletions of %d activities, want each counted once", sum, n)
		}
		if got := list(t, s, store.ActivityFilter{Namespace: "ns"}); len(got) != 0 {
			t.Fatalf("%d activities left after the reapers finished", len(got))
		}
	})

	t.Run("ReapRefusesABadLimit", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		closeActivity(t, s, "ns", "a", reapEpoch)
		for _, limit := range []int{0, -1, store.MaxReapBatch + 1} {
			if _, err := s.ReapActivities(ctx, "ns", reapEpoch.Add(time.Hour), limit); err == nil {
				t.Errorf("reap activities with limit %d: no error", limit)
			}
			if _, err := s.ReapRuns(ctx, "ns", reapEpoch.Add(time.Hour), limit); err == nil {
				t.Errorf("reap runs with limit %d: no error", limit)
			}
		}
		if !activityExists(t, s, "ns", "a") {
			t.Fatal("a refused reap deleted an activity")
		}
	})
}
