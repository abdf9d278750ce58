package server

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/internal/tracing"
	"github.com/aion-run/aion/internal/tracing/w3c"
)

// The server's span names and attribute keys (docs/operations.md, Tracing).
const (
	spanSchedule      = "aion.schedule"
	spanStartWorkflow = "aion.start_workflow"
	spanDispatchWait  = "aion.dispatch_wait"
	spanResult        = "aion.result"

	attrNamespace    = attribute.Key("aion.namespace")
	attrActivityID   = attribute.Key("aion.activity.id")
	attrActivityType = attribute.Key("aion.activity.type")
	attrTaskQueue    = attribute.Key("aion.task_queue")
	attrAttempt      = attribute.Key("aion.attempt")
	attrWorkerID     = attribute.Key("aion.worker.id")
	attrOutcome      = attribute.Key("aion.outcome")
	attrState        = attribute.Key("aion.state")
	attrExisting     = attribute.Key("aion.existing")
	attrWorkflowID   = attribute.Key("aion.workflow.id")
	attrWorkflowType = attribute.Key("aion.workflow.type")
	attrRunID        = attribute.Key("aion.run.id")
)

// traceContextFromProto reads a request's trace context; its checks are
// the engine's (engine.Request.Trace).
func traceContextFromProto(tc *aionv1.TraceContext) tracectx.Context {
	if tc == nil {
		return tracectx.Context{}
	}
	return tracectx.Context{Parent: tc.GetTraceparent(), State: tc.GetTracestate()}
}

// startSpan starts a server span of an incoming request, child of the
// trace context the caller sent, and returns it with the trace context the
// work it starts keeps: the span's own. A trace context that does not
// parse is left to the engine to refuse, and the span starts a new trace.
func startSpan(t *tracing.Tracing, name string, parent tracectx.Context, attrs ...attribute.KeyValue) (trace.Span, tracectx.Context) {
	ctx := w3c.Context(context.Background(), parent)
	_, span := t.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attrs...)
	}
	return span, w3c.Of(span.SpanContext())
}

// endSpan ends span, recording err as its error status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// engineTracer makes the engine's spans: the wait of each attempt for a
// worker, and the recording of each result. Activities without a trace
// context (scheduled while tracing was off, or by a schedule) get none.
type engineTracer struct{ t *tracing.Tracing }

// attemptAttrs are what the engine's spans say of an attempt: less than
// the schedule span, their ancestor, says of the activity (its type and
// task queue), since every attribute is exported with every span.
func attemptAttrs(a *store.Activity, w registry.WorkerID, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{attrNamespace.String(a.Namespace), attrActivityID.String(a.ID), attrAttempt.Int(a.Attempt),
		attrWorkerID.String(strconv.FormatUint(uint64(w), 10))}, more...)
}

// Started records the attempt's dispatch wait, from when it became ready
// to its start, as a span in the activity's trace.
func (x engineTracer) Started(a *store.Activity, w registry.WorkerID, readyAt, startedAt time.Time) {
	if a.Trace.IsZero() {
		return
	}
	ctx := w3c.Context(context.Background(), a.Trace)
	_, span := x.t.Tracer().Start(ctx, spanDispatchWait, trace.WithTimestamp(readyAt))
	if span.IsRecording() { // attributes are built only for a span the sampler kept
		span.SetAttributes(attemptAttrs(a, w)...)
	}
	span.End(trace.WithTimestamp(startedAt))
}

// Completing starts the span of recording a worker's result, child of the
// worker's span for the attempt when it sent one, else of the activity's
// trace context; it ends once the outcome is durable.
func (x engineTracer) Completing(a *store.Activity, w registry.WorkerID, out engine.Outcome, now time.Time) func(time.Time, store.ActivityState, error) {
	parent := out.Trace
	if !w3c.SpanContext(parent).IsValid() {
		parent = a.Trace
	}
	if parent.IsZero() {
		return nil
	}
	outcome := "failed"
	switch {
	case out.Completed:
		outcome = "completed"
	case out.Canceled:
		outcome = "canceled"
	}
	ctx := w3c.Context(context.Background(), parent)
	_, span := x.t.Tracer().Start(ctx, spanResult, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(now))
	if !span.IsRecording() {
		return func(at time.Time, _ store.ActivityState, _ error) { span.End(trace.WithTimestamp(at)) }
	}
	span.SetAttributes(attemptAttrs(a, w, attrOutcome.String(outcome))...)
	if !a.Trace.IsZero() && parent != a.Trace {
		// The worker's span is the parent; the activity's own context is
		// linked, for a worker that started a trace of its own.
		span.AddLink(trace.Link{SpanContext: w3c.SpanContext(a.Trace)})
	}
	return func(at time.Time, state store.ActivityState, err error) {
		span.SetAttributes(attrState.String(string(state)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "result not recorded: "+err.Error())
		}
		span.End(trace.WithTimestamp(at))
	}
}
