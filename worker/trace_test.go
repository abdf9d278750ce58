package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/internal/tracing/w3c"
)

const taskParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// spanEcho registers "span", which returns the span context its handler's
// context holds and the trace context its ActivityInfo shows.
func spanEcho(w *Worker) {
	RegisterActivity(w, "span", func(ctx context.Context, _ struct{}) ([]string, error) {
		sc, info := trace.SpanContextFromContext(ctx), Info(ctx)
		return []string{sc.TraceID().String(), sc.SpanID().String(), info.TraceParent, info.TraceState}, nil
	})
}

func tracedTask(id string) *aionv1.ActivityTask {
	t := fakeTask(id, 2, "span")
	t.TraceContext = &aionv1.TraceContext{Traceparent: taskParent, Tracestate: "k=v"}
	return t
}

func TestWithATracerEachAttemptIsASpanChildOfTheTasksTraceContextAndGoesBackWithTheResult(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newFakeSetup(t, Options{TracerProvider: tp}, spanEcho)
	c := s.accepted(t)
	c.task(tracedTask("a"))
	r := c.result()
	c.resultAck(r)
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	span := ended[0]
	parent := w3c.SpanContext(tracectx.Context{Parent: taskParent})
	if span.Name() != "aion.attempt" || span.SpanKind() != trace.SpanKindConsumer || span.Parent().SpanID() != parent.SpanID() ||
		span.SpanContext().TraceID() != parent.TraceID() || span.SpanContext().TraceState().String() != "k=v" {
		t.Fatalf("span %s kind %v parent %v trace %v state %q; want aion.attempt, consumer, child of the task's context, keeping its tracestate",
			span.Name(), span.SpanKind(), span.Parent().SpanID(), span.SpanContext().TraceID(), span.SpanContext().TraceState())
	}
	want := w3c.Of(span.SpanContext())
	if got := r.GetTraceContext(); got.GetTraceparent() != want.Parent || got.GetTracestate() != "k=v" {
		t.Fatalf("result carries trace context %v, want the attempt span's %+v", got, want)
	}
	var seen []string
	if err := decodeResult(r, &seen); err != nil {
		t.Fatal(err)
	}
	if seen[0] != parent.TraceID().String() || seen[1] != span.SpanContext().SpanID().String() || seen[2] != taskParent || seen[3] != "k=v" {
		t.Fatalf("handler saw %q; want its context to hold the attempt's span and its info the task's trace context", seen)
	}
	s.stop()
	c.closeCleanly()
}

func TestWithoutATracerTheHandlersContextHoldsTheTasksTraceContextAndTheResultNone(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{}, spanEcho)
	c := s.accepted(t)
	c.task(tracedTask("a"))
	r := c.result()
	c.resultAck(r)
	c.task(fakeTask("plain", 1, "span"))
	plain := c.result()
	c.resultAck(plain)
	var seen, none []string
	if err := decodeResult(r, &seen); err != nil {
		t.Fatal(err)
	}
	if err := decodeResult(plain, &none); err != nil {
		t.Fatal(err)
	}
	parent := w3c.SpanContext(tracectx.Context{Parent: taskParent})
	if seen[0] != parent.TraceID().String() || seen[1] != parent.SpanID().String() || seen[2] != taskParent {
		t.Fatalf("handler saw %q; want the task's trace context as its remote parent", seen)
	}
	if none[0] != (trace.TraceID{}).String() || none[2] != "" || r.GetTraceContext() != nil || plain.GetTraceContext() != nil {
		t.Fatalf("handler without a trace context saw %q, results carry %v and %v; want none anywhere", none, r.GetTraceContext(), plain.GetTraceContext())
	}
	s.stop()
	c.closeCleanly()
}

// decodeResult decodes a completed result's JSON into v.
func decodeResult(r *aionv1.ActivityResult, v any) error {
	if r.GetCompleted() == nil {
		return fmt.Errorf("result %v is not completed", r)
	}
	return json.Unmarshal(r.GetCompleted().GetResult(), v)
}
