package client

import (
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The server of these tests does not trace, so it keeps the trace context a
// call sent as it is, and the activity or run shows it.

func TestWithoutATracerACallSendsTheTraceContextOfTheSpanInItsContext(t *testing.T) {
	t.Parallel()
	e := setup(t)
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(ctxFor(t), caller)
	want := fmt.Sprintf("00-%s-%s-01", caller.TraceID(), caller.SpanID())

	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, struct{}{})
	if err != nil || h.Activity.TraceParent != want {
		t.Fatalf("Schedule: trace parent %q, %v; want %q", h.Activity.TraceParent, err, want)
	}
	batch, err := e.c.ScheduleBatch(ctx, []ScheduleRequest{{Options: ScheduleOptions{Namespace: "ns", ActivityType: "t"}}})
	if err != nil || batch[0].Err != nil || batch[0].Handle.Activity.TraceParent != want {
		t.Fatalf("ScheduleBatch: %+v, %v; want trace parent %q", batch, err, want)
	}
	wf, err := StartWorkflow(ctx, e.c, StartWorkflowOptions{Namespace: "ns", WorkflowType: "w"}, struct{}{})
	if err != nil || wf.Run.TraceParent != want {
		t.Fatalf("StartWorkflow: trace parent %q, %v; want %q", wf.Run.TraceParent, err, want)
	}
	plain, err := Schedule(ctxFor(t), e.c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, struct{}{})
	if err != nil || plain.Activity.TraceParent != "" {
		t.Fatalf("Schedule without a span: trace parent %q, %v; want none", plain.Activity.TraceParent, err)
	}
}

func TestWithATracerACallIsAClientSpanWhoseContextItSends(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := tracetest.NewSpanRecorder()
	c := e.dial(t, WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	h, err := Schedule(ctxFor(t), c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Schedule(ctxFor(t), c, ScheduleOptions{Namespace: "", ActivityType: "t"}, struct{}{}) // refused
	if err == nil {
		t.Fatal("Schedule without a namespace succeeded")
	}
	ended := rec.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	ok, bad := ended[0], ended[1]
	want := fmt.Sprintf("00-%s-%s-01", ok.SpanContext().TraceID(), ok.SpanContext().SpanID())
	if ok.Name() != "aion.Schedule" || ok.SpanKind() != trace.SpanKindClient || h.Activity.TraceParent != want {
		t.Fatalf("span %s kind %v, activity's trace parent %q; want aion.Schedule, client, %q", ok.Name(), ok.SpanKind(),
			h.Activity.TraceParent, want)
	}
	if bad.Status().Code.String() != "Error" {
		t.Fatalf("refused call's span status %v, want Error", bad.Status())
	}
}
