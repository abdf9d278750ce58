package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

func newActivity(ns, id string) store.Activity {
	return store.Activity{
		Namespace:    ns,
		ID:           id,
		TaskQueue:    "default",
		ActivityType: "echo",
		Payload:      []byte(`{"n":1}`),
		Fingerprint:  "fp-" + id,
		Timeouts:     store.Timeouts{StartToClose: time.Minute, ScheduleToClose: time.Hour},
		Retry:        store.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3},
		State:        store.StateScheduled,
		ScheduledAt:  time.Now().UTC().Truncate(time.Microsecond),
	}
}

// traceContext is a W3C trace context with both of its values.
var traceContext = tracectx.Context{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}

func apply(t *testing.T, s store.Store, ws ...store.Write) []bool {
	t.Helper()
	changed, err := s.Apply(context.Background(), ws)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return changed
}

// get reads one activity and fails the test on any error, so a backend whose
// reads fail cannot pass by returning a zero record.
func get(t *testing.T, s store.Store, ns, id string) store.Activity {
	t.Helper()
	a, err := s.GetActivity(context.Background(), ns, id)
	if err != nil {
		t.Fatalf("get activity %s/%s: %v", ns, id, err)
	}
	return a
}

// list lists activities and fails the test on any error.
func list(t *testing.T, s store.Store, f store.ActivityFilter) []store.Activity {
	t.Helper()
	got, err := s.ListActivities(context.Background(), f)
	if err != nil {
		t.Fatalf("list activities %+v: %v", f, err)
	}
	return got
}

// listAttempts lists one activity's attempts and fails the test on any error.
func listAttempts(t *testing.T, s store.Store, ns, id string) []store.Attempt {
	t.Helper()
	got, err := s.ListAttempts(context.Background(), ns, id)
	if err != nil {
		t.Fatalf("list attempts of %s/%s: %v", ns, id, err)
	}
	return got
}

func runActivity(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("InsertIsIdempotentOnNamespaceAndID", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		a := newActivity("ns", "a1")
		other := newActivity("other", "a1") // same id, other namespace: a different activity
		dup := newActivity("ns", "a1")
		dup.Payload = []byte(`"changed"`)
		got := apply(t, s, store.InsertActivity{Activity: a}, store.InsertActivity{Activity: other}, store.InsertActivity{Activity: dup})
		if fmt.Sprint(got) != "[true true false]" {
			t.Fatalf("changed = %v, want [true true false]", got)
		}
		read, err := s.GetActivity(ctx, "ns", "a1")
		if err != nil {
			t.Fatal(err)
		}
		if string(read.Payload) != `{"n":1}` || read.Fingerprint != "fp-a1" || read.State != store.StateScheduled {
			t.Fatalf("duplicate insert changed the record: %+v", read)
		}
		if read.Timeouts != a.Timeouts || read.Retry.MaximumAttempts != 3 || !read.ScheduledAt.Equal(a.ScheduledAt) {
			t.Fatalf("record does not round-trip: %+v", read)
		}
		if _, err := s.GetActivity(ctx, "ns", "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
	})

	t.Run("OneApplyInsertsInOrderAroundOtherWrites", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		apply(t, s, store.InsertActivity{Activity: newActivity("ns", "old")})
		ins := func(id string) store.Write { return store.InsertActivity{Activity: newActivity("ns", id)} }
		closed := time.Now().UTC().Truncate(time.Microsecond)
		got := apply(t, s, ins("x1"), ins("old"), ins("x2"),
			store.EndAttempt{Namespace: "ns", ID: "x2", State: store.StateCanceled, ClosedAt: closed},
			ins("x3"), ins("x1"), ins("x4"))
		if fmt.Sprint(got) != "[true false true true true false true]" {
			t.Fatalf("changed = %v, want [true false true true true false true]: an id in the store or earlier in the writes inserts nothing", got)
		}
		var ids []string
		for _, a := range list(t, s, store.ActivityFilter{Namespace: "ns"}) {
			ids = append(ids, a.ID)
		}
		if fmt.Sprint(ids) != "[x4 x3 x2 x1 old]" {
			t.Fatalf("listed newest first: %v, want [x4 x3 x2 x1 old]: activities are numbered in write order", ids)
		}
		if a := get(t, s, "ns", "x2"); a.State != store.StateCanceled {
			t.Fatalf("x2 is %s after the end that followed its insert in one apply, want canceled", a.State)
		}
	})

	t.Run("OneApplyClosesSeveralEachOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		apply(t, s, store.InsertActivity{Activity: newActivity("ns", "a")}, store.InsertActivity{Activity: newActivity("ns", "b")},
			store.InsertActivity{Activity: newActivity("ns", "c")})
		t0 := time.Now().UTC().Truncate(time.Microsecond)
		closing := func(id string, st store.ActivityState, out store.AttemptOutcome, f *store.Failure, result string) store.Write {
			at := &store.Attempt{Number: 1, WorkerID: 7, Node: "gpu", StartedAt: t0, EndedAt: t0.Add(time.Second), Outcome: out, Failure: f}
			var r []byte
			if result != "" {
				r = []byte(result)
			}
			return store.EndAttempt{Namespace: "ns", ID: id, Attempt: at, StartedAt: t0, State: st, Result: r,
				ActivityFailure: f, ClosedAt: t0.Add(time.Second)}
		}
		apply(t, s, closing("b", store.StateCompleted, store.OutcomeCompleted, nil, `"first"`))
		boom := &store.Failure{Message: "boom", Type: "error"}
		got := apply(t, s, closing("a", store.StateCompleted, store.OutcomeCompleted, nil, `"done"`),
			closing("b", store.StateCompleted, store.OutcomeCompleted, nil, `"again"`),
			closing("c", store.StateFailed, store.OutcomeFailed, boom, ""))
		if fmt.Sprint(got) != "[true false true]" {
			t.Fatalf("changed = %v, want [true false true]: a closed activity is not closed again", got)
		}
		if a := get(t, s, "ns", "a"); a.State != store.StateCompleted || string(a.Result) != `"done"` || a.Attempt != 1 {
			t.Fatalf("a read back %s result %s attempt %d", a.State, a.Result, a.Attempt)
		}
		if b := get(t, s, "ns", "b"); string(b.Result) != `"first"` {
			t.Fatalf("b's result %s, want the first close's", b.Result)
		}
		if c := get(t, s, "ns", "c"); c.State != store.StateFailed || c.Failure == nil || c.Failure.Message != "boom" {
			t.Fatalf("c read back %s failure %+v", c.State, c.Failure)
		}
		ats := listAttempts(t, s, "ns", "c")
		if len(ats) != 1 || ats[0].WorkerID != 7 || ats[0].Node != "gpu" || ats[0].Outcome != store.OutcomeFailed ||
			ats[0].Failure == nil || ats[0].Failure.Message != "boom" || !ats[0].EndedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("c's attempts: %+v", ats)
		}
	})

	t.Run("PriorityRoundTripsAndDefaultsToThree", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		urgent, plain := newActivity("ns", "urgent"), newActivity("ns", "plain")
		urgent.Priority = store.HighestPriority
		apply(t, s, store.InsertActivity{Activity: urgent}, store.InsertActivity{Activity: plain})
		if got := get(t, s, "ns", "urgent").Priority; got != 1 {
			t.Fatalf("urgent priority = %d, want 1", got)
		}
		if got := get(t, s, "ns", "plain").Priority; got != store.DefaultPriority {
			t.Fatalf("priority left 0 reads back %d, want %d", got, store.DefaultPriority)
		}
		open, err := s.OpenActivities(ctx, -1)
		if err != nil || len(open) != 2 || open[0].Priority != 1 || open[1].Priority != 3 {
			t.Fatalf("open activities: %+v, %v", open, err)
		}
	})

	t.Run("FlowAndOriginRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		keyed, plain := newActivity("ns", "keyed"), newActivity("ns", "plain")
		keyed.Flow = store.Flow{FairnessKey: "tenant-a", FairnessWeight: 3, ConcurrencyKey: "customer-9"}
		nominal := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
		keyed.Origin = store.ScheduleOrigin{ScheduleID: "nightly", Time: nominal}
		apply(t, s, store.InsertActivity{Activity: keyed}, store.InsertActivity{Activity: plain})
		got := get(t, s, "ns", "keyed")
		if got.Flow != keyed.Flow || got.Origin.ScheduleID != "nightly" || !got.Origin.Time.Equal(nominal) {
			t.Fatalf("keyed activity read back flow %+v origin %+v, want %+v %+v", got.Flow, got.Origin, keyed.Flow, keyed.Origin)
		}
		if got := get(t, s, "ns", "plain"); got.Flow != (store.Flow{FairnessWeight: 1}) || got.Origin != (store.ScheduleOrigin{}) {
			t.Fatalf("activity without keys read back flow %+v origin %+v, want the default key of weight 1 and no schedule", got.Flow, got.Origin)
		}
		open, err := s.OpenActivities(ctx, -1)
		if err != nil || len(open) != 2 || open[0].Flow != keyed.Flow || !open[0].Origin.Time.Equal(nominal) {
			t.Fatalf("open activities: %+v, %v", open, err)
		}
	})

	t.Run("TraceContextRoundTripsOnEveryRead", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		traced, plain := newActivity("ns", "traced"), newActivity("ns", "plain")
		traced.Trace = traceContext
		traced.Payload = make([]byte, 10_000) // past the inline bound below: read without its payload
		apply(t, s, store.InsertActivity{Activity: traced}, store.InsertActivity{Activity: plain})
		if got := get(t, s, "ns", "traced").Trace; got != traceContext {
			t.Fatalf("get: trace context %+v, want %+v", got, traceContext)
		}
		if got := get(t, s, "ns", "plain").Trace; !got.IsZero() {
			t.Fatalf("get: activity scheduled without a trace context reads back %+v", got)
		}
		open, err := s.OpenActivities(ctx, 100)
		if err != nil || idsOf(open) != "[traced plain]" || open[0].Trace != traceContext || !open[1].Trace.IsZero() {
			t.Fatalf("open activities = %s (%+v), %v; want the trace context kept, payload or not", idsOf(open), open, err)
		}
		for _, omit := range []bool{false, true} {
			listed := list(t, s, store.ActivityFilter{Namespace: "ns", OmitPayloads: omit})
			if idsOf(listed) != "[plain traced]" || listed[1].Trace != traceContext || !listed[0].Trace.IsZero() {
				t.Fatalf("list (payloads left out %v): %+v; want the trace context kept", omit, listed)
			}
		}
		// An attempt ending, even a retry, leaves it as it was.
		apply(t, s, store.EndAttempt{Namespace: "ns", ID: "traced", State: store.StateScheduled, ReadyAt: time.Now(),
			Attempt: &store.Attempt{Number: 1, Outcome: store.OutcomeFailed, StartedAt: time.Now(), EndedAt: time.Now()}})
		if got := get(t, s, "ns", "traced").Trace; got != traceContext {
			t.Fatalf("after a retry: trace context %+v, want %+v", got, traceContext)
		}
	})

	t.Run("AttemptLifecycle", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		a := newActivity("ns", "a1")
		t0 := time.Now().UTC()
		fail := &store.Failure{Message: "boom", Type: "io", Retryable: true}
		retryAt := t0.Add(time.Second)
		apply(t, s,
			store.InsertActivity{Activity: a},
			store.EndAttempt{Namespace: "ns", ID: "a1", StartedAt: t0,
				Attempt: &store.Attempt{Number: 1, WorkerID: 7, Node: "n1", StartedAt: t0, EndedAt: t0.Add(time.Millisecond),
					Outcome: store.OutcomeFailed, Failure: fail},
				State: store.StateScheduled, ReadyAt: retryAt, HeartbeatDetails: []byte(`{"step":3}`)},
		)
		read := get(t, s, "ns", "a1")
		if read.State != store.StateScheduled || read.Attempt != 1 || !read.StartedAt.Equal(t0) ||
			!read.ReadyAt.Equal(retryAt) || string(read.HeartbeatDetails) != `{"step":3}` {
			t.Fatalf("after a retryable failure: %+v", read)
		}
		t2 := t0.Add(2 * time.Second)
		apply(t, s, store.EndAttempt{Namespace: "ns", ID: "a1", StartedAt: t2,
			Attempt: &store.Attempt{Number: 2, WorkerID: 8, Node: "n2", StartedAt: t2, EndedAt: t2.Add(time.Millisecond),
				Outcome: store.OutcomeCompleted},
			State: store.StateCompleted, Result: []byte(`"ok"`), ClosedAt: t2.Add(time.Millisecond)})
		read = get(t, s, "ns", "a1")
		if read.State != store.StateCompleted || string(read.Result) != `"ok"` || read.Attempt != 2 ||
			!read.StartedAt.Equal(t0) || !read.ClosedAt.Equal(t2.Add(time.Millisecond)) ||
			string(read.HeartbeatDetails) != `{"step":3}` {
			t.Fatalf("after completion: %+v (the first start time and details must stay)", read)
		}
		attempts, err := s.ListAttempts(ctx, "ns", "a1")
		if err != nil {
			t.Fatal(err)
		}
		if len(attempts) != 2 || attempts[0].Outcome != store.OutcomeFailed || attempts[0].Failure == nil ||
			attempts[0].Failure.Message != "boom" || attempts[0].WorkerID != 7 || attempts[0].Node != "n1" ||
			!attempts[0].StartedAt.Equal(t0) || attempts[1].Number != 2 || attempts[1].Outcome != store.OutcomeCompleted ||
			attempts[1].WorkerID != 8 || attempts[1].Node != "n2" || !attempts[1].StartedAt.Equal(t2) ||
			!attempts[1].EndedAt.Equal(t2.Add(time.Millisecond)) || attempts[1].Failure != nil {
			t.Fatalf("attempts = %+v", attempts)
		}
	})

	// The attempt that closes an activity is listed with all it recorded,
	// whatever the closing state, and an attempt recorded twice (ended
	// once for a retry, then again as the close) is listed once, as
	// recorded last.
	t.Run("ClosingAttemptIsListedAsRecorded", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		t0 := time.Now().UTC()
		fatal := &store.Failure{Message: "card declined", Type: "payment", Details: []byte(`{"code":51}`)}
		for _, c := range []struct {
			id      string
			state   store.ActivityState
			outcome store.AttemptOutcome
			failure *store.Failure
		}{
			{"failed", store.StateFailed, store.OutcomeFailed, fatal},
			{"canceled", store.StateCanceled, store.OutcomeCanceled, nil},
			{"timed-out", store.StateTimedOut, store.OutcomeTimedOut, &store.Failure{Type: "start_to_close_timeout"}},
		} {
			apply(t, s, store.InsertActivity{Activity: newActivity("ns", c.id)},
				store.EndAttempt{Namespace: "ns", ID: c.id, StartedAt: t0, State: c.state, ClosedAt: t0.Add(time.Second),
					ActivityFailure: c.failure,
					Attempt: &store.Attempt{Number: 1, WorkerID: 3, Node: "n3", StartedAt: t0, EndedAt: t0.Add(time.Second),
						Outcome: c.outcome, Failure: c.failure}})
			got := listAttempts(t, s, "ns", c.id)
			if len(got) != 1 || got[0].Number != 1 || got[0].WorkerID != 3 || got[0].Node != "n3" ||
				!got[0].StartedAt.Equal(t0) || !got[0].EndedAt.Equal(t0.Add(time.Second)) || got[0].Outcome != c.outcome ||
				(got[0].Failure == nil) != (c.failure == nil) ||
				(c.failure != nil && (got[0].Failure.Type != c.failure.Type || got[0].Failure.Message != c.failure.Message ||
					string(got[0].Failure.Details) != string(c.failure.Details))) {
				t.Fatalf("%s: attempts = %+v, want one %s attempt with failure %+v", c.id, got, c.outcome, c.failure)
			}
		}

		apply(t, s, store.InsertActivity{Activity: newActivity("ns", "twice")},
			store.EndAttempt{Namespace: "ns", ID: "twice", StartedAt: t0, State: store.StateScheduled, ReadyAt: t0,
				Attempt: &store.Attempt{Number: 1, WorkerID: 4, StartedAt: t0, EndedAt: t0, Outcome: store.OutcomeFailed,
					Failure: &store.Failure{Message: "first"}}},
			store.EndAttempt{Namespace: "ns", ID: "twice", State: store.StateFailed, ClosedAt: t0.Add(time.Second),
				Attempt: &store.Attempt{Number: 1, WorkerID: 4, StartedAt: t0, EndedAt: t0.Add(time.Second),
					Outcome: store.OutcomeFailed, Failure: &store.Failure{Message: "last"}}})
		if got := listAttempts(t, s, "ns", "twice"); len(got) != 1 || got[0].Failure == nil ||
			got[0].Failure.Message != "last" || !got[0].EndedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("attempt recorded twice: %+v, want it once as recorded last", got)
		}
	})

	t.Run("TerminalActivityIsNotChangedAgain", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		now := time.Now().UTC()
		apply(t, s,
			store.InsertActivity{Activity: newActivity("ns", "a1")},
			store.EndAttempt{Namespace: "ns", ID: "a1", State: store.StateTimedOut, ClosedAt: now,
				ActivityFailure: &store.Failure{Type: "schedule_to_start_timeout", Message: "no worker"}},
		)
		got := apply(t, s,
			store.EndAttempt{Namespace: "ns", ID: "a1", State: store.StateCompleted, ClosedAt: now,
				Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}},
			store.EndAttempt{Namespace: "ns", ID: "ghost", State: store.StateCompleted, ClosedAt: now,
				Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}},
		)
		if fmt.Sprint(got) != "[false false]" {
			t.Fatalf("writes to a closed or missing activity reported %v", got)
		}
		read := get(t, s, "ns", "a1")
		if read.State != store.StateTimedOut || read.Failure == nil || read.Failure.Type != "schedule_to_start_timeout" {
			t.Fatalf("closed activity changed: %+v", read)
		}
		for _, id := range []string{"a1", "ghost"} {
			if at := listAttempts(t, s, "ns", id); len(at) != 0 {
				t.Fatalf("an attempt on a closed or missing activity %s was recorded: %+v", id, at)
			}
		}
	})

	t.Run("ListFiltersAndPages", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var ws []store.Write
		for i := range 7 {
			a := newActivity("ns", fmt.Sprintf("a%d", i))
			if i%2 == 1 {
				a.ActivityType = "sleep"
			}
			ws = append(ws, store.InsertActivity{Activity: a})
		}
		ws = append(ws, store.InsertActivity{Activity: newActivity("other", "x")},
			store.EndAttempt{Namespace: "ns", ID: "a0", State: store.StateCompleted, ClosedAt: time.Now()})
		apply(t, s, ws...)

		page1 := list(t, s, store.ActivityFilter{Namespace: "ns", Limit: 3})
		if len(page1) != 3 {
			t.Fatalf("first page = %s, want 3 activities", idsOf(page1))
		}
		page2 := list(t, s, store.ActivityFilter{Namespace: "ns", Limit: 3, Before: page1[2].Seq})
		if len(page2) != 3 {
			t.Fatalf("second page = %s, want 3 activities", idsOf(page2))
		}
		page3 := list(t, s, store.ActivityFilter{Namespace: "ns", Limit: 3, Before: page2[2].Seq})
		if got := idsOf(page1, page2, page3); got != "[a6 a5 a4 a3 a2 a1 a0]" {
			t.Fatalf("pages = %s, want newest first across pages", got)
		}
		sleeps := list(t, s, store.ActivityFilter{Namespace: "ns", ActivityType: "sleep"})
		if got := idsOf(sleeps); got != "[a5 a3 a1]" {
			t.Fatalf("type filter = %s", got)
		}
		done := list(t, s, store.ActivityFilter{Namespace: "ns", State: store.StateCompleted})
		if got := idsOf(done); got != "[a0]" {
			t.Fatalf("state filter = %s", got)
		}
		open, err := s.OpenActivities(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		if got := idsOf(open); got != "[a1 a2 a3 a4 a5 a6 x]" {
			t.Fatalf("open activities = %s, want every non-terminal one oldest first", got)
		}
	})

	t.Run("ReadsCanLeaveBulkyFieldsOut", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		small, big, failed := newActivity("ns", "small"), newActivity("ns", "big"), newActivity("ns", "failed")
		big.Payload = make([]byte, 10_000)
		apply(t, s, store.InsertActivity{Activity: small}, store.InsertActivity{Activity: big}, store.InsertActivity{Activity: failed},
			store.EndAttempt{Namespace: "ns", ID: "failed", State: store.StateFailed, ClosedAt: time.Now(), HeartbeatDetails: []byte("hb"),
				ActivityFailure: &store.Failure{Type: "boom", Message: "it broke", Details: []byte("details")}})

		read, err := s.GetActivity(ctx, "ns", "big")
		if err != nil || len(read.Payload) != 10_000 || read.PayloadSize != 10_000 {
			t.Fatalf("get: payload of %d bytes, size %d, err %v; want 10000 and 10000", len(read.Payload), read.PayloadSize, err)
		}
		open, err := s.OpenActivities(ctx, 100)
		if err != nil || idsOf(open) != "[small big]" {
			t.Fatalf("open activities = %s, %v", idsOf(open), err)
		}
		if string(open[0].Payload) != `{"n":1}` || open[1].Payload != nil || open[1].PayloadSize != 10_000 {
			t.Fatalf("inline 100: payloads %q (size %d) and %d bytes (size %d); want the small one kept, the big one left out with its size",
				open[0].Payload, open[0].PayloadSize, len(open[1].Payload), open[1].PayloadSize)
		}

		light, err := s.ListActivities(ctx, store.ActivityFilter{Namespace: "ns", OmitPayloads: true})
		if err != nil || idsOf(light) != "[failed big small]" {
			t.Fatalf("list without payloads = %s, %v", idsOf(light), err)
		}
		f := light[0]
		if f.Payload != nil || f.HeartbeatDetails != nil || f.Failure == nil || f.Failure.Details != nil ||
			f.Failure.Message != "it broke" || f.Failure.Type != "boom" || f.PayloadSize != len(`{"n":1}`) {
			t.Fatalf("list without payloads returned %+v (failure %+v)", f, f.Failure)
		}
		if light[1].Payload != nil || light[1].PayloadSize != 10_000 {
			t.Fatalf("list without payloads: big has %d payload bytes, size %d", len(light[1].Payload), light[1].PayloadSize)
		}
		full := list(t, s, store.ActivityFilter{Namespace: "ns"})
		if len(full) != 3 {
			t.Fatalf("list with payloads = %s, want 3 activities", idsOf(full))
		}
		if f := full[0]; string(f.HeartbeatDetails) != "hb" || f.Failure == nil || string(f.Failure.Details) != "details" || len(full[1].Payload) != 10_000 {
			t.Fatalf("list with payloads lost them: %+v", f)
		}
	})

	t.Run("ListStopsAfterTheActivityPastMaxBytes", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var ws []store.Write
		for i := range 5 {
			a := newActivity("ns", fmt.Sprintf("a%d", i))
			a.Payload = make([]byte, 1000)
			ws = append(ws, store.InsertActivity{Activity: a})
		}
		apply(t, s, ws...)
		one := newActivity("ns", "a0")
		one.Payload = make([]byte, 1000)
		size := one.Size()
		got, err := s.ListActivities(ctx, store.ActivityFilter{Namespace: "ns", MaxBytes: 2*size + 1})
		if err != nil || idsOf(got) != "[a4 a3 a2]" {
			t.Fatalf("list up to %d bytes = %s, %v; want the two that fit and the one that passed the bound", 2*size+1, idsOf(got), err)
		}
		if got := list(t, s, store.ActivityFilter{Namespace: "ns", MaxBytes: 1}); idsOf(got) != "[a4]" {
			t.Fatalf("list up to 1 byte = %s, want the first activity alone", idsOf(got))
		}
		if got := list(t, s, store.ActivityFilter{Namespace: "ns", MaxBytes: 1, OmitPayloads: true, Limit: 2}); len(got) != 1 {
			t.Fatalf("list without payloads up to 1 byte returned %d activities, want 1", len(got))
		}
	})

	t.Run("CommitterGroupsConcurrentWrites", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var (
			mu      sync.Mutex
			batches []int
		)
		c := store.NewCommitter(s, store.CommitterOptions{Observe: func(n int, _ time.Duration) {
			mu.Lock()
			batches = append(batches, n)
			mu.Unlock()
		}})
		const writers, each = 8, 50
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					created, err := c.Commit(ctx, store.InsertActivity{Activity: newActivity("ns", fmt.Sprintf("w%d-%d", w, i))})
					if err != nil || !created {
						t.Errorf("commit: created=%v err=%v", created, err)
					}
				}
			})
		}
		wg.Wait()
		c.Close()
		if _, err := c.Commit(ctx, store.InsertActivity{Activity: newActivity("ns", "late")}); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("commit after close: %v, want ErrClosed", err)
		}
		all, err := s.OpenActivities(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != writers*each {
			t.Fatalf("%d activities durable, want %d", len(all), writers*each)
		}
		mu.Lock()
		defer mu.Unlock()
		total, largest := 0, 0
		for _, n := range batches {
			total += n
			largest = max(largest, n)
		}
		if total != writers*each {
			t.Fatalf("batches carried %d writes, want %d", total, writers*each)
		}
		if largest < 2 {
			t.Fatalf("no transaction carried more than one write across %d concurrent writers: %v", writers, batches)
		}
	})
}

func idsOf(pages ...[]store.Activity) string {
	var ids []string
	for _, p := range pages {
		for _, a := range p {
			ids = append(ids, a.ID)
		}
	}
	return fmt.Sprint(ids)
}
