package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/store"
)

// startKeyedWF starts workflow id of type "order" with a concurrency key.
func (b *bench) startKeyedWF(id, key string) {
	b.t.Helper()
	_, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: id,
		WorkflowType: "order", Flow: store.Flow{ConcurrencyKey: key}})
	if err != nil {
		b.t.Fatalf("start workflow %s: %v", id, err)
	}
}

// taskRuns reads the workflow tasks sent now, without waiting, by workflow id.
func (fw *wfWorker) taskRuns() map[string]*aionv1.WorkflowTask {
	out := map[string]*aionv1.WorkflowTask{}
	for {
		select {
		case task := <-fw.conn.wf:
			out[task.GetWorkflowId()] = task
		default:
			return out
		}
	}
}

func wantTaskRuns(t *testing.T, what string, got map[string]*aionv1.WorkflowTask, want ...string) {
	t.Helper()
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Fatalf("%s: tasks for %q, want %q", what, ids, want)
	}
}

// nextRun waits for the next workflow task (a close frees its key's slot
// once the close is durable, after the task's ack) and checks its run.
func (fw *wfWorker) nextRun(id string) *aionv1.WorkflowTask {
	fw.b.t.Helper()
	task := fw.next()
	if task.GetWorkflowId() != id {
		fw.b.t.Fatalf("next task is for %s, want %s", task.GetWorkflowId(), id)
	}
	idle(fw.b.t, fw.conn.wf, "a second workflow task")
	return task
}

func (b *bench) wantHeldRun(id string, admitted, ahead int) {
	b.t.Helper()
	ex, err := b.eng.WhyWorkflow(context.Background(), anyone, "ns", id, "")
	if err != nil {
		b.t.Fatalf("why %s: %v", id, err)
	}
	if ex.Reason != WhyConcurrencyLimit || ex.ConcurrencyKey != "k" || ex.Running != admitted || ex.Limit != 2 || ex.Ahead != ahead {
		b.t.Fatalf("why %s: %s key %q admitted %d limit %d ahead %d (%s), want concurrency_limit k %d 2 %d",
			id, ex.Reason, ex.ConcurrencyKey, ex.Running, ex.Limit, ex.Ahead, ex.Message, admitted, ahead)
	}
}

// With a concurrency limit of 2 on a workflow type, at most 2 runs of a key
// are admitted at once; a run over the limit waits without a task (never
// failed) and is admitted, oldest first, when an admitted run of its key
// closes; another key is not held up; a restart keeps the count.
func TestWorkflowConcurrencyLimitAdmitsAtMostNRunsPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Concurrency: 2})
	fw := b.joinWorkflows("v1", 10, "order")
	for _, id := range []string{"k-1", "k-2", "k-3", "k-4", "k-5"} {
		b.startKeyedWF(id, "k")
	}
	b.startKeyedWF("j-1", "j")
	b.startKeyedWF("free", "")
	tasks := fw.taskRuns()
	wantTaskRuns(t, "after the starts", tasks, "free", "j-1", "k-1", "k-2")
	b.wantHeldRun("k-3", 2, 0)
	b.wantHeldRun("k-5", 2, 2)
	if v := b.getWF("k-4"); v.Run.Status != store.RunRunning {
		t.Fatalf("held run is %s, want running", v.Run.Status)
	}

	fw.mustAnswer(tasks["k-1"], false, complete(`1`))
	fw.mustAnswer(tasks["k-2"], false, startTimer(1, time.Hour))
	fw.mustAnswer(tasks["j-1"], false, startTimer(1, time.Hour))
	fw.mustAnswer(tasks["free"], false, complete(`1`))
	fw.nextRun("k-3")
	b.wantHeldRun("k-4", 2, 0)

	// k-2 has a recorded task and counts at once after the restart; k-3 was
	// given a task that was never answered and is admitted again before the
	// younger runs.
	b.restart()
	fw = b.joinWorkflows("v1", 10, "order")
	tasks = fw.taskRuns()
	wantTaskRuns(t, "after a restart", tasks, "k-3")
	b.wantHeldRun("k-4", 2, 0)
	b.wantHeldRun("k-5", 2, 1)

	fw.mustAnswer(tasks["k-3"], false, complete(`3`))
	fw.nextRun("k-4")
	b.wantHeldRun("k-5", 2, 0)
}

// Raising a workflow type's limit admits the runs it held, and clearing it
// admits the rest.
func TestRaisingOrClearingAWorkflowLimitAdmitsHeldRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Concurrency: 1})
	fw := b.joinWorkflows("v1", 10, "order")
	for _, id := range []string{"k-1", "k-2", "k-3", "k-4"} {
		b.startKeyedWF(id, "k")
	}
	wantTaskRuns(t, "limit 1", fw.taskRuns(), "k-1")
	b.setLimit(store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Concurrency: 2})
	fw.nextRun("k-2")
	if _, err := b.eng.ClearFlowLimit(context.Background(), anyone, "ns", store.FlowWorkflow, "order"); err != nil {
		t.Fatalf("clear: %v", err)
	}
	wantTaskRuns(t, "no limit", fw.taskRuns(), "k-3", "k-4")
}

// Terminating a held run takes it out of its key's FIFO and frees nothing;
// terminating an admitted run admits the oldest held one.
func TestTerminatingAHeldOrAdmittedRunKeepsTheCountRight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Concurrency: 1})
	fw := b.joinWorkflows("v1", 10, "order")
	for _, id := range []string{"k-1", "k-2", "k-3"} {
		b.startKeyedWF(id, "k")
	}
	wantTaskRuns(t, "limit 1", fw.taskRuns(), "k-1")
	ctx := context.Background()
	if _, err := b.eng.TerminateWorkflow(ctx, anyone, "ns", "k-2", "", "held too long"); err != nil {
		t.Fatalf("terminate held k-2: %v", err)
	}
	idle(t, fw.conn.wf, "workflow task after the held run was terminated")
	if _, err := b.eng.TerminateWorkflow(ctx, anyone, "ns", "k-1", "", "done"); err != nil {
		t.Fatalf("terminate admitted k-1: %v", err)
	}
	fw.nextRun("k-3")
}

// Canceling a run its key's limit holds, before its code ever ran, closes
// it as canceled at once without a workflow task; the admitted run is not
// disturbed, and its close admits nobody (the held run is gone).
func TestCancelingAHeldRunClosesItWithoutRunningItsCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Concurrency: 1})
	fw := b.joinWorkflows("v1", 10, "order")
	b.startKeyedWF("k-1", "k")
	b.startKeyedWF("k-2", "k")
	first := fw.nextRun("k-1")
	ctx := context.Background()
	rec, err := b.eng.CancelWorkflow(ctx, anyone, "ns", "k-2", "", "not needed")
	if err != nil {
		t.Fatalf("cancel held k-2: %v", err)
	}
	if rec.Status != store.RunCanceled || rec.Failure == nil || rec.Failure.Type != FailureCanceled || rec.Failure.Message != "not needed" {
		t.Fatalf("cancel held k-2 answered %s %+v, want canceled with the reason", rec.Status, rec.Failure)
	}
	if got := b.waitWF("k-2"); got.Status != store.RunCanceled {
		t.Fatalf("k-2 ended %s, want canceled", got.Status)
	}
	idle(t, fw.conn.wf, "workflow task of the canceled held run")
	fw.mustAnswer(first, false, complete(`1`))
	if got := b.waitWF("k-1"); got.Status != store.RunCompleted {
		t.Fatalf("k-1 ended %s, want completed", got.Status)
	}
	idle(t, fw.conn.wf, "workflow task after the admitted run closed")
}
