package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// RunWaiting runs the suite of store.WaitingStore against a backend whose
// stores implement it.
func RunWaiting(t *testing.T, open Opener) {
	t.Helper()
	ctx := context.Background()
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	waiting := func(t *testing.T) (store.Store, store.WaitingStore) {
		s := open(t)
		ws, ok := s.(store.WaitingStore)
		if !ok {
			t.Fatalf("%T does not implement store.WaitingStore", s)
		}
		return s, ws
	}
	// act is an activity of queue "q", type "echo", scheduled at epoch and
	// ready after ready.
	act := func(id string, priority int, key string, ready time.Duration) store.Activity {
		a := newActivity("ns", id)
		a.TaskQueue, a.Priority, a.Flow = "q", priority, store.Flow{FairnessKey: key, FairnessWeight: 1}
		a.ScheduledAt, a.ReadyAt = epoch, epoch.Add(ready)
		a.Timeouts = store.Timeouts{}
		return a
	}
	insert := func(t *testing.T, s store.Store, as ...store.Activity) {
		t.Helper()
		for _, a := range as {
			if got := apply(t, s, store.InsertActivity{Activity: a, Spilled: true}); !got[0] {
				t.Fatalf("insert %s: refused", a.ID)
			}
		}
	}
	closeAct := func(t *testing.T, s store.Store, id string) {
		t.Helper()
		if got := apply(t, s, store.EndAttempt{Namespace: "ns", ID: id, State: store.StateCanceled, ClosedAt: epoch}); !got[0] {
			t.Fatalf("close %s: refused", id)
		}
	}
	lane := func(priority int, key string) store.Lane {
		return store.Lane{Namespace: "ns", TaskQueue: "q", ActivityType: "echo", Priority: priority, FairnessKey: key}
	}
	ids := func(as []store.Activity) string {
		var b strings.Builder
		for i, a := range as {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(a.ID)
		}
		return b.String()
	}

	t.Run("CountWaitingCountsScheduledActivitiesPerLane", func(t *testing.T) {
		t.Parallel()
		s, ws := waiting(t)
		insert(t, s, act("a1", 3, "", 0), act("a2", 3, "", time.Second), act("b1", 1, "", 0),
			act("k1", 3, "tenant", 2*time.Second), act("gone", 3, "", 0))
		closeAct(t, s, "gone")
		got, err := ws.CountWaiting(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, c := range got {
			lines = append(lines, fmt.Sprintf("p%d/%q: %d, %d bytes, oldest +%v", c.Priority, c.FairnessKey, c.Count, c.Bytes, c.OldestReady.Sub(epoch)))
		}
		n := int64(len(`{"n":1}`))
		want := fmt.Sprintf(`[p1/"": 1, %d bytes, oldest +0s p3/"": 2, %d bytes, oldest +0s p3/"tenant": 1, %d bytes, oldest +2s]`, n, 2*n, n)
		if fmt.Sprint(lines) != want {
			t.Fatalf("counts:\n got %v\nwant %s", lines, want)
		}
		noBytes, err := ws.CountWaiting(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(noBytes) != 3 || noBytes[0].Bytes != 0 || noBytes[1].Count != 2 {
			t.Fatalf("counts without bytes: %+v", noBytes)
		}
		perNS, err := ws.WaitingBytes(ctx)
		if err != nil || len(perNS) != 1 || perNS["ns"] != 4*n {
			t.Fatalf("waiting bytes: %v %v, want ns: %d", perNS, err, 4*n)
		}
	})

	t.Run("PageWaitingReadsOneLaneInDispatchOrderFromTheCursor", func(t *testing.T) {
		t.Parallel()
		s, ws := waiting(t)
		// Inserted out of ready order; c and d are ready at the same time,
		// so the one inserted first (c) comes first.
		insert(t, s, act("late", 3, "", 3*time.Second), act("b", 3, "", 2*time.Second), act("a", 3, "", time.Second),
			act("c", 3, "", 2*time.Second), act("d", 3, "", 2*time.Second), act("other-prio", 1, "", 0),
			act("other-key", 3, "tenant", 0), act("closed", 3, "", 0))
		closeAct(t, s, "closed")
		now := epoch.Add(2 * time.Second)
		p := store.WaitingPage{Lane: lane(3, ""), Now: now, Limit: 2, Inline: -1}
		first, next, err := ws.PageWaiting(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ids(first) != "a b" || !next.IsZero() {
			t.Fatalf("first page: %q next %v, want \"a b\" and no next (the page is full)", ids(first), next)
		}
		if string(first[0].Payload) != `{"n":1}` || first[0].PayloadSize != 7 {
			t.Fatalf("first page's payload: %q (%d)", first[0].Payload, first[0].PayloadSize)
		}
		last := first[len(first)-1]
		p.After, p.Limit = store.WaitingCursor{At: last.ReadyAt, Seq: last.Seq}, 10
		rest, next, err := ws.PageWaiting(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ids(rest) != "c d" || !next.Equal(epoch.Add(3*time.Second)) {
			t.Fatalf("second page: %q next %v, want \"c d\" and the next ready time %v", ids(rest), next, epoch.Add(3*time.Second))
		}
		p.Inline = 0
		small, _, err := ws.PageWaiting(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(small) != 2 || small[0].Payload != nil || small[0].PayloadSize != 7 {
			t.Fatalf("a page without payloads over 0 bytes: %+v", small)
		}
		keyed, next, err := ws.PageWaiting(ctx, store.WaitingPage{Lane: lane(3, "tenant"), Now: now, Inline: -1})
		if err != nil {
			t.Fatal(err)
		}
		if ids(keyed) != "other-key" || !next.IsZero() {
			t.Fatalf("the tenant key's lane: %q next %v", ids(keyed), next)
		}
	})

	t.Run("ExpiredWaitingFindsPassedDeadlinesInOrder", func(t *testing.T) {
		t.Parallel()
		s, ws := waiting(t)
		closeSoon := act("close-soon", 3, "", 0)
		closeSoon.Timeouts.ScheduleToClose = 10 * time.Second
		startSoon := act("start-soon", 3, "", 5*time.Second)
		startSoon.Timeouts = store.Timeouts{ScheduleToStart: 2 * time.Second, ScheduleToClose: time.Hour} // at +7s
		never := act("never", 3, "", 0)
		later := act("later", 3, "", 0)
		later.Timeouts.ScheduleToClose = time.Minute
		done := act("done", 3, "", 0)
		done.Timeouts.ScheduleToClose = time.Second
		insert(t, s, closeSoon, startSoon, never, later, done)
		closeAct(t, s, "done")
		for _, c := range []struct {
			a    store.Activity
			want time.Duration
		}{{closeSoon, 10 * time.Second}, {startSoon, 7 * time.Second}, {later, time.Minute}} {
			if got := store.WaitingDeadline(&c.a); !got.Equal(epoch.Add(c.want)) {
				t.Fatalf("WaitingDeadline(%s) = %v, want epoch+%v", c.a.ID, got, c.want)
			}
		}
		if got := store.WaitingDeadline(&never); !got.IsZero() {
			t.Fatalf("WaitingDeadline without timeouts = %v, want zero", got)
		}
		got, err := ws.ExpiredWaiting(ctx, epoch.Add(30*time.Second), store.WaitingCursor{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != "start-soon close-soon" || got[0].Payload != nil {
			t.Fatalf("expired at +30s: %q, want \"start-soon close-soon\" without payloads", ids(got))
		}
		after, err := ws.ExpiredWaiting(ctx, epoch.Add(30*time.Second), store.WaitingCursor{At: epoch.Add(7 * time.Second), Seq: got[0].Seq}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if ids(after) != "close-soon" {
			t.Fatalf("expired after the first: %q, want close-soon", ids(after))
		}
		next, ok, err := ws.NextWaitingDeadline(ctx, epoch.Add(30*time.Second))
		if err != nil || !ok || !next.Equal(epoch.Add(time.Minute)) {
			t.Fatalf("next deadline after +30s: %v %v %v, want epoch+1m", next, ok, err)
		}
		if _, ok, err := ws.NextWaitingDeadline(ctx, epoch.Add(time.Hour)); err != nil || ok {
			t.Fatalf("next deadline after +1h: %v %v, want none", ok, err)
		}
	})

	t.Run("ARetryMovesTheScheduleToStartDeadline", func(t *testing.T) {
		t.Parallel()
		s, ws := waiting(t)
		retried := act("retried", 3, "", 0)
		retried.Timeouts = store.Timeouts{ScheduleToStart: 5 * time.Second, ScheduleToClose: time.Hour} // at +5s
		insert(t, s, retried)
		// The first attempt fails at +3s; the retry is ready at +100s, so
		// it may wait until +105s.
		if got := apply(t, s, store.EndAttempt{Namespace: "ns", ID: "retried", State: store.StateScheduled,
			Attempt:   &store.Attempt{Number: 1, StartedAt: epoch.Add(time.Second), EndedAt: epoch.Add(3 * time.Second), Outcome: store.OutcomeFailed},
			StartedAt: epoch.Add(time.Second), ReadyAt: epoch.Add(100 * time.Second)}); !got[0] {
			t.Fatal("the retry changed nothing")
		}
		if got, err := ws.ExpiredWaiting(ctx, epoch.Add(30*time.Second), store.WaitingCursor{}, 10); err != nil || len(got) != 0 {
			t.Fatalf("expired at +30s after the retry: %q %v, want none", ids(got), err)
		}
		if next, ok, err := ws.NextWaitingDeadline(ctx, epoch.Add(30*time.Second)); err != nil || !ok || !next.Equal(epoch.Add(105*time.Second)) {
			t.Fatalf("next deadline after the retry: %v %v %v, want epoch+105s", next, ok, err)
		}
		closeAct(t, s, "retried")
		if _, ok, err := ws.NextWaitingDeadline(ctx, epoch); err != nil || ok {
			t.Fatalf("next deadline once closed: %v %v, want none", ok, err)
		}
	})

	t.Run("HeldActivitiesAreTheOpenOnesNotSpilled", func(t *testing.T) {
		t.Parallel()
		s, ws := waiting(t)
		insert(t, s, act("spilled", 3, "", 0))
		for _, id := range []string{"held", "held-closed", "held-delayed"} {
			a := act(id, 3, "", 0)
			if id == "held-delayed" {
				a.ReadyAt = epoch.Add(time.Hour)
			}
			if got := apply(t, s, store.InsertActivity{Activity: a}); !got[0] {
				t.Fatalf("insert %s: refused", id)
			}
		}
		closeAct(t, s, "held-closed")
		got, err := ws.HeldActivities(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != "held held-delayed" || got[0].Payload == nil {
			t.Fatalf("held activities: %q, want \"held held-delayed\" with payloads", ids(got))
		}
		// Held work is neither counted nor paged as waiting.
		counts, err := ws.CountWaiting(ctx, false)
		if err != nil || len(counts) != 1 || counts[0].Count != 1 {
			t.Fatalf("waiting counts %+v %v, want the spilled one only", counts, err)
		}
		page, _, err := ws.PageWaiting(ctx, store.WaitingPage{Lane: lane(3, ""), Now: epoch.Add(2 * time.Hour), Limit: 10})
		if err != nil || ids(page) != "spilled" {
			t.Fatalf("page: %q %v, want spilled only", ids(page), err)
		}
	})
}
