package w3c_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/internal/tracing/w3c"
)

func TestATraceContextRoundTripsThroughASpanContext(t *testing.T) {
	t.Parallel()
	for _, tc := range []tracectx.Context{
		{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
	} {
		sc := w3c.SpanContext(tc)
		if !sc.IsValid() || !sc.IsRemote() {
			t.Fatalf("SpanContext(%+v) = %+v, want a valid remote span context", tc, sc)
		}
		if got := w3c.Of(sc); got != tc {
			t.Errorf("Of(SpanContext(x)) = %+v, want %+v", got, tc)
		}
		if got := trace.SpanContextFromContext(w3c.Context(context.Background(), tc)); !got.Equal(sc) {
			t.Errorf("Context carries %+v, want %+v", got, sc)
		}
	}
}

func TestNoOrABadTraceContextIsNoSpanContext(t *testing.T) {
	t.Parallel()
	for _, tc := range []tracectx.Context{{}, {Parent: "junk"}, {State: "a=b"}} {
		if sc := w3c.SpanContext(tc); sc.IsValid() {
			t.Errorf("SpanContext(%+v) = %+v, want none", tc, sc)
		}
		ctx := context.Background()
		if w3c.Context(ctx, tc) != ctx {
			t.Errorf("Context(ctx, %+v) changed ctx", tc)
		}
		if got := w3c.Of(trace.SpanContext{}); !got.IsZero() {
			t.Errorf("Of(no span) = %+v, want zero", got)
		}
	}
	// A tracestate that does not parse is dropped; the traceparent holds.
	sc := w3c.SpanContext(tracectx.Context{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "not a list member"})
	if !sc.IsValid() || sc.TraceState().Len() != 0 {
		t.Errorf("with a bad tracestate: %+v, want the traceparent's span context without a tracestate", sc)
	}
}
