package server_test

import (
	"context"
	"io"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzWorkerFrames sends a real server two worker frames decoded from the
// fuzzer's bytes: whatever they hold, the stream ends with a status that
// names the problem (never Internal or Unknown), and once it ends the
// registry holds no worker.
func FuzzWorkerFrames(f *testing.F) {
	seed := func(first, second *aionv1.WorkerMessage) {
		a, _ := proto.Marshal(first)
		b, _ := proto.Marshal(second)
		f.Add(a, b)
	}
	reg := func(r *aionv1.Register) *aionv1.WorkerMessage {
		return &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: r}}
	}
	ok := &aionv1.Register{Namespaces: []string{"fz"}, ActivityTypes: []string{"t"}, Slots: 2}
	seed(reg(ok), &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: 7}}})
	seed(reg(ok), reg(ok))
	seed(&aionv1.WorkerMessage{}, &aionv1.WorkerMessage{})
	seed(reg(&aionv1.Register{Namespaces: []string{"a b"}, ActivityTypes: []string{"t"}}), &aionv1.WorkerMessage{})
	seed(reg(ok), &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
		Namespace: "fz", ActivityId: "nope", Attempt: 3, Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}}}}})
	seed(reg(ok), &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{Namespace: "fz"}}})
	seed(reg(ok), &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Drain{Drain: &aionv1.Drain{Reason: "bye"}}})

	cfg := servertest.Config(f.TempDir())
	cfg.DrainTimeout = time.Second
	srv, err := startServer(context.Background(), cfg, servertest.Logger())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Stop(context.Background()) })
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	workers := aionv1.NewWorkerServiceClient(cc)

	f.Fuzz(func(t *testing.T, a, b []byte) {
		var first, second aionv1.WorkerMessage
		if proto.Unmarshal(a, &first) != nil || proto.Unmarshal(b, &second) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := workers.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&first)
		_ = stream.Send(&second)
		_ = stream.CloseSend()
		for err == nil {
			_, err = stream.Recv()
		}
		switch status.Code(err) {
		case codes.OK, codes.InvalidArgument, codes.PermissionDenied, codes.NotFound, codes.FailedPrecondition:
		default:
			if err != io.EOF {
				t.Fatalf("frames %v then %v ended the stream with %v", &first, &second, err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for srv.Registry().Census().Workers != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a worker stayed registered after its stream ended: %+v", srv.Registry().Census())
			}
			time.Sleep(time.Millisecond)
		}
	})
}
