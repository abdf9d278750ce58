package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

var (
	clientTrace = tracectx.Context{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "vendor=x"}
	workerTrace = tracectx.Context{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"}
)

func TestTraceContextTravelsWithTheActivityToEveryAttemptAndSurvivesARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := request("a", store.Timeouts{}, store.RetryPolicy{InitialInterval: time.Second})
	r.Trace = clientTrace
	if rec := b.schedule(r); rec.Trace != clientTrace {
		t.Fatalf("scheduled record has trace context %+v, want %+v", rec.Trace, clientTrace)
	}
	b.schedule(request("plain", store.Timeouts{}, store.RetryPolicy{}))
	w := b.join(2)
	got := map[string]Task{}
	for range 2 {
		task := w.task()
		got[task.ActivityID] = task
	}
	if got["a"].Trace != clientTrace || !got["plain"].Trace.IsZero() {
		t.Fatalf("tasks carry trace contexts %+v and %+v; want the scheduled one and none", got["a"].Trace, got["plain"].Trace)
	}
	w.complete("plain", 1, `"done"`)
	w.fail("a", 1, store.Failure{Type: "flaky", Retryable: true})
	b.restart()
	w = b.join(1)
	b.advance(time.Second)
	if task := w.task(); task.ActivityID != "a" || task.Attempt != 2 || task.Trace != clientTrace {
		t.Fatalf("retry after a restart: %s#%d with trace context %+v, want a#2 with %+v", task.ActivityID, task.Attempt, task.Trace, clientTrace)
	}
}

func TestScheduleRefusesABadTraceContextNamingItAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := request("a", store.Timeouts{}, store.RetryPolicy{})
	r.Trace = tracectx.Context{Parent: "00-not-a-traceparent"}
	_, _, err := b.eng.Schedule(context.Background(), anyone, r)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `trace_context.traceparent: "00-not-a-traceparent"`) {
		t.Fatalf("schedule with a bad traceparent: %v; want ErrInvalid naming the field and value", err)
	}
	if _, err := b.eng.Get(context.Background(), anyone, "ns", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after the refusal: %v, want ErrNotFound", err)
	}
}

func TestTraceContextIsNoPartOfTheRequestsIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := request("a", store.Timeouts{}, store.RetryPolicy{})
	r.Trace = clientTrace
	b.schedule(r)
	r.Trace = workerTrace // a retry of the call, from another span
	rec, existing, err := b.eng.Schedule(context.Background(), anyone, r)
	if err != nil || !existing || rec.Trace != clientTrace {
		t.Fatalf("repeat with another trace context: existing %v, trace %+v, %v; want the first activity, unchanged", existing, rec.Trace, err)
	}
}

// recordingTracer keeps what the engine told it.
type recordingTracer struct {
	mu       sync.Mutex
	started  []string
	complete []string
}

func (r *recordingTracer) Started(a *store.Activity, w registry.WorkerID, readyAt, startedAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, a.ID+" "+a.Trace.Parent+" waited "+startedAt.Sub(readyAt).String())
}

func (r *recordingTracer) Completing(a *store.Activity, w registry.WorkerID, out Outcome, now time.Time) func(time.Time, store.ActivityState, error) {
	line := a.ID + " worker " + out.Trace.Parent
	return func(_ time.Time, state store.ActivityState, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.complete = append(r.complete, line+" "+string(state)+" "+errString(err))
	}
}

func errString(err error) string {
	if err == nil {
		return "durable"
	}
	return err.Error()
}

func TestTracerIsToldOfEachStartAndEachDurableResult(t *testing.T) {
	t.Parallel()
	rt := &recordingTracer{}
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db"), tracer: rt}
	b.start()
	t.Cleanup(b.stop)
	r := request("a", store.Timeouts{}, store.RetryPolicy{})
	r.Trace = clientTrace
	b.schedule(r)
	b.advance(3 * time.Second) // the wait for a worker
	w := b.join(1)
	task := w.task()
	if refused := w.report("a", task.Attempt, Outcome{Completed: true, Trace: workerTrace}); refused != "" {
		t.Fatalf("result refused: %s", refused)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if want := "a " + clientTrace.Parent + " waited 3s"; len(rt.started) != 1 || rt.started[0] != want {
		t.Errorf("starts told: %q, want [%q]", rt.started, want)
	}
	if want := "a worker " + workerTrace.Parent + " completed durable"; len(rt.complete) != 1 || rt.complete[0] != want {
		t.Errorf("results told: %q, want [%q]", rt.complete, want)
	}
}

func TestWorkflowStepsAndChildrenJoinTheRunsTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	run, _, err := b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order", Trace: clientTrace})
	if err != nil || run.Trace != clientTrace {
		t.Fatalf("start: run trace %+v, %v; want %+v", run.Trace, err, clientTrace)
	}
	fw := b.joinWorkflows("b1", 4, "order", "kid")
	task := fw.next()
	if tc := task.GetTraceContext(); tc.GetTraceparent() != clientTrace.Parent || tc.GetTracestate() != clientTrace.State {
		t.Fatalf("workflow task trace context %v, want %+v", tc, clientTrace)
	}
	fw.mustAnswer(task, false, scheduleActivity(1, "t", `1`), startChild(2, "o-1-kid", "kid"))
	if step := fw.activity(); step.Trace != clientTrace {
		t.Fatalf("step activity trace context %+v, want the run's %+v", step.Trace, clientTrace)
	}
	kid, err := b.eng.st.LatestRun(ctx, "ns", "o-1-kid")
	if err != nil || kid.Trace != clientTrace {
		t.Fatalf("child run: trace %+v, %v; want the parent's %+v", kid.Trace, err, clientTrace)
	}
	_, _, err = b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-2", WorkflowType: "order",
		Trace: tracectx.Context{State: "a=b"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "trace_context.traceparent: missing") {
		t.Fatalf("start with tracestate alone: %v, want ErrInvalid naming trace_context.traceparent", err)
	}
}
