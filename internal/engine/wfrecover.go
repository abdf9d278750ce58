package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/proto"
)

// WorkflowObserver is told about workflow steps, for metrics. Its methods
// run under the engine lock and must be quick.
type WorkflowObserver interface {
	// RunStarted: a new run is durable.
	RunStarted(namespace string)
	// RunClosed: a run's close is durable; events is its history's length.
	RunClosed(namespace string, status store.RunStatus, events int)
	// TaskStarted: a workflow task was handed to a worker; replay is set
	// when it carries the whole history of a run that had run code before
	// (the worker replays it), events counts what it carries.
	TaskStarted(namespace string, replay bool, events int)
	// TaskCompleted: a workflow task's commands were accepted.
	TaskCompleted(namespace string)
	// TaskFailed: a workflow task failed with the failure type.
	TaskFailed(namespace, failureType string)
	// TaskLatency: a worker's result for the run's current workflow task
	// arrived, took after the task was sent (whatever its outcome).
	// replay says the task carried a whole history to replay.
	TaskLatency(namespace string, took time.Duration, replay bool)
}

// RunChange is a run whose start or close has become durable.
type RunChange struct {
	Namespace, WorkflowID, RunID, WorkflowType, TaskQueue string
	// Status is RunRunning for a start, else how the run closed.
	Status store.RunStatus
	// At is when the run started, or closed.
	At time.Time
}

func runChangeOf(r store.Run) RunChange {
	at := r.StartedAt
	if r.Status.Closed() {
		at = r.ClosedAt
	}
	return RunChange{Namespace: r.Namespace, WorkflowID: r.WorkflowID, RunID: r.RunID, WorkflowType: r.WorkflowType,
		TaskQueue: r.TaskQueue, Status: r.Status, At: at}
}

type noWorkflowObserver struct{}

func (noWorkflowObserver) RunStarted(string)                       {}
func (noWorkflowObserver) RunClosed(string, store.RunStatus, int)  {}
func (noWorkflowObserver) TaskStarted(string, bool, int)           {}
func (noWorkflowObserver) TaskCompleted(string)                    {}
func (noWorkflowObserver) TaskFailed(string, string)               {}
func (noWorkflowObserver) TaskLatency(string, time.Duration, bool) {}

// armRunLocked arms a run timer of kind for task token task.
func (e *Engine) armRunLocked(at time.Time, k runKey, task uint64, kind timerKind) {
	e.pushTimerLocked(timer{at: at, k: key(k), attempt: int(task), kind: kind})
}

// armStepTimerLocked arms the fire time of a run's timer step.
func (e *Engine) armStepTimerLocked(r *wfRun, step int64, at time.Time) {
	e.pushTimerLocked(timer{at: at, k: key(r.key()), step: step, kind: timerWorkflowStep})
}

// runTimerLiveLocked reports whether a run timer may still act.
func (e *Engine) runTimerLiveLocked(tm timer) bool {
	r := e.runs[runKey(tm.k)]
	if r == nil || r.closing {
		return false
	}
	switch tm.kind {
	case timerWorkflowStep:
		s := r.steps[tm.step]
		return s != nil && s.kind == aionv1.StepKind_STEP_KIND_TIMER && s.timerAt.Equal(tm.at)
	case timerWorkflowTask:
		return r.taskWorker != nil && r.task == uint64(tm.attempt)
	}
	return r.task == uint64(tm.attempt) && !r.retryAt.IsZero()
}

// fireRunLocked acts on a due run timer.
func (e *Engine) fireRunLocked(tm timer, now time.Time) {
	if !e.runTimerLiveLocked(tm) {
		return
	}
	r := e.runs[runKey(tm.k)]
	switch tm.kind {
	case timerWorkflowStep:
		delete(r.steps, tm.step)
		e.appendLocked(r, now.UTC(), &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_TimerFired{TimerFired: &aionv1.TimerFired{Step: tm.step}}})
		e.flushLocked(r)
		e.needTaskLocked(r)
	case timerWorkflowTask:
		w := r.taskWorker
		e.log.Warn("workflow task timed out", "namespace", r.rec.Namespace, "run", r.rec.RunID, "worker", w.ID(),
			"timeout", workflowTaskTimeout)
		e.releaseTaskLocked(r)
		e.taskFailedLocked(r, FailureWorkflowTaskTimeout, fmt.Sprintf("worker %v did not answer workflow task %d within %v", w.ID(), tm.attempt, workflowTaskTimeout))
	case timerWorkflowRetry:
		r.retryAt = time.Time{}
		e.needTaskLocked(r)
	}
}

// stepActivityLostLocked reports a step whose activity could not be
// scheduled as failed, so the workflow decides what to do.
func (e *Engine) stepActivityLostLocked(a *activity, err error) {
	f := &store.Failure{Type: "schedule_failed", Message: err.Error(), Retryable: false}
	e.stepActivityClosedLocked(a, store.EndAttempt{State: store.StateFailed, ActivityFailure: f})
}

// adoptStepActivity finds the outcome of a step activity that was already
// in the store: a closed one reports its outcome to the run; an open one
// is in memory already (recovery loaded it) and reports when it closes.
func (e *Engine) adoptStepActivity(a *activity) {
	if e.closed {
		return
	}
	k := a.key()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		var rec store.Activity
		err := e.call(func(ctx context.Context) (err error) {
			rec, err = e.st.GetActivity(ctx, k.ns, k.id)
			return err
		})
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case err != nil:
			e.stepActivityLostLocked(a, err)
		case rec.State.Terminal():
			a.rec = rec
			e.stepActivityClosedLocked(a, store.EndAttempt{State: rec.State, Result: rec.Result, ActivityFailure: rec.Failure})
		default:
			if o := e.open[k]; o != nil && e.cl == nil {
				o.step = a.step
			}
		}
	}()
}

// QueryWorkflow asks a worker to evaluate a query handler on the open run's
// state; nothing is written to history. It waits for the answer or ctx.
func (e *Engine) QueryWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID, queryName string, input []byte) ([]byte, error) {
	if queryName == "" {
		return nil, fmt.Errorf("query: query_name: required: %w", ErrInvalid)
	}
	if len(input) > e.maxPayload {
		return nil, fmt.Errorf("query: input: %d bytes, at most %d allowed: %w", len(input), e.maxPayload, ErrResourceExhausted)
	}
	r, rec, err := e.openRun(ctx, caller, "query", ns, workflowID, runID)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("query: run %s of workflow %q is held by another server of the cluster; ask that server: %w",
			rec.RunID, rec.WorkflowID, ErrUnavailable)
	}
	e.mu.Lock()
	if r.closing || e.runs[r.key()] != r {
		e.mu.Unlock()
		return nil, fmt.Errorf("query: run %s closed: %w", r.rec.RunID, ErrFailedPrecondition)
	}
	e.queryN++
	q := &wfQuery{id: strconv.FormatUint(e.queryN, 10), name: queryName, input: input, done: make(chan struct{})}
	r.queries = append(r.queries, q)
	e.needTaskLocked(r)
	e.mu.Unlock()
	select {
	case <-q.done:
		return q.result, q.err
	case <-ctx.Done():
		e.mu.Lock()
		for i, x := range r.queries {
			if x == q {
				r.queries = append(r.queries[:i], r.queries[i+1:]...)
				break
			}
		}
		e.mu.Unlock()
		return nil, fmt.Errorf("query %q: no worker answered: %w", queryName, ctx.Err())
	}
}

// recoverRuns loads every open run with its history and rebuilds what it
// waits on: its step activities (inserted again when a crash cut them
// short), timers (fired at once when past) and children.
func (e *Engine) recoverRuns(ctx context.Context) (int, error) {
	open, err := e.st.OpenRuns(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover runs: %w", err)
	}
	// Runs admitted before the restart count first: the others wait to be
	// admitted, oldest first, once every run is back.
	e.mu.Lock()
	e.recoveringRuns = true
	e.mu.Unlock()
	defer e.admitRecoveredRuns()
	for _, rec := range open {
		if err := e.loadRunRecord(ctx, rec); err != nil {
			return 0, err
		}
	}
	return len(open), nil
}

// loadRun reads one open run back from the store into memory.
func (e *Engine) loadRun(ctx context.Context, k runKey) error {
	rec, err := e.st.GetRun(ctx, k.ns, k.id)
	if err != nil {
		return fmt.Errorf("read run %s: %w", k.id, err)
	}
	if rec.Status.Closed() {
		return nil
	}
	return e.loadRunRecord(ctx, rec)
}

func (e *Engine) loadRunRecord(ctx context.Context, rec store.Run) error {
	stored, err := e.st.ReadHistory(ctx, rec.Namespace, rec.RunID, 0, 0)
	if err != nil {
		return fmt.Errorf("recover run %s: %w", rec.RunID, err)
	}
	r := &wfRun{rec: rec, steps: make(map[int64]*wfStep), events: make([]*aionv1.HistoryEvent, 0, len(stored))}
	for _, ev := range stored {
		m := new(aionv1.HistoryEvent)
		if err := proto.Unmarshal(ev.Data, m); err != nil {
			return fmt.Errorf("recover run %s: event %d is damaged: %w", rec.RunID, ev.Seq, err)
		}
		if m.GetSeq() != int64(len(r.events))+1 {
			return fmt.Errorf("recover run %s: event %d out of order (want %d)", rec.RunID, m.GetSeq(), len(r.events)+1)
		}
		r.events = append(r.events, m)
	}
	r.durable = r.length()
	r.rec.HistoryLength = r.durable

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs[r.key()] != nil {
		return nil
	}
	e.runs[r.key()] = r
	e.openWF[wfKey{rec.Namespace, rec.WorkflowID}] = r
	now := e.now().UTC()
	for _, ev := range r.events {
		if !isCommandEvent(ev) {
			r.lastNonCmd = ev.GetSeq()
		}
		switch x := ev.GetEvent().(type) {
		case *aionv1.HistoryEvent_WorkflowTaskCompleted:
			r.seen = x.WorkflowTaskCompleted.GetSeenSeq()
		case *aionv1.HistoryEvent_ActivityScheduled:
			a := x.ActivityScheduled
			r.steps[a.GetStep()] = &wfStep{n: a.GetStep(), kind: aionv1.StepKind_STEP_KIND_ACTIVITY, name: a.GetActivityType(),
				activity: key{rec.Namespace, a.GetActivityId()}}
		case *aionv1.HistoryEvent_ActivityClosed:
			delete(r.steps, x.ActivityClosed.GetStep())
		case *aionv1.HistoryEvent_TimerStarted:
			t := x.TimerStarted
			r.steps[t.GetStep()] = &wfStep{n: t.GetStep(), kind: aionv1.StepKind_STEP_KIND_TIMER, name: t.GetName(), timerAt: t.GetFireTime().AsTime()}
		case *aionv1.HistoryEvent_TimerFired:
			delete(r.steps, x.TimerFired.GetStep())
		case *aionv1.HistoryEvent_TimerCanceled:
			delete(r.steps, x.TimerCanceled.GetStep())
		case *aionv1.HistoryEvent_ChildStarted:
			c := x.ChildStarted
			r.steps[c.GetStep()] = &wfStep{n: c.GetStep(), kind: aionv1.StepKind_STEP_KIND_CHILD, name: c.GetWorkflowType(),
				child: runKey{rec.Namespace, c.GetRunId()}, childWF: c.GetWorkflowId()}
		case *aionv1.HistoryEvent_ChildClosed:
			delete(r.steps, x.ChildClosed.GetStep())
		case *aionv1.HistoryEvent_CancelRequested:
			r.cancelRequested = true
		}
	}
	for _, s := range r.steps {
		switch s.kind {
		case aionv1.StepKind_STEP_KIND_TIMER:
			e.armStepTimerLocked(r, s.n, s.timerAt)
		case aionv1.StepKind_STEP_KIND_ACTIVITY:
			if a := e.open[s.activity]; a != nil {
				// Open here: alone, it reports its close to the run; in a
				// cluster it runs on a local worker and posts its close.
				if e.cl == nil {
					a.step = r.stepRef(s.n)
				}
				continue
			}
			// In a cluster the activity lives in the store: inserting it
			// again is a no-op that reads its state, and a closed one
			// reports its outcome.
			e.restoreStepActivityLocked(r, s, now)
		}
	}
	if r.hasChildrenLocked() {
		e.bg.Add(1)
		go e.reconcileChildren(r)
	}
	if r.seen > 0 {
		// A recorded task: the run was admitted before and counts against
		// its workflow type's concurrency limit, whether or not it needs a
		// task now.
		e.admitRunLocked(r)
	}
	e.delayFirstTaskLocked(r)
	e.needTaskLocked(r)
	return nil
}

// delayFirstTaskLocked holds back the first workflow task of a run started
// with a delay until its ready time: the run's retry timer gives it then.
func (e *Engine) delayFirstTaskLocked(r *wfRun) {
	if r.seen > 0 || len(r.events) == 0 {
		return
	}
	ready := r.events[0].GetWorkflowStarted().GetReadyTime()
	if ready == nil {
		return
	}
	if at := ready.AsTime(); at.After(e.now()) {
		r.retryAt = at
		e.armRunLocked(at, r.key(), r.task, timerWorkflowRetry)
	}
}

func (r *wfRun) hasChildrenLocked() bool {
	for _, s := range r.steps {
		if s.kind == aionv1.StepKind_STEP_KIND_CHILD {
			return true
		}
	}
	return false
}

// restoreStepActivityLocked handles a step whose activity is not open in
// memory: it closed (its outcome did not reach the history before a
// crash) or its insert was cut short; the store says which.
func (e *Engine) restoreStepActivityLocked(r *wfRun, s *wfStep, now time.Time) {
	var sched *aionv1.ActivityScheduled
	for _, ev := range r.events {
		if x, ok := ev.GetEvent().(*aionv1.HistoryEvent_ActivityScheduled); ok && x.ActivityScheduled.GetStep() == s.n {
			sched = x.ActivityScheduled
		}
	}
	if sched == nil {
		return
	}
	req, err := e.stepRequest(r, &aionv1.ScheduleActivityCommand{Step: s.n, ActivityType: sched.GetActivityType(),
		Input: sched.GetInput(), Options: sched.GetOptions()})
	if err != nil {
		e.log.Error("recover a workflow step", "run", r.rec.RunID, "step", s.n, "err", err)
		return
	}
	rec := e.stepRecord(req, now)
	if e.cl != nil {
		e.restoreStepInStoreLocked(r, s, rec)
		return
	}
	a := &activity{rec: rec, creating: make(chan struct{}), size: len(req.Payload), step: r.stepRef(s.n)}
	e.addOpenLocked(a)
	e.insertStepActivityLocked(a, nil)
}

// restoreStepInStoreLocked is restoreStepActivityLocked in a cluster, where
// the step's activity lives in the store and may be running on any server:
// nothing is put in memory. Inserting it again is a no-op for an activity
// that exists, whose state is then read: a closed one reports its outcome
// to the run, an open one posts its close when it ends. One whose insert a
// crash cut short is inserted and announced to the servers that claim it.
func (e *Engine) restoreStepInStoreLocked(r *wfRun, s *wfStep, rec store.Activity) {
	e.commit.Submit(store.InsertActivity{Activity: rec}, func(created bool, err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case err != nil:
			e.log.Error("restore a workflow step's activity", "namespace", rec.Namespace, "activity", rec.ID, "err", err)
		case created:
			t := tripleOf(&rec)
			e.localWorkLocked(t)
			e.announce(t)
		default:
			e.adoptStepActivity(&activity{rec: rec, step: r.stepRef(s.n)})
		}
	})
}

// reconcileChildren records the close of children that closed while their
// parent's history missed it (a crash between the two writes).
func (e *Engine) reconcileChildren(r *wfRun) {
	defer e.bg.Done()
	e.mu.Lock()
	var kids []*wfStep
	for _, s := range r.steps {
		if s.kind == aionv1.StepKind_STEP_KIND_CHILD {
			kids = append(kids, s)
		}
	}
	e.mu.Unlock()
	for _, s := range kids {
		rec, err := e.stGetRun(s.child.ns, s.child.id)
		if errors.Is(err, store.ErrNotFound) {
			// The child's insert was cut short: start it again.
			e.mu.Lock()
			e.restartChildLocked(r, s)
			e.mu.Unlock()
			continue
		}
		if err != nil || !rec.Status.Closed() {
			continue
		}
		for rec.Status == store.RunContinuedAsNew && rec.NextRunID != "" {
			next, err := e.stGetRun(rec.Namespace, rec.NextRunID)
			if err != nil {
				break
			}
			rec = next
		}
		if !rec.Status.Closed() {
			continue
		}
		e.mu.Lock()
		if e.runs[r.key()] == r {
			e.childClosedLocked(r, &wfRun{rec: rec}, e.now().UTC())
		}
		e.mu.Unlock()
	}
}

func (e *Engine) stGetRun(ns, id string) (rec store.Run, err error) {
	err = e.call(func(ctx context.Context) (err error) {
		rec, err = e.st.GetRun(ctx, ns, id)
		return err
	})
	return rec, err
}

// restartChildLocked starts a child whose insert a crash cut short.
func (e *Engine) restartChildLocked(p *wfRun, s *wfStep) {
	if e.runs[p.key()] != p || p.steps[s.n] != s || e.runs[s.child] != nil {
		return
	}
	for _, ev := range p.events {
		x, ok := ev.GetEvent().(*aionv1.HistoryEvent_ChildStarted)
		if !ok || x.ChildStarted.GetStep() != s.n {
			continue
		}
		c := x.ChildStarted
		now := e.now().UTC()
		rec := store.Run{Namespace: p.rec.Namespace, WorkflowID: c.GetWorkflowId(), RunID: c.GetRunId(), WorkflowType: c.GetWorkflowType(),
			TaskQueue: c.GetTaskQueue(), Status: store.RunRunning, Input: c.GetInput(), ParentWorkflowID: p.rec.WorkflowID,
			ParentRunID: p.rec.RunID, ParentStep: s.n, StartedAt: now, Priority: p.rec.Priority, Flow: p.rec.Flow, Trace: p.rec.Trace}
		rec.Fingerprint = workflowFingerprint(WorkflowRequest{Namespace: rec.Namespace, WorkflowID: rec.WorkflowID,
			WorkflowType: rec.WorkflowType, TaskQueue: rec.TaskQueue, Input: rec.Input})
		e.insertChildLocked(p, s, rec, &aionv1.WorkflowStarted{WorkflowType: rec.WorkflowType, TaskQueue: rec.TaskQueue,
			Input: rec.Input, ParentWorkflowId: p.rec.WorkflowID, ParentRunId: p.rec.RunID})
	}
}
