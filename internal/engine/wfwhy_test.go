package engine

import (
	"context"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

func (b *bench) whyWF(id string) Explanation {
	b.t.Helper()
	ex, err := b.eng.WhyWorkflow(context.Background(), anyone, "ns", id, "")
	if err != nil {
		b.t.Fatalf("why workflow %s: %v", id, err)
	}
	return ex
}

func TestWhyNamesTheReasonARunHasNoTask(t *testing.T) {
	t.Parallel()
	t.Run("no worker serves its type", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWF("o-1", "order", `1`)
		wantWhy(t, b.whyWF("o-1"), WhyNoWorker, `"order"`)
	})
	t.Run("no worker runs its build", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		v1 := b.joinWorkflows("v1", 1, "order")
		b.startWF("o-1", "order", `1`)
		task := v1.next()
		v1.mustAnswer(task, false, startTimer(1, time.Minute))
		v1.leave()
		b.joinWorkflows("v2", 1, "order")
		b.advance(time.Minute) // the timer fires; the run, bound to v1, needs a task
		wantWhy(t, b.whyWF("o-1"), WhyNoBuild, `"v1"`, "1 workers")
	})
	t.Run("every workflow slot is busy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.joinWorkflows("v1", 1, "order")
		for _, id := range []string{"o-1", "o-2", "o-3"} {
			b.startWF(id, "order", `1`)
		}
		fw.next() // o-1 holds the only slot
		ex := b.whyWF("o-3")
		wantWhy(t, ex, WhySlotsBusy, "0 free workflow slots", "1 runs wait before it")
		if ex.Ahead != 1 || ex.Eligible != 1 {
			t.Fatalf("ahead %d eligible %d, want 1 and 1", ex.Ahead, ex.Eligible)
		}
	})
	t.Run("its delayed start has not come", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.joinWorkflows("v1", 1, "order")
		if _, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1",
			WorkflowType: "order", StartDelay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		ex := b.whyWF("o-1")
		wantWhy(t, ex, WhyDelayedStart, "in 1h0m0s")
		if !ex.Until.Equal(epoch.Add(time.Hour)) {
			t.Fatalf("until %v, want the start time", ex.Until)
		}
	})
	t.Run("a failed task's backoff has not ended", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.joinWorkflows("v1", 1, "order")
		b.startWF("o-1", "order", `1`)
		task := fw.next()
		fw.result(&aionv1.WorkflowTaskResult{Namespace: "ns", RunId: task.GetRunId(), Task: task.GetTask(),
			Failure: &aionv1.Failure{Type: FailureNondeterministic, Message: "step 1 differs"}})
		wantWhy(t, b.whyWF("o-1"), WhyTaskBackoff, "1 workflow tasks failed in a row")
	})
	t.Run("it waits on its steps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.joinWorkflows("v1", 1, "order")
		b.startWF("o-1", "order", `1`)
		fw.mustAnswer(fw.next(), true, startTimer(1, time.Hour))
		wantWhy(t, b.whyWF("o-1"), WhyWaitingOnSteps, "1 steps")
	})
	t.Run("its task runs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.joinWorkflows("v1", 1, "order")
		b.startWF("o-1", "order", `1`)
		fw.next()
		if ex := b.whyWF("o-1"); ex.Reason != WhyRunning || ex.WorkerID != fw.w.ID() {
			t.Fatalf("why a running task: %+v", ex)
		}
	})
	t.Run("it closed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.joinWorkflows("v1", 1, "order")
		b.startWF("o-1", "order", `1`)
		fw.mustAnswer(fw.next(), false, complete(`"ok"`))
		b.waitWF("o-1")
		wantWhy(t, b.whyWF("o-1"), WhyClosed, "completed")
	})
}
