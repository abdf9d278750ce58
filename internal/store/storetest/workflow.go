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

// runEpoch is the start time of the runs the suite writes: fixed, with
// nanoseconds, so a backend that rounds times fails the round trip.
var runEpoch = time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.UTC)

// newRun is an open run of workflow wf with every field a caller sets.
func newRun(ns, wf, id string) store.Run {
	return store.Run{
		Namespace:    ns,
		WorkflowID:   wf,
		RunID:        id,
		WorkflowType: "order",
		TaskQueue:    "default",
		Status:       store.RunRunning,
		Input:        []byte(`{"order":"` + id + `"}`),
		Fingerprint:  "fp-" + id,
		StartedAt:    runEpoch,
	}
}

// evs are events from..to, each with data naming its seq.
func evs(from, to int64) []store.Event {
	var out []store.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, store.Event{Seq: seq, Data: fmt.Appendf(nil, "event-%d", seq)})
	}
	return out
}

// startRun inserts r with events 1..n and fails the test unless it is new.
func startRun(t *testing.T, s store.Store, r store.Run, n int64) {
	t.Helper()
	if got := apply(t, s, store.InsertRun{Run: r, Events: evs(1, n)}); !got[0] {
		t.Fatalf("insert run %s/%s: refused", r.Namespace, r.RunID)
	}
}

// closeRun closes an open run whose history is after events long with one
// closing event.
func closeRun(t *testing.T, s store.Store, ns, id string, after int64, status store.RunStatus) {
	t.Helper()
	got := apply(t, s, store.AppendEvents{Namespace: ns, RunID: id, After: after, Events: evs(after+1, after+1),
		Update: store.RunUpdate{Status: status, ClosedAt: runEpoch.Add(time.Hour)}})
	if !got[0] {
		t.Fatalf("close run %s/%s after %d: refused", ns, id, after)
	}
}

func getRun(t *testing.T, s store.Store, ns, id string) store.Run {
	t.Helper()
	r, err := s.GetRun(context.Background(), ns, id)
	if err != nil {
		t.Fatalf("get run %s/%s: %v", ns, id, err)
	}
	return r
}

func readHistory(t *testing.T, s store.Store, ns, id string, after int64, limit int) []store.Event {
	t.Helper()
	got, err := s.ReadHistory(context.Background(), ns, id, after, limit)
	if err != nil {
		t.Fatalf("read history of %s/%s after %d limit %d: %v", ns, id, after, limit, err)
	}
	return got
}

func listRuns(t *testing.T, s store.Store, f store.RunFilter) []store.Run {
	t.Helper()
	got, err := s.ListRuns(context.Background(), f)
	if err != nil {
		t.Fatalf("list runs %+v: %v", f, err)
	}
	return got
}

// seqsOf renders events' sequence numbers, checking each one's data.
func seqsOf(t *testing.T, es []store.Event) string {
	t.Helper()
	var seqs []int64
	for _, e := range es {
		if want := fmt.Sprintf("event-%d", e.Seq); string(e.Data) != want {
			t.Fatalf("event %d holds %q, want %q", e.Seq, e.Data, want)
		}
		seqs = append(seqs, e.Seq)
	}
	return fmt.Sprint(seqs)
}

func runIDsOf(pages ...[]store.Run) string {
	var ids []string
	for _, p := range pages {
		for _, r := range p {
			ids = append(ids, r.RunID)
		}
	}
	return fmt.Sprint(ids)
}

func ptr[T any](v T) *T { return &v }

func runWorkflow(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("InsertThenGetRoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		want := store.Run{
			Namespace:        "ns",
			WorkflowID:       "wf-1",
			RunID:            "run-1",
			WorkflowType:     "order",
			TaskQueue:        "gpu",
			BuildID:          "build-7",
			Status:           store.RunRunning,
			Input:            []byte{0, 1, 2, 0xff},
			Result:           []byte(`"early"`),
			Failure:          &store.Failure{Message: "m", Type: "t", Retryable: true, Details: []byte("d")},
			Fingerprint:      "fp",
			ParentWorkflowID: "parent-wf",
			ParentRunID:      "parent-run",
			ParentStep:       42,
			NextRunID:        "next",
			TaskFailure:      "panic at step 3",
			HistoryLength:    3,
			Priority:         2,
			Flow:             store.Flow{FairnessKey: "tenant-a", FairnessWeight: 3, ConcurrencyKey: "customer-9"},
			Origin:           store.ScheduleOrigin{ScheduleID: "nightly", Time: runEpoch.Add(-time.Hour)},
			Trace:            traceContext,
			StartedAt:        runEpoch,
			ClosedAt:         runEpoch.Add(time.Nanosecond),
		}
		startRun(t, s, want, 3)
		got := getRun(t, s, "ns", "run-1")
		if got.Seq <= 0 {
			t.Fatalf("run seq = %d, want one set by the store", got.Seq)
		}
		want.Seq = got.Seq
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("run does not round-trip:\n got %+v (failure %+v)\nwant %+v (failure %+v)", got, got.Failure, want, want.Failure)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "run-1", 0, 0)); got != "[1 2 3]" {
			t.Fatalf("history = %s, want the three inserted events", got)
		}

		bare := store.Run{Namespace: "ns", WorkflowID: "wf-2", RunID: "run-2"}
		startRun(t, s, bare, 0)
		got = getRun(t, s, "ns", "run-2")
		if got.Status != store.RunRunning || got.Failure != nil || got.Input != nil || got.Result != nil ||
			!got.StartedAt.IsZero() || !got.ClosedAt.IsZero() || got.HistoryLength != 0 || got.TaskFailure != "" ||
			got.Priority != store.DefaultPriority || got.Flow != (store.Flow{FairnessWeight: 1}) || got.Origin != (store.ScheduleOrigin{}) ||
			!got.Trace.IsZero() {
			t.Fatalf("run inserted with only its ids and no events read back as %+v", got)
		}
		if got := readHistory(t, s, "ns", "run-2", 0, 0); len(got) != 0 {
			t.Fatalf("run inserted without events has history %v", got)
		}
		for _, c := range []struct{ ns, id string }{{"ns", "ghost"}, {"other", "run-1"}} {
			if _, err := s.GetRun(ctx, c.ns, c.id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get run %s/%s: %v, want ErrNotFound", c.ns, c.id, err)
			}
			if _, err := s.ReadHistory(ctx, c.ns, c.id, 0, 0); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("read history of %s/%s: %v, want ErrNotFound", c.ns, c.id, err)
			}
		}
	})

	t.Run("OneOpenRunPerWorkflowID", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		got := apply(t, s,
			store.InsertRun{Run: newRun("ns", "wf", "r1"), Events: evs(1, 1)},
			store.InsertRun{Run: newRun("ns", "wf", "r2"), Events: evs(1, 2)},
			store.InsertRun{Run: newRun("other", "wf", "r2"), Events: evs(1, 1)},
		)
		if fmt.Sprint(got) != "[true false true]" {
			t.Fatalf("insert r1, a second open run of wf, and wf in another namespace: %v, want [true false true]", got)
		}
		if _, err := s.GetRun(ctx, "ns", "r2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused second open run was recorded: %v", err)
		}
		if _, err := s.ReadHistory(ctx, "ns", "r2", 0, 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused second open run left history: %v", err)
		}
		closeRun(t, s, "ns", "r1", 1, store.RunContinuedAsNew)
		if got := apply(t, s, store.InsertRun{Run: newRun("ns", "wf", "r2"), Events: evs(1, 2)}); !got[0] {
			t.Fatal("a new run of wf after its open run closed: refused")
		}
		if r := getRun(t, s, "ns", "r2"); r.Status != store.RunRunning || r.HistoryLength != 2 {
			t.Fatalf("new run after the close: %+v", r)
		}
		if got := apply(t, s, store.InsertRun{Run: newRun("ns", "wf", "r3")}); got[0] {
			t.Fatal("a third run while the second is open: accepted")
		}
	})

	t.Run("DuplicateRunIDIsRefused", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("ns", "wf-1", "r1"), 1)
		closeRun(t, s, "ns", "r1", 1, store.RunCompleted)
		for _, wf := range []string{"wf-1", "wf-2"} {
			dup := newRun("ns", wf, "r1")
			dup.Input = []byte("changed")
			if got := apply(t, s, store.InsertRun{Run: dup, Events: evs(1, 1)}); got[0] {
				t.Fatalf("insert of a taken run id under workflow %s: accepted", wf)
			}
		}
		r := getRun(t, s, "ns", "r1")
		if r.WorkflowID != "wf-1" || r.Status != store.RunCompleted || string(r.Input) != `{"order":"r1"}` || r.HistoryLength != 2 {
			t.Fatalf("refused inserts changed the run: %+v", r)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "r1", 0, 0)); got != "[1 2]" {
			t.Fatalf("refused inserts changed the history: %s", got)
		}
	})

	t.Run("AppendEventsIsFenced", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("ns", "wf", "open"), 3)
		startRun(t, s, newRun("ns", "wf-closed", "closed"), 1)
		closeRun(t, s, "ns", "closed", 1, store.RunFailed)
		refused := []struct {
			name string
			w    store.AppendEvents
		}{
			{"after behind the history", store.AppendEvents{Namespace: "ns", RunID: "open", After: 2, Events: evs(3, 3)}},
			{"after ahead of the history", store.AppendEvents{Namespace: "ns", RunID: "open", After: 4, Events: evs(5, 5)}},
			{"closed run", store.AppendEvents{Namespace: "ns", RunID: "closed", After: 2, Events: evs(3, 3)}},
			{"missing run", store.AppendEvents{Namespace: "ns", RunID: "ghost", After: 0, Events: evs(1, 1)}},
			{"run of another namespace", store.AppendEvents{Namespace: "other", RunID: "open", After: 3, Events: evs(4, 4)}},
		}
		for _, c := range refused {
			c.w.Update = store.RunUpdate{BuildID: "b", TaskFailure: ptr("x"), Status: store.RunCompleted, Result: []byte("r")}
			if got := apply(t, s, c.w); got[0] {
				t.Errorf("append to %s: accepted", c.name)
			}
		}
		r := getRun(t, s, "ns", "open")
		if r.HistoryLength != 3 || r.Status != store.RunRunning || r.BuildID != "" || r.TaskFailure != "" || r.Result != nil {
			t.Fatalf("refused appends changed the open run: %+v", r)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "open", 0, 0)); got != "[1 2 3]" {
			t.Fatalf("refused appends changed the history: %s", got)
		}
		if c := getRun(t, s, "ns", "closed"); c.Status != store.RunFailed || c.HistoryLength != 2 || c.Result != nil {
			t.Fatalf("refused append changed the closed run: %+v", c)
		}

		// Of two writers that read the same history, only the first appends.
		got := apply(t, s,
			store.AppendEvents{Namespace: "ns", RunID: "open", After: 3, Events: evs(4, 5)},
			store.AppendEvents{Namespace: "ns", RunID: "open", After: 3, Events: evs(4, 4)},
			store.AppendEvents{Namespace: "ns", RunID: "open", After: 5},
		)
		if fmt.Sprint(got) != "[true false true]" {
			t.Fatalf("append after 3, again after 3, then after 5: %v, want [true false true]", got)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "open", 0, 0)); got != "[1 2 3 4 5]" {
			t.Fatalf("history after the race = %s", got)
		}
		if r := getRun(t, s, "ns", "open"); r.HistoryLength != 5 {
			t.Fatalf("history length = %d, want 5", r.HistoryLength)
		}
	})

	t.Run("BadWritesAreErrorsAndChangeNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("ns", "wf", "r1"), 2)
		bad := []struct {
			name string
			w    store.Write
		}{
			{"events with a gap", store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: []store.Event{{Seq: 3}, {Seq: 5}}}},
			{"events not after After", store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: evs(2, 3)}},
			{"events repeating a seq", store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: []store.Event{{Seq: 3}, {Seq: 3}}}},
			{"events out of order", store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: []store.Event{{Seq: 4}, {Seq: 3}}}},
			{"negative after", store.AppendEvents{Namespace: "ns", RunID: "r1", After: -1}},
			{"append without a run id", store.AppendEvents{Namespace: "ns", After: 2, Events: evs(3, 3)}},
			{"unknown status", store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Update: store.RunUpdate{Status: "done"}}},
			{"insert without a run id", store.InsertRun{Run: newRun("ns", "wf-2", "")}},
			{"insert without a workflow id", store.InsertRun{Run: newRun("ns", "", "r2")}},
			{"insert of a closed run", store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: "wf-2", RunID: "r2", Status: store.RunCompleted}}},
			{"insert with events from 2", store.InsertRun{Run: newRun("ns", "wf-2", "r2"), Events: evs(2, 3)}},
			{"insert with a wrong history length", store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: "wf-2", RunID: "r2", HistoryLength: 5}, Events: evs(1, 1)}},
		}
		for _, c := range bad {
			// Valid writes around the bad one must not commit either.
			batch := []store.Write{
				store.InsertActivity{Activity: newActivity("ns", "a-before")},
				store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: evs(3, 3)},
				c.w,
				store.InsertRun{Run: newRun("ns", "wf-3", "r3"), Events: evs(1, 1)},
			}
			if _, err := s.Apply(ctx, batch); err == nil {
				t.Errorf("apply with %s: no error", c.name)
			}
		}
		if _, err := s.GetActivity(ctx, "ns", "a-before"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an activity of a failed batch was recorded: %v", err)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "r1", 0, 0)); got != "[1 2]" {
			t.Fatalf("a failed batch changed the history: %s", got)
		}
		for _, id := range []string{"r2", "r3"} {
			if _, err := s.GetRun(ctx, "ns", id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("run %s of a failed batch was recorded: %v", id, err)
			}
		}
	})

	t.Run("RunUpdateSetsOnlyWhatItNames", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("ns", "wf", "r1"), 1)
		steps := []struct {
			name          string
			update        store.RunUpdate
			build, taskFx string
		}{
			{"bind the build and record a task failure", store.RunUpdate{BuildID: "b1", TaskFailure: ptr("nondeterministic at step 2")}, "b1", "nondeterministic at step 2"},
			{"an empty update keeps both", store.RunUpdate{}, "b1", "nondeterministic at step 2"},
			{"a running status changes nothing", store.RunUpdate{Status: store.RunRunning}, "b1", "nondeterministic at step 2"},
			{"clear the task failure", store.RunUpdate{TaskFailure: ptr("")}, "b1", ""},
			{"a new build replaces the old", store.RunUpdate{BuildID: "b2"}, "b2", ""},
		}
		after := int64(1)
		for _, st := range steps {
			if got := apply(t, s, store.AppendEvents{Namespace: "ns", RunID: "r1", After: after, Events: evs(after+1, after+1), Update: st.update}); !got[0] {
				t.Fatalf("%s: refused", st.name)
			}
			after++
			r := getRun(t, s, "ns", "r1")
			if r.BuildID != st.build || r.TaskFailure != st.taskFx || r.Status != store.RunRunning || r.HistoryLength != after ||
				!r.ClosedAt.IsZero() || r.Result != nil {
				t.Fatalf("%s: run is %+v, want build %q, task failure %q, open with %d events", st.name, r, st.build, st.taskFx, after)
			}
		}
		// An update without events changes the record and keeps the length.
		if got := apply(t, s, store.AppendEvents{Namespace: "ns", RunID: "r1", After: after, Update: store.RunUpdate{TaskFailure: ptr("again")}}); !got[0] {
			t.Fatal("update without events: refused")
		}
		if r := getRun(t, s, "ns", "r1"); r.TaskFailure != "again" || r.HistoryLength != after {
			t.Fatalf("update without events: %+v", r)
		}
	})

	t.Run("ClosingRecordsTheOutcome", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		closedAt := runEpoch.Add(90 * time.Minute)
		cases := []struct {
			status store.RunStatus
			update store.RunUpdate
		}{
			{store.RunCompleted, store.RunUpdate{Result: []byte(`{"ok":true}`)}},
			{store.RunFailed, store.RunUpdate{Failure: &store.Failure{Message: "card declined", Type: "Declined", Details: []byte("x")}}},
			{store.RunCanceled, store.RunUpdate{Failure: &store.Failure{Message: "canceled by operator", Type: "canceled"}}},
			{store.RunTerminated, store.RunUpdate{Failure: &store.Failure{Message: "terminated", Type: "terminated"}}},
			{store.RunContinuedAsNew, store.RunUpdate{NextRunID: "next-run", BuildID: "b9"}},
		}
		for i, c := range cases {
			id := fmt.Sprintf("r%d", i)
			startRun(t, s, newRun("ns", "wf-"+id, id), 2)
			u := c.update
			u.Status, u.ClosedAt, u.TaskFailure = c.status, closedAt, ptr("")
			if got := apply(t, s, store.AppendEvents{Namespace: "ns", RunID: id, After: 2, Events: evs(3, 4), Update: u}); !got[0] {
				t.Fatalf("close as %s: refused", c.status)
			}
			r := getRun(t, s, "ns", id)
			if r.Status != c.status || !r.ClosedAt.Equal(closedAt) || r.HistoryLength != 4 || string(r.Result) != string(u.Result) ||
				!reflect.DeepEqual(r.Failure, u.Failure) || r.NextRunID != u.NextRunID || string(r.Input) != `{"order":"`+id+`"}` {
				t.Fatalf("closed as %s: run is %+v (failure %+v), want update %+v", c.status, r, r.Failure, u)
			}
			if u.BuildID != "" && r.BuildID != u.BuildID {
				t.Fatalf("closed as %s: build id %q, want %q", c.status, r.BuildID, u.BuildID)
			}
			if got := apply(t, s, store.AppendEvents{Namespace: "ns", RunID: id, After: 4, Events: evs(5, 5),
				Update: store.RunUpdate{Status: store.RunCompleted, Result: []byte("again")}}); got[0] {
				t.Fatalf("append to a run closed as %s: accepted", c.status)
			}
			if r2 := getRun(t, s, "ns", id); r2.Status != c.status || r2.HistoryLength != 4 || string(r2.Result) != string(u.Result) {
				t.Fatalf("refused append changed the run closed as %s: %+v", c.status, r2)
			}
		}
	})

	t.Run("ReadHistoryPagesAfterASeq", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("ns", "wf", "r1"), 1)
		for after := int64(1); after < 10; after += 3 {
			if got := apply(t, s, store.AppendEvents{Namespace: "ns", RunID: "r1", After: after, Events: evs(after+1, after+3)}); !got[0] {
				t.Fatalf("append after %d: refused", after)
			}
		}
		startRun(t, s, newRun("other", "wf", "r1"), 2) // same run id elsewhere: not this history
		cases := []struct {
			after int64
			limit int
			want  string
		}{
			{0, 0, "[1 2 3 4 5 6 7 8 9 10]"},
			{0, 3, "[1 2 3]"},
			{3, 4, "[4 5 6 7]"},
			{7, 100, "[8 9 10]"},
			{9, 0, "[10]"},
			{10, 0, "[]"},
			{50, 5, "[]"},
		}
		for _, c := range cases {
			if got := seqsOf(t, readHistory(t, s, "ns", "r1", c.after, c.limit)); got != c.want {
				t.Errorf("history after %d limit %d = %s, want %s", c.after, c.limit, got, c.want)
			}
		}
		// Paging to the end reads every event once.
		var all []store.Event
		for after := int64(0); ; {
			page := readHistory(t, s, "ns", "r1", after, 4)
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			after = page[len(page)-1].Seq
		}
		if got := seqsOf(t, all); got != "[1 2 3 4 5 6 7 8 9 10]" {
			t.Fatalf("paged history = %s", got)
		}
	})

	t.Run("LatestRunPrefersTheOpenRunElseTheNewest", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, err := s.LatestRun(ctx, "ns", "wf"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("latest run of a workflow that never ran: %v, want ErrNotFound", err)
		}
		latest := func() string {
			t.Helper()
			r, err := s.LatestRun(ctx, "ns", "wf")
			if err != nil {
				t.Fatalf("latest run: %v", err)
			}
			return r.RunID + "/" + string(r.Status)
		}
		startRun(t, s, newRun("ns", "wf", "r1"), 1)
		startRun(t, s, newRun("ns", "wf-other", "x1"), 1)
		if got := latest(); got != "r1/running" {
			t.Fatalf("latest = %s, want the open r1", got)
		}
		closeRun(t, s, "ns", "r1", 1, store.RunContinuedAsNew)
		if got := latest(); got != "r1/continued_as_new" {
			t.Fatalf("latest = %s, want the closed r1", got)
		}
		startRun(t, s, newRun("ns", "wf", "r2"), 1)
		closeRun(t, s, "ns", "r2", 1, store.RunFailed)
		startRun(t, s, newRun("ns", "wf-third", "x2"), 1) // newer, but another workflow id
		if got := latest(); got != "r2/failed" {
			t.Fatalf("latest = %s, want the newest closed run r2", got)
		}
		startRun(t, s, newRun("ns", "wf", "r3"), 1)
		if got := latest(); got != "r3/running" {
			t.Fatalf("latest = %s, want the open r3", got)
		}
		if r, err := s.LatestRun(ctx, "ns", "wf"); err != nil || string(r.Input) != `{"order":"r3"}` {
			t.Fatalf("latest run lacks its input: %+v, %v", r, err)
		}
		if _, err := s.LatestRun(ctx, "other", "wf"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("latest run of wf in another namespace: %v, want ErrNotFound", err)
		}
	})

	t.Run("ListRunsFiltersPagesNewestFirstWithoutPayloads", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var ws []store.Write
		for i := range 7 {
			r := newRun("ns", fmt.Sprintf("wf-%d", i%4), fmt.Sprintf("r%d", i))
			if i%2 == 1 {
				r.WorkflowType = "refund"
			}
			r.Result = []byte("result")
			ws = append(ws, store.InsertRun{Run: r, Events: evs(1, 1)})
			if i < 3 {
				// Close the first run of each workflow id, so the next may start.
				ws = append(ws, store.AppendEvents{Namespace: "ns", RunID: r.RunID, After: 1,
					Update: store.RunUpdate{Status: store.RunFailed, Failure: &store.Failure{Message: "boom " + r.RunID}}})
			}
		}
		ws = append(ws, store.InsertRun{Run: newRun("other", "wf-0", "o1")})
		for i, ok := range apply(t, s, ws...) {
			if !ok {
				t.Fatalf("setup write %d (%T) refused", i, ws[i])
			}
		}
		// r3..r6 are open; r0..r2 failed; wf-0 holds r0 and r4.

		page1 := listRuns(t, s, store.RunFilter{Namespace: "ns", Limit: 3})
		page2 := listRuns(t, s, store.RunFilter{Namespace: "ns", Limit: 3, Before: page1[len(page1)-1].Seq})
		page3 := listRuns(t, s, store.RunFilter{Namespace: "ns", Limit: 3, Before: page2[len(page2)-1].Seq})
		if got := runIDsOf(page1, page2, page3); got != "[r6 r5 r4 r3 r2 r1 r0]" || len(page1) != 3 || len(page2) != 3 {
			t.Fatalf("pages = %s (%d, %d), want newest first, three a page", got, len(page1), len(page2))
		}
		cases := []struct {
			name string
			f    store.RunFilter
			want string
		}{
			{"status", store.RunFilter{Namespace: "ns", Status: store.RunFailed}, "[r2 r1 r0]"},
			{"type", store.RunFilter{Namespace: "ns", WorkflowType: "refund"}, "[r5 r3 r1]"},
			{"workflow id", store.RunFilter{Namespace: "ns", WorkflowID: "wf-0"}, "[r4 r0]"},
			{"status and type", store.RunFilter{Namespace: "ns", Status: store.RunRunning, WorkflowType: "order"}, "[r6 r4]"},
			{"workflow id paged", store.RunFilter{Namespace: "ns", WorkflowID: "wf-0", Before: page1[2].Seq, Limit: 1}, "[r0]"},
			{"another namespace", store.RunFilter{Namespace: "other"}, "[o1]"},
			{"every namespace", store.RunFilter{WorkflowID: "wf-0"}, "[o1 r4 r0]"},
			{"nothing matches", store.RunFilter{Namespace: "ns", Status: store.RunTerminated}, "[]"},
		}
		for _, c := range cases {
			if got := runIDsOf(listRuns(t, s, c.f)); got != c.want {
				t.Errorf("list by %s = %s, want %s", c.name, got, c.want)
			}
		}
		for _, r := range page3 {
			if r.Input != nil || r.Result != nil {
				t.Fatalf("listed run %s carries input %q and result %q, want neither", r.RunID, r.Input, r.Result)
			}
			if r.Failure == nil || r.Failure.Message != "boom "+r.RunID || r.Fingerprint != "fp-"+r.RunID ||
				!r.StartedAt.Equal(runEpoch) || r.HistoryLength != 1 || r.Status != store.RunFailed {
				t.Fatalf("listed run %s lacks its record: %+v", r.RunID, r)
			}
		}

		// Without a limit a page holds 100.
		ws = nil
		for i := range 105 {
			ws = append(ws, store.InsertRun{Run: newRun("many", fmt.Sprintf("wf-%d", i), fmt.Sprintf("m%d", i))})
		}
		apply(t, s, ws...)
		if got := listRuns(t, s, store.RunFilter{Namespace: "many"}); len(got) != 100 || got[0].RunID != "m104" {
			t.Fatalf("list without a limit: %d runs from %s, want 100 from m104", len(got), runIDsOf(got[:1]))
		}
	})

	t.Run("OpenRunsListsOnlyOpenRunsOldestFirst", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		startRun(t, s, newRun("b", "wf", "r1"), 1)
		startRun(t, s, newRun("a", "wf", "r2"), 1)
		startRun(t, s, newRun("a", "wf-2", "r3"), 1)
		startRun(t, s, newRun("c", "wf", "r4"), 2)
		closeRun(t, s, "a", "r2", 1, store.RunCompleted)
		open, err := s.OpenRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := runIDsOf(open); got != "[r1 r3 r4]" {
			t.Fatalf("open runs = %s, want [r1 r3 r4]", got)
		}
		if r := open[2]; r.Namespace != "c" || r.HistoryLength != 2 || string(r.Input) != `{"order":"r4"}` || r.Status != store.RunRunning {
			t.Fatalf("open run lacks its record: %+v", r)
		}
	})

	t.Run("ConcurrentInsertsOfOneWorkflowIDOneWins", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const racers = 12
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []string
			errs []error
		)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("r%d", i)
				got, err := s.Apply(ctx, []store.Write{store.InsertRun{Run: newRun("ns", "wf", id), Events: evs(1, 1)}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if got[0] {
					won = append(won, id)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("concurrent inserts failed: %v", errs)
		}
		if len(won) != 1 {
			t.Fatalf("%d of %d concurrent inserts of one workflow id won (%v), want exactly 1", len(won), racers, won)
		}
		latest, err := s.LatestRun(ctx, "ns", "wf")
		if err != nil || latest.RunID != won[0] {
			t.Fatalf("latest run = %+v, %v; want the winner %s", latest, err, won[0])
		}
		if all := listRuns(t, s, store.RunFilter{Namespace: "ns"}); len(all) != 1 {
			t.Fatalf("concurrent inserts left %s, want the winner alone", runIDsOf(all))
		}
	})

	t.Run("MixedBatchAppliesInOrder", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		done := time.Now().UTC()
		got := apply(t, s,
			store.InsertActivity{Activity: newActivity("ns", "a1")},
			store.InsertRun{Run: newRun("ns", "wf", "r1"), Events: evs(1, 1)},
			store.AppendEvents{Namespace: "ns", RunID: "r1", After: 1, Events: evs(2, 2)},
			store.EndAttempt{Namespace: "ns", ID: "a1", State: store.StateCompleted, Result: []byte(`"ok"`), ClosedAt: done},
			store.AppendEvents{Namespace: "ns", RunID: "r1", After: 1, Events: evs(2, 2)},
			store.AppendEvents{Namespace: "ns", RunID: "r1", After: 2, Events: evs(3, 3),
				Update: store.RunUpdate{Status: store.RunCompleted, Result: []byte("done"), ClosedAt: done}},
			store.InsertRun{Run: newRun("ns", "wf", "r2"), Events: evs(1, 1)},
			store.InsertRun{Run: newRun("ns", "wf", "r3"), Events: evs(1, 1)},
		)
		// Each write sees the ones before it: the append after the insert,
		// the stale append refused, the new run after the close, and the
		// next new run refused while that one is open.
		if fmt.Sprint(got) != "[true true true true false true true false]" {
			t.Fatalf("changed = %v, want [true true true true false true true false]", got)
		}
		if a := get(t, s, "ns", "a1"); a.State != store.StateCompleted {
			t.Fatalf("activity of the batch: %+v", a)
		}
		if r := getRun(t, s, "ns", "r1"); r.Status != store.RunCompleted || r.HistoryLength != 3 || string(r.Result) != "done" {
			t.Fatalf("run r1 after the batch: %+v", r)
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "r1", 0, 0)); got != "[1 2 3]" {
			t.Fatalf("history of r1 = %s", got)
		}
		if r := getRun(t, s, "ns", "r2"); r.Status != store.RunRunning {
			t.Fatalf("run r2 after the batch: %+v", r)
		}
	})

	t.Run("CommitterCarriesWorkflowWrites", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		c := store.NewCommitter(s, store.CommitterOptions{})
		defer c.Close()
		if ok, err := c.Commit(ctx, store.InsertRun{Run: newRun("ns", "wf", "r1"), Events: evs(1, 1)}); err != nil || !ok {
			t.Fatalf("commit insert: %v, %v", ok, err)
		}
		if ok, err := c.Commit(ctx, store.InsertRun{Run: newRun("ns", "wf", "r2")}); err != nil || ok {
			t.Fatalf("commit second open run: %v, %v; want refused", ok, err)
		}
		if ok, err := c.Commit(ctx, store.AppendEvents{Namespace: "ns", RunID: "r1", After: 1, Events: evs(2, 3)}); err != nil || !ok {
			t.Fatalf("commit append: %v, %v", ok, err)
		}
		if _, err := c.Commit(ctx, store.AppendEvents{Namespace: "ns", RunID: "r1", After: 3, Events: evs(5, 5)}); err == nil {
			t.Fatal("commit of an append with a gap: no error")
		}
		if got := seqsOf(t, readHistory(t, s, "ns", "r1", 0, 0)); got != "[1 2 3]" {
			t.Fatalf("history = %s", got)
		}
	})
}
