package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/store"
)

// With 10,000 priority-5 activities waiting and one slot, a priority-1
// activity scheduled afterwards starts next; within a priority the oldest
// goes first, and the order survives a restart.
func TestUrgentActivityOvertakesALowPriorityBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reqs := make([]Request, 10000)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("low-%05d", i), store.Timeouts{}, store.RetryPolicy{})
		reqs[i].Priority = 5
	}
	for _, res := range b.eng.ScheduleBatch(context.Background(), anyone, reqs) {
		if res.Err != nil {
			t.Fatalf("schedule the backlog: %v", res.Err)
		}
	}
	urgent := request("urgent", store.Timeouts{}, store.RetryPolicy{})
	urgent.Priority = 1
	b.schedule(urgent)
	normal := request("normal", store.Timeouts{}, store.RetryPolicy{}) // priority 0: the default 3
	b.schedule(normal)
	if ex := b.why("low-00000"); ex.Reason != WhyNoWorker {
		t.Fatalf("why the backlog waits: %s", ex.Reason)
	}

	b.restart()
	fw := b.join(1)
	for _, want := range []string{"urgent", "normal", "low-00000", "low-00001"} {
		task := fw.task()
		if task.ActivityID != want {
			t.Fatalf("started %s, want %s", task.ActivityID, want)
		}
		fw.complete(task.ActivityID, task.Attempt, "1")
	}
}

func TestPriorityOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []int{-1, 6, 100} {
		r := request(fmt.Sprintf("p%d", p), store.Timeouts{}, store.RetryPolicy{})
		r.Priority = p
		_, _, err := b.eng.Schedule(context.Background(), anyone, r)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("priority: %d", p)) {
			t.Fatalf("priority %d: %v, want ErrInvalid naming it", p, err)
		}
	}
}

// A workflow's activity step takes the priority its options give, and
// overtakes waiting work of a lower priority.
func TestWorkflowStepTakesItsPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 {
		r := request(fmt.Sprintf("low-%d", i), store.Timeouts{}, store.RetryPolicy{})
		r.Priority = 5
		b.schedule(r)
	}
	fw := b.joinWorkflows("v1", 10, "order")
	b.startWF("w", "order", `1`)
	urgent := scheduleActivity(1, "t", `"urgent"`)
	urgent.GetScheduleActivity().Options = &aionv1.ActivityOptions{Priority: 1}
	task := fw.next()
	// The worker's one activity slot took the oldest low activity already.
	first := fw.activity()
	fw.mustAnswer(task, false, urgent)
	fw.completeActivity(first, "1")
	if next := fw.activity(); next.WorkflowID != "w" || next.Step != 1 {
		t.Fatalf("after the slot freed, %s started, want the workflow's priority-1 step", next.ActivityID)
	}
	if v := b.get(stepActivityID(b.getWF("w").Run.RunID, 1)); v.Activity.Priority != 1 {
		t.Fatalf("step priority %d, want 1", v.Activity.Priority)
	}
}

// Workflow tasks follow their run's priority: with low-priority runs
// waiting for the one workflow slot, a priority-1 run started afterwards
// gets the next task, before and after a restart.
func TestUrgentRunOvertakesWaitingWorkflowTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := func(id string, priority int) {
		t.Helper()
		if _, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: id,
			WorkflowType: "order", Priority: priority}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	for i := range 50 {
		start(fmt.Sprintf("low-%02d", i), 5)
	}
	start("urgent", 1)
	start("normal", 0)

	b.restart()
	fw := b.joinWorkflows("b1", 1, "order")
	for _, want := range []string{"urgent", "normal", "low-00", "low-01"} {
		task := fw.next()
		if got := task.GetWorkflowId(); got != want {
			t.Fatalf("workflow task for %s, want %s", got, want)
		}
		fw.mustAnswer(task, false, closeRun(aionv1.RunStatus_RUN_STATUS_COMPLETED, `1`))
	}
}
