package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
	namerule "github.com/aion-run/aion/internal/name"
)

// ActivityOptions are a workflow's choices for one activity step. Zero
// values take the server's defaults, as for an activity scheduled with the
// client.
type ActivityOptions struct {
	// TaskQueue is where the activity runs; empty means the workflow's.
	TaskQueue string
	// Node pins the activity to workers advertising that node; empty means
	// none.
	Node string
	// ScheduleToStartTimeout limits the wait for a worker.
	ScheduleToStartTimeout time.Duration
	// StartToCloseTimeout limits one attempt.
	StartToCloseTimeout time.Duration
	// ScheduleToCloseTimeout limits the whole activity, retries included.
	ScheduleToCloseTimeout time.Duration
	// HeartbeatTimeout limits the gap between heartbeats; 0 means
	// heartbeats are not required.
	HeartbeatTimeout time.Duration
	// RetryPolicy decides retries; nil takes the server's default.
	RetryPolicy *RetryPolicy
	// Priority orders the step among the ready work of its pool: 1 is
	// dispatched first, 5 last; 0 means the default 3.
	Priority int
}

// RetryPolicy decides whether and when a failed attempt is retried. Zero
// fields take the server's defaults.
type RetryPolicy struct {
	// InitialInterval is the delay before the second attempt.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the delay after each failed attempt (at
	// least 1 when set).
	BackoffCoefficient float64
	// MaximumInterval caps the delay between attempts.
	MaximumInterval time.Duration
	// MaximumAttempts counts attempts including the first; 0 means
	// unlimited (or the server default), 1 means no retry.
	MaximumAttempts int32
	// NonRetryableErrorTypes are failure types that are never retried.
	NonRetryableErrorTypes []string
}

func (o ActivityOptions) toProto() (*aionv1.ActivityOptions, error) {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"ScheduleToStartTimeout", o.ScheduleToStartTimeout},
		{"StartToCloseTimeout", o.StartToCloseTimeout},
		{"ScheduleToCloseTimeout", o.ScheduleToCloseTimeout},
		{"HeartbeatTimeout", o.HeartbeatTimeout},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("ActivityOptions.%s is %s, want at least 0", d.field, d.v)
		}
	}
	if err := namerule.CheckOptional("ActivityOptions.TaskQueue", o.TaskQueue, namerule.MaxName); err != nil {
		return nil, err
	}
	if err := namerule.CheckOptional("ActivityOptions.Node", o.Node, namerule.MaxName); err != nil {
		return nil, err
	}
	if o.Priority < 0 || o.Priority > 5 {
		return nil, fmt.Errorf("ActivityOptions.Priority is %d, want 1 (first) to 5 (last), or 0 for the default 3", o.Priority)
	}
	p := &aionv1.ActivityOptions{
		Priority:               int32(o.Priority),
		TaskQueue:              o.TaskQueue,
		Node:                   o.Node,
		ScheduleToStartTimeout: duration(o.ScheduleToStartTimeout),
		StartToCloseTimeout:    duration(o.StartToCloseTimeout),
		ScheduleToCloseTimeout: duration(o.ScheduleToCloseTimeout),
		HeartbeatTimeout:       duration(o.HeartbeatTimeout),
	}
	if rp := o.RetryPolicy; rp != nil {
		switch {
		case rp.InitialInterval < 0:
			return nil, fmt.Errorf("ActivityOptions.RetryPolicy.InitialInterval is %s, want at least 0", rp.InitialInterval)
		case rp.MaximumInterval < 0:
			return nil, fmt.Errorf("ActivityOptions.RetryPolicy.MaximumInterval is %s, want at least 0", rp.MaximumInterval)
		case rp.BackoffCoefficient != 0 && rp.BackoffCoefficient < 1:
			return nil, fmt.Errorf("ActivityOptions.RetryPolicy.BackoffCoefficient is %g, want 0 or at least 1", rp.BackoffCoefficient)
		case rp.MaximumAttempts < 0:
			return nil, fmt.Errorf("ActivityOptions.RetryPolicy.MaximumAttempts is %d, want at least 0", rp.MaximumAttempts)
		}
		p.RetryPolicy = &aionv1.RetryPolicy{
			InitialInterval:        duration(rp.InitialInterval),
			BackoffCoefficient:     rp.BackoffCoefficient,
			MaximumInterval:        duration(rp.MaximumInterval),
			MaximumAttempts:        rp.MaximumAttempts,
			NonRetryableErrorTypes: rp.NonRetryableErrorTypes,
		}
	}
	return p, nil
}

func duration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// ExecuteActivity starts an activity step and returns its future: the
// activity's result decoded from JSON into T, or an *ActivityError when the
// activity failed, timed out or was canceled. input is encoded as JSON (nil
// sends no payload). opts, when given, replace the Context's options (see
// WithActivityOptions); only the first is used.
//
// The activity runs in the workflow's namespace, on the workflow's task
// queue unless opts say otherwise. When ctx is already canceled, or the
// input or options are invalid, no step is taken and the future is ready
// with the error.
func ExecuteActivity[T any](ctx Context, activityType string, input any, opts ...ActivityOptions) Future[T] {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("start an activity")
	if err := namerule.Check("activity type", activityType, namerule.MaxName); err != nil {
		return failed[T](r, fmt.Errorf("workflow: ExecuteActivity: %w", err))
	}
	if c.sc.canceled {
		return failed[T](r, ErrCanceled)
	}
	var o ActivityOptions
	switch {
	case len(opts) > 0:
		o = opts[0]
	case c.aopts != nil:
		o = *c.aopts
	}
	po, err := o.toProto()
	if err != nil {
		return failed[T](r, fmt.Errorf("workflow: activity %q: %w", activityType, err))
	}
	payload, err := encode(input)
	if err == nil {
		err = checkPayload("the input", payload)
	}
	if err != nil {
		return failed[T](r, fmt.Errorf("workflow: activity %q: input %T: %w", activityType, input, err))
	}
	f := newFuture[T](r)
	s := r.newStep(kindActivity, activityType, c.sc)
	s.onEvent = func(ev *aionv1.HistoryEvent) {
		ac := ev.GetActivityClosed()
		var zero T
		if fl := ac.GetFailure(); fl != nil {
			f.settle(zero, &ActivityError{Step: s.n, ActivityType: activityType, Type: fl.GetType(),
				Message: fl.GetMessage(), Retryable: fl.GetRetryable(), Details: fl.GetDetails()})
			return
		}
		v, err := decode[T](ac.GetResult())
		if err != nil {
			err = fmt.Errorf("workflow: activity %q (step %d) result: %w", activityType, s.n, err)
		}
		f.settle(v, err)
	}
	r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_ScheduleActivity{ScheduleActivity: &aionv1.ScheduleActivityCommand{
		Step: s.n, ActivityType: activityType, Input: payload, Options: po,
	}}})
	return f
}

// NewTimer starts a durable timer step that fires after d and returns its
// future, ready when it fires. To cancel it, start it on a Context made by
// WithCancel and call the CancelFunc: the timer is canceled and its future
// is ready with ErrCanceled. A d of zero or less takes no step (the future
// is ready at once); a d under a millisecond is a millisecond.
func NewTimer(ctx Context, d time.Duration) Future[struct{}] {
	c := ctxOf(ctx)
	f, _ := c.r.newTimer(c, d, "")
	return f
}

// newTimer starts a timer; the step is nil when it took none.
func (r *run) newTimer(c *wctx, d time.Duration, name string) (*future[struct{}], *step) {
	r.mayCommand("start a timer")
	if c.sc.canceled {
		return failed[struct{}](r, ErrCanceled), nil
	}
	f := newFuture[struct{}](r)
	if d <= 0 {
		f.settle(struct{}{}, nil)
		return f, nil
	}
	d = max(d, time.Millisecond)
	s := r.newStep(kindTimer, name, c.sc)
	s.onEvent = func(*aionv1.HistoryEvent) { f.settle(struct{}{}, nil) }
	s.onCancel = func() { f.settle(struct{}{}, ErrCanceled) }
	r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_StartTimer{StartTimer: &aionv1.StartTimerCommand{
		Step: s.n, Duration: durationpb.New(d), Name: name,
	}}})
	return f, s
}

// Sleep blocks for d on a durable timer: the run may leave the worker
// meanwhile and resumes when the timer fires. It returns ErrCanceled if ctx
// is canceled first.
func Sleep(ctx Context, d time.Duration) error {
	_, err := NewTimer(ctx, d).Get(ctx)
	return err
}

// ReceiveSignal blocks until a signal named name is available and returns
// its input decoded from JSON into T. Signals are received exactly once
// each, in the order the server accepted them; those no receive has taken
// yet wait in a buffer per name. It returns ErrCanceled if ctx is canceled
// while no signal is available; a decode error consumes the signal.
func ReceiveSignal[T any](ctx Context, name string) (T, error) {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("receive a signal")
	r.await(func() bool { return len(r.signals[name]) > 0 || c.sc.canceled })
	if len(r.signals[name]) == 0 {
		var zero T
		return zero, ErrCanceled
	}
	return takeSignal[T](r, name)
}

// ReceiveSignalWithTimeout is ReceiveSignal with a durable timer: it
// returns the signal and true if one arrives before d passes, and false
// when the timer fires first. A timer it started and no longer needs is
// canceled (a CancelTimer command). A signal already buffered is returned
// at once, with no timer; a d of zero or less only looks for one.
func ReceiveSignalWithTimeout[T any](ctx Context, name string, d time.Duration) (T, bool, error) {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("receive a signal")
	var zero T
	if len(r.signals[name]) > 0 {
		v, err := takeSignal[T](r, name)
		return v, true, err
	}
	if c.sc.canceled {
		return zero, false, ErrCanceled
	}
	timer, timerStep := r.newTimer(c, d, timerName("signal:"+name))
	r.await(func() bool { return len(r.signals[name]) > 0 || timer.ready || c.sc.canceled })
	q := r.signals[name]
	if timer.ready && timer.err == nil && (len(q) == 0 || timer.order < q[0].order) {
		return zero, false, nil
	}
	if timerStep != nil && !timer.ready {
		r.cancelStep(timerStep)
	}
	if len(q) == 0 {
		return zero, false, ErrCanceled
	}
	v, err := takeSignal[T](r, name)
	return v, true, err
}

// maxName is the server's limit on names, timer names included.
const maxName = 128

// timerName clips a timer's name to the server's limit.
func timerName(s string) string {
	if len(s) > maxName {
		return s[:maxName]
	}
	return s
}

func takeSignal[T any](r *run, name string) (T, error) {
	q := r.signals[name]
	s := q[0]
	if len(q) == 1 {
		delete(r.signals, name)
	} else {
		r.signals[name] = q[1:]
	}
	v, err := decode[T](s.input)
	if err != nil {
		err = fmt.Errorf("workflow: signal %q: %w", name, err)
	}
	return v, err
}

// Now returns the time of the latest history event the code has seen: the
// same on every replay. It takes no step. Never use time.Now in workflow
// code.
func Now(ctx Context) time.Time {
	return ctxOf(ctx).r.now
}

// Random returns a random number, recorded as a side-effect step named
// "random" so that replay returns the same number.
func Random(ctx Context) uint64 {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("take a random number")
	s := r.newStep(kindSideEffect, "random", nil)
	cmd := &aionv1.RecordSideEffectCommand{Step: s.n, Name: "random"}
	if !r.replaying {
		n := rand.Uint64()
		cmd.Value = strconv.AppendQuote(nil, strconv.FormatUint(n, 10))
		r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_RecordSideEffect{RecordSideEffect: cmd}})
		return n
	}
	ev := r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_RecordSideEffect{RecordSideEffect: cmd}})
	var text string
	err := json.Unmarshal(ev.GetSideEffectRecorded().GetValue(), &text)
	n, perr := strconv.ParseUint(text, 10, 64)
	if err != nil || perr != nil {
		r.failure = &NonDeterministicError{Step: s.n, Detail: fmt.Sprintf("step %d: the recorded random value %s is not a number",
			s.n, clip(ev.GetSideEffectRecorded().GetValue()))}
		r.park()
	}
	return n
}

// sideEffectValue is how a side effect's outcome is recorded.
type sideEffectValue struct {
	Value json.RawMessage `json:"value,omitempty"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// SideEffect runs fn once and records its outcome as a side-effect step
// named name; on replay fn is not run and the recorded outcome is returned.
// Use it for small non-deterministic values (an id, a configuration read);
// real work belongs in activities. The value is recorded as JSON. An error
// is recorded by its message and comes back, on the first run as on
// replay, as an error with that message (its type is not kept), so the
// code takes the same path both times. A panic in fn fails the workflow
// task.
func SideEffect[T any](ctx Context, name string, fn func() (T, error)) (T, error) {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("record a side effect")
	var zero T
	if err := limit.Check("side effect name", name, namerule.MaxName); err != nil {
		return zero, fmt.Errorf("workflow: SideEffect: %w", err)
	}
	s := r.newStep(kindSideEffect, name, nil)
	cmd := &aionv1.RecordSideEffectCommand{Step: s.n, Name: name}
	var raw []byte
	if !r.replaying {
		var rec sideEffectValue
		v, err := fn()
		if err == nil {
			b, merr := json.Marshal(v)
			if merr == nil {
				merr = checkPayload("the value", b)
			}
			if merr != nil {
				err = fmt.Errorf("side effect %q: value %T: %w", name, v, merr)
			} else {
				rec.Value = b
			}
		}
		if err != nil {
			rec.Error = &struct {
				Message string `json:"message"`
			}{err.Error()}
		}
		raw, _ = json.Marshal(rec)
		cmd.Value = raw
		r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_RecordSideEffect{RecordSideEffect: cmd}})
	} else {
		raw = r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_RecordSideEffect{RecordSideEffect: cmd}}).
			GetSideEffectRecorded().GetValue()
	}
	var rec sideEffectValue
	if err := json.Unmarshal(raw, &rec); err != nil {
		return zero, fmt.Errorf("workflow: side effect %q (step %d): recorded value %s: %w", name, s.n, clip(raw), err)
	}
	if rec.Error != nil {
		return zero, &sideEffectError{msg: rec.Error.Message}
	}
	v, err := decode[T](rec.Value)
	if err != nil {
		return zero, fmt.Errorf("workflow: side effect %q (step %d): %w", name, s.n, err)
	}
	return v, nil
}

// sideEffectError is a recorded side effect's error.
type sideEffectError struct{ msg string }

func (e *sideEffectError) Error() string { return e.msg }

// ChildOptions are a parent's choices for a child workflow.
type ChildOptions struct {
	// WorkflowID is the child's workflow id; empty means
	// "<parent workflow id>/<step>".
	WorkflowID string
	// TaskQueue is the child's task queue; empty means the parent's.
	TaskQueue string
}

// ExecuteChild starts a child workflow step and returns its future: the
// child's result decoded from JSON into T, or a *ChildError when its run
// did not complete. input is encoded as JSON. When ctx is already canceled
// or the input does not encode, no step is taken and the future is ready
// with the error. Canceling ctx later does not cancel the child (only the
// run's cancellation does, on the server).
func ExecuteChild[T any](ctx Context, workflowType string, input any, opts ChildOptions) Future[T] {
	c := ctxOf(ctx)
	r := c.r
	r.mayCommand("start a child workflow")
	for _, err := range []error{
		namerule.Check("workflow type", workflowType, namerule.MaxName),
		namerule.CheckOptional("ChildOptions.WorkflowID", opts.WorkflowID, namerule.MaxID),
		namerule.CheckOptional("ChildOptions.TaskQueue", opts.TaskQueue, namerule.MaxName),
	} {
		if err != nil {
			return failed[T](r, fmt.Errorf("workflow: ExecuteChild: %w", err))
		}
	}
	if c.sc.canceled {
		return failed[T](r, ErrCanceled)
	}
	payload, err := encode(input)
	if err == nil {
		err = checkPayload("the input", payload)
	}
	if err != nil {
		return failed[T](r, fmt.Errorf("workflow: child %q: input %T: %w", workflowType, input, err))
	}
	f := newFuture[T](r)
	s := r.newStep(kindChild, workflowType, nil)
	s.onEvent = func(ev *aionv1.HistoryEvent) {
		cc := ev.GetChildClosed()
		var zero T
		if cc.GetStatus() != aionv1.RunStatus_RUN_STATUS_COMPLETED {
			fl := cc.GetFailure()
			f.settle(zero, &ChildError{Step: s.n, WorkflowType: workflowType, Status: statusName(cc.GetStatus()),
				Type: fl.GetType(), Message: fl.GetMessage(), Details: fl.GetDetails()})
			return
		}
		v, err := decode[T](cc.GetResult())
		if err != nil {
			err = fmt.Errorf("workflow: child %q (step %d) result: %w", workflowType, s.n, err)
		}
		f.settle(v, err)
	}
	r.issue(&aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_StartChild{StartChild: &aionv1.StartChildCommand{
		Step: s.n, WorkflowId: opts.WorkflowID, WorkflowType: workflowType, TaskQueue: opts.TaskQueue, Input: payload,
	}}})
	return f
}

// Go starts fn as a new coroutine of the run. Coroutines run one at a time,
// in the order they were created, each until it blocks in a call of this
// package, so they never race and replay runs them the same way. Never use
// the go statement in workflow code. Coroutines still blocked when the
// workflow function returns are ended: their deferred calls run, but can
// take no step.
//
// A panic in fn fails the workflow task, as one in the workflow function
// does.
func Go(ctx Context, fn func(ctx Context)) {
	c := ctxOf(ctx)
	c.r.mayCommand("start a coroutine")
	c.r.newCoroutine(func() { fn(c) })
}

// SetQueryHandler registers fn as the handler of queries named name,
// replacing any earlier one. A query's input is decoded from JSON into In
// (empty leaves the zero value) and its answer encoded as JSON. Handlers
// read the run's state: they must not block or take steps (such a call
// panics, and the query is answered with an error).
func SetQueryHandler[In, Out any](ctx Context, name string, fn func(in In) (Out, error)) error {
	c := ctxOf(ctx)
	if name == "" {
		return errors.New("workflow: SetQueryHandler: the query name is empty")
	}
	if fn == nil {
		return fmt.Errorf("workflow: SetQueryHandler %q: nil function", name)
	}
	c.r.queries[name] = func(input []byte) ([]byte, error) {
		in, err := decode[In](input)
		if err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		out, err := fn(in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
	return nil
}
