package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// wfQueue holds the runs waiting for a workflow task on one workflow
// triple: one lane per priority, the most urgent served first; within a
// lane one FIFO per fairness key, shared out by weight as activities are
// (see fair.go). A triple with an empty build holds runs not yet bound to a
// build, which go to the pool's default build.
type wfQueue struct {
	triple registry.Triple
	lanes  [store.LowestPriority]wfLane
}

// The workflow queue's lane and flow. A run that stops waiting leaves its
// lane at once (remove), so a lane holds no stale entries.
type (
	wfLane = fairLane[*wfRun, *wfQueue]
	wfFlow = fairFlow[*wfRun]
)

func newWFQueue(t registry.Triple) *wfQueue {
	q := &wfQueue{triple: t}
	for i := range q.lanes {
		q.lanes[i].def.at = -1
	}
	return q
}

// waiting calls fn for the runs waiting, in dispatch order (see
// queue.waiting); fn returns false to stop.
func (q *wfQueue) waiting(fn func(*wfRun) bool) {
	for i := range q.lanes {
		if !q.lanes[i].waiting(q, fn) {
			return
		}
	}
}

func (r *wfRun) fairKey() string         { return r.rec.Flow.FairnessKey }
func (r *wfRun) fairWeight() int         { return r.rec.Flow.FairnessWeight }
func (r *wfRun) waitsIn(q *wfQueue) bool { return r.queued == q }

// needTaskLocked arranges a workflow task for a run that has events its
// code has not seen: at once on the worker that holds it in memory, or in
// its queue. A run whose task is running gets the next one when it ends.
func (e *Engine) needTaskLocked(r *wfRun) {
	if r.closing || r.creating != nil || r.taskWorker != nil || r.queued != nil || e.closed {
		return
	}
	if !r.retryAt.IsZero() && r.retryAt.After(e.now()) {
		return // a timer queues it when the backoff ends
	}
	if !e.runWantsTaskLocked(r) && len(r.queries) == 0 {
		return
	}
	if !e.admitRunLocked(r) {
		return // its key's limit holds it; a close of the key admits it
	}
	if w := r.sticky; w != nil {
		if e.reg.Take(w, registry.KindWorkflow) {
			e.sendTaskLocked(r, w)
			return
		}
		r.sticky = nil
	}
	e.enqueueRunLocked(r)
}

// runWantsTaskLocked reports whether the run has events its code has not
// seen in a recorded round: anything after the last task's commands.
func (e *Engine) runWantsTaskLocked(r *wfRun) bool { return r.lastNonCmd > r.seen }

func (e *Engine) routeOf(r *wfRun) registry.Triple {
	return registry.NewWorkflowTriple(r.rec.Namespace, r.rec.TaskQueue, r.rec.WorkflowType, r.rec.BuildID)
}

func (e *Engine) enqueueRunLocked(r *wfRun) {
	t := e.routeOf(r)
	q := e.wfQueues[t]
	if q == nil {
		q = newWFQueue(t)
		e.wfQueues[t] = q
	}
	r.queued, r.queuedAt = q, e.now()
	q.lanes[laneOf(r.rec.Priority)].push(r)
	e.dispatchRunsLocked(q)
}

func (e *Engine) unqueueRunLocked(r *wfRun) {
	q := r.queued
	if q == nil {
		return
	}
	r.queued = nil
	q.lanes[laneOf(r.rec.Priority)].remove(r)
	if q.front() == nil && e.wfQueues[q.triple] == q {
		delete(e.wfQueues, q.triple)
	}
}

// front is the most urgent lane with runs waiting, nil when none waits.
func (q *wfQueue) front() *wfLane {
	for i := range q.lanes {
		if q.lanes[i].len() > 0 {
			return &q.lanes[i]
		}
	}
	return nil
}

// dispatchRunsLocked hands queued runs to free workers of the queue's
// triple (for unbound runs: of the pool's default build) until none is
// free, the most urgent first; within a priority the fairness keys take
// turns by weight, and a key's runs go oldest first.
func (e *Engine) dispatchRunsLocked(q *wfQueue) {
	for l := q.front(); l != nil; l = q.front() {
		t := q.triple
		if t.Build == "" {
			b, ok := e.reg.DefaultBuild(t.Pool, t.ActivityType)
			if !ok {
				return
			}
			t.Build = b
		}
		w, ok := e.reg.Select(t, matchFor("", e.placementLocked(t.Pool.Namespace)))
		if !ok {
			return
		}
		r := l.dequeue(l.next())
		r.queued = nil
		e.sendTaskLocked(r, w)
	}
	if e.wfQueues[q.triple] == q {
		delete(e.wfQueues, q.triple)
	}
}

// dispatchWorkflowWorkerLocked re-runs workflow dispatch for what a worker
// can take: after it registers or a workflow slot of it frees.
func (e *Engine) dispatchWorkflowWorkerLocked(w *registry.Worker) {
	if len(e.wfQueues) == 0 {
		return
	}
	w.WorkflowTriples(func(t registry.Triple) {
		if q := e.wfQueues[t]; q != nil {
			e.dispatchRunsLocked(q)
		}
		t.Build = ""
		if q := e.wfQueues[t]; q != nil {
			e.dispatchRunsLocked(q)
		}
	})
}

// sendTaskLocked hands the run's next workflow task to w, whose workflow
// slot is taken: only the new events when w holds the run in memory, the
// whole history otherwise.
func (e *Engine) sendTaskLocked(r *wfRun, w *registry.Worker) {
	r.task++
	r.taskWorker = w
	r.taskSeen = r.length()
	r.taskSent = e.now()
	from := int64(1)
	if r.sticky == w && r.stickySeen > 0 {
		from = r.stickySeen + 1
	}
	r.sticky = nil
	task := &aionv1.WorkflowTask{
		Namespace:    r.rec.Namespace,
		WorkflowId:   r.rec.WorkflowID,
		RunId:        r.rec.RunID,
		WorkflowType: r.rec.WorkflowType,
		TaskQueue:    r.rec.TaskQueue,
		Task:         r.task,
		Events:       slices.Clone(r.events[from-1:]),
		FirstSeq:     from,
		TraceContext: TraceContextProto(r.rec.Trace),
	}
	wantsTask := e.runWantsTaskLocked(r)
	for _, q := range r.queries {
		if !q.sent {
			q.sent = true
			task.Queries = append(task.Queries, &aionv1.WorkflowQuery{QueryId: q.id, Name: q.name, Input: q.input})
		}
	}
	task.QueryOnly = !wantsTask && len(task.Queries) > 0
	r.taskQueryOnly = task.QueryOnly
	m := e.wfInflight[w.ID()]
	if m == nil {
		m = make(map[runKey]*wfRun)
		e.wfInflight[w.ID()] = m
	}
	m[r.key()] = r
	e.armRunLocked(e.now().Add(workflowTaskTimeout), r.key(), r.task, timerWorkflowTask)
	r.taskReplay = from == 1 && r.seen > 0
	e.obsWF.TaskStarted(r.rec.Namespace, r.taskReplay, len(task.Events))
	if s, ok := w.Delivery().(WorkflowTaskSender); ok {
		// A failed send means the stream is closing; its departure
		// gives the task to another worker.
		_ = s.SendWorkflowTask(task)
	}
}

// releaseTaskLocked forgets the run's running task and frees its slot.
func (e *Engine) releaseTaskLocked(r *wfRun) {
	w := r.taskWorker
	if w == nil {
		return
	}
	r.taskWorker = nil
	if m := e.wfInflight[w.ID()]; m != nil {
		delete(m, r.key())
		if len(m) == 0 {
			delete(e.wfInflight, w.ID())
		}
	}
	e.reg.ReleaseKind(w, registry.KindWorkflow)
	e.dispatchWorkflowWorkerLocked(w)
}

// WorkflowWorkerLeft gives every workflow task in flight on a departed
// worker to another worker, with the whole history.
func (e *Engine) workflowWorkerLeftLocked(w *registry.Worker) {
	for _, r := range e.wfInflight[w.ID()] {
		r.taskWorker = nil
		r.sticky = nil
		e.failQueriesSentLocked(r, "the worker answering it left")
		e.needTaskLocked(r)
	}
	delete(e.wfInflight, w.ID())
}

// failQueriesSentLocked ends queries sent with a task that will not be
// answered; those not yet sent wait for the next task.
func (e *Engine) failQueriesSentLocked(r *wfRun, why string) {
	kept := r.queries[:0]
	for _, q := range r.queries {
		if q.sent {
			q.err = fmt.Errorf("query %q: %s: %w", q.name, why, ErrUnavailable)
			close(q.done)
			continue
		}
		kept = append(kept, q)
	}
	clear(r.queries[len(kept):])
	r.queries = kept
}

// CompleteWorkflowTask takes a worker's result for one workflow task. The
// ack is sent once its commands are durable; a result for a task that is
// not the run's current one on this worker is refused and changes nothing.
func (e *Engine) CompleteWorkflowTask(w *registry.Worker, res *aionv1.WorkflowTaskResult, ack Ack) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.runs[runKey{res.GetNamespace(), res.GetRunId()}]
	if r == nil || r.taskWorker != w || r.task != res.GetTask() {
		ack(fmt.Sprintf("workflow task %d of run %q in namespace %q is not current on this worker",
			res.GetTask(), res.GetRunId(), res.GetNamespace()))
		return
	}
	e.obsWF.TaskLatency(r.rec.Namespace, e.now().Sub(r.taskSent), r.taskReplay)
	e.answerQueriesLocked(r, res.GetQueryAnswers())
	seen, queryOnly := r.taskSeen, r.taskQueryOnly
	e.releaseTaskLocked(r)
	if f := res.GetFailure(); f != nil {
		ack("")
		e.taskFailedLocked(r, f.GetType(), f.GetMessage())
		return
	}
	if r.closing {
		ack("")
		return
	}
	if queryOnly {
		// It only answered queries: nothing to record.
		if res.GetSticky() {
			r.sticky, r.stickySeen = w, seen
		}
		ack("")
		e.needTaskLocked(r)
		return
	}
	if err := e.checkCommands(r, res.GetCommands()); err != nil {
		ack("")
		e.taskFailedLocked(r, FailureBadCommand, err.Error())
		return
	}
	if closes(res.GetCommands()) && unseenSignal(r, seen) {
		// The code closed the run without seeing signals accepted while
		// the task ran: nothing of the task is applied, and the run gets
		// a task again with them, whole history (the worker's cached run
		// took its close as done). Its code then sees every acknowledged
		// signal before a close can be recorded.
		ack("")
		r.sticky = nil
		e.needTaskLocked(r)
		return
	}
	now := e.now().UTC()
	upto := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowTaskCompleted{
		WorkflowTaskCompleted: &aionv1.WorkflowTaskCompleted{SeenSeq: seen, BuildId: w.BuildID(), WorkerId: uint64(w.ID())}}})
	r.seen = seen
	if r.rec.BuildID == "" {
		r.rec.BuildID = w.BuildID()
		r.update.BuildID = w.BuildID()
		r.updating = true
	}
	if r.rec.TaskFailure != "" {
		r.rec.TaskFailure = ""
		empty := ""
		r.update.TaskFailure = &empty
		r.updating = true
	}
	r.failures, r.retryAt = 0, time.Time{}
	for _, c := range res.GetCommands() {
		upto = e.applyCommandLocked(r, c, now)
	}
	if res.GetSticky() && !r.closing {
		r.sticky, r.stickySeen = w, seen
	}
	e.flushLocked(r)
	e.afterFlushLocked(r, upto, func(err error) {
		if err == nil {
			ack("")
		}
	})
	e.obsWF.TaskCompleted(r.rec.Namespace)
	e.needTaskLocked(r)
}

// closes reports whether cmds close the run (complete, fail, cancel or
// continue as new).
func closes(cmds []*aionv1.WorkflowCommand) bool {
	for _, c := range cmds {
		if c.GetClose() != nil {
			return true
		}
	}
	return false
}

// unseenSignal reports whether r's history holds a signal after seq seen:
// accepted while the code ran, and not yet shown to it.
func unseenSignal(r *wfRun, seen int64) bool {
	for _, ev := range r.events[min(max(seen, 0), r.length()):] {
		if ev.GetSignalReceived() != nil {
			return true
		}
	}
	return false
}

// taskFailedLocked records a failed workflow task on the run and tries it
// again after a backoff, on any worker of the run's build, whole history.
func (e *Engine) taskFailedLocked(r *wfRun, typ, msg string) {
	r.sticky = nil
	e.failQueriesSentLocked(r, "the workflow task failed: "+msg)
	if typ == FailureStickyCacheMiss {
		e.needTaskLocked(r)
		return
	}
	r.failures++
	d := min(time.Duration(1<<min(r.failures-1, 10))*100*time.Millisecond, maxTaskBackoff)
	r.retryAt = e.now().Add(d)
	text := typ + ": " + msg
	if r.rec.TaskFailure != text {
		r.rec.TaskFailure = text
		r.update.TaskFailure = &text
		r.updating = true
		e.flushLocked(r)
	}
	e.log.Warn("workflow task failed", "namespace", r.rec.Namespace, "workflow", r.rec.WorkflowID, "run", r.rec.RunID,
		"type", typ, "message", msg, "retry_in", d)
	e.obsWF.TaskFailed(r.rec.Namespace, typ)
	e.armRunLocked(r.retryAt, r.key(), r.task, timerWorkflowRetry)
}

// checkCommands refuses commands that break the protocol: a step number out
// of order, a bad name, a payload over the limit, a close that is not last.
func (e *Engine) checkCommands(r *wfRun, cmds []*aionv1.WorkflowCommand) error {
	next := e.nextStep(r)
	for i, c := range cmds {
		field := fmt.Sprintf("commands[%d]", i)
		step := func(n int64) error {
			if n != next {
				return fmt.Errorf("%s: step %d, want %d (one more than the run's last step)", field, n, next)
			}
			next++
			return nil
		}
		var err error
		switch c := c.GetCommand().(type) {
		case *aionv1.WorkflowCommand_ScheduleActivity:
			a := c.ScheduleActivity
			err = step(a.GetStep())
			if err == nil {
				err = name.Check(field+".activity_type", a.GetActivityType(), name.MaxName)
			}
			if err == nil && len(a.GetInput()) > e.maxPayload {
				err = fmt.Errorf("%s.input: %d bytes, at most %d allowed", field, len(a.GetInput()), e.maxPayload)
			}
			if err == nil {
				_, err = e.stepRequest(r, a)
			}
		case *aionv1.WorkflowCommand_StartTimer:
			err = step(c.StartTimer.GetStep())
			if err == nil && c.StartTimer.GetDuration().AsDuration() < time.Millisecond {
				err = fmt.Errorf("%s.duration: %v, want at least 1ms", field, c.StartTimer.GetDuration().AsDuration())
			}
			if err == nil {
				err = limit.Check(field+".name", c.StartTimer.GetName(), name.MaxName)
			}
		case *aionv1.WorkflowCommand_CancelTimer:
			if s := r.steps[c.CancelTimer.GetStep()]; s == nil || s.kind != aionv1.StepKind_STEP_KIND_TIMER {
				if c.CancelTimer.GetStep() <= 0 || c.CancelTimer.GetStep() >= next {
					err = fmt.Errorf("%s.step: %d is not a timer of the run", field, c.CancelTimer.GetStep())
				}
			}
		case *aionv1.WorkflowCommand_RecordSideEffect:
			err = step(c.RecordSideEffect.GetStep())
			if err == nil && len(c.RecordSideEffect.GetValue()) > e.maxPayload {
				err = fmt.Errorf("%s.value: %d bytes, at most %d allowed", field, len(c.RecordSideEffect.GetValue()), e.maxPayload)
			}
			if err == nil {
				err = limit.Check(field+".name", c.RecordSideEffect.GetName(), name.MaxName)
			}
		case *aionv1.WorkflowCommand_StartChild:
			sc := c.StartChild
			err = step(sc.GetStep())
			if err == nil {
				err = name.Check(field+".workflow_type", sc.GetWorkflowType(), name.MaxName)
			}
			if err == nil {
				err = name.CheckOptional(field+".workflow_id", sc.GetWorkflowId(), name.MaxID)
			}
			if err == nil {
				err = name.CheckOptional(field+".task_queue", sc.GetTaskQueue(), name.MaxName)
			}
			if err == nil && len(sc.GetInput()) > e.maxPayload {
				err = fmt.Errorf("%s.input: %d bytes, at most %d allowed", field, len(sc.GetInput()), e.maxPayload)
			}
		case *aionv1.WorkflowCommand_CancelActivity:
			if n := c.CancelActivity.GetStep(); n <= 0 || n >= next {
				err = fmt.Errorf("%s.step: %d is not an activity step of the run", field, n)
			}
		case *aionv1.WorkflowCommand_Close:
			if i != len(cmds)-1 {
				err = fmt.Errorf("%s: close must be the last command, %d follow it", field, len(cmds)-1-i)
			}
			switch c.Close.GetStatus() {
			case aionv1.RunStatus_RUN_STATUS_COMPLETED, aionv1.RunStatus_RUN_STATUS_FAILED,
				aionv1.RunStatus_RUN_STATUS_CANCELED, aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
			default:
				err = fmt.Errorf("%s.status: %v cannot close a run from its code", field, c.Close.GetStatus())
			}
			if err == nil && max(len(c.Close.GetResult()), len(c.Close.GetContinueInput())) > e.maxPayload {
				err = fmt.Errorf("%s: result or continue_input over %d bytes", field, e.maxPayload)
			}
		default:
			err = fmt.Errorf("%s: no command set", field)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nextStep is the number the run's next step takes.
func (e *Engine) nextStep(r *wfRun) int64 {
	var last int64
	for i := len(r.events) - 1; i >= 0; i-- {
		if n := stepOf(r.events[i]); n > 0 {
			last = n
			break
		}
	}
	return last + 1
}

// stepActivityID is the id of the activity a run's step schedules: the same
// for every replay of the step, so its insert is idempotent.
func stepActivityID(runID string, step int64) string {
	return runID + "-" + strconv.FormatInt(step, 10)
}

// stepRequest turns an activity command into the request for its activity.
func (e *Engine) stepRequest(r *wfRun, a *aionv1.ScheduleActivityCommand) (Request, error) {
	o := a.GetOptions()
	req := Request{
		Namespace:    r.rec.Namespace,
		ID:           stepActivityID(r.rec.RunID, a.GetStep()),
		TaskQueue:    o.GetTaskQueue(),
		ActivityType: a.GetActivityType(),
		Node:         o.GetNode(),
		Payload:      a.GetInput(),
		Priority:     int(o.GetPriority()),
		// A step shares out its pool under its run's keys, and joins its
		// run's trace.
		Flow:  r.rec.Flow,
		Trace: r.rec.Trace,
		Timeouts: store.Timeouts{
			ScheduleToStart: o.GetScheduleToStartTimeout().AsDuration(),
			StartToClose:    o.GetStartToCloseTimeout().AsDuration(),
			ScheduleToClose: o.GetScheduleToCloseTimeout().AsDuration(),
			Heartbeat:       o.GetHeartbeatTimeout().AsDuration(),
		},
	}
	if req.TaskQueue == "" {
		req.TaskQueue = r.rec.TaskQueue
	}
	if p := o.GetRetryPolicy(); p != nil {
		req.Retry = store.RetryPolicy{InitialInterval: p.GetInitialInterval().AsDuration(), BackoffCoefficient: p.GetBackoffCoefficient(),
			MaximumInterval: p.GetMaximumInterval().AsDuration(), MaximumAttempts: int(p.GetMaximumAttempts()),
			NonRetryableErrorTypes: p.GetNonRetryableErrorTypes()}
	}
	if err := validate(req, e.maxPayload); err != nil {
		return Request{}, err
	}
	if req.Node != "" {
		if p := e.placementLocked(r.rec.Namespace); p.Mode == store.Pinned && !slices.Contains(p.Nodes, req.Node) {
			return Request{}, fmt.Errorf("options.node: %q is outside namespace %q's placement %s", req.Node, r.rec.Namespace, p)
		}
	}
	return req, nil
}

// applyCommandLocked records one command's event and starts what it asks.
// It returns the seq of the last event written.
func (e *Engine) applyCommandLocked(r *wfRun, c *aionv1.WorkflowCommand, now time.Time) int64 {
	switch c := c.GetCommand().(type) {
	case *aionv1.WorkflowCommand_ScheduleActivity:
		a := c.ScheduleActivity
		req, _ := e.stepRequest(r, a) // checked by checkCommands
		seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityScheduled{ActivityScheduled: &aionv1.ActivityScheduled{
			Step: a.GetStep(), ActivityType: a.GetActivityType(), Input: a.GetInput(), Options: a.GetOptions(), ActivityId: req.ID}}})
		s := &wfStep{n: a.GetStep(), kind: aionv1.StepKind_STEP_KIND_ACTIVITY, name: a.GetActivityType(), activity: key{req.Namespace, req.ID}}
		r.steps[s.n] = s
		e.startStepActivityLocked(r, s, req, now)
		return seq
	case *aionv1.WorkflowCommand_StartTimer:
		t := c.StartTimer
		at := now.Add(t.GetDuration().AsDuration())
		seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_TimerStarted{TimerStarted: &aionv1.TimerStarted{
			Step: t.GetStep(), FireTime: timestamp(at), Name: t.GetName()}}})
		r.steps[t.GetStep()] = &wfStep{n: t.GetStep(), kind: aionv1.StepKind_STEP_KIND_TIMER, name: t.GetName(), timerAt: at}
		e.armStepTimerLocked(r, t.GetStep(), at)
		return seq
	case *aionv1.WorkflowCommand_CancelTimer:
		delete(r.steps, c.CancelTimer.GetStep())
		return e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_TimerCanceled{TimerCanceled: &aionv1.TimerCanceled{
			Step: c.CancelTimer.GetStep()}}})
	case *aionv1.WorkflowCommand_RecordSideEffect:
		s := c.RecordSideEffect
		return e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_SideEffectRecorded{SideEffectRecorded: &aionv1.SideEffectRecorded{
			Step: s.GetStep(), Name: s.GetName(), Value: s.GetValue()}}})
	case *aionv1.WorkflowCommand_StartChild:
		return e.startChildLocked(r, c.StartChild, now)
	case *aionv1.WorkflowCommand_CancelActivity:
		n := c.CancelActivity.GetStep()
		seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityCancelRequested{
			ActivityCancelRequested: &aionv1.ActivityCancelRequested{Step: n}}})
		if s := r.steps[n]; s != nil && s.kind == aionv1.StepKind_STEP_KIND_ACTIVITY {
			if a := e.open[s.activity]; a != nil && !a.closing {
				e.unqueueLocked(a)
				if a.creating == nil {
					e.closeLocked(a, store.StateCanceled, &store.Failure{Type: FailureCanceled, Message: "canceled by its workflow"}, now)
				}
			} else if a == nil && e.cl != nil {
				e.cancelStepElsewhereLocked(s.activity, "canceled by its workflow")
			}
		}
		return seq
	case *aionv1.WorkflowCommand_Close:
		return e.closeRunLocked(r, now, c.Close)
	}
	return r.length()
}

// startStepActivityLocked schedules the activity of a step; its insert is
// written after the step's event. A closed activity of the same id (the
// step ran before a crash cut its event short) reports its outcome instead.
func (e *Engine) startStepActivityLocked(r *wfRun, s *wfStep, req Request, now time.Time) {
	k := key{req.Namespace, req.ID}
	if a := e.open[k]; a != nil {
		// Open here already (a task redone after a crash): alone, it
		// reports to the run; in a cluster it posts its close.
		if e.cl == nil {
			a.step = r.stepRef(s.n)
		}
		return
	}
	rec := e.stepRecord(req, now)
	a := &activity{rec: rec, creating: make(chan struct{}), size: len(req.Payload), step: r.stepRef(s.n)}
	e.addOpenLocked(a)
	// Inserted after the event that records the step: a crash between the
	// two leaves the event, and recovery inserts the activity again.
	r.extra = append(r.extra, func() { e.insertStepActivityLocked(a, e.directWorkerLocked(a, e.now())) })
}

// stepRecord is the record of a step's activity, scheduled and ready at
// now, the engine's defaults applied as for any scheduled activity.
func (e *Engine) stepRecord(req Request, now time.Time) store.Activity {
	return store.Activity{
		Namespace: req.Namespace, ID: req.ID, TaskQueue: registry.Pool(req.Namespace, req.TaskQueue).TaskQueue,
		ActivityType: req.ActivityType, Node: req.Node, Payload: req.Payload, PayloadSize: len(req.Payload),
		Fingerprint: fingerprint(req), Timeouts: e.timeouts(req.Timeouts), Retry: e.retry(req.Retry),
		Priority: store.EffectivePriority(req.Priority), Flow: effectiveFlow(req.Flow), Trace: req.Trace,
		State: store.StateScheduled, ScheduledAt: now, ReadyAt: now,
	}
}

// insertStepActivityLocked submits a step activity's insert and queues it
// once durable; with w (see directWorkerLocked) it is inserted running on
// w, as new work is. An id already in the store belongs to the same step
// run before a crash: its outcome, when it closed, is the step's.
func (e *Engine) insertStepActivityLocked(a *activity, w *registry.Worker) {
	k := a.key()
	write := store.InsertActivity{Activity: a.rec}
	if w != nil {
		write.Start = e.insertStartLocked(k.ns, w)
	}
	e.commit.Submit(write, func(created bool, err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if w != nil && e.settleStartLocked(k.ns, w, created, err) {
			e.insertStepActivityLocked(a, nil)
			return
		}
		creating := a.creating
		a.creating = nil
		defer close(creating)
		switch {
		case err != nil:
			e.dropOpenLocked(a)
			e.log.Error("schedule a workflow step's activity", "namespace", k.ns, "activity", k.id, "err", err)
			e.stepActivityLostLocked(a, err)
		case !created:
			e.dropOpenLocked(a)
			e.adoptStepActivity(a)
		case w != nil:
			e.obs.Scheduled(k.ns)
			e.startInsertedLocked(a, w)
		default:
			e.obs.Scheduled(k.ns)
			if t := a.rec.Timeouts.ScheduleToClose; t > 0 && e.cl == nil {
				e.armLocked(a.rec.ScheduledAt.Add(t), k, 0, timerScheduleToClose)
			}
			e.readyLocked(a, e.now())
			e.shedPayloadLocked(a)
		}
	})
}

// stepRef names the run step an activity belongs to.
type stepRef struct {
	run        runKey
	workflowID string
	n          int64
}

func (r *wfRun) stepRef(n int64) *stepRef {
	return &stepRef{run: r.key(), workflowID: r.rec.WorkflowID, n: n}
}

// stepActivityClosedLocked records the outcome of a step's activity in its
// run's history (written after the activity's own terminal write) and wakes
// the run.
func (e *Engine) stepActivityClosedLocked(a *activity, end store.EndAttempt) {
	r := e.runs[a.step.run]
	if r == nil || r.closing {
		return
	}
	s := r.steps[a.step.n]
	if s == nil || s.activity != a.key() {
		return
	}
	delete(r.steps, s.n)
	ev := &aionv1.ActivityClosed{Step: s.n, Attempts: uint32(a.rec.Attempt)}
	if end.State == store.StateCompleted {
		ev.Result = end.Result
	} else {
		ev.Failure = failureProto(end.ActivityFailure)
	}
	e.appendLocked(r, e.now().UTC(), &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: ev}})
	e.flushLocked(r)
	e.needTaskLocked(r)
}

// startChildLocked records a child step and starts its run after the
// parent's event; a workflow id with an open run closes the step at once
// as failed.
func (e *Engine) startChildLocked(r *wfRun, sc *aionv1.StartChildCommand, now time.Time) int64 {
	id := sc.GetWorkflowId()
	if id == "" {
		id = r.rec.WorkflowID + "/" + strconv.FormatInt(sc.GetStep(), 10)
	}
	tq := sc.GetTaskQueue()
	if tq == "" {
		tq = r.rec.TaskQueue
	}
	childRun := newID(now)
	seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildStarted{ChildStarted: &aionv1.ChildStarted{
		Step: sc.GetStep(), WorkflowId: id, WorkflowType: sc.GetWorkflowType(), TaskQueue: tq, Input: sc.GetInput(), RunId: childRun}}})
	s := &wfStep{n: sc.GetStep(), kind: aionv1.StepKind_STEP_KIND_CHILD, name: sc.GetWorkflowType(), child: runKey{r.rec.Namespace, childRun}, childWF: id}
	r.steps[s.n] = s
	if e.openWF[wfKey{r.rec.Namespace, id}] != nil {
		delete(r.steps, s.n)
		return e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildClosed{ChildClosed: &aionv1.ChildClosed{
			Step: s.n, Status: aionv1.RunStatus_RUN_STATUS_FAILED, Failure: &aionv1.Failure{Type: "already_exists",
				Message: fmt.Sprintf("workflow %q already has an open run", id)}}}})
	}
	rec := store.Run{Namespace: r.rec.Namespace, WorkflowID: id, RunID: childRun, WorkflowType: sc.GetWorkflowType(), TaskQueue: tq,
		Status: store.RunRunning, Input: sc.GetInput(), ParentWorkflowID: r.rec.WorkflowID, ParentRunID: r.rec.RunID,
		ParentStep: s.n, StartedAt: now, Priority: r.rec.Priority, Flow: r.rec.Flow, Trace: r.rec.Trace} // a child shares out its pools as its parent, and its trace
	rec.Fingerprint = workflowFingerprint(WorkflowRequest{Namespace: rec.Namespace, WorkflowID: id, WorkflowType: rec.WorkflowType, TaskQueue: tq, Input: rec.Input})
	started := &aionv1.WorkflowStarted{WorkflowType: rec.WorkflowType, TaskQueue: tq, Input: rec.Input,
		ParentWorkflowId: r.rec.WorkflowID, ParentRunId: r.rec.RunID}
	r.extra = append(r.extra, func() { e.insertChildLocked(r, s, rec, started) })
	return seq
}

// insertChildLocked starts a child run after its parent's event; a failed
// start closes the parent's step as failed.
func (e *Engine) insertChildLocked(parent *wfRun, s *wfStep, rec store.Run, started *aionv1.WorkflowStarted) {
	if e.openWF[wfKey{rec.Namespace, rec.WorkflowID}] != nil {
		e.childFailedLocked(parent, s, "already_exists", fmt.Sprintf("workflow %q already has an open run", rec.WorkflowID))
		return
	}
	e.insertRunLocked(rec, started, func(err error) {
		if err != nil {
			e.childFailedLocked(parent, s, "start_failed", err.Error())
		}
	})
}

func (e *Engine) childFailedLocked(p *wfRun, s *wfStep, typ, msg string) {
	if p.closing || p.steps[s.n] != s {
		return
	}
	delete(p.steps, s.n)
	e.appendLocked(p, e.now().UTC(), &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildClosed{ChildClosed: &aionv1.ChildClosed{
		Step: s.n, Status: aionv1.RunStatus_RUN_STATUS_FAILED, Failure: &aionv1.Failure{Type: typ, Message: msg}}}})
	e.flushLocked(p)
	e.needTaskLocked(p)
}

// closeRunLocked records the run's last event and closes it once durable:
// waiters wake, its parent hears of it, a continue-as-new starts the next
// run, and what it still waits on is canceled.
func (e *Engine) closeRunLocked(r *wfRun, now time.Time, c *aionv1.CloseWorkflowCommand) int64 {
	status := runStatusOf(c.GetStatus())
	ev := &aionv1.WorkflowClosed{Status: c.GetStatus(), Result: c.GetResult(), Failure: c.GetFailure(), ContinueInput: c.GetContinueInput()}
	var next *store.Run
	if status == store.RunContinuedAsNew {
		n := store.Run{Namespace: r.rec.Namespace, WorkflowID: r.rec.WorkflowID, RunID: newID(now), WorkflowType: r.rec.WorkflowType,
			TaskQueue: r.rec.TaskQueue, Status: store.RunRunning, Input: c.GetContinueInput(), Fingerprint: r.rec.Fingerprint,
			ParentWorkflowID: r.rec.ParentWorkflowID, ParentRunID: r.rec.ParentRunID, ParentStep: r.rec.ParentStep, StartedAt: now,
			Priority: r.rec.Priority, Flow: r.rec.Flow, Origin: r.rec.Origin, Trace: r.rec.Trace}
		ev.NextRunId = n.RunID
		next = &n
	}
	seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowClosed{WorkflowClosed: ev}})
	r.closing = true
	r.rec.Status, r.rec.Result, r.rec.Failure, r.rec.ClosedAt = status, c.GetResult(), failureOf(c.GetFailure()), now
	r.update.Status, r.update.Result, r.update.Failure, r.update.ClosedAt = status, c.GetResult(), failureOf(c.GetFailure()), now
	r.updating = true
	if next != nil {
		r.rec.NextRunID, r.update.NextRunID = next.RunID, next.RunID
	}
	e.unqueueRunLocked(r)
	e.cancelStepsLocked(r, "workflow "+r.rec.WorkflowID+" closed "+string(status))
	r.steps = map[int64]*wfStep{}
	if next != nil {
		started := &aionv1.WorkflowStarted{WorkflowType: next.WorkflowType, TaskQueue: next.TaskQueue, Input: next.Input,
			ParentWorkflowId: next.ParentWorkflowID, ParentRunId: next.ParentRunID, ContinuedFromRunId: r.rec.RunID}
		// Inserted after the close, in the same commit order, so the store
		// never sees two open runs of the workflow id.
		r.extra = append(r.extra, func() {
			e.insertRunLocked(*next, started, func(err error) {
				if err != nil {
					e.log.Error("continue a run as new", "namespace", next.Namespace, "workflow", next.WorkflowID, "err", err)
				}
			})
		})
	}
	if p := e.runs[runKey{r.rec.Namespace, r.rec.ParentRunID}]; p != nil && next == nil {
		e.childClosedLocked(p, r, now)
	} else if r.rec.ParentRunID != "" && next == nil && e.cl != nil {
		// The parent is held elsewhere: its inbox hears of the close, in
		// the same write as the close.
		cc := &aionv1.ChildClosed{Step: r.rec.ParentStep, Status: RunStatusProto(status), Result: c.GetResult(), Failure: c.GetFailure()}
		if data, err := proto.Marshal(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildClosed{ChildClosed: cc}}); err == nil {
			r.post = append(r.post, store.RunEvent{Namespace: r.rec.Namespace, RunID: r.rec.ParentRunID, Data: data})
		}
	}
	e.flushLocked(r)
	return seq
}

// childClosedLocked records a child's close in its parent's history.
func (e *Engine) childClosedLocked(p *wfRun, child *wfRun, now time.Time) {
	s := p.steps[child.rec.ParentStep]
	if p.closing || s == nil || s.kind != aionv1.StepKind_STEP_KIND_CHILD || s.childWF != child.rec.WorkflowID {
		return
	}
	delete(p.steps, s.n)
	e.appendLocked(p, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildClosed{ChildClosed: &aionv1.ChildClosed{
		Step: s.n, Status: RunStatusProto(child.rec.Status), Result: child.rec.Result, Failure: failureProto(child.rec.Failure)}}})
	e.flushLocked(p)
	e.needTaskLocked(p)
}

// answerQueriesLocked completes the queries a task answered.
func (e *Engine) answerQueriesLocked(r *wfRun, answers []*aionv1.QueryAnswer) {
	if len(answers) == 0 {
		return
	}
	kept := r.queries[:0]
	for _, q := range r.queries {
		i := slices.IndexFunc(answers, func(a *aionv1.QueryAnswer) bool { return a.GetQueryId() == q.id })
		if !q.sent || i < 0 {
			kept = append(kept, q)
			continue
		}
		if msg := answers[i].GetError(); msg != "" {
			q.err = fmt.Errorf("query %q: %s: %w", q.name, msg, ErrInvalid)
		} else {
			q.result = answers[i].GetResult()
		}
		close(q.done)
	}
	clear(r.queries[len(kept):])
	r.queries = kept
}

func isCommandEvent(ev *aionv1.HistoryEvent) bool {
	switch ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_WorkflowTaskCompleted, *aionv1.HistoryEvent_ActivityScheduled, *aionv1.HistoryEvent_TimerStarted,
		*aionv1.HistoryEvent_TimerCanceled, *aionv1.HistoryEvent_SideEffectRecorded, *aionv1.HistoryEvent_ChildStarted,
		*aionv1.HistoryEvent_ActivityCancelRequested, *aionv1.HistoryEvent_WorkflowClosed:
		return true
	}
	return false
}

// stepOf is the step number an event takes, or 0 when it takes none.
func stepOf(ev *aionv1.HistoryEvent) int64 {
	switch x := ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_ActivityScheduled:
		return x.ActivityScheduled.GetStep()
	case *aionv1.HistoryEvent_TimerStarted:
		return x.TimerStarted.GetStep()
	case *aionv1.HistoryEvent_SideEffectRecorded:
		return x.SideEffectRecorded.GetStep()
	case *aionv1.HistoryEvent_ChildStarted:
		return x.ChildStarted.GetStep()
	}
	return 0
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func failureProto(f *store.Failure) *aionv1.Failure {
	if f == nil {
		return nil
	}
	return &aionv1.Failure{Message: f.Message, Type: f.Type, Retryable: f.Retryable, Details: f.Details}
}

func failureOf(f *aionv1.Failure) *store.Failure {
	if f == nil {
		return nil
	}
	return &store.Failure{Message: f.GetMessage(), Type: f.GetType(), Retryable: f.GetRetryable(), Details: f.GetDetails()}
}

func runStatusOf(s aionv1.RunStatus) store.RunStatus {
	switch s {
	case aionv1.RunStatus_RUN_STATUS_COMPLETED:
		return store.RunCompleted
	case aionv1.RunStatus_RUN_STATUS_FAILED:
		return store.RunFailed
	case aionv1.RunStatus_RUN_STATUS_CANCELED:
		return store.RunCanceled
	case aionv1.RunStatus_RUN_STATUS_TERMINATED:
		return store.RunTerminated
	case aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
		return store.RunContinuedAsNew
	}
	return store.RunRunning
}

// RunStatusProto is the wire form of a run status.
func RunStatusProto(s store.RunStatus) aionv1.RunStatus {
	switch s {
	case store.RunCompleted:
		return aionv1.RunStatus_RUN_STATUS_COMPLETED
	case store.RunFailed:
		return aionv1.RunStatus_RUN_STATUS_FAILED
	case store.RunCanceled:
		return aionv1.RunStatus_RUN_STATUS_CANCELED
	case store.RunTerminated:
		return aionv1.RunStatus_RUN_STATUS_TERMINATED
	case store.RunContinuedAsNew:
		return aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW
	case store.RunRunning:
		return aionv1.RunStatus_RUN_STATUS_RUNNING
	}
	return aionv1.RunStatus_RUN_STATUS_UNSPECIFIED
}

func sortSteps(s []PendingStep) {
	slices.SortFunc(s, func(a, b PendingStep) int { return cmp.Compare(a.Step, b.Step) })
}
