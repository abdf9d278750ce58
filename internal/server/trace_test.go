package server_test

import (
	"context"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/tracectx"
	"github.com/aion-run/aion/internal/tracing"
	"github.com/aion-run/aion/internal/tracing/otlptest"
	"google.golang.org/grpc/codes"
)

const callerParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// With tracing on, each scheduled item and each started run gets a server
// span, child of the trace context it came with (or the root of a new
// trace), and keeps that span's context in place of the caller's; a bad
// trace context is still refused.
func TestTracingServerSpansParentEachItemAndRunAndTheirContextIsKept(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	b := setup(t, func(c *server.Config) {
		c.Tracing = tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: rcv.Addr}
	})
	ctx := context.Background()
	resp, err := b.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: []*aionv1.ScheduleRequest{
		{Namespace: "tr", ActivityType: "t", TraceContext: &aionv1.TraceContext{Traceparent: callerParent, Tracestate: "k=v"}},
		{Namespace: "tr", ActivityType: "t"},
		{Namespace: "tr", ActivityType: "t", TraceContext: &aionv1.TraceContext{Traceparent: "nope"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if e := r[2].GetError(); e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.Contains(e.GetMessage(), "trace_context.traceparent") {
		t.Fatalf("item with a bad traceparent: %v, want InvalidArgument naming trace_context.traceparent", r[2])
	}
	joined, fresh := r[0].GetActivity().GetTraceContext(), r[1].GetActivity().GetTraceContext()
	kept, ok := tracectx.Parse(joined.GetTraceparent())
	caller, _ := tracectx.Parse(callerParent)
	if !ok || kept.TraceID != caller.TraceID || kept.SpanID == caller.SpanID || joined.GetTracestate() != "k=v" {
		t.Fatalf("item 0 keeps trace context %v; want the caller's trace, a span of its own and the caller's tracestate", joined)
	}
	own, ok := tracectx.Parse(fresh.GetTraceparent())
	if !ok || own.TraceID == caller.TraceID {
		t.Fatalf("item 1 keeps trace context %v; want a trace of its own", fresh)
	}
	run, err := aionv1.NewWorkflowServiceClient(b.cc).Start(ctx, &aionv1.StartWorkflowRequest{Namespace: "tr", WorkflowType: "w",
		TraceContext: &aionv1.TraceContext{Traceparent: callerParent}})
	if err != nil {
		t.Fatal(err)
	}
	started, ok := tracectx.Parse(run.GetRun().GetTraceContext().GetTraceparent())
	if !ok || started.TraceID != caller.TraceID || started.SpanID == caller.SpanID {
		t.Fatalf("run keeps trace context %v; want the caller's trace and a span of its own", run.GetRun().GetTraceContext())
	}
	if got, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tr", Id: r[0].GetActivity().GetId()}); err != nil ||
		got.GetActivity().GetTraceContext().GetTraceparent() != joined.GetTraceparent() {
		t.Fatalf("get: trace context %v, %v; want %v", got.GetActivity().GetTraceContext(), err, joined)
	}

	if err := b.srv.Stop(ctx); err != nil { // exports what it holds
		t.Fatal(err)
	}
	spans := rcv.Wait(t, "two schedule spans and a start span", func(s []otlptest.Span) bool { return len(s) >= 3 })
	want := map[string]string{ // span id → parent span id
		spanID(joined.GetTraceparent()):                         spanID(callerParent),
		spanID(fresh.GetTraceparent()):                          "", // a root
		spanID(run.GetRun().GetTraceContext().GetTraceparent()): spanID(callerParent),
	}
	for _, s := range spans {
		parent, ok := want[s.SpanID]
		if !ok {
			t.Errorf("unexpected span %s %s", s.Name, s.SpanID)
			continue
		}
		if s.ParentID != parent || (s.Name != "aion.schedule" && s.Name != "aion.start_workflow") {
			t.Errorf("span %s %s has parent %q, want %s", s.Name, s.SpanID, s.ParentID, parent)
		}
		delete(want, s.SpanID)
	}
	if len(want) != 0 {
		t.Errorf("spans not exported: %v", want)
	}
}

// spanID is the parent span id of a traceparent, in hex.
func spanID(traceparent string) string { return strings.Split(traceparent, "-")[2] }

// With tracing off the server keeps the caller's trace context as it is.
func TestTracingOffKeepsTheCallersTraceContextAsItIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tc := &aionv1.TraceContext{Traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", Tracestate: "k=v"}
	resp, err := b.activities.Schedule(context.Background(), &aionv1.ScheduleRequest{Namespace: "tr", ActivityType: "t", TraceContext: tc})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetActivity().GetTraceContext(); got.GetTraceparent() != tc.GetTraceparent() || got.GetTracestate() != "k=v" {
		t.Fatalf("kept trace context %v, want %v untouched", got, tc)
	}
}
