package server_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/internal/tracing"
	"github.com/aion-run/aion/internal/tracing/otlptest"
)

// BenchmarkScheduleToResult measures the whole path of one activity through
// a real server on loopback: its item of a ScheduleBatch of 100 made durable,
// its dispatch to a worker stream, the worker's result made durable and its
// ResultAck. Four goroutines schedule while one worker of 400 slots
// completes every task at once; an iteration is one activity. With tracing
// off, and on: exporting its three spans (schedule, dispatch wait, result)
// over OTLP/gRPC to a receiver in this process.
func BenchmarkScheduleToResult(b *testing.B) {
	b.Run("tracing=off", func(b *testing.B) { benchScheduleToResult(b, false) })
	b.Run("tracing=on", func(b *testing.B) { benchScheduleToResult(b, true) })
}

func benchScheduleToResult(b *testing.B, traced bool) {
	var opts []servertest.Option
	if traced {
		rcv := otlptest.Start(b)
		opts = append(opts, func(c *server.Config) {
			c.Tracing = tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: rcv.Addr}
		})
	}
	srv := servertest.Start(b, opts...)
	cc := srv.Dial(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := aionv1.NewWorkerServiceClient(cc).Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"bench"}, ActivityTypes: []string{"t"}, Slots: 400}}}); err != nil {
		b.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetRegisterAck() == nil {
		b.Fatalf("register: %v %v", m, err)
	}
	var acked atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	recv := make(chan struct{})
	go func() {
		defer close(recv)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			switch f := m.GetMessage().(type) {
			case *aionv1.ServerMessage_ActivityTask:
				t := f.ActivityTask
				_ = stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
					Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt(),
					Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}}}}})
			case *aionv1.ServerMessage_ResultAck:
				if acked.Add(1) == target {
					close(done)
				}
			}
		}
	}()
	acts := aionv1.NewActivityServiceClient(cc)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				end := next.Add(100)
				n := min(100, target-(end-100))
				if n <= 0 {
					return
				}
				reqs := make([]*aionv1.ScheduleRequest, n)
				for i := range reqs {
					reqs[i] = &aionv1.ScheduleRequest{Namespace: "bench", ActivityType: "t", Payload: []byte(`{}`)}
				}
				if _, err := acts.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: reqs}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if !b.Failed() {
		<-done
	}
	b.StopTimer()
	cancel()
	<-recv
}
