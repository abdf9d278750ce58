package worker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// fakeServer is a scriptable WorkerService: every accepted stream is handed
// to the test as a fakeConn, which reads the worker's frames and writes the
// server's.
type fakeServer struct {
	aionv1.UnimplementedWorkerServiceServer

	mu     sync.Mutex
	refuse error // when set, Connect reads Register and returns this

	conns chan *fakeConn
	lis   *bufconn.Listener
	srv   *grpc.Server
}

type fakeConn struct {
	t      *testing.T
	reg    *aionv1.Register
	in     chan *aionv1.WorkerMessage // closed when the worker half-closes or the stream ends
	sendMu sync.Mutex
	stream aionv1.WorkerService_ConnectServer
	end    chan error // the status Connect returns
	ended  chan struct{}
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{conns: make(chan *fakeConn, 16), lis: bufconn.Listen(1 << 20), srv: grpc.NewServer()}
	aionv1.RegisterWorkerServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(f.lis) }()
	t.Cleanup(func() { f.srv.Stop() })
	return f
}

func (f *fakeServer) setRefuse(err error) {
	f.mu.Lock()
	f.refuse = err
	f.mu.Unlock()
}

// dialOptions connect a worker to this server.
func (f *fakeServer) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return f.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

func (f *fakeServer) Connect(stream aionv1.WorkerService_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		return refuse
	}
	c := &fakeConn{reg: first.GetRegister(), in: make(chan *aionv1.WorkerMessage, 64), stream: stream,
		end: make(chan error, 1), ended: make(chan struct{})}
	defer close(c.ended)
	go func() {
		defer close(c.in)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case c.in <- m:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	f.conns <- c
	select {
	case err := <-c.end:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// accept waits for the next stream.
func (f *fakeServer) accept(t *testing.T) *fakeConn {
	t.Helper()
	select {
	case c := <-f.conns:
		c.t = t
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no worker connected")
		return nil
	}
}

func (c *fakeConn) send(m *aionv1.ServerMessage) {
	c.t.Helper()
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.stream.Send(m); err != nil {
		c.t.Fatalf("server send: %v", err)
	}
}

func (c *fakeConn) ack(window, ping time.Duration) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_RegisterAck{RegisterAck: &aionv1.RegisterAck{
		WorkerId: 7, HeartbeatWindow: durationpb.New(window), PingInterval: durationpb.New(ping),
	}}})
}

func (c *fakeConn) task(t *aionv1.ActivityTask) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ActivityTask{ActivityTask: t}})
}

func (c *fakeConn) resultAck(r *aionv1.ActivityResult, refused string) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ResultAck{ResultAck: &aionv1.ResultAck{
		Namespace: r.GetNamespace(), ActivityId: r.GetActivityId(), Attempt: r.GetAttempt(), Refused: refused,
	}}})
}

// next returns the worker's next frame that is not a Ping; nil when the
// worker half-closed.
func (c *fakeConn) next() *aionv1.WorkerMessage {
	c.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				return nil
			}
			if m.GetPing() != nil {
				continue
			}
			return m
		case <-timeout:
			c.t.Fatal("no frame from the worker")
			return nil
		}
	}
}

// result expects the next frame to be an ActivityResult.
func (c *fakeConn) result() *aionv1.ActivityResult {
	c.t.Helper()
	m := c.next()
	if m.GetActivityResult() == nil {
		c.t.Fatalf("got frame %v, want ActivityResult", m)
	}
	return m.GetActivityResult()
}

// expectClosed expects the worker to half-close, then ends the stream OK.
func (c *fakeConn) expectClosed() {
	c.t.Helper()
	if m := c.next(); m != nil {
		c.t.Fatalf("got frame %v, want CloseSend", m)
	}
	c.finish(nil)
}

// finish ends the stream with err (nil: OK).
func (c *fakeConn) finish(err error) {
	c.end <- err
	<-c.ended
}

func drainFrames(c *fakeConn) {
	for range c.in {
	}
}
