package server_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzServer starts a server whose worker connections the transport tr
// serves, and a client connection to it; both end with the fuzz run.
func fuzzServer(f *testing.F, tr string) (*server.Server, *grpc.ClientConn) {
	cfg := servertest.Config(f.TempDir())
	cfg.DrainTimeout = time.Second
	cfg.Conn.WorkerTransport = tr
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
	return srv, cc
}

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

	srv, cc := fuzzServer(f, server.WorkerTransportGRPC)
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

// FuzzWorkerStream drives Connect streams frame by frame over a real
// connection to a real server on each worker transport, with a script read
// from the fuzzer's bytes: streams opened (their HEADERS may end them at
// once), gRPC messages of any bytes, raw DATA that may cut a message in
// half, a valid Register or Ping, ends of the client's side, resets, and
// the connection closed at any point. Whatever the script, the server stays
// up, keeps no worker of the connection once it is gone, and answers the
// next call.
func FuzzWorkerStream(f *testing.F) {
	f.Add([]byte{0x80})                            // HEADERS with END_STREAM: no Register
	f.Add([]byte{0, 4})                            // END_STREAM before Register
	f.Add([]byte{0, 5})                            // reset before Register
	f.Add([]byte{0, 6})                            // connection closed before Register
	f.Add([]byte{0, 3, 4})                         // Register, then END_STREAM
	f.Add([]byte{0, 3, 7, 7, 5})                   // Register, pings, reset
	f.Add([]byte{0, 2, 5, 0, 0, 0, 0x7f, 0xff, 4}) // a length prefix promising more, then END_STREAM
	f.Add([]byte{0, 3, 2, 2, 0, 0, 6})             // Register, half a prefix, connection closed
	f.Add([]byte{0, 1, 3, 0xff, 0xff, 0xff, 4})    // a malformed message
	f.Add([]byte{0, 3, 0, 3, 0x80, 4, 4})          // two workers on one connection, a third stream ended at once
	f.Add([]byte{0, 4, 3, 7})                      // frames after the end of the client's side

	register, err := proto.Marshal(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"fz"}, ActivityTypes: []string{"t"}, Slots: 1}}})
	if err != nil {
		f.Fatal(err)
	}
	ping, err := proto.Marshal(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: 7}}})
	if err != nil {
		f.Fatal(err)
	}
	type target struct {
		srv    *server.Server
		health healthpb.HealthClient
	}
	var targets []target
	for _, tr := range workerTransports {
		srv, cc := fuzzServer(f, tr)
		targets = append(targets, target{srv: srv, health: healthpb.NewHealthClient(cc)})
	}

	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 256 {
			return
		}
		ops := parseStreamScript(script)
		for _, tg := range targets {
			c := dialH2(t, tg.srv.GRPCAddr())
			var id uint32 = 1 // the stream frames go to: the last one opened
			hardClose := false
			for _, o := range ops {
				switch o.kind {
				case stepOpen:
					if c.next < 9 { // at most four streams
						id = c.open(aionv1.WorkerService_Connect_FullMethodName, o.flag)
					}
				case stepMessage:
					c.data(id, message(o.bytes), false)
				case stepRaw:
					c.data(id, o.bytes, false)
				case stepRegister:
					c.data(id, message(register), false)
				case stepPing:
					c.data(id, message(ping), false)
				case stepEnd:
					c.data(id, nil, true)
				case stepReset:
					c.reset(id, o.code)
				case stepClose:
					hardClose = true
				}
			}
			if hardClose {
				c.conn.Close()
			} else {
				// The server reads every frame sent, then the end of the
				// connection; whatever it answers is read and dropped.
				_ = c.conn.(*net.TCPConn).CloseWrite()
				_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(io.Discard, c.conn)
				c.conn.Close()
			}
			deadline := time.Now().Add(10 * time.Second)
			for tg.srv.Registry().Census().Workers != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("a worker stayed registered after its connection ended: %+v", tg.srv.Registry().Census())
				}
				time.Sleep(time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				t.Fatalf("the server answered no health check after the script: %v", err)
			}
		}
	})
}

// streamOp is one step of a FuzzWorkerStream script.
type streamOp struct {
	kind  int
	flag  bool          // stepOpen: HEADERS carry END_STREAM
	bytes []byte        // stepMessage, stepRaw
	code  http2.ErrCode // stepReset
}

const (
	stepOpen = iota
	stepMessage
	stepRaw
	stepRegister
	stepEnd
	stepReset
	stepClose
	stepPing
)

// parseStreamScript reads at most 32 steps: each is a byte whose low three
// bits name the step; a message or raw DATA takes the next byte as its
// length and that many bytes after it. A close ends the script.
func parseStreamScript(b []byte) []streamOp {
	var ops []streamOp
	for len(b) > 0 && len(ops) < 32 {
		op := b[0]
		b = b[1:]
		o := streamOp{kind: int(op % 8)}
		switch o.kind {
		case stepOpen:
			o.flag = op&0x80 != 0
		case stepMessage, stepRaw:
			if len(b) > 0 {
				n := min(int(b[0]), len(b)-1)
				o.bytes, b = b[1:1+n], b[1+n:]
			}
		case stepReset:
			o.code = http2.ErrCode(op >> 3)
		}
		ops = append(ops, o)
		if o.kind == stepClose {
			break
		}
	}
	return ops
}
