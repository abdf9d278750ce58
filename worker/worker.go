package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	ivwire "github.com/aion-run/aion/internal/intervention/wire"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/target"
	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/workflow"
)

// SDKVersion is sent in Register.sdk_version.
const SDKVersion = "aion-go/0.1.0"

// Capability is an intervention primitive a worker can advertise.
type Capability string

// The intervention primitives. The SDK applies CapabilityCancel (it
// cancels the handler's context with ErrActivityCanceled) and
// CapabilityPauseResume (see Paused and WaitWhilePaused) itself; the others
// reach the handler through Interventions. Advertise a primitive only if
// the worker's handlers honour it: the server sends a command only to a
// worker that advertised its primitive.
const (
	CapabilityInjectMessage     Capability = "inject_message"
	CapabilityCancel            Capability = "cancel"
	CapabilityPauseResume       Capability = "pause_resume"
	CapabilityUpdateBudget      Capability = "update_budget"
	CapabilityRespondToApproval Capability = "respond_to_approval"
)

// capabilityOf is the SDK's name for a primitive.
func capabilityOf(p intervention.Primitive) Capability { return Capability(p.String()) }

func (c Capability) toProto() (aionv1.InterventionPrimitive, error) {
	p, err := intervention.Parse(string(c))
	if err != nil {
		return 0, fmt.Errorf("capability %w", err)
	}
	return ivwire.Primitive(p), nil
}

// Options configures a Worker. Namespaces is required; everything else has
// a default.
type Options struct {
	// Namespaces the worker serves; at least one. The server authorizes
	// every one of them or refuses the registration.
	Namespaces []string
	// TaskQueue is the pool the worker serves in each namespace; empty
	// means "default".
	TaskQueue string
	// Node is the locality label the worker advertises; empty means none.
	Node string
	// Slots is the most attempts run at once; 0 means 1.
	Slots int
	// Identity names the worker process for operators; default host:pid.
	Identity string
	// Capabilities are the intervention primitives advertised.
	Capabilities []Capability

	// Token, when set, is sent as "authorization: Bearer <token>" metadata.
	// The transport is plain gRPC unless DialOptions passes transport
	// credentials (grpc.WithTransportCredentials), as a server that serves
	// TLS needs; without TLS the token travels in clear text.
	Token string
	// DialOptions are appended to the worker's own (plain-gRPC transport
	// credentials, the token), so they can override them, for example with
	// grpc.WithTransportCredentials for TLS.
	DialOptions []grpc.DialOption
	// Conn, when set, is the connection the worker opens its stream on,
	// instead of dialing an address of its own (New's address must then
	// be empty, and DialOptions unset: set them in Dial). Workers of one
	// process given one Conn from Dial share a single HTTP/2 connection,
	// a stream each, which costs the server much less memory per worker
	// than a connection each (docs/benchmarks.md). Token is still sent, on
	// the worker's stream. The caller owns Conn: Run does not close it,
	// and gRPC reconnects it after a loss. A server takes at most
	// --grpc-max-streams (1,000 by default) calls and streams at once on
	// one connection; a worker past it waits for one to end.
	Conn grpc.ClientConnInterface

	// Logger receives connection events and per-attempt debug lines;
	// default slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the reconnect delay, which doubles
	// from MinBackoff up to MaxBackoff, with jitter. Defaults 100ms and 30s.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// StopTimeout bounds how long in-flight handlers may keep running after
	// Run's context is canceled; then their contexts are canceled (cause
	// ErrWorkerStopping). Default 30s. After the handlers return, Run waits
	// a further 10s at most for the server to acknowledge their results.
	StopTimeout time.Duration

	// BuildID is the version of the worker's workflow code; required when a
	// workflow is registered (RegisterWorkflow). A run's workflow tasks go
	// only to workers of the build id it started on, so code that changes
	// the steps running workflows take must ship under a new one. It
	// follows the name rule (letters, digits and - _ . : / @ + =, at most
	// 128 bytes).
	BuildID string
	// CompatibleBuildIDs are other builds whose open runs this code may also
	// advance: a deployer's declaration that it takes the same steps as
	// theirs (for a fix that changes no step), so those runs need not wait
	// for workers of their own build. New runs still start on the newest
	// BuildID. At most 16, each following the name rule.
	CompatibleBuildIDs []string
	// WorkflowSlots is the most workflow tasks the server sends the worker
	// at once, apart from its activity Slots; 0 means DefaultWorkflowSlots.
	// Workflow tasks are short: they run on a few goroutines of their own.
	WorkflowSlots int
	// WorkflowCacheSize is the most workflow runs kept in memory between
	// their tasks (a kept run resumes without replaying its history); 0
	// means workflow.DefaultCacheSize, negative keeps none.
	WorkflowCacheSize int

	// TracerProvider, when set, makes a span for each attempt, "aion.attempt"
	// (kind consumer), child of the trace context the task carries (or a
	// new trace when it carries none); the handler's context holds the
	// span, so spans the handler starts are its children, and the span's
	// context goes back with the result so the server's span for recording
	// it is a child too. Nil makes no spans: the handler's context then
	// still carries the task's trace context as its remote parent, so a
	// handler that traces on its own joins the trace.
	TracerProvider trace.TracerProvider

	// ExitOnDrain makes Run return nil once it has finished a server's
	// DrainRequest. By default the worker reconnects (with backoff) after a
	// drain: a DrainRequest usually means the server is shutting down for a
	// restart, and a worker that exits would need a supervisor to come back.
	// Set it for workers that an operator drain should retire.
	ExitOnDrain bool
}

// Defaults for Options fields left zero.
const (
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
	DefaultStopTimeout = 30 * time.Second
)

// handlerFunc runs one attempt on an encoded payload.
type handlerFunc func(ctx context.Context, payload []byte) ([]byte, error)

// Worker connects to an aion server, registers the activity types it can
// run and the workflow types it can advance, and runs the attempts and
// workflow tasks the server pushes to it.
//
// Create it with New, register handlers with RegisterActivity and
// RegisterWorkflow, then call Run once.
type Worker struct {
	address  string
	opts     Options
	log      *slog.Logger
	tracer   trace.Tracer // nil without Options.TracerProvider
	register *aionv1.Register
	caps     map[Capability]bool // advertised
	// ackGrace bounds the wait for ResultAcks after a stop; a variable so
	// tests can shorten it.
	ackGrace time.Duration
	// registerTimeout bounds the wait for RegisterAck.
	registerTimeout time.Duration
	// closeWait bounds the wait for the server to end the stream after
	// CloseSend.
	closeWait time.Duration
	// hbEvery is the most often one attempt sends a heartbeat; 0 sends
	// every one (an offline worker, for aiontest).
	hbEvery time.Duration

	mu       sync.Mutex
	handlers map[string]handlerFunc
	started  bool
	running  map[attemptKey]*attempt
	book     resultBook
	sess     *outbox // the current stream's outbox; nil while disconnected
	workerID uint64
	stopping bool      // Run's ctx is done
	finalAt  time.Time // when a stopping worker gives up on acknowledgements
	stopTime *time.Timer

	// handlerCtx parents every attempt; canceled with ErrWorkerStopping
	// when a stop outlasts StopTimeout, and when Run returns.
	handlerCtx     context.Context
	cancelHandlers context.CancelCauseFunc

	wf         *workflow.Executor
	wfRun      workflowRunners
	wfInFlight int // workflow tasks received and not yet answered

	sem     chan struct{}  // slot guard
	changed chan struct{}  // an attempt finished or a result was acknowledged
	tasks   sync.WaitGroup // attempt goroutines
	aux     sync.WaitGroup // heartbeat throttle timers
}

// New returns a worker for the server at address (host:port or any gRPC
// target), or for a cluster's servers listed as "host1:port,host2:port,…":
// the worker connects to one of them, in a random order, and after losing it
// reconnects to another. It does not connect; Run does.
//
// With Options.Conn, address is empty: the worker uses that connection.
func New(address string, opts Options) (*Worker, error) {
	switch {
	case opts.Conn == nil && address == "":
		return nil, errors.New("worker: address is empty")
	case opts.Conn != nil && address != "":
		return nil, fmt.Errorf("worker: address %q and Options.Conn both set; want one", address)
	case opts.Conn != nil && len(opts.DialOptions) > 0:
		return nil, errors.New("worker: Options.DialOptions set with Options.Conn; give them to Dial, which makes the connection")
	}
	if len(opts.Namespaces) == 0 {
		return nil, errors.New("worker: Options.Namespaces: at least one namespace is required")
	}
	for i, ns := range opts.Namespaces {
		if ns == "" {
			return nil, fmt.Errorf("worker: Options.Namespaces[%d] is empty", i)
		}
	}
	if opts.Slots < 0 {
		return nil, fmt.Errorf("worker: Options.Slots is %d, want at least 0", opts.Slots)
	}
	if opts.Slots == 0 {
		opts.Slots = 1
	}
	if opts.WorkflowSlots < 0 {
		return nil, fmt.Errorf("worker: Options.WorkflowSlots is %d, want at least 0", opts.WorkflowSlots)
	}
	if opts.WorkflowSlots == 0 {
		opts.WorkflowSlots = DefaultWorkflowSlots
	}
	if err := name.CheckOptional("worker: Options.BuildID", opts.BuildID, name.MaxName); err != nil {
		return nil, err
	}
	if len(opts.CompatibleBuildIDs) > 16 {
		return nil, fmt.Errorf("worker: Options.CompatibleBuildIDs: %d given, at most 16 allowed", len(opts.CompatibleBuildIDs))
	}
	for i, b := range opts.CompatibleBuildIDs {
		if err := name.Check(fmt.Sprintf("worker: Options.CompatibleBuildIDs[%d]", i), b, name.MaxName); err != nil {
			return nil, err
		}
		if b == opts.BuildID {
			return nil, fmt.Errorf("worker: Options.CompatibleBuildIDs[%d]: %q is the worker's own BuildID", i, b)
		}
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		return nil, fmt.Errorf("worker: Options.MaxBackoff %s is below MinBackoff %s", opts.MaxBackoff, opts.MinBackoff)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = host + ":" + strconv.Itoa(os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	reg := &aionv1.Register{
		Namespaces: append([]string(nil), opts.Namespaces...),
		TaskQueue:  opts.TaskQueue,
		Node:       opts.Node,
		Slots:      uint32(opts.Slots),
		Identity:   opts.Identity,
		SdkVersion: SDKVersion,
	}
	caps := make(map[Capability]bool)
	for _, c := range opts.Capabilities {
		p, err := c.toProto()
		if err != nil {
			return nil, fmt.Errorf("worker: Options.Capabilities: %w", err)
		}
		if !caps[c] {
			reg.Capabilities = append(reg.Capabilities, p)
		}
		caps[c] = true
	}
	var tracer trace.Tracer
	if opts.TracerProvider != nil {
		tracer = opts.TracerProvider.Tracer(instrumentationName, trace.WithInstrumentationVersion(SDKVersion))
	}
	return &Worker{
		tracer:          tracer,
		address:         address,
		opts:            opts,
		log:             opts.Logger,
		register:        reg,
		caps:            caps,
		ackGrace:        10 * time.Second,
		registerTimeout: 30 * time.Second,
		closeWait:       5 * time.Second,
		hbEvery:         heartbeatEvery,
		handlers:        make(map[string]handlerFunc),
		wf:              workflow.NewExecutor(workflow.ExecutorOptions{BuildID: opts.BuildID, CacheSize: opts.WorkflowCacheSize}),
		running:         make(map[attemptKey]*attempt),
		sem:             make(chan struct{}, opts.Slots),
		changed:         make(chan struct{}, 1),
	}, nil
}

// RegisterActivity registers fn as the handler of activityType. The
// attempt's payload is decoded from JSON into In (an empty payload leaves In
// at its zero value) and the returned Out is encoded as JSON into the
// result; use json.RawMessage for either to handle raw JSON.
//
// A payload that does not decode fails the attempt, not retryable, with type
// "payload_decode_error". An error returned by fn fails the attempt: see
// Error, NewError and NonRetryable for how it is reported.
//
// RegisterActivity panics if activityType is empty or already registered,
// fn is nil, or Run has been called: these are programming errors.
func RegisterActivity[In, Out any](w *Worker, activityType string, fn func(ctx context.Context, in In) (Out, error)) {
	if fn == nil {
		panic("worker: RegisterActivity " + strconv.Quote(activityType) + " with a nil function")
	}
	w.registerHandler(activityType, func(ctx context.Context, payload []byte) ([]byte, error) {
		var in In
		if len(payload) > 0 {
			if err := json.Unmarshal(payload, &in); err != nil {
				return nil, NewError("payload_decode_error", fmt.Sprintf("decode payload into %T: %v", in, err), false, nil)
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, NewError("result_encode_error", fmt.Sprintf("encode result %T: %v", out, err), false, nil)
		}
		return b, nil
	})
}

func (w *Worker) registerHandler(activityType string, h handlerFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case activityType == "":
		panic("worker: RegisterActivity with an empty activity type")
	case w.started:
		panic("worker: RegisterActivity " + strconv.Quote(activityType) + " after Run")
	case w.handlers[activityType] != nil:
		panic("worker: activity type " + strconv.Quote(activityType) + " registered twice")
	}
	w.handlers[activityType] = h
	w.register.ActivityTypes = append(w.register.ActivityTypes, activityType)
}

// notify wakes the session loop after an attempt finished or a result was
// acknowledged.
func (w *Worker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// idle reports whether nothing is running and every result is
// acknowledged. Callers hold w.mu.
func (w *Worker) idleLocked() bool {
	return len(w.running) == 0 && w.book.len() == 0 && w.wfInFlight == 0
}

func (w *Worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.idleLocked()
}

// beginStop marks the worker stopping (Run's ctx is done): handlers get
// StopTimeout to finish, then the worker waits at most ackGrace more for
// acknowledgements.
func (w *Worker) beginStop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return
	}
	w.stopping = true
	w.finalAt = time.Now().Add(w.opts.StopTimeout + w.ackGrace)
	cancel := w.cancelHandlers
	w.stopTime = time.AfterFunc(w.opts.StopTimeout, func() { cancel(ErrWorkerStopping) })
	w.log.Info("aion worker stopping: finishing in-flight attempts", "running", len(w.running), "unacknowledged", w.book.len(), "stop_timeout", w.opts.StopTimeout)
}

// attach makes out the current stream after RegisterAck: the unacknowledged
// results are queued first, then (when stopping) the Drain frame.
func (w *Worker) attach(out *outbox, workerID uint64) (resent int, stopping bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sess = out
	w.workerID = workerID
	for _, r := range w.book.unacked() {
		out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: r}})
		resent++
	}
	if w.stopping {
		out.push(drainFrame("worker stopping"))
	}
	return resent, w.stopping
}

func (w *Worker) detach(out *outbox) {
	w.mu.Lock()
	if w.sess == out {
		w.sess = nil
	}
	w.mu.Unlock()
	out.close()
}

func drainFrame(reason string) *aionv1.WorkerMessage {
	return &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Drain{Drain: &aionv1.Drain{Reason: reason}}}
}

// sendHeartbeat queues an ActivityHeartbeat on the current stream, if any.
func (w *Worker) sendHeartbeat(k attemptKey, details []byte) {
	w.mu.Lock()
	out := w.sess
	w.mu.Unlock()
	if out == nil {
		return
	}
	out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
		Namespace: k.namespace, ActivityId: k.id, Attempt: k.attempt, Details: details,
	}}})
}

// startAttempt runs one ActivityTask in its own goroutine.
func (w *Worker) startAttempt(t *aionv1.ActivityTask) {
	a := newAttempt(w, t, 0)
	w.mu.Lock()
	a.info.WorkerID = w.workerID
	if _, dup := w.running[a.key]; dup || w.book.has(a.key) {
		w.mu.Unlock()
		w.log.Warn("aion worker: duplicate task ignored", "activity", a.key.String())
		return
	}
	h := w.handlers[t.GetActivityType()]
	ctx, cancel := context.WithCancelCause(w.handlerCtx)
	ctx = context.WithValue(ctx, ctxKey{}, a)
	if tc := t.GetTraceContext(); tc != nil || w.tracer != nil {
		ctx = w.traceAttempt(ctx, a, tracectx.Context{Parent: tc.GetTraceparent(), State: tc.GetTracestate()})
	}
	a.cancel = cancel
	w.running[a.key] = a
	w.tasks.Add(1)
	w.mu.Unlock()

	go w.runAttempt(ctx, a, h, t.GetPayload())
}

func (w *Worker) runAttempt(ctx context.Context, a *attempt, h handlerFunc, payload []byte) {
	defer w.tasks.Done()
	defer a.cancel(nil)
	var stopDeadline context.CancelFunc = func() {}
	if !a.info.Deadline.IsZero() {
		ctx, stopDeadline = context.WithDeadline(ctx, a.info.Deadline)
	}
	defer stopDeadline()

	start := time.Now()
	var (
		out []byte
		err error
	)
	// The slot guard: the server never sends more than Slots attempts at
	// once, but a worker must not trust that blindly.
	select {
	case w.sem <- struct{}{}:
		if ctx.Err() == nil {
			out, err = call(ctx, h, payload)
		} else {
			err = context.Cause(ctx)
		}
		<-w.sem
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if h == nil && err == nil {
		out, err = nil, NewError("activity_type_not_registered",
			fmt.Sprintf("activity type %q is not registered on this worker", a.info.ActivityType), false, nil)
	}
	a.finish()
	if n := a.iv.end(); n > 0 {
		w.log.Warn("aion worker: interventions the handler did not acknowledge were declined", "activity", a.key.String(), "declined", n)
	}
	res := buildResult(ctx, a.key, out, err)
	if a.span != nil {
		endAttemptSpan(a.span, res)
		res.TraceContext = a.spanContext
	}
	w.log.Debug("aion worker: attempt finished", "activity", a.key.String(), "type", a.info.ActivityType,
		"outcome", outcomeName(res), "duration", time.Since(start))

	w.mu.Lock()
	delete(w.running, a.key)
	w.book.add(res)
	if w.sess != nil {
		w.sess.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: res}})
	}
	w.mu.Unlock()
	w.notify()
}

// call runs a handler, turning a panic into a retryable failure of type
// "panic" whose details hold the stack.
func call(ctx context.Context, h handlerFunc, payload []byte) (out []byte, err error) {
	if h == nil {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			p := &panicError{value: r, stack: string(debug.Stack())}
			out, err = nil, &Error{Type: "panic", Message: p.Error(), Retryable: true, Details: p.stack, cause: p}
		}
	}()
	return h(ctx, payload)
}

// buildResult turns a handler's return values into the ActivityResult.
func buildResult(ctx context.Context, k attemptKey, out []byte, err error) *aionv1.ActivityResult {
	r := &aionv1.ActivityResult{Namespace: k.namespace, ActivityId: k.id, Attempt: k.attempt}
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		r.Outcome = &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{Result: out}}
	case ctx.Err() != nil && errors.Is(cause, ErrActivityCanceled):
		var details []byte
		if msg := err.Error(); msg != "" {
			details, _ = json.Marshal(msg)
		}
		r.Outcome = &aionv1.ActivityResult_Canceled{Canceled: &aionv1.ActivityCanceled{Details: details}}
	case ctx.Err() != nil && errors.Is(cause, ErrWorkerStopping) && isContextErr(err):
		r.Outcome = &aionv1.ActivityResult_Failed{Failed: &aionv1.Failure{
			Type: "worker_stopping", Message: "the worker stopped before the attempt finished: " + err.Error(), Retryable: true,
		}}
	default:
		r.Outcome = &aionv1.ActivityResult_Failed{Failed: toFailure(err)}
	}
	return r
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrWorkerStopping)
}

func outcomeName(r *aionv1.ActivityResult) string {
	switch o := r.GetOutcome().(type) {
	case *aionv1.ActivityResult_Completed:
		return "completed"
	case *aionv1.ActivityResult_Canceled:
		return "canceled"
	case *aionv1.ActivityResult_Failed:
		return "failed: " + o.Failed.GetType()
	}
	return "unknown"
}

// cancelAttempt cancels the handler of a running attempt; false if it is not
// running.
func (w *Worker) cancelAttempt(k attemptKey, cause error) bool {
	w.mu.Lock()
	a := w.running[k]
	w.mu.Unlock()
	if a == nil {
		return false
	}
	a.cancel(cause)
	return true
}

// cancelRunning cancels every running handler.
func (w *Worker) cancelRunning(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		a.cancel(cause)
	}
}

// dial opens the client connection.
func (w *Worker) dial() (*grpc.ClientConn, error) {
	return target.DialSDK(w.address, w.opts.Token, w.opts.DialOptions...)
}

// Dial returns a connection for Options.Conn, to the server at address (as
// New takes it), with the SDK's defaults: plain gRPC unless opts pass
// transport credentials (grpc.WithTransportCredentials for TLS), and
// messages as large as the wire limits allow. It does not connect; the
// first worker's Run does. Close it once the workers' Run calls returned.
func Dial(address string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if address == "" {
		return nil, errors.New("worker: address is empty")
	}
	return target.DialSDK(address, "", opts...)
}

// connectOptions are the call options of the worker's stream: its token,
// when it shares a connection dialed without one.
func (w *Worker) connectOptions() []grpc.CallOption {
	if w.opts.Conn == nil || w.opts.Token == "" {
		return nil
	}
	return []grpc.CallOption{grpc.PerRPCCredentials(target.BearerToken(w.opts.Token))}
}

// server names the server in errors: its address, or the shared
// connection's target.
func (w *Worker) server() string {
	if t, ok := w.opts.Conn.(interface{ Target() string }); ok && w.address == "" {
		return t.Target()
	}
	return w.address
}
