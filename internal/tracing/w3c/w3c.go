// Package w3c turns the trace contexts aion carries (tracectx) into
// OpenTelemetry span contexts and back. It depends on the OpenTelemetry
// trace API only, not on the SDK, so the client and worker SDKs can use it
// without pulling an exporter into every program that imports them.
package w3c

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/aion-run/aion/internal/tracectx"
)

// SpanContext is the remote span context c names; not valid (IsValid
// false) when c is zero or its traceparent does not parse.
func SpanContext(c tracectx.Context) trace.SpanContext {
	if c.Parent == "" {
		return trace.SpanContext{}
	}
	s, ok := tracectx.Parse(c.Parent)
	if !ok {
		return trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceID: s.TraceID, SpanID: s.SpanID, TraceFlags: trace.TraceFlags(s.Flags) & trace.FlagsSampled,
		Remote: true}
	if c.State != "" {
		// A tracestate that does not parse is dropped, as W3C asks of a
		// receiver; the traceparent still holds.
		cfg.TraceState, _ = trace.ParseTraceState(c.State)
	}
	return trace.NewSpanContext(cfg)
}

// Context is ctx carrying c as its remote parent span; ctx itself when c
// names none.
func Context(ctx context.Context, c tracectx.Context) context.Context {
	if sc := SpanContext(c); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Of is the trace context naming sc: its traceparent and tracestate; zero
// when sc is not valid.
func Of(sc trace.SpanContext) tracectx.Context {
	if !sc.IsValid() {
		return tracectx.Context{}
	}
	return tracectx.Context{
		Parent: tracectx.Format(tracectx.Span{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}),
		State:  sc.TraceState().String(),
	}
}
