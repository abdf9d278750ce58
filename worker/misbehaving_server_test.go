package worker

// The tests in this file use a hand-written, scriptable WorkerService, not
// the real server, because they check how the worker copes with frames the
// real aion server never sends: a task before RegisterAck, more tasks than
// the worker has slots, results that are never acknowledged, a task of a
// type the worker never registered, the same attempt twice, and
// interventions the server gates away: for a
// primitive the worker did not advertise, with no command, or for an
// attempt the worker is not running (the real server answers stale_target
// instead of sending those). Everything the real server can produce is tested
// against it in run_test.go.

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
)

// fakeServer hands every accepted stream to the test as a fakeConn, which
// reads the worker's frames and writes whatever the test scripts.
type fakeServer struct {
	aionv1.UnimplementedWorkerServiceServer

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
	t.Cleanup(f.srv.Stop)
	return f
}

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

func (c *fakeConn) ack() {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_RegisterAck{RegisterAck: &aionv1.RegisterAck{
		WorkerId: 7, HeartbeatWindow: durationpb.New(time.Minute), PingInterval: durationpb.New(time.Hour),
	}}})
}

func (c *fakeConn) task(t *aionv1.ActivityTask) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ActivityTask{ActivityTask: t}})
}

func (c *fakeConn) resultAck(r *aionv1.ActivityResult) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ResultAck{ResultAck: &aionv1.ResultAck{
		Namespace: r.GetNamespace(), ActivityId: r.GetActivityId(), Attempt: r.GetAttempt(),
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

func (c *fakeConn) result() *aionv1.ActivityResult {
	c.t.Helper()
	m := c.next()
	if m.GetActivityResult() == nil {
		c.t.Fatalf("got frame %v, want ActivityResult", m)
	}
	return m.GetActivityResult()
}

// closeCleanly expects Drain then CloseSend from a stopping worker and ends
// the stream OK.
func (c *fakeConn) closeCleanly() {
	c.t.Helper()
	if m := c.next(); m.GetDrain() == nil {
		c.t.Fatalf("got %v, want Drain", m)
	}
	if m := c.next(); m != nil {
		c.t.Fatalf("got frame %v, want CloseSend", m)
	}
	c.finish(nil)
}

func (c *fakeConn) finish(err error) {
	c.end <- err
	<-c.ended
}

// fakeSetup is one worker's Run against a fake server.
type fakeSetup struct {
	srv  *fakeServer
	w    *Worker
	stop context.CancelFunc
	done chan struct{}
	err  error
}

func newFakeSetup(t *testing.T, opts Options, register func(*Worker)) *fakeSetup {
	t.Helper()
	srv := newFakeServer(t)
	opts.Namespaces = []string{"ns"}
	opts.DialOptions = srv.dialOptions()
	opts.MinBackoff, opts.MaxBackoff = 5*time.Millisecond, 20*time.Millisecond
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	w, err := New("passthrough:///bufnet", opts)
	if err != nil {
		t.Fatal(err)
	}
	w.ackGrace = time.Second
	w.closeWait = time.Second
	register(w)
	ctx, stop := context.WithCancel(context.Background())
	s := &fakeSetup{srv: srv, w: w, stop: stop, done: make(chan struct{})}
	go func() { s.err = w.Run(ctx); close(s.done) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	return s
}

// registered waits until the worker has processed RegisterAck.
func (s *fakeSetup) registered(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.w.mu.Lock()
		ok := s.w.sess != nil
		s.w.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatal("worker never registered")
}

func (s *fakeSetup) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// accepted accepts the stream and acknowledges the registration.
func (s *fakeSetup) accepted(t *testing.T) *fakeConn {
	t.Helper()
	c := s.srv.accept(t)
	c.ack()
	s.registered(t)
	return c
}

func fakeTask(id string, attempt uint32, typ string) *aionv1.ActivityTask {
	return &aionv1.ActivityTask{Namespace: "ns", ActivityId: id, Attempt: attempt, TaskQueue: "default",
		ActivityType: typ, Payload: []byte(`{}`), StartedTime: timestamppb.Now()}
}

func TestTaskBeforeRegisterAckIsAProtocolErrorThatReconnects(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{}, echo)
	c1 := s.srv.accept(t)
	c1.task(fakeTask("a1", 1, "echo")) // before RegisterAck
	if m := c1.next(); m != nil {
		t.Fatalf("got %v, want the worker to drop the stream", m)
	}
	c1.finish(nil)
	c2 := s.accepted(t)
	s.stop()
	c2.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestSlotsBoundConcurrencyEvenIfTheServerOversends(t *testing.T) {
	t.Parallel()
	var cur, peak atomic.Int32
	release := make(chan struct{})
	s := newFakeSetup(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "work", func(ctx context.Context, _ struct{}) (struct{}, error) {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release // held until both slots are seen busy
			cur.Add(-1)
			return struct{}{}, nil
		})
	})
	c := s.accepted(t)
	for i := range 6 {
		c.task(fakeTask("a"+strconv.Itoa(i), 1, "work"))
	}
	servertest.Eventually(t, "both slots busy", func() bool { return cur.Load() >= 2 })
	close(release)
	for range 6 {
		r := c.result()
		if r.GetCompleted() == nil {
			t.Fatalf("result = %v", r)
		}
		c.resultAck(r)
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrency %d, want the 2 slots", p)
	}
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestStopGivesUpWhenResultsAreNeverAcknowledged(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{StopTimeout: 20 * time.Millisecond}, echo)
	s.w.ackGrace = 100 * time.Millisecond
	c := s.accepted(t)
	c.task(fakeTask("a1", 1, "echo"))
	_ = c.result() // never acknowledged
	s.stop()
	start := time.Now()
	err := s.wait(t)
	if err == nil {
		t.Fatal("Run = nil, want an error about unacknowledged results")
	}
	// About StopTimeout+ackGrace (120ms); the bound only has to tell it
	// from the default grace of 10s, and leaves a busy machine room.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Run gave up after %v, want about StopTimeout+ackGrace (120ms)", d)
	}
	go func() {
		for range c.in {
		}
	}()
}

func TestTaskOfAnUnregisteredTypeFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{}, echo)
	c := s.accepted(t)
	c.task(fakeTask("u", 1, "unknown"))
	r := c.result()
	if f := r.GetFailed(); f.GetType() != "activity_type_not_registered" || f.GetRetryable() {
		t.Fatalf("failure = %v, want non-retryable activity_type_not_registered", f)
	}
	c.resultAck(r)
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRepeatedTaskRunsOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	release := make(chan struct{})
	logs := newLogRecorder()
	s := newFakeSetup(t, Options{Slots: 2, Logger: slog.New(logs)}, func(w *Worker) {
		RegisterActivity(w, "once", func(context.Context, struct{}) (int32, error) {
			n := calls.Add(1)
			<-release
			return n, nil
		})
	})
	c := s.accepted(t)
	c.task(fakeTask("a", 1, "once"))
	c.task(fakeTask("a", 1, "once")) // the same attempt again while it runs
	logs.waitFor(t, "aion worker: duplicate task ignored", 1)
	close(release)
	r := c.result()
	c.task(fakeTask("a", 1, "once")) // and while its result awaits the ack
	logs.waitFor(t, "aion worker: duplicate task ignored", 2)
	c.resultAck(r)
	s.stop()
	c.closeCleanly() // no second result before the Drain
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestInterventionsTheServerShouldNotSendAreDeclined(t *testing.T) {
	t.Parallel()
	took := make(chan Intervention, 1)
	release := make(chan struct{})
	s := newFakeSetup(t, Options{Capabilities: []Capability{CapabilityInjectMessage}}, func(w *Worker) {
		RegisterActivity(w, "agent", func(ctx context.Context, _ struct{}) (struct{}, error) {
			select {
			case iv := <-Interventions(ctx):
				took <- iv
			case <-release:
			}
			return struct{}{}, nil
		})
	})
	c := s.accepted(t)
	c.task(fakeTask("a1", 3, "agent"))
	inject := &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{Text: "hi"}}}
	pause := &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Pause{Pause: &aionv1.PauseCommand{}}}
	for _, tc := range []struct {
		id      string
		attempt uint32
		cmd     *aionv1.InterventionCommand
		want    string
	}{
		{"a1", 3, pause, "did not advertise the pause_resume capability"},
		{"a1", 3, &aionv1.InterventionCommand{}, "no command"},
		{"a1", 3, nil, "no command"},
		{"a1", 2, inject, "attempt ns/a1#2 is not running on this worker"},
		{"gone", 1, inject, "attempt ns/gone#1 is not running on this worker"},
	} {
		c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_Intervention{Intervention: &aionv1.Intervention{
			Namespace: "ns", ActivityId: tc.id, Attempt: tc.attempt, InterventionId: "iv-" + tc.want, Command: tc.cmd}}})
		ack := c.next().GetInterventionAck()
		if ack.GetInterventionId() != "iv-"+tc.want || ack.GetActivityId() != tc.id || ack.GetAttempt() != tc.attempt ||
			ack.GetAccepted() || !strings.Contains(ack.GetMessage(), tc.want) {
			t.Errorf("intervention %v for %s#%d: ack %v, want declined with %q", tc.cmd, tc.id, tc.attempt, ack, tc.want)
		}
	}
	select {
	case iv := <-took:
		t.Fatalf("the handler was handed %+v", iv)
	default:
	}
	close(release)
	r := c.result()
	c.resultAck(r)
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
