package bench

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/aion-run/aion/internal/limit"
)

// traceSink is an OTLP/gRPC trace receiver in the bench's process that
// counts the spans exported to it and drops them: with --trace-sink the
// in-process servers trace and export to it, so tracing's cost can be
// measured without a collector.
type traceSink struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	srv   *grpc.Server
	done  chan struct{}
	spans atomic.Int64
}

// startTraceSink listens on a free loopback port.
func startTraceSink() (*traceSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("trace sink: %w", err)
	}
	s := &traceSink{addr: lis.Addr().String(), srv: grpc.NewServer(grpc.MaxRecvMsgSize(4 * limit.Message)), done: make(chan struct{})}
	collectortrace.RegisterTraceServiceServer(s.srv, s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Export counts the request's spans.
func (s *traceSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// stop ends the sink once the servers exporting to it have stopped.
func (s *traceSink) stop() {
	s.srv.Stop()
	<-s.done
}
