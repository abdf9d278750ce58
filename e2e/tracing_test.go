package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/tracing/otlptest"
	"github.com/aion-run/aion/worker"
)

// withEnv launches the server with extra environment variables.
func withEnv(env ...string) func(args ...string) *osexec.Cmd {
	return func(args ...string) *osexec.Cmd {
		cmd := osexec.Command(binary, args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
}

// exportTo is a tracer provider of service that exports each span to rcv
// as it ends.
func exportTo(t *testing.T, rcv *otlptest.Receiver, service string) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(rcv.Addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// One activity, scheduled by a traced client and run by a traced worker on
// a server tracing from its OTEL_* environment, yields one trace: the
// client's call, the server's schedule, dispatch wait and result spans,
// and the worker's attempt, each the child of the one before it.
func TestTracingJoinsClientServerAndWorkerInOneTrace(t *testing.T) {
	t.Parallel()
	const ns = "traced"
	rcv := otlptest.Start(t)
	c := startServerWith(t, withEnv("OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+rcv.Addr, "OTEL_SERVICE_NAME=aion-e2e", "OTEL_BSP_SCHEDULE_DELAY=20"))
	clientTP, workerTP := exportTo(t, rcv, "e2e-client"), exportTo(t, rcv, "e2e-worker")
	wctx, stopWorker := context.WithCancel(context.Background())
	defer stopWorker()
	traceWorkerUntil(t, wctx, c.grpc, ns, workerTP)
	cl, err := client.Dial(context.Background(), c.grpc, client.WithTracerProvider(clientTP))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The caller's own trace, with a tracestate the whole way must keep.
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x00, 0xf0, 2},
		TraceFlags: trace.FlagsSampled, TraceState: mustTraceState(t, "vendor=x"), Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), caller)
	h, err := client.Schedule(ctx, cl, client.ScheduleOptions{Namespace: ns, ActivityType: "trace-echo"}, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen, err := client.WaitResult[[]string](wait, cl, ns, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	stopWorker()
	// A stopping server exports the spans it still holds before it exits.
	c.server.signal(syscall.SIGTERM)
	if code := c.server.exit(30 * time.Second); code != 0 {
		t.Fatalf("server exited %d", code)
	}

	names := []string{"aion.Schedule", "aion.schedule", "aion.dispatch_wait", "aion.attempt", "aion.result"}
	spans := rcv.Wait(t, "the five spans of the activity", func(s []otlptest.Span) bool {
		return len(byName(s, caller.TraceID().String())) == len(names)
	})
	got := byName(spans, caller.TraceID().String())
	for _, n := range names {
		if _, ok := got[n]; !ok {
			t.Fatalf("no %s span in trace %s: %+v", n, caller.TraceID(), spans)
		}
	}
	parent := map[string]string{ // each span's parent
		"aion.Schedule":      caller.SpanID().String(),
		"aion.schedule":      got["aion.Schedule"].SpanID,
		"aion.dispatch_wait": got["aion.schedule"].SpanID,
		"aion.attempt":       got["aion.schedule"].SpanID,
		"aion.result":        got["aion.attempt"].SpanID,
	}
	service := map[string]string{"aion.Schedule": "e2e-client", "aion.schedule": "aion-e2e", "aion.dispatch_wait": "aion-e2e",
		"aion.attempt": "e2e-worker", "aion.result": "aion-e2e"}
	kind := map[string]tracepb.Span_SpanKind{"aion.Schedule": tracepb.Span_SPAN_KIND_CLIENT, "aion.schedule": tracepb.Span_SPAN_KIND_SERVER,
		"aion.dispatch_wait": tracepb.Span_SPAN_KIND_INTERNAL, "aion.attempt": tracepb.Span_SPAN_KIND_CONSUMER,
		"aion.result": tracepb.Span_SPAN_KIND_SERVER}
	for _, n := range names {
		s := got[n]
		if s.ParentID != parent[n] || s.Service != service[n] || s.Kind != kind[n] {
			t.Errorf("%s: parent %s service %q kind %v; want parent %s service %q kind %v", n, s.ParentID, s.Service, s.Kind,
				parent[n], service[n], kind[n])
		}
		if n != "aion.Schedule" && s.Attributes["aion.activity.id"] != h.ID {
			t.Errorf("%s: aion.activity.id %q, want %q", n, s.Attributes["aion.activity.id"], h.ID)
		}
	}
	if a := got["aion.result"].Attributes; a["aion.outcome"] != "completed" || a["aion.state"] != "completed" || a["aion.attempt"] != "1" {
		t.Errorf("result span attributes %v: want outcome and state completed, attempt 1", a)
	}
	if d := got["aion.dispatch_wait"]; d.End.Before(d.Start) || d.End.After(got["aion.attempt"].Start.Add(time.Second)) {
		t.Errorf("dispatch wait from %v to %v; the attempt started %v", d.Start, d.End, got["aion.attempt"].Start)
	}
	// The handler saw the server's schedule span as its task's trace
	// context, with the caller's tracestate, and ran inside the attempt's span.
	want := []string{fmt.Sprintf("00-%s-%s-01", caller.TraceID(), got["aion.schedule"].SpanID), "vendor=x",
		caller.TraceID().String(), got["aion.attempt"].SpanID}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("handler saw %q, want %q", seen, want)
	}
}

// traceWorkerUntil runs a worker of namespace ns, tracing with tp (nil for
// none), until ctx ends; the test waits for it to stop. Its activity
// "trace-echo" returns the trace context its attempt carries and the span
// its handler's context holds.
func traceWorkerUntil(t *testing.T, ctx context.Context, addr, ns string, tp trace.TracerProvider) {
	t.Helper()
	w, err := worker.New(addr, worker.Options{Namespaces: []string{ns}, TracerProvider: tp, StopTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	worker.RegisterActivity(w, "trace-echo", func(ctx context.Context, _ struct{}) ([]string, error) {
		info, sc := worker.Info(ctx), trace.SpanContextFromContext(ctx)
		return []string{info.TraceParent, info.TraceState, sc.TraceID().String(), sc.SpanID().String()}, nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

func mustTraceState(t *testing.T, s string) trace.TraceState {
	t.Helper()
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// byName indexes the spans of trace by name.
func byName(spans []otlptest.Span, traceID string) map[string]otlptest.Span {
	out := make(map[string]otlptest.Span)
	for _, s := range spans {
		if s.TraceID == traceID {
			out[s.Name] = s
		}
	}
	return out
}

// With tracing off (no OTEL_TRACES_EXPORTER, even with an endpoint set;
// or OTEL_SDK_DISABLED=true) the server exports nothing, and a task carries
// a trace context only when its client sent one, then exactly that one.
func TestTracingOffExportsNothingAndPassesTheCallersTraceContextThrough(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"exporter unset": {"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		"sdk disabled":   {"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_TRACES_EXPORTER=otlp", "OTEL_SDK_DISABLED=true"},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const ns = "untraced"
			rcv := otlptest.Start(t)
			c := startServerWith(t, withEnv(append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+rcv.Addr, "OTEL_BSP_SCHEDULE_DELAY=20")...))
			wctx, stopWorker := context.WithCancel(context.Background())
			defer stopWorker()
			traceWorkerUntil(t, wctx, c.grpc, ns, nil)
			run := func(ctx context.Context) []string {
				t.Helper()
				h, err := client.Schedule(ctx, c.client, client.ScheduleOptions{Namespace: ns, ActivityType: "trace-echo"}, struct{}{})
				if err != nil {
					t.Fatal(err)
				}
				wait, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				seen, err := client.WaitResult[[]string](wait, c.client, ns, h.ID)
				if err != nil {
					t.Fatal(err)
				}
				a, err := c.client.Get(wait, ns, h.ID)
				if err != nil {
					t.Fatal(err)
				}
				return append(seen, a.TraceParent, a.TraceState)
			}
			none := trace.TraceID{}.String()
			noSpan := trace.SpanID{}.String()
			if got, want := run(context.Background()), []string{"", "", none, noSpan, "", ""}; strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("without a trace context the handler and the activity saw %q, want %q", got, want)
			}
			caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7, 7, 7}, SpanID: trace.SpanID{9, 9},
				TraceFlags: trace.FlagsSampled, TraceState: mustTraceState(t, "k=v"), Remote: true})
			tp := fmt.Sprintf("00-%s-%s-01", caller.TraceID(), caller.SpanID())
			got := run(trace.ContextWithRemoteSpanContext(context.Background(), caller))
			if want := []string{tp, "k=v", caller.TraceID().String(), caller.SpanID().String(), tp, "k=v"}; strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("with the caller's trace context the handler and the activity saw %q, want %q", got, want)
			}
			stopWorker()
			c.server.signal(syscall.SIGTERM)
			if code := c.server.exit(30 * time.Second); code != 0 {
				t.Fatalf("server exited %d", code)
			}
			if spans := rcv.Spans(); len(spans) != 0 {
				t.Fatalf("tracing off, yet the server exported %d spans: %+v", len(spans), spans)
			}
		})
	}
}
