package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/tracing/w3c"
)

// callAttrs are what a span of the client says of its call; built into
// attributes only when the client traces, so a client without a tracer
// allocates nothing for them.
type callAttrs struct {
	namespace string
	// typeKey names the attribute of typ: an activity or workflow type.
	typeKey, typ string
	// batch is the number of items of a batch call; 0 for another call.
	batch int
}

func (a callAttrs) list() []attribute.KeyValue {
	var out []attribute.KeyValue
	if a.namespace != "" {
		out = append(out, attribute.String("aion.namespace", a.namespace))
	}
	if a.typeKey != "" {
		out = append(out, attribute.String(a.typeKey, a.typ))
	}
	if a.batch > 0 {
		out = append(out, attribute.Int("aion.batch.size", a.batch))
	}
	return out
}

// traceCall starts the client's span for a call that starts work, when the
// client traces, and returns the trace context to send: the span's, or
// without a tracer the one of the span in ctx (nil when there is none).
// end ends the span with the call's error; it is never nil.
func (c *Client) traceCall(ctx context.Context, name string, attrs callAttrs) (_ context.Context, tc *aionv1.TraceContext, end func(error)) {
	if c.tracer == nil {
		return ctx, traceContextOf(trace.SpanContextFromContext(ctx)), func(error) {}
	}
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs.list()...))
	return ctx, traceContextOf(span.SpanContext()), func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// traceContextOf is the trace context naming sc, nil when sc is not valid.
func traceContextOf(sc trace.SpanContext) *aionv1.TraceContext {
	tc := w3c.Of(sc)
	if tc.IsZero() {
		return nil
	}
	return &aionv1.TraceContext{Traceparent: tc.Parent, Tracestate: tc.State}
}
