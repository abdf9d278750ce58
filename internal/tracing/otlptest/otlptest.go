// Package otlptest is an OTLP trace receiver for tests: a real gRPC server
// on a loopback port implementing the collector's TraceService, keeping
// every span exported to it. Point an exporter at Addr (plain gRPC) and
// read what arrived with Spans or Wait.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, its ids in lower-case hex.
type Span struct {
	Name                      string
	TraceID, SpanID, ParentID string
	Kind                      tracepb.Span_SpanKind
	Start, End                time.Time
	Attributes                map[string]string
	// Service is the service.name of the resource that sent it.
	Service string
	// Links are the span ids the span links to.
	Links []string
	// Error is set when the span's status is an error.
	Error bool
}

// Receiver is a running receiver.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Addr is the host:port it listens on.
	Addr string

	srv     *grpc.Server
	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced at each export
}

// Start runs a receiver on a free 127.0.0.1 port until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlptest: listen: %v", err)
	}
	r := &Receiver{Addr: lis.Addr().String(), srv: grpc.NewServer(), changed: make(chan struct{})}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		r.srv.Stop()
		<-done
	})
	return r
}

// Export implements the collector's TraceService: it keeps the spans.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attributes: attrs(s.GetAttributes()), Service: service,
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// attrs flattens attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Spans returns every span received so far, in order of arrival.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Wait returns the spans received once cond holds of them, checking at
// each export; it fails the test if cond does not hold within 30s.
func (r *Receiver) Wait(t testing.TB, what string, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		spans, changed := slices.Clone(r.spans), r.changed
		r.mu.Unlock()
		if cond(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("otlptest: %s: not within 30s; received %d spans: %+v", what, len(spans), spans)
		}
	}
}
