package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	srv        *server.Server
	cc         *grpc.ClientConn
	activities aionv1.ActivityServiceClient
	namespaces aionv1.NamespaceServiceClient
	workers    aionv1.WorkerServiceClient
}

type setupOpt func(*server.Config)

// setup starts a real server on loopback ports with its own data dir.
func setup(t *testing.T, opts ...setupOpt) *bundle {
	t.Helper()
	cfg := servertest.Config(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := startServer(context.Background(), cfg, servertest.TestLogger(t))
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &bundle{srv: srv, cc: cc,
		activities: aionv1.NewActivityServiceClient(cc),
		namespaces: aionv1.NewNamespaceServiceClient(cc),
		workers:    aionv1.NewWorkerServiceClient(cc)}
}

// startServer builds and starts a server as `aion server` does; on success
// the caller stops it.
func startServer(ctx context.Context, cfg server.Config, log *slog.Logger) (*server.Server, error) {
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, errors.Join(err, srv.Stop(context.Background()))
	}
	return srv, nil
}

// rawWorker speaks the worker protocol frame by frame.
type rawWorker struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[aionv1.WorkerMessage, aionv1.ServerMessage]
	cancel context.CancelFunc
	id     uint64
	// held are frames read while looking for another kind, in order.
	held []*aionv1.ServerMessage
}

func (b *bundle) connect(t *testing.T, reg *aionv1.Register) (*rawWorker, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := b.workers.Connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &rawWorker{t: t, stream: stream, cancel: cancel}
	t.Cleanup(cancel)
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: reg}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// A send the server's end of the stream beat reports io.EOF; the status
	// it ended with comes from the receive.
	m, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	ack := m.GetRegisterAck()
	if ack == nil {
		t.Fatalf("first server frame = %v, want register_ack", m)
	}
	w.id = ack.GetWorkerId()
	return w, nil
}

// recv returns the next frame, held ones first.
func (w *rawWorker) recv() *aionv1.ServerMessage {
	w.t.Helper()
	if len(w.held) > 0 {
		m := w.held[0]
		w.held = w.held[1:]
		return m
	}
	return w.recvWire()
}

// recvWhere returns the first frame for which keep is true, holding the
// frames it passes over for later recv calls.
func (w *rawWorker) recvWhere(keep func(*aionv1.ServerMessage) bool) *aionv1.ServerMessage {
	w.t.Helper()
	for i, m := range w.held {
		if keep(m) {
			w.held = append(w.held[:i:i], w.held[i+1:]...)
			return m
		}
	}
	for {
		m := w.recvWire()
		if keep(m) {
			return m
		}
		w.held = append(w.held, m)
	}
}

func (w *rawWorker) recvWire() *aionv1.ServerMessage {
	w.t.Helper()
	type res struct {
		m   *aionv1.ServerMessage
		err error
	}
	ch := make(chan res, 1)
	go func() { m, err := w.stream.Recv(); ch <- res{m, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			w.t.Fatalf("worker recv: %v", r.err)
		}
		return r.m
	case <-time.After(10 * time.Second):
		w.t.Fatal("worker got no frame within 10s")
		return nil
	}
}

func (w *rawWorker) send(m *aionv1.WorkerMessage) {
	w.t.Helper()
	if err := w.stream.Send(m); err != nil {
		w.t.Fatalf("worker send: %v", err)
	}
}

func (w *rawWorker) complete(task *aionv1.ActivityTask, result []byte) *aionv1.ResultAck {
	w.t.Helper()
	w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
		Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{Result: result}},
	}}})
	return w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetResultAck() != nil }).GetResultAck()
}

func TestScheduleDispatchCompleteOverRealGRPC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w, err := b.connect(t, &aionv1.Register{Namespaces: []string{"demo"}, ActivityTypes: []string{"echo"}, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "demo", Id: "a1", ActivityType: "echo",
		Payload: []byte(`{"hello":"world"}`), StartToCloseTimeout: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if resp.GetActivity().GetTaskQueue() != "default" || resp.GetExisting() {
		t.Fatalf("schedule response = %v", resp)
	}
	task := w.recv().GetActivityTask()
	if task == nil || task.GetActivityId() != "a1" || task.GetAttempt() != 1 || string(task.GetPayload()) != `{"hello":"world"}` {
		t.Fatalf("task = %v", task)
	}
	if ack := w.complete(task, []byte(`{"hello":"world"}`)); ack.GetRefused() != "" {
		t.Fatalf("result refused: %s", ack.GetRefused())
	}
	wait, err := b.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: "demo", Id: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	a := wait.GetActivity()
	if a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED || string(a.GetResult()) != `{"hello":"world"}` ||
		len(a.GetAttempts()) != 1 || a.GetAttempts()[0].GetWorkerId() != w.id {
		t.Fatalf("activity after completion = %v", a)
	}
	// The same result again is stale: refused, nothing changes.
	if ack := w.complete(task, []byte(`"again"`)); ack.GetRefused() == "" {
		t.Fatal("a second result for a closed attempt was accepted")
	}

	again, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "demo", Id: "a1", ActivityType: "echo",
		Payload: []byte(`{"hello":"world"}`), StartToCloseTimeout: durationpb.New(time.Minute)})
	if err != nil || !again.GetExisting() || again.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
		t.Fatalf("idempotent re-schedule = %v, %v", again, err)
	}
	_, err = b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "demo", Id: "a1", ActivityType: "echo",
		Payload: []byte(`"different"`)})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same id, different request: %v, want AlreadyExists", err)
	}

	resp2, err := http.Get("http://" + b.srv.HTTPAddr() + "/readyz")
	if err != nil || resp2.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp2, err)
	}
	resp2.Body.Close()
	_ = namespace.Open
}
