package workflow

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
)

// Step and command kinds, as NonDeterministicError names them.
const (
	kindActivity       = "activity"
	kindTimer          = "timer"
	kindCancelTimer    = "cancel-timer"
	kindSideEffect     = "side-effect"
	kindChild          = "child"
	kindCancelActivity = "cancel-activity"
	kindClose          = "close"
)

// workflowFunc is a registered workflow function on encoded payloads.
type workflowFunc func(ctx Context, input []byte) ([]byte, error)

// run is one workflow run's state on this worker: the code's coroutines and
// everything they wait for, and where the run stands in its history.
type run struct {
	info Info
	fn   workflowFunc

	// nextSeq is the sequence number of the next event the run expects.
	nextSeq int64
	// held are events that arrived and are not fed to the code yet, in
	// order: the ones after the seen_seq of the round being replayed.
	held []*aionv1.HistoryEvent
	now  time.Time

	coros    []*coroutine
	current  *coroutine // the coroutine running, nil when the scheduler runs
	started  bool       // WorkflowStarted was fed: the workflow function runs
	finished bool       // the workflow function returned: Close was issued
	dead     bool       // the run is being dropped: its coroutines are killed
	inQuery  bool
	failure  error // fails the task: a panic or a divergence from history

	lastStep int64
	steps    map[int64]*step
	order    int64 // counts resolutions (futures, signals), see nextOrder

	// unmatched are commands the code issued that history does not record
	// yet: a task's new commands, matched with their events in the next
	// task when the run stays in the cache.
	unmatched []*aionv1.WorkflowCommand
	// expected are the command events of the round being replayed that the
	// code has not issued yet.
	expected  []*aionv1.HistoryEvent
	replaying bool

	signals         map[string][]signal
	queries         map[string]queryFunc
	root            *scope
	cancelRequested bool
}

type signal struct {
	input []byte
	order int64
}

type queryFunc func(input []byte) ([]byte, error)

// step is one step the code took: an activity, timer, side effect or child.
type step struct {
	n        int64
	kind     string
	name     string
	sc       *scope // for a timer or an activity: the scope that cancels it
	resolved bool
	canceled bool                       // the code canceled it (timer) or asked it to stop (activity)
	onEvent  func(*aionv1.HistoryEvent) // the event that resolves it
	onCancel func()                     // a timer canceled by the code
}

func newRun(task *aionv1.WorkflowTask, fn workflowFunc, buildID string) *run {
	r := &run{
		info: Info{
			Namespace: task.GetNamespace(), WorkflowID: task.GetWorkflowId(), RunID: task.GetRunId(),
			WorkflowType: task.GetWorkflowType(), TaskQueue: task.GetTaskQueue(), BuildID: buildID,
		},
		fn:      fn,
		nextSeq: 1,
		steps:   make(map[int64]*step),
		signals: make(map[string][]signal),
		queries: make(map[string]queryFunc),
	}
	r.root = r.newScope(nil)
	return r
}

func (r *run) nextOrder() int64 {
	r.order++
	return r.order
}

// exitCoroutine ends the calling coroutine of a run being dropped.
func (r *run) exitCoroutine() {
	if r.current != nil {
		r.current.killed = true
		runtime.Goexit()
	}
	panic("workflow: the run of this Context has ended")
}

// badHistoryError marks a history the server should never have sent.
type badHistoryError struct{ msg string }

func (e *badHistoryError) Error() string { return "bad history: " + e.msg }

func badHistory(format string, args ...any) error {
	return &badHistoryError{msg: fmt.Sprintf(format, args...)}
}

// errStickyMiss: the cached run cannot take this task; the server resends
// the whole history.
var errStickyMiss = errors.New("sticky cache miss")

// runTask advances the run by a task's events and returns the commands the
// code issued past what history records (none for a query-only task).
func (r *run) runTask(task *aionv1.WorkflowTask) ([]*aionv1.WorkflowCommand, error) {
	events := task.GetEvents()
	want := r.nextSeq
	for i, ev := range events {
		if ev.GetSeq() != want {
			return nil, badHistory("events[%d] has seq %d, want %d (first_seq %d)", i, ev.GetSeq(), want, task.GetFirstSeq())
		}
		want++
	}
	if r.nextSeq == 1 && (len(events) == 0 || events[0].GetWorkflowStarted() == nil) {
		return nil, badHistory("a run's history must begin with WorkflowStarted")
	}
	r.nextSeq = want

	for i := 0; i < len(events); {
		ev := events[i]
		switch {
		case ev.GetWorkflowTaskCompleted() != nil:
			// The round's commands are the command events up to the next
			// marker. Other events among them arrived as the server applied
			// the commands (a child whose workflow id is taken closes at
			// once): the code sees them in a later round.
			var recorded []*aionv1.HistoryEvent
			j := i + 1
			for ; j < len(events) && events[j].GetWorkflowTaskCompleted() == nil; j++ {
				if isCommandEvent(events[j]) {
					recorded = append(recorded, events[j])
				} else {
					r.held = append(r.held, events[j])
				}
			}
			if err := r.replayRound(ev.GetWorkflowTaskCompleted().GetSeenSeq(), recorded); err != nil {
				return nil, err
			}
			i = j
		case isCommandEvent(ev):
			return nil, badHistory("event %d (%s) is a command's event with no WorkflowTaskCompleted before it", ev.GetSeq(), eventName(ev))
		default:
			r.held = append(r.held, ev)
			i++
		}
	}
	if len(r.unmatched) > 0 {
		// The code ran past what history records (its last commands were
		// never recorded): this state cannot answer for the history.
		return nil, errStickyMiss
	}
	if task.GetQueryOnly() {
		return nil, nil
	}
	r.replaying = false
	r.feed(func(*aionv1.HistoryEvent) bool { return true })
	if r.failure == nil {
		r.schedule()
	}
	if r.failure != nil {
		return nil, r.failure
	}
	r.afterRound()
	return r.unmatched, nil
}

// replayRound replays one recorded round: it feeds the events the code had
// seen by seen, runs the code until it blocks, and checks that it issued
// exactly the commands recorded after the round's marker.
func (r *run) replayRound(seen int64, recorded []*aionv1.HistoryEvent) error {
	r.expected = recorded
	r.replaying = true
	defer func() { r.expected, r.replaying = nil, false }()
	// Commands issued in an earlier task of this worker come first.
	for _, cmd := range r.unmatched {
		if _, err := r.matchNext(cmd); err != nil {
			return err
		}
	}
	r.unmatched = nil
	r.feed(func(ev *aionv1.HistoryEvent) bool { return ev.GetSeq() <= seen })
	if r.failure == nil {
		r.schedule()
	}
	if r.failure != nil {
		return r.failure
	}
	r.afterRound()
	if len(r.expected) > 0 {
		ev := r.expected[0]
		kind, n, name := eventKey(ev)
		return &NonDeterministicError{Step: n, RecordedKind: kind, RecordedName: name, RecordedStep: n}
	}
	return nil
}

// afterRound ends the goroutines of a run whose workflow function returned.
func (r *run) afterRound() {
	if r.finished && len(r.coros) > 0 {
		r.killCoroutines()
	}
}

// feed hands the held events that ok accepts to the code, in order.
func (r *run) feed(ok func(*aionv1.HistoryEvent) bool) {
	n := 0
	for _, ev := range r.held {
		if !ok(ev) {
			break
		}
		n++
		r.feedEvent(ev)
		if r.failure != nil {
			break
		}
	}
	r.held = append(r.held[:0:0], r.held[n:]...)
}

// feedEvent applies one event that is not a command's.
func (r *run) feedEvent(ev *aionv1.HistoryEvent) {
	if t := ev.GetTime(); t != nil {
		r.now = t.AsTime()
	}
	if r.finished {
		return
	}
	switch e := ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_WorkflowStarted:
		if r.started {
			r.failure = badHistory("event %d: a second WorkflowStarted", ev.GetSeq())
			return
		}
		ws := e.WorkflowStarted
		if ws.GetWorkflowType() != "" {
			r.info.WorkflowType = ws.GetWorkflowType()
		}
		if ws.GetTaskQueue() != "" {
			r.info.TaskQueue = ws.GetTaskQueue()
		}
		r.info.ParentWorkflowID, r.info.ParentRunID = ws.GetParentWorkflowId(), ws.GetParentRunId()
		r.info.ContinuedFromRunID = ws.GetContinuedFromRunId()
		r.info.StartTime = r.now
		r.started = true
		input := ws.GetInput()
		ctx := &wctx{r: r, sc: r.root}
		r.newCoroutine(func() {
			out, err := r.fn(ctx, input)
			r.close(out, err)
		})
	case *aionv1.HistoryEvent_ActivityClosed:
		r.resolve(ev, e.ActivityClosed.GetStep(), kindActivity)
	case *aionv1.HistoryEvent_TimerFired:
		r.resolve(ev, e.TimerFired.GetStep(), kindTimer)
	case *aionv1.HistoryEvent_ChildClosed:
		r.resolve(ev, e.ChildClosed.GetStep(), kindChild)
	case *aionv1.HistoryEvent_SignalReceived:
		name := e.SignalReceived.GetName()
		r.signals[name] = append(r.signals[name], signal{input: e.SignalReceived.GetInput(), order: r.nextOrder()})
	case *aionv1.HistoryEvent_CancelRequested:
		r.cancelRequested = true
		r.root.cancelTree(nil)
	default:
		r.failure = badHistory("event %d has no known kind", ev.GetSeq())
	}
}

// resolve hands an event to the step it closes.
func (r *run) resolve(ev *aionv1.HistoryEvent, n int64, kind string) {
	s := r.steps[n]
	switch {
	case s == nil:
		r.failure = &NonDeterministicError{Step: n, Detail: fmt.Sprintf(
			"step %d: history has %s for a step the code never took", n, eventName(ev))}
	case s.kind != kind:
		r.failure = &NonDeterministicError{Step: n, Detail: fmt.Sprintf(
			"step %d: history has %s for the code's %s", n, eventName(ev), describe(s.kind, s.name))}
	case s.kind == kindTimer && s.canceled:
		// The timer fired before its cancellation took effect: ignored.
	case s.resolved:
		r.failure = &NonDeterministicError{Step: n, Detail: fmt.Sprintf(
			"step %d: history has a second %s", n, eventName(ev))}
	default:
		s.resolved = true
		if s.sc != nil {
			delete(s.sc.pending, n)
		}
		s.onEvent(ev)
	}
}

// newStep numbers the code's next step.
func (r *run) newStep(kind, name string, sc *scope) *step {
	r.lastStep++
	s := &step{n: r.lastStep, kind: kind, name: name, sc: sc}
	r.steps[s.n] = s
	if sc != nil {
		if sc.pending == nil {
			sc.pending = make(map[int64]*step)
		}
		sc.pending[s.n] = s
	}
	return s
}

// mayCommand panics when the caller may not issue a command: a query
// handler, or a run whose code has ended.
func (r *run) mayCommand(what string) {
	if r.inQuery {
		panic("workflow: a query handler must not " + what)
	}
	if r.dead || r.finished {
		r.exitCoroutine()
	}
}

// issue records a command the code issued. While a round is replayed it
// must be the next one history recorded, and issue returns that event; a
// mismatch fails the task and parks the coroutine for good.
func (r *run) issue(cmd *aionv1.WorkflowCommand) *aionv1.HistoryEvent {
	if !r.replaying {
		r.unmatched = append(r.unmatched, cmd)
		return nil
	}
	ev, err := r.matchNext(cmd)
	if err != nil {
		r.failure = err
		r.park()
	}
	return ev
}

// matchNext checks cmd against the next recorded command event.
func (r *run) matchNext(cmd *aionv1.WorkflowCommand) (*aionv1.HistoryEvent, error) {
	kind, n, name := commandKey(cmd)
	if len(r.expected) == 0 {
		return nil, &NonDeterministicError{Step: n, Kind: kind, Name: name}
	}
	ev := r.expected[0]
	rkind, rn, rname := eventKey(ev)
	if kind != rkind || n != rn || name != rname {
		return nil, &NonDeterministicError{Step: cmp.Or(n, rn), Kind: kind, Name: name, RecordedKind: rkind, RecordedName: rname, RecordedStep: rn}
	}
	r.expected = r.expected[1:]
	return ev, nil
}

// cancelStep is an explicit cancel of a pending timer or activity.
func (r *run) cancelStep(s *step) {
	if s.resolved || s.canceled {
		return
	}
	s.canceled = true
	if s.sc != nil {
		delete(s.sc.pending, s.n)
	}
	switch s.kind {
	case kindTimer:
		r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_CancelTimer{CancelTimer: &aionv1.CancelTimerCommand{Step: s.n}}})
		s.onCancel()
	case kindActivity:
		r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_CancelActivity{CancelActivity: &aionv1.CancelActivityCommand{Step: s.n}}})
	}
}

// close issues the run's Close command for what the workflow function
// returned.
func (r *run) close(out []byte, err error) {
	if r.dead {
		return
	}
	cmd := &aionv1.CloseWorkflowCommand{}
	var can *ContinueAsNewError
	if err == nil {
		if perr := checkPayload("the workflow's result", out); perr != nil {
			err = &typedError{typ: "result_too_large", msg: perr.Error()}
		}
	} else if errors.As(err, &can) && can.err == nil {
		if perr := checkPayload("the next run's input", can.Input); perr != nil {
			err = &typedError{typ: "input_too_large", msg: perr.Error()}
		}
	}
	switch {
	case err == nil:
		cmd.Status, cmd.Result = aionv1.RunStatus_RUN_STATUS_COMPLETED, out
	case errors.As(err, &can) && can.err == nil:
		cmd.Status, cmd.ContinueInput = aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW, can.Input
	case errors.Is(err, ErrCanceled) && r.cancelRequested:
		cmd.Status = aionv1.RunStatus_RUN_STATUS_CANCELED
		cmd.Failure = &aionv1.Failure{Type: "canceled", Message: err.Error()}
	default:
		typ := "workflow_error"
		var et errorTyper
		if errors.As(err, &et) && et.ErrorType() != "" {
			typ = et.ErrorType()
		}
		cmd.Status = aionv1.RunStatus_RUN_STATUS_FAILED
		cmd.Failure = &aionv1.Failure{Type: typ, Message: err.Error()}
	}
	cmd.Failure = clipped(cmd.Failure)
	r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_Close{Close: cmd}})
	r.finished = true
}

// answer runs a query handler on the run's state.
func (r *run) answer(q *aionv1.WorkflowQuery) (a *aionv1.QueryAnswer) {
	a = &aionv1.QueryAnswer{QueryId: q.GetQueryId()}
	defer func() { a.Error = limit.Clip(a.Error, limit.FailureMessage) }()
	h := r.queries[q.GetName()]
	if h == nil {
		a.Error = fmt.Sprintf("unknown query %q: the run's code registered %s", q.GetName(), r.queryNames())
		return a
	}
	r.inQuery = true
	defer func() {
		r.inQuery = false
		if p := recover(); p != nil {
			a.Result, a.Error = nil, fmt.Sprintf("query %q panicked: %v", q.GetName(), p)
		}
	}()
	out, err := h(q.GetInput())
	if err == nil {
		err = checkPayload("the result", out)
	}
	if err != nil {
		a.Error = fmt.Sprintf("query %q: %v", q.GetName(), err)
		return a
	}
	a.Result = out
	return a
}

func (r *run) queryNames() string {
	if len(r.queries) == 0 {
		return "no query handler"
	}
	names := make([]string, 0, len(r.queries))
	for n := range r.queries {
		names = append(names, n)
	}
	slices.Sort(names)
	return fmt.Sprintf("%q", names)
}

// commandKey is what replay compares of a command: kind, step and name.
func commandKey(c *aionv1.WorkflowCommand) (kind string, n int64, name string) {
	switch x := c.GetCommand().(type) {
	case *aionv1.WorkflowCommand_ScheduleActivity:
		return kindActivity, x.ScheduleActivity.GetStep(), x.ScheduleActivity.GetActivityType()
	case *aionv1.WorkflowCommand_StartTimer:
		return kindTimer, x.StartTimer.GetStep(), x.StartTimer.GetName()
	case *aionv1.WorkflowCommand_CancelTimer:
		return kindCancelTimer, x.CancelTimer.GetStep(), ""
	case *aionv1.WorkflowCommand_RecordSideEffect:
		return kindSideEffect, x.RecordSideEffect.GetStep(), x.RecordSideEffect.GetName()
	case *aionv1.WorkflowCommand_StartChild:
		return kindChild, x.StartChild.GetStep(), x.StartChild.GetWorkflowType()
	case *aionv1.WorkflowCommand_CancelActivity:
		return kindCancelActivity, x.CancelActivity.GetStep(), ""
	case *aionv1.WorkflowCommand_Close:
		return kindClose, 0, statusName(x.Close.GetStatus())
	}
	return "unknown", 0, ""
}

// eventKey is commandKey for the event a command was recorded as; kind is
// empty for an event that is not a command's.
func eventKey(ev *aionv1.HistoryEvent) (kind string, n int64, name string) {
	switch x := ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_ActivityScheduled:
		return kindActivity, x.ActivityScheduled.GetStep(), x.ActivityScheduled.GetActivityType()
	case *aionv1.HistoryEvent_TimerStarted:
		return kindTimer, x.TimerStarted.GetStep(), x.TimerStarted.GetName()
	case *aionv1.HistoryEvent_TimerCanceled:
		return kindCancelTimer, x.TimerCanceled.GetStep(), ""
	case *aionv1.HistoryEvent_SideEffectRecorded:
		return kindSideEffect, x.SideEffectRecorded.GetStep(), x.SideEffectRecorded.GetName()
	case *aionv1.HistoryEvent_ChildStarted:
		return kindChild, x.ChildStarted.GetStep(), x.ChildStarted.GetWorkflowType()
	case *aionv1.HistoryEvent_ActivityCancelRequested:
		return kindCancelActivity, x.ActivityCancelRequested.GetStep(), ""
	case *aionv1.HistoryEvent_WorkflowClosed:
		return kindClose, 0, statusName(x.WorkflowClosed.GetStatus())
	}
	return "", 0, ""
}

func isCommandEvent(ev *aionv1.HistoryEvent) bool {
	kind, _, _ := eventKey(ev)
	return kind != ""
}

// eventName names an event's kind for messages.
func eventName(ev *aionv1.HistoryEvent) string {
	switch ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_WorkflowStarted:
		return "WorkflowStarted"
	case *aionv1.HistoryEvent_WorkflowTaskCompleted:
		return "WorkflowTaskCompleted"
	case *aionv1.HistoryEvent_ActivityScheduled:
		return "ActivityScheduled"
	case *aionv1.HistoryEvent_ActivityClosed:
		return "ActivityClosed"
	case *aionv1.HistoryEvent_TimerStarted:
		return "TimerStarted"
	case *aionv1.HistoryEvent_TimerFired:
		return "TimerFired"
	case *aionv1.HistoryEvent_TimerCanceled:
		return "TimerCanceled"
	case *aionv1.HistoryEvent_SignalReceived:
		return "SignalReceived"
	case *aionv1.HistoryEvent_SideEffectRecorded:
		return "SideEffectRecorded"
	case *aionv1.HistoryEvent_ChildStarted:
		return "ChildStarted"
	case *aionv1.HistoryEvent_ChildClosed:
		return "ChildClosed"
	case *aionv1.HistoryEvent_CancelRequested:
		return "CancelRequested"
	case *aionv1.HistoryEvent_ActivityCancelRequested:
		return "ActivityCancelRequested"
	case *aionv1.HistoryEvent_WorkflowClosed:
		return "WorkflowClosed"
	}
	return "an unknown event"
}

// statusName is a run status in lower case: "completed", "failed", ….
func statusName(s aionv1.RunStatus) string {
	switch s {
	case aionv1.RunStatus_RUN_STATUS_RUNNING:
		return "running"
	case aionv1.RunStatus_RUN_STATUS_COMPLETED:
		return "completed"
	case aionv1.RunStatus_RUN_STATUS_FAILED:
		return "failed"
	case aionv1.RunStatus_RUN_STATUS_CANCELED:
		return "canceled"
	case aionv1.RunStatus_RUN_STATUS_TERMINATED:
		return "terminated"
	case aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
		return "continued_as_new"
	}
	return "unspecified"
}
