package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/namespace"
)

// Reasons only a run's workflow task gives.
const (
	// WhyWaitingOnSteps: the run needs no workflow task now; it waits for
	// its steps (activities, timers, signals, children) to report.
	WhyWaitingOnSteps WaitReason = "waiting_on_steps"
	// WhyTaskBackoff: its last workflow task failed and the next waits for
	// the backoff to end.
	WhyTaskBackoff WaitReason = "task_backoff"
	// WhyNoBuild: workers serve the workflow type, but none runs the build
	// the run is bound to or one compatible with it.
	WhyNoBuild WaitReason = "no_worker_of_its_build"
	// WhyHeldElsewhere: in a cluster another server holds the run.
	WhyHeldElsewhere WaitReason = "held_by_another_server"
)

// WhyWorkflow explains why the open run of workflowID (or run runID) has no
// workflow task running now, from the server's live state.
func (e *Engine) WhyWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID string) (Explanation, error) {
	if err := checkRunRef(ns, workflowID, runID); err != nil {
		return Explanation{}, fmt.Errorf("why workflow: %w", err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return Explanation{}, fmt.Errorf("why workflow: %w", err)
	}
	rec, r, err := e.lookupRun(ctx, ns, workflowID, runID)
	if err != nil {
		return Explanation{}, fmt.Errorf("why workflow: %w", err)
	}
	if r != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.runs[r.key()] == r {
			return e.explainRunLocked(r), nil
		}
		rec = r.rec
	}
	if rec.Status.Closed() {
		return Explanation{Reason: WhyClosed, Message: fmt.Sprintf("the run is %s; nothing waits", rec.Status)}, nil
	}
	if e.cl != nil {
		return Explanation{Reason: WhyHeldElsewhere,
			Message: "another server of the cluster holds the run (or none has claimed it yet); ask any server that holds it, or wait for a claim"}, nil
	}
	return Explanation{Reason: WhyBeingRecorded, Message: "the run is being read back from the store"}, nil
}

// explainRunLocked explains the workflow task of a run held in memory.
func (e *Engine) explainRunLocked(r *wfRun) Explanation {
	now := e.now()
	switch {
	case r.creating != nil:
		return Explanation{Reason: WhyBeingRecorded, Message: "its start is being made durable"}
	case r.closing || r.rec.Status.Closed():
		return Explanation{Reason: WhyClosed, Message: "the run is closing; nothing waits"}
	case r.taskWorker != nil:
		return Explanation{Reason: WhyRunning, WorkerID: r.taskWorker.ID(),
			Message: fmt.Sprintf("workflow task %d runs on worker %d", r.task, r.taskWorker.ID())}
	case !r.retryAt.IsZero() && r.retryAt.After(now):
		ex := Explanation{Reason: WhyTaskBackoff, Until: r.retryAt}
		if r.failures == 0 {
			ex.Reason = WhyDelayedStart
			ex.Message = fmt.Sprintf("it was started to run at %s (in %v)", r.retryAt.Format(time.RFC3339),
				r.retryAt.Sub(now).Round(time.Millisecond))
		} else {
			ex.Message = fmt.Sprintf("%d workflow tasks failed in a row; the next may start at %s (in %v)", r.failures,
				r.retryAt.Format(time.RFC3339), r.retryAt.Sub(now).Round(time.Millisecond))
		}
		return ex
	case r.heldBy != nil:
		return e.explainHeldRunLocked(r)
	case r.queued == nil:
		return Explanation{Reason: WhyWaitingOnSteps,
			Message: fmt.Sprintf("the run needs no workflow task now: it waits on %d steps", len(r.steps))}
	}
	q := r.queued
	t := q.triple
	ex := Explanation{}
	for _, w := range e.reg.WorkflowCandidates(t.Pool, t.ActivityType) {
		ex.Workers++
		if t.Build != "" && w.BuildID != t.Build && !slices.Contains(w.CompatibleBuilds, t.Build) {
			continue
		}
		ex.Eligible++
		if !w.Draining {
			ex.FreeSlots += max(w.WorkflowSlots-w.WorkflowSlotsInUse, 0)
		}
	}
	q.waiting(func(o *wfRun) bool {
		if o == r {
			return false
		}
		ex.Ahead++
		if o.rec.Flow.FairnessKey != r.rec.Flow.FairnessKey {
			ex.AheadOfOtherKeys++
		}
		return true
	})
	switch {
	case ex.Workers == 0:
		ex.Reason = WhyNoWorker
		ex.Message = fmt.Sprintf("no connected worker serves namespace %q, task queue %q and workflow type %q",
			t.Pool.Namespace, t.Pool.TaskQueue, t.ActivityType)
	case ex.Eligible == 0:
		ex.Reason = WhyNoBuild
		ex.Message = fmt.Sprintf("%d workers serve workflow type %q, none of build %q (the run's) or one compatible with it",
			ex.Workers, t.ActivityType, t.Build)
	default:
		ex.Reason = WhySlotsBusy
		ex.Message = fmt.Sprintf("%d eligible workers, %d free workflow slots; %d runs wait before it%s", ex.Eligible,
			ex.FreeSlots, ex.Ahead, otherKeys(ex.AheadOfOtherKeys))
	}
	return ex
}
