// Package aiontest tests activity handlers written with the worker SDK,
// without a server, much as River's rivertest tests River workers.
//
// NewWorker wraps one handler. Work runs it once on an input the way a
// worker runs one attempt, through the worker SDK's own code: the input
// decoded from JSON and the output encoded to it, failures reported as
// worker.NewError, NonRetryable and panics are, and worker.Info,
// RecordHeartbeat, HeartbeatDetails, Interventions, Paused and
// WaitWhilePaused all working. It returns what the worker would report.
// Start runs the handler in the background so that the test can steer the
// attempt while it runs, as a server and its operators would: read each
// heartbeat, send interventions (the client package's InjectMessage, Pause,
// Resume, UpdateBudget, RespondToApproval, CancelCommand) and get the
// handler's acknowledgement, cancel the activity.
//
//	w := aiontest.NewWorker(t, countWords, nil)
//	res, err := w.Work(ctx, "to be or not to be")
//	if err != nil {
//		t.Fatal(err)
//	}
//	if res.Outcome != aiontest.Completed || res.Value != 6 {
//		t.Fatalf("got %+v", res)
//	}
//
// Two things differ from a worker connected to a server, both to make tests
// exact: heartbeats are not throttled (each RecordHeartbeat is one
// heartbeat the test sees), and the time a paused attempt waits is not
// filled with keep-alive heartbeats.
package aiontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	"github.com/aion-run/aion/internal/intervention/wire"
	"github.com/aion-run/aion/internal/workerhook"
	"github.com/aion-run/aion/worker"
)

// Config describes the attempt a Worker runs. The zero value (or a nil
// *Config) is a first attempt with every default.
type Config struct {
	// Info is what the handler sees through worker.Info. Zero fields take
	// defaults: Namespace "default", ActivityID "aiontest", Attempt 1,
	// TaskQueue "default", ActivityType "aiontest", WorkerID 1,
	// ScheduledTime and StartedTime the time the attempt starts, and
	// Deadline StartedTime + StartToCloseTimeout when that timeout is set
	// (the handler's context carries the deadline, as on a worker).
	Info worker.ActivityInfo
	// Capabilities are the intervention primitives the worker advertises;
	// nil advertises every one. As on a server, an intervention whose
	// primitive is not advertised is not sent (Intervene returns
	// ErrCapabilityNotSupported).
	Capabilities []worker.Capability
	// LastHeartbeatDetails are the details a previous attempt recorded,
	// encoded as JSON, which worker.HeartbeatDetails returns; nil for none.
	LastHeartbeatDetails any
	// Logger receives the worker SDK's log lines; by default they are
	// discarded.
	Logger *slog.Logger
}

// Worker runs one activity handler as a worker runs its attempts. Create
// it with NewWorker.
type Worker[In, Out any] struct {
	t           testing.TB
	fn          func(context.Context, In) (Out, error)
	info        worker.ActivityInfo
	caps        []worker.Capability
	advertised  intervention.Set
	lastDetails []byte
	log         *slog.Logger
}

// NewWorker returns a Worker for fn with cfg (nil for the defaults). It
// fails the test if cfg does not describe an attempt: an unknown
// capability, heartbeat details that do not encode as JSON.
func NewWorker[In, Out any](t testing.TB, fn func(ctx context.Context, in In) (Out, error), cfg *Config) *Worker[In, Out] {
	t.Helper()
	if fn == nil {
		t.Fatalf("aiontest: NewWorker with a nil handler")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	w := &Worker[In, Out]{t: t, fn: fn, info: c.Info, caps: c.Capabilities, log: c.Logger}
	if w.caps == nil {
		for _, p := range intervention.All() {
			w.caps = append(w.caps, worker.Capability(p.String()))
		}
	}
	for _, c := range w.caps {
		p, err := intervention.Parse(string(c))
		if err != nil {
			t.Fatalf("aiontest: Config.Capabilities: %v", err)
		}
		w.advertised = w.advertised.With(p)
	}
	if c.LastHeartbeatDetails != nil {
		b, err := json.Marshal(c.LastHeartbeatDetails)
		if err != nil {
			t.Fatalf("aiontest: Config.LastHeartbeatDetails: %v", err)
		}
		w.lastDetails = b
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	i := &w.info
	i.Namespace = or(i.Namespace, "default")
	i.ActivityID = or(i.ActivityID, "aiontest")
	i.TaskQueue = or(i.TaskQueue, "default")
	i.ActivityType = or(i.ActivityType, "aiontest")
	if i.Attempt == 0 {
		i.Attempt = 1
	}
	if i.WorkerID == 0 {
		i.WorkerID = 1
	}
	return w
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Work runs the handler on in until it returns and reports the outcome. If
// ctx ends first, the handler's context is canceled as a stopping worker
// cancels it (cause worker.ErrWorkerStopping), and Work reports how the
// handler then ended (a retryable failure of type "worker_stopping" when
// it returned the context's error). The error is for a result that does
// not decode into Out.
func (w *Worker[In, Out]) Work(ctx context.Context, in In) (*Result[Out], error) {
	w.t.Helper()
	// Start's ctx cancels the handler; the wait itself must not end early.
	return w.Start(ctx, in).Wait(context.WithoutCancel(ctx))
}

// Start runs the handler on in in the background and returns the running
// attempt. The handler's context carries ctx's values; when ctx ends, or
// when the test ends, a handler still running is canceled as a stopping
// worker cancels it (cause worker.ErrWorkerStopping) and waited for.
func (w *Worker[In, Out]) Start(ctx context.Context, in In) *Attempt[Out] {
	w.t.Helper()
	payload, err := json.Marshal(in)
	if err != nil {
		w.t.Fatalf("aiontest: encode the input %T as JSON: %v", in, err)
	}
	a := &Attempt[Out]{info: w.info, advertised: w.advertised, changed: make(chan struct{})}
	// The handler sees times as they come off the wire: UTC, with no
	// monotonic reading. Info returns them the same way.
	a.info.StartedTime, a.info.ScheduledTime, a.info.Deadline = a.info.StartedTime.UTC(), a.info.ScheduledTime.UTC(), a.info.Deadline.UTC()
	if a.info.StartedTime.IsZero() {
		a.info.StartedTime = time.Now().UTC()
	}
	if a.info.ScheduledTime.IsZero() {
		a.info.ScheduledTime = a.info.StartedTime
	}
	if a.info.Deadline.IsZero() && a.info.StartToCloseTimeout > 0 {
		a.info.Deadline = a.info.StartedTime.Add(a.info.StartToCloseTimeout)
	}
	sdk, err := worker.New("aiontest", worker.Options{
		Namespaces:   []string{a.info.Namespace},
		TaskQueue:    a.info.TaskQueue,
		Node:         a.info.Node,
		Capabilities: w.caps,
		Logger:       w.log,
	})
	if err != nil {
		w.t.Fatalf("aiontest: %v", err)
	}
	worker.RegisterActivity(sdk, a.info.ActivityType, func(ctx context.Context, in In) (Out, error) {
		out, err := w.fn(ctx, in)
		a.mu.Lock()
		a.handlerErr = err
		a.mu.Unlock()
		return out, err
	})
	deliver, stop, err := workerhook.Offline(ctx, sdk, a.info.WorkerID, a.receive)
	if err != nil {
		w.t.Fatalf("aiontest: %v", err)
	}
	a.deliver, a.stop = deliver, stop
	w.t.Cleanup(stop)
	a.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ActivityTask{ActivityTask: taskOf(a.info, payload, w.lastDetails)}})
	return a
}

// taskOf is the ActivityTask a server would send for info.
func taskOf(info worker.ActivityInfo, payload, lastDetails []byte) *aionv1.ActivityTask {
	t := &aionv1.ActivityTask{
		Namespace:            info.Namespace,
		ActivityId:           info.ActivityID,
		Attempt:              info.Attempt,
		TaskQueue:            info.TaskQueue,
		ActivityType:         info.ActivityType,
		Payload:              payload,
		Node:                 info.Node,
		ScheduledTime:        timestamppb.New(info.ScheduledTime),
		StartedTime:          timestamppb.New(info.StartedTime),
		LastHeartbeatDetails: lastDetails,
	}
	if info.StartToCloseTimeout > 0 {
		t.StartToCloseTimeout = durationpb.New(info.StartToCloseTimeout)
	}
	if info.HeartbeatTimeout > 0 {
		t.HeartbeatTimeout = durationpb.New(info.HeartbeatTimeout)
	}
	if !info.Deadline.IsZero() {
		t.Deadline = timestamppb.New(info.Deadline)
	}
	return t
}

// Outcome is how an attempt ended, as the worker reports it.
type Outcome string

// The outcomes.
const (
	// Completed: the handler returned a result.
	Completed Outcome = "completed"
	// Failed: the handler returned an error (or panicked, or its input did
	// not decode); Result.Failure says how the failure is reported.
	Failed Outcome = "failed"
	// Canceled: the activity was canceled (Attempt.Cancel, or a cancel
	// intervention) and the handler returned an error.
	Canceled Outcome = "canceled"
)

// Result is what the worker reports for an attempt.
type Result[Out any] struct {
	// Outcome is how the attempt ended.
	Outcome Outcome
	// Value is the handler's output, encoded to JSON and decoded again as
	// a scheduler's client.Result decodes it; the zero value unless
	// Completed.
	Value Out
	// Err is the error the handler returned; nil when it completed, when
	// it panicked, and when its input did not decode (Failure says which).
	Err error
	// Failure is the failure as the server records it and client.Result
	// reports it (type, message, retryability, details); nil unless Failed.
	Failure *client.ActivityError
	// Heartbeats are the details of every heartbeat the handler recorded,
	// in order, as JSON ("null" for a heartbeat without details).
	Heartbeats []json.RawMessage
}

// Ack is a worker's acknowledgement of an intervention.
type Ack struct {
	// Accepted says whether the intervention was applied.
	Accepted bool
	// Message explains, mainly when it was not.
	Message string
}

// Errors Intervene returns where a server would not send the command.
var (
	// ErrCapabilityNotSupported: the worker did not advertise the
	// command's primitive (Config.Capabilities).
	ErrCapabilityNotSupported = errors.New("the worker did not advertise the command's capability")
	// ErrNotRunning: the attempt has ended.
	ErrNotRunning = errors.New("the attempt is not running")
)

// Attempt is one attempt running in the background; Start returns it. Its
// methods are safe for concurrent use.
type Attempt[Out any] struct {
	info       worker.ActivityInfo
	advertised intervention.Set
	sendMu     sync.Mutex // frames reach the worker one at a time, as from a stream
	deliver    func(*aionv1.ServerMessage)
	stop       func()

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced whenever a frame arrives
	heartbeats []json.RawMessage
	nextBeat   int // the heartbeat NextHeartbeat returns next
	acks       map[string]Ack
	result     *aionv1.ActivityResult
	handlerErr error
	sent       int // interventions sent, for their ids
}

// Info is what the handler sees through worker.Info.
func (a *Attempt[Out]) Info() worker.ActivityInfo { return a.info }

func (a *Attempt[Out]) send(m *aionv1.ServerMessage) {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.deliver(m)
}

// receive takes each frame the worker sends.
func (a *Attempt[Out]) receive(m *aionv1.WorkerMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch f := m.GetMessage().(type) {
	case *aionv1.WorkerMessage_ActivityHeartbeat:
		d := f.ActivityHeartbeat.GetDetails()
		if len(d) == 0 {
			d = []byte("null")
		}
		a.heartbeats = append(a.heartbeats, json.RawMessage(d))
	case *aionv1.WorkerMessage_InterventionAck:
		if a.acks == nil {
			a.acks = make(map[string]Ack)
		}
		ack := f.InterventionAck
		a.acks[ack.GetInterventionId()] = Ack{Accepted: ack.GetAccepted(), Message: ack.GetMessage()}
	case *aionv1.WorkerMessage_ActivityResult:
		a.result = f.ActivityResult
	default:
		return
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// waitFor waits until cond, called with a.mu held, holds or ctx ends.
func (a *Attempt[Out]) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		a.mu.Lock()
		ok, changed := cond(), a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("aiontest: waiting for %s: %w", what, ctx.Err())
		}
	}
}

// Heartbeats returns the details of every heartbeat the handler recorded so
// far, in order, as JSON.
func (a *Attempt[Out]) Heartbeats() []json.RawMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]json.RawMessage(nil), a.heartbeats...)
}

// NextHeartbeat waits for the heartbeat after the one it returned last (the
// first, on the first call) and returns its details as JSON. It returns an
// error when ctx ends first, or when the attempt ends without recording
// one more.
func (a *Attempt[Out]) NextHeartbeat(ctx context.Context) (json.RawMessage, error) {
	var (
		d     json.RawMessage
		ended bool
	)
	err := a.waitFor(ctx, "a heartbeat", func() bool {
		if a.nextBeat < len(a.heartbeats) {
			d = a.heartbeats[a.nextBeat]
			a.nextBeat++
			return true
		}
		ended = a.result != nil
		return ended
	})
	if err == nil && ended {
		err = fmt.Errorf("aiontest: waiting for a heartbeat: %w", ErrNotRunning)
	}
	return d, err
}

// Intervene sends cmd to the attempt as a server sends an intervention,
// and waits for the worker's acknowledgement. Cancel, pause and resume are
// acknowledged by the worker SDK at once; the others when the handler
// calls Accept or Decline on the intervention it took from
// worker.Interventions, or, if it never does, when the handler returns.
//
// Like a server, Intervene refuses a malformed command (empty message
// text, a budget with no limit, an approval with no call id) and sends
// nothing when the worker did not advertise the command's primitive
// (ErrCapabilityNotSupported) or the attempt has ended (ErrNotRunning).
func (a *Attempt[Out]) Intervene(ctx context.Context, cmd client.InterventionCommand) (Ack, error) {
	p, err := wire.Check(cmd.Proto())
	if err != nil {
		return Ack{}, fmt.Errorf("aiontest: intervene: %w", err)
	}
	kind := cmd.Kind()
	if !a.advertised.Has(p) {
		return Ack{}, fmt.Errorf("aiontest: intervene (%s): %s: %w", kind, p, ErrCapabilityNotSupported)
	}
	a.mu.Lock()
	if a.result != nil {
		a.mu.Unlock()
		return Ack{}, fmt.Errorf("aiontest: intervene (%s): %w", kind, ErrNotRunning)
	}
	a.sent++
	id := "intervention-" + strconv.Itoa(a.sent)
	a.mu.Unlock()
	a.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_Intervention{Intervention: &aionv1.Intervention{
		Namespace: a.info.Namespace, ActivityId: a.info.ActivityID, Attempt: a.info.Attempt,
		InterventionId: id, Command: cmd.Proto(),
	}}})
	var ack Ack
	err = a.waitFor(ctx, "the acknowledgement of "+kind, func() bool {
		var ok bool
		ack, ok = a.acks[id]
		return ok
	})
	return ack, err
}

// Cancel cancels the activity as a server does when a client cancels it:
// the handler's context is canceled with cause worker.ErrActivityCanceled
// (and reason), and a handler that then returns an error is reported as
// Canceled.
func (a *Attempt[Out]) Cancel(reason string) {
	a.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_CancelActivity{CancelActivity: &aionv1.CancelActivity{
		Namespace: a.info.Namespace, ActivityId: a.info.ActivityID, Attempt: a.info.Attempt, Reason: reason,
	}}})
}

// Wait waits for the handler to return and reports the outcome, or returns
// ctx's error if ctx ends first (the handler keeps running).
func (a *Attempt[Out]) Wait(ctx context.Context) (*Result[Out], error) {
	if err := a.waitFor(ctx, "the handler to return", func() bool { return a.result != nil }); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	res := &Result[Out]{Heartbeats: append([]json.RawMessage(nil), a.heartbeats...)}
	switch o := a.result.GetOutcome().(type) {
	case *aionv1.ActivityResult_Completed:
		res.Outcome = Completed
		if b := o.Completed.GetResult(); len(b) > 0 {
			if err := json.Unmarshal(b, &res.Value); err != nil {
				return nil, fmt.Errorf("aiontest: decode the result %s into %T: %w", b, res.Value, err)
			}
		}
	case *aionv1.ActivityResult_Failed:
		f := o.Failed
		res.Outcome, res.Err = Failed, a.handlerErr
		res.Failure = &client.ActivityError{Type: f.GetType(), Message: f.GetMessage(), Retryable: f.GetRetryable(), Details: client.Payload(f.GetDetails())}
	case *aionv1.ActivityResult_Canceled:
		res.Outcome, res.Err = Canceled, a.handlerErr
	default:
		return nil, fmt.Errorf("aiontest: the worker reported a result without an outcome: %v", a.result)
	}
	return res, nil
}
