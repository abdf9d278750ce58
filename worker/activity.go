package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/internal/tracing/w3c"
)

// ActivityInfo describes the attempt a handler is running.
type ActivityInfo struct {
	Namespace    string
	ActivityID   string
	Attempt      uint32 // from 1
	TaskQueue    string
	ActivityType string
	// Node is the activity's node pin; empty when not pinned.
	Node string
	// ScheduledTime is when the activity was scheduled; StartedTime when
	// this attempt was handed to the worker.
	ScheduledTime time.Time
	StartedTime   time.Time
	// Deadline is when the server gives up on this attempt (the handler's
	// context carries it too); zero if none.
	Deadline time.Time
	// StartToCloseTimeout limits this attempt; HeartbeatTimeout is the
	// longest allowed gap between heartbeats (0: heartbeats not required).
	StartToCloseTimeout time.Duration
	HeartbeatTimeout    time.Duration
	// WorkerID is the id the server gave this worker's stream.
	WorkerID uint64
	// WorkflowID, RunID and Step name the workflow step this activity is,
	// when a workflow started it; empty (Step 0) otherwise.
	WorkflowID string
	RunID      string
	Step       int64
	// TraceParent and TraceState are the W3C trace context the activity
	// carries (its scheduler's, or the server's schedule span when the
	// server traces); empty when it has none. The handler's context
	// already carries it as its span's parent (see Options.TracerProvider).
	TraceParent string
	TraceState  string
}

type ctxKey struct{}

// attemptFrom returns the running attempt a handler context belongs to.
func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(ctxKey{}).(*attempt)
	return a
}

// Info returns the attempt the handler's ctx belongs to; the zero value
// outside an activity handler.
func Info(ctx context.Context) ActivityInfo {
	if a := attemptFrom(ctx); a != nil {
		return a.info
	}
	return ActivityInfo{}
}

// ErrNoHeartbeatDetails is returned by HeartbeatDetails when the previous
// attempt recorded none (or this is the first attempt).
var ErrNoHeartbeatDetails = errors.New("no heartbeat details from a previous attempt")

// HeartbeatDetails decodes the details of the last heartbeat a previous
// attempt of this activity recorded, so a retry can resume where it left
// off. It returns ErrNoHeartbeatDetails when there are none.
func HeartbeatDetails[T any](ctx context.Context) (T, error) {
	var out T
	a := attemptFrom(ctx)
	if a == nil {
		return out, errors.New("worker: HeartbeatDetails called outside an activity handler")
	}
	if len(a.lastDetails) == 0 {
		return out, ErrNoHeartbeatDetails
	}
	if err := json.Unmarshal(a.lastDetails, &out); err != nil {
		return out, err
	}
	return out, nil
}

// heartbeatEvery is the most often one attempt sends a heartbeat.
const heartbeatEvery = time.Second

// RecordHeartbeat reports that the attempt is alive, with progress details
// (encoded as JSON; nil is fine) that the server keeps and hands to the next
// attempt if this one fails (see HeartbeatDetails).
//
// Calls are throttled to one heartbeat per second per attempt (or half the
// heartbeat timeout, if that is shorter); the latest details are always
// sent, at the end of the throttle interval. Heartbeats are best effort:
// while the worker is disconnected they are dropped. When the server answers
// that the activity was canceled or the attempt is stale, the handler's ctx
// is canceled (see ErrActivityCanceled, ErrAttemptStale).
//
// Outside an activity handler RecordHeartbeat does nothing.
func RecordHeartbeat(ctx context.Context, details any) {
	a := attemptFrom(ctx)
	if a == nil {
		return
	}
	var b []byte
	if details != nil {
		var err error
		if b, err = json.Marshal(details); err != nil {
			a.w.log.Warn("heartbeat details not encodable as JSON; sending none", "activity", a.key.String(), "err", err)
			b = nil
		}
	}
	a.heartbeat(b)
}

// attempt is one running activity attempt.
type attempt struct {
	w           *Worker
	key         attemptKey
	info        ActivityInfo
	lastDetails []byte // from the previous attempt
	cancel      context.CancelCauseFunc
	iv          interventions

	hbMu       sync.Mutex
	hbLatest   []byte // the details of the latest heartbeat asked for
	hbInterval time.Duration
	hbLast     time.Time
	hbPending  []byte
	hasPending bool
	hbTimer    *time.Timer
	done       bool

	// span is the attempt's span, nil unless the worker traces;
	// spanContext names it, for the result.
	span        trace.Span
	spanContext *aionv1.TraceContext
}

func newAttempt(w *Worker, t *aionv1.ActivityTask, workerID uint64) *attempt {
	a := &attempt{
		w:           w,
		key:         attemptKey{namespace: t.GetNamespace(), id: t.GetActivityId(), attempt: t.GetAttempt()},
		lastDetails: t.GetLastHeartbeatDetails(),
		hbInterval:  w.hbEvery,
		iv:          interventions{ch: make(chan Intervention, interventionBuffer)},
		info: ActivityInfo{
			Namespace:           t.GetNamespace(),
			ActivityID:          t.GetActivityId(),
			Attempt:             t.GetAttempt(),
			TaskQueue:           t.GetTaskQueue(),
			ActivityType:        t.GetActivityType(),
			Node:                t.GetNode(),
			StartToCloseTimeout: t.GetStartToCloseTimeout().AsDuration(),
			HeartbeatTimeout:    t.GetHeartbeatTimeout().AsDuration(),
			WorkerID:            workerID,
			WorkflowID:          t.GetWorkflowId(),
			RunID:               t.GetRunId(),
			Step:                t.GetStep(),
			TraceParent:         t.GetTraceContext().GetTraceparent(),
			TraceState:          t.GetTraceContext().GetTracestate(),
		},
	}
	if t.GetScheduledTime() != nil {
		a.info.ScheduledTime = t.GetScheduledTime().AsTime()
	}
	if t.GetStartedTime() != nil {
		a.info.StartedTime = t.GetStartedTime().AsTime()
	}
	if t.GetDeadline() != nil {
		a.info.Deadline = t.GetDeadline().AsTime()
	}
	if t.GetStartToCloseTimeout() == nil {
		a.info.StartToCloseTimeout = 0
	}
	if t.GetHeartbeatTimeout() == nil {
		a.info.HeartbeatTimeout = 0
	}
	if ht := a.info.HeartbeatTimeout; ht > 0 && ht/2 < a.hbInterval {
		a.hbInterval = max(ht/2, 10*time.Millisecond)
	}
	return a
}

// heartbeat sends details now if the throttle allows, otherwise keeps them
// as the pending details and arms a timer that sends the latest pending
// details when the interval is up.
func (a *attempt) heartbeat(details []byte) {
	a.hbMu.Lock()
	if a.done {
		a.hbMu.Unlock()
		return
	}
	a.hbLatest = details
	now := time.Now()
	if a.hbTimer == nil && now.Sub(a.hbLast) >= a.hbInterval {
		a.hbLast = now
		a.hbMu.Unlock()
		a.w.sendHeartbeat(a.key, details)
		return
	}
	a.hbPending, a.hasPending = details, true
	if a.hbTimer == nil {
		a.w.aux.Add(1)
		a.hbTimer = time.AfterFunc(a.hbLast.Add(a.hbInterval).Sub(now), a.flush)
	}
	a.hbMu.Unlock()
}

// latestDetails are the details of the latest heartbeat, to repeat them.
func (a *attempt) latestDetails() []byte {
	a.hbMu.Lock()
	defer a.hbMu.Unlock()
	return a.hbLatest
}

// flush is the throttle timer: it sends the latest pending details.
func (a *attempt) flush() {
	defer a.w.aux.Done()
	a.hbMu.Lock()
	a.hbTimer = nil
	if a.done || !a.hasPending {
		a.hbMu.Unlock()
		return
	}
	details := a.hbPending
	a.hbPending, a.hasPending = nil, false
	a.hbLast = time.Now()
	a.hbMu.Unlock()
	a.w.sendHeartbeat(a.key, details)
}

// finish stops heartbeating for good.
func (a *attempt) finish() {
	a.hbMu.Lock()
	a.done = true
	if a.hbTimer != nil && a.hbTimer.Stop() {
		a.w.aux.Done()
	}
	a.hbTimer = nil
	a.hbPending = nil
	a.hbMu.Unlock()
}

// instrumentationName names the tracer of the worker's spans.
const instrumentationName = "github.com/aion-run/aion/worker"

// traceAttempt returns the handler's context for attempt a, whose task
// carries trace context tc (zero for none): with a tracer, holding a new
// span for the attempt, child of tc; without one, holding tc as its remote
// parent.
func (w *Worker) traceAttempt(ctx context.Context, a *attempt, tc tracectx.Context) context.Context {
	ctx = w3c.Context(ctx, tc)
	if w.tracer == nil {
		return ctx
	}
	attrs := []attribute.KeyValue{
		attribute.String("aion.namespace", a.info.Namespace),
		attribute.String("aion.activity.id", a.info.ActivityID),
		attribute.String("aion.activity.type", a.info.ActivityType),
		attribute.String("aion.task_queue", a.info.TaskQueue),
		attribute.Int("aion.attempt", int(a.info.Attempt)),
	}
	if a.info.WorkflowID != "" {
		attrs = append(attrs, attribute.String("aion.workflow.id", a.info.WorkflowID), attribute.String("aion.run.id", a.info.RunID),
			attribute.Int64("aion.step", a.info.Step))
	}
	ctx, a.span = w.tracer.Start(ctx, "aion.attempt", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	if c := w3c.Of(a.span.SpanContext()); !c.IsZero() {
		a.spanContext = &aionv1.TraceContext{Traceparent: c.Parent, Tracestate: c.State}
	}
	return ctx
}

// endAttemptSpan ends an attempt's span with its outcome.
func endAttemptSpan(span trace.Span, res *aionv1.ActivityResult) {
	switch o := res.GetOutcome().(type) {
	case *aionv1.ActivityResult_Completed:
		span.SetAttributes(attribute.String("aion.outcome", "completed"))
	case *aionv1.ActivityResult_Canceled:
		span.SetAttributes(attribute.String("aion.outcome", "canceled"))
	case *aionv1.ActivityResult_Failed:
		span.SetAttributes(attribute.String("aion.outcome", "failed"), attribute.String("aion.failure.type", o.Failed.GetType()))
		span.SetStatus(codes.Error, o.Failed.GetMessage())
	}
	span.End()
}
