package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// These tests run workflows on a real server over loopback gRPC, with the
// SDK's worker and client.

type order struct {
	ID string `json:"id"`
}

// shipOrder reserves, waits for the "ship" signal, sleeps, records a side
// effect, runs a child and fans out five activities; "status" answers
// where it stands.
func shipOrder(ctx workflow.Context, o order) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	status := "reserving"
	if err := workflow.SetQueryHandler(ctx, "status", func(struct{}) (string, error) { return status, nil }); err != nil {
		return "", err
	}
	r, err := workflow.ExecuteActivity[string](ctx, "reserve", o).Get(ctx)
	if err != nil {
		return "", err
	}
	status = "waiting"
	tracking, ok, err := workflow.ReceiveSignalWithTimeout[string](ctx, "ship", time.Hour)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", errors.New("not shipped within the hour")
	}
	status = "sleeping"
	if err := workflow.Sleep(ctx, 50*time.Millisecond); err != nil {
		return "", err
	}
	id, err := workflow.SideEffect(ctx, "id", func() (string, error) { return "n-1", nil })
	if err != nil {
		return "", err
	}
	kid, err := workflow.ExecuteChild[string](ctx, "label", tracking, workflow.ChildOptions{}).Get(ctx)
	if err != nil {
		return "", err
	}
	var fs []workflow.Awaitable
	for i := range 5 {
		fs = append(fs, workflow.ExecuteActivity[string](ctx, "reserve", order{ID: fmt.Sprint("fan-", i)}))
	}
	if err := workflow.AwaitAll(ctx, fs...); err != nil {
		return "", err
	}
	status = "done"
	return r + "/" + tracking + "/" + id + "/" + kid, nil
}

func label(_ workflow.Context, in string) (string, error) {
	if in == "again" {
		return "", workflow.NewContinueAsNewError("last")
	}
	return "label:" + in, nil
}

// cancelable blocks on an activity; when canceled it runs a cleanup
// activity on a disconnected context and closes canceled.
func cancelable(ctx workflow.Context, _ struct{}) (string, error) {
	opts := workflow.ActivityOptions{StartToCloseTimeout: time.Minute}
	_, err := workflow.ExecuteActivity[string](ctx, "block", nil, opts).Get(ctx)
	if !errors.Is(err, workflow.ErrCanceled) {
		return "", err
	}
	d := workflow.NewDisconnectedContext(ctx)
	if _, cerr := workflow.ExecuteActivity[string](d, "reserve", order{ID: "cleanup"}, opts).Get(d); cerr != nil {
		return "", cerr
	}
	return "", fmt.Errorf("cleaned up: %w", err)
}

type bundle struct {
	srv *servertest.Server
	c   *client.Client
	// reserved counts executions of "reserve" by id.
	reserved map[string]*atomic.Int32
	blocked  atomic.Int32
	ctx      context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := servertest.Start(t)
	c, err := client.Dial(context.Background(), srv.Addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b := &bundle{srv: srv, c: c, ctx: ctx, reserved: map[string]*atomic.Int32{}}
	for _, id := range []string{"1", "2", "cleanup"} {
		b.reserved[id] = new(atomic.Int32)
	}
	return b
}

// startWorker runs a worker of build with register's workflows and the
// test activities until the returned stop is called (or the test ends).
func (b *bundle) startWorker(t *testing.T, build string, register func(*worker.Worker)) (stop func()) {
	t.Helper()
	w, err := worker.New(b.srv.Addr, worker.Options{Namespaces: []string{"ns"}, BuildID: build, Slots: 4, StopTimeout: time.Second})
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	worker.RegisterActivity(w, "reserve", func(_ context.Context, o order) (string, error) {
		if n := b.reserved[o.ID]; n != nil {
			n.Add(1)
		}
		return "rsv-" + o.ID, nil
	})
	worker.RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (string, error) {
		b.blocked.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	})
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func v1(w *worker.Worker) {
	worker.RegisterWorkflow(w, "order", shipOrder)
	worker.RegisterWorkflow(w, "label", label)
	worker.RegisterWorkflow(w, "cancelable", cancelable)
}

// waitStatus polls the "status" query until it answers want.
func waitStatus(t *testing.T, b *bundle, h *client.WorkflowHandle, want string) {
	t.Helper()
	servertest.Eventually(t, "status "+want, func() bool {
		var status string
		err := h.Query(b.ctx, "status", nil, &status)
		return err == nil && status == want
	})
}

func TestOrderWorkflowRunsEveryKindOfStepOnARealServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "b1", v1)
	h, err := client.StartWorkflow(b.ctx, b.c, client.StartWorkflowOptions{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order"}, order{ID: "1"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	waitStatus(t, b, h, "waiting")
	if err := h.Signal(b.ctx, "ship", "1Z"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	run, err := h.Wait(b.ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	got, err := client.WorkflowResult[string](run)
	if err != nil || got != "rsv-1/1Z/n-1/label:1Z" {
		t.Fatalf("result %q err %v (run %+v)", got, err, run)
	}
	if n := b.reserved["1"].Load(); n != 1 {
		t.Fatalf("the reserve step ran %d times, want once", n)
	}
	var kinds []string
	for ev, err := range h.History(b.ctx) {
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		kinds = append(kinds, ev.Kind)
	}
	if kinds[0] != "workflow_started" || kinds[len(kinds)-1] != "workflow_closed" || int64(len(kinds)) != run.HistoryLength {
		t.Fatalf("history %v (length %d)", kinds, run.HistoryLength)
	}
}

func TestCancelReachesTheRunningStepAndTheCodeCleansUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "b1", v1)
	h, err := client.StartWorkflow(b.ctx, b.c, client.StartWorkflowOptions{Namespace: "ns", WorkflowID: "c-1", WorkflowType: "cancelable"}, struct{}{})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	servertest.Eventually(t, "the blocking step runs", func() bool { return b.blocked.Load() == 1 })
	if _, err := h.Cancel(b.ctx, "test"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	run, err := h.Wait(b.ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if run.Status != client.RunCanceled || b.reserved["cleanup"].Load() != 1 {
		t.Fatalf("run %+v, cleanup ran %d times", run, b.reserved["cleanup"].Load())
	}
}

func TestContinueAsNewIsFollowedByWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "b1", v1)
	h, err := client.StartWorkflow(b.ctx, b.c, client.StartWorkflowOptions{Namespace: "ns", WorkflowID: "k-1", WorkflowType: "label"}, "again")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	run, err := b.c.Workflow("ns", "k-1", "").Wait(b.ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if run.RunID == h.RunID || string(run.Result) != `"label:last"` {
		t.Fatalf("wait ended on %+v, want the continued run's result", run)
	}
}

// TestChangedCodeIsReportedAndTheRunWaitsForTheOriginal: a fresh worker
// replays a waiting run; code that changed its first step fails the task
// with a nondeterministic error naming the step; once the original code is
// back the run completes, and no completed step ran twice.
func TestChangedCodeIsReportedAndTheRunWaitsForTheOriginal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stop := b.startWorker(t, "b1", v1)
	h, err := client.StartWorkflow(b.ctx, b.c, client.StartWorkflowOptions{Namespace: "ns", WorkflowID: "o-2", WorkflowType: "order"}, order{ID: "2"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	waitStatus(t, b, h, "waiting")
	stop()

	changed := b.startWorker(t, "b1", func(w *worker.Worker) {
		worker.RegisterWorkflow(w, "order", func(ctx workflow.Context, o order) (string, error) {
			return workflow.ExecuteActivity[string](ctx, "charge", o, workflow.ActivityOptions{StartToCloseTimeout: time.Minute}).Get(ctx)
		})
	})
	if err := h.Signal(b.ctx, "ship", "2Z"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	var failure string
	servertest.Eventually(t, "a nondeterministic task failure", func() bool {
		r, err := h.Get(b.ctx)
		failure = r.TaskFailure
		return err == nil && failure != ""
	})
	if !strings.Contains(failure, "nondeterministic") || !strings.Contains(failure, "step 1") ||
		!strings.Contains(failure, `"charge"`) || !strings.Contains(failure, `"reserve"`) {
		t.Fatalf("task failure %q does not name the step and both activities", failure)
	}
	if r, _ := h.Get(b.ctx); r.Status != client.RunRunning {
		t.Fatalf("run after the failure: %s, want still running", r.Status)
	}
	changed()

	b.startWorker(t, "b1", v1)
	run, err := h.Wait(b.ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if run.Status != client.RunCompleted || run.TaskFailure != "" {
		t.Fatalf("run with the original code back: %+v", run)
	}
	if n := b.reserved["2"].Load(); n != 1 {
		t.Fatalf("the reserve step ran %d times across the replays, want once", n)
	}
}
