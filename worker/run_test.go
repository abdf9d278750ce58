package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/servertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// rig is one test's real server and a client to schedule and inspect
// activities on it.
type rig struct {
	srv *servertest.Server
	c   *client.Client

	mu    sync.Mutex
	gates []*gate
}

// gate holds handlers until the test opens it; a rig opens its gates when
// the test ends, so a failed test never leaves a handler (and Run) stuck.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (r *rig) gate() *gate {
	g := &gate{ch: make(chan struct{})}
	r.mu.Lock()
	r.gates = append(r.gates, g)
	r.mu.Unlock()
	return g
}

func (r *rig) openGates() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gates {
		g.open()
	}
}

func newRig(t *testing.T, opts ...servertest.Option) *rig {
	t.Helper()
	srv := servertest.Start(t, opts...)
	c, err := client.Dial(context.Background(), srv.Addr, client.WithDialOptions(servertest.FastReconnect()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rig{srv: srv, c: c}
}

// running is one worker's Run on the rig's server.
type running struct {
	w    *Worker
	wire *wire
	stop context.CancelFunc
	done chan struct{} // closed when Run returned
	err  error         // what Run returned
}

// start runs a worker against the rig's server; it is stopped (and Run
// must return) when the test ends. Zero options get test defaults: the
// namespace "ns", quick reconnects.
func (r *rig) start(t *testing.T, opts Options, register func(*Worker)) *running {
	t.Helper()
	if opts.Namespaces == nil {
		opts.Namespaces = []string{"ns"}
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	wr := &wire{}
	opts.DialOptions = append(append(servertest.FastReconnect(), wr.dialOptions()...), opts.DialOptions...)
	w, err := New(r.srv.Addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	ctx, stop := context.WithCancel(context.Background())
	run := &running{w: w, wire: wr, stop: stop, done: make(chan struct{})}
	go func() { run.err = w.Run(ctx); close(run.done) }()
	t.Cleanup(func() {
		stop()
		r.openGates()
		select {
		case <-run.done:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return within 20s of its context ending")
		}
	})
	return run
}

// wait waits for Run to return on its own.
func (run *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-run.done:
		return run.err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// shutdown stops the worker as SIGTERM would and returns what Run returned.
func (run *running) shutdown(t *testing.T) error {
	t.Helper()
	run.stop()
	return run.wait(t)
}

// registered waits until the server lists this worker and returns its
// registration as the server sees it.
func (r *rig) registered(t *testing.T, run *running) registry.WorkerInfo {
	t.Helper()
	var id uint64
	servertest.Eventually(t, "RegisterAck", func() bool {
		acks := run.wire.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetRegisterAck() != nil })
		if len(acks) == 0 {
			return false
		}
		id = acks[len(acks)-1].msg.GetRegisterAck().GetWorkerId()
		return true
	})
	info := r.srv.WaitForWorker(t, func(w registry.WorkerInfo) bool { return uint64(w.ID) == id })
	// And the worker has acted on the ack, not only received it.
	servertest.Eventually(t, "the worker to take RegisterAck", func() bool {
		run.w.mu.Lock()
		defer run.w.mu.Unlock()
		return run.w.sess != nil && run.w.workerID == id
	})
	return info
}

func (r *rig) schedule(t *testing.T, opts client.ScheduleOptions, input any) string {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = "ns"
	}
	h, err := client.Schedule(context.Background(), r.c, opts, input)
	if err != nil {
		t.Fatalf("schedule %+v: %v", opts, err)
	}
	return h.ID
}

// waitCtx bounds a wait for an outcome.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wait waits for an activity in namespace ns to finish.
func (r *rig) wait(t *testing.T, id string) *client.Activity {
	t.Helper()
	a, err := r.c.Wait(waitCtx(t), "ns", id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return a
}

func (r *rig) get(t *testing.T, id string) *client.Activity {
	t.Helper()
	a, err := r.c.Get(context.Background(), "ns", id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return a
}

// until polls the activity until cond holds.
func (r *rig) until(t *testing.T, id, what string, cond func(*client.Activity) bool) *client.Activity {
	t.Helper()
	var a *client.Activity
	servertest.Eventually(t, id+" "+what, func() bool {
		a = r.get(t, id)
		return cond(a)
	})
	return a
}

func echo(w *Worker) {
	RegisterActivity(w, "echo", func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
}

// quickRetry retries after 5ms.
var quickRetry = &client.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaximumInterval: 5 * time.Millisecond}

func TestRegisterCarriesTheWorkersOptions(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	run := r.start(t, Options{Namespaces: []string{"a", "b"}, TaskQueue: "gpu", Node: "n1", Slots: 3, Identity: "me",
		Capabilities: []Capability{CapabilityCancel}}, echo)
	got := r.registered(t, run)
	if strings.Join(got.Namespaces, ",") != "a,b" || got.TaskQueue != "gpu" || got.Node != "n1" || got.Slots != 3 ||
		strings.Join(got.ActivityTypes, ",") != "echo" || got.Capabilities.String() != "cancel" {
		t.Fatalf("the server registered %+v", got)
	}
	// Identity and SDK version are not kept by the server; the frame it was
	// sent carries them, first on the stream.
	sent := run.wire.sentWhere(func(*aionv1.WorkerMessage) bool { return true })
	if reg := sent[0].msg.GetRegister(); reg.GetIdentity() != "me" || reg.GetSdkVersion() != SDKVersion {
		t.Fatalf("first frame = %v, want Register with identity and SDK version", sent[0].msg)
	}
	for _, ns := range []string{"a", "b"} {
		n, err := r.c.GetNamespace(context.Background(), ns)
		if err != nil || n.Origin != client.OriginWorker {
			t.Fatalf("namespace %s after registration: %+v, %v", ns, n, err)
		}
	}
	if err := run.shutdown(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if reason := r.srv.DisconnectReason(t, got.ID); reason != registry.ReasonDrained {
		t.Fatalf("the server recorded the worker leaving as %q, want drained", reason)
	}
}

func TestTaskCompletesWithTheTypedResult(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	type In struct{ A, B int }
	type Out struct {
		Sum  int    `json:"sum"`
		From string `json:"from"`
	}
	run := r.start(t, Options{TaskQueue: "math"}, func(w *Worker) {
		RegisterActivity(w, "add", func(ctx context.Context, in In) (Out, error) {
			return Out{Sum: in.A + in.B, From: Info(ctx).ActivityID}, nil
		})
	})
	info := r.registered(t, run)
	id := r.schedule(t, client.ScheduleOptions{TaskQueue: "math", ActivityType: "add"}, In{A: 2, B: 3})
	out, err := client.WaitResult[Out](waitCtx(t), r.c, "ns", id)
	if err != nil || out.Sum != 5 || out.From != id {
		t.Fatalf("result = %+v, %v", out, err)
	}
	a := r.get(t, id)
	if len(a.Attempts) != 1 || a.Attempts[0].WorkerID != uint64(info.ID) || a.Attempts[0].Outcome != client.OutcomeCompleted {
		t.Fatalf("attempts = %+v", a.Attempts)
	}
}

func TestInfoAndHeartbeatDetailsReachTheHandler(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	type progress struct{ Done int }
	infos := make(chan ActivityInfo, 2)
	release := r.gate()
	run := r.start(t, Options{Node: "n1", TaskQueue: "q"}, func(w *Worker) {
		RegisterActivity(w, "resume", func(ctx context.Context, _ struct{}) (int, error) {
			info := Info(ctx)
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(info.Deadline) {
				return 0, NonRetryable(fmt.Errorf("ctx deadline %v, info deadline %v", dl, info.Deadline))
			}
			infos <- info
			p, err := HeartbeatDetails[progress](ctx)
			if errors.Is(err, ErrNoHeartbeatDetails) {
				// First attempt: report progress, then fail so that the
				// retry resumes from it.
				RecordHeartbeat(ctx, progress{Done: 41})
				<-release.ch
				return 0, errors.New("transient")
			}
			if err != nil {
				return 0, NonRetryable(err)
			}
			return p.Done + 1, nil
		})
	})
	worker := r.registered(t, run)
	id := r.schedule(t, client.ScheduleOptions{TaskQueue: "q", ActivityType: "resume", Node: "n1",
		StartToCloseTimeout: time.Minute, HeartbeatTimeout: 10 * time.Second, RetryPolicy: quickRetry}, struct{}{})
	first := <-infos
	// The heartbeat is on the server before the attempt fails.
	r.until(t, id, "shows the heartbeat", func(a *client.Activity) bool { return string(a.LastHeartbeatDetails) == `{"Done":41}` })
	release.open()
	out, err := client.WaitResult[int](waitCtx(t), r.c, "ns", id)
	if err != nil || out != 42 {
		t.Fatalf("result = %v, %v; want 42 (resumed from the heartbeat)", out, err)
	}
	second := <-infos
	a := r.get(t, id)
	for i, info := range []ActivityInfo{first, second} {
		if info.Namespace != "ns" || info.ActivityID != id || info.Attempt != uint32(i+1) || info.TaskQueue != "q" ||
			info.ActivityType != "resume" || info.Node != "n1" || info.WorkerID != uint64(worker.ID) ||
			info.StartToCloseTimeout != time.Minute || info.HeartbeatTimeout != 10*time.Second {
			t.Errorf("attempt %d info = %+v", i+1, info)
		}
		if info.ScheduledTime.Sub(a.ScheduledTime).Abs() > time.Millisecond || info.Deadline.Sub(info.StartedTime) != time.Minute {
			t.Errorf("attempt %d times: scheduled %v (server %v), started %v, deadline %v", i+1,
				info.ScheduledTime, a.ScheduledTime, info.StartedTime, info.Deadline)
		}
		if d := info.StartedTime.Sub(a.Attempts[i].StartedTime).Abs(); d > time.Millisecond {
			t.Errorf("attempt %d started at %v, the server says %v", i+1, info.StartedTime, a.Attempts[i].StartedTime)
		}
	}
}

func TestHeartbeatsAreThrottledAndTheServerKeepsTheLastDetails(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sent := make(chan struct{})
	release := r.gate()
	run := r.start(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "progress", func(ctx context.Context, _ struct{}) (int, error) {
			for i := 1; i <= 50; i++ {
				RecordHeartbeat(ctx, i)
			}
			close(sent)
			<-release.ch
			return 50, nil
		})
	})
	// A 1s heartbeat timeout throttles heartbeats to one per 500ms.
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "progress", HeartbeatTimeout: time.Second}, struct{}{})
	<-sent
	first := r.until(t, id, "shows a heartbeat", func(a *client.Activity) bool { return len(a.LastHeartbeatDetails) > 0 })
	seen := time.Now()
	if string(first.LastHeartbeatDetails) != "1" {
		t.Fatalf("first details on the server = %s, want 1 (the rest held back by the throttle)", first.LastHeartbeatDetails)
	}
	r.until(t, id, "shows the last details", func(a *client.Activity) bool { return string(a.LastHeartbeatDetails) == "50" })
	if d := time.Since(seen); d < 300*time.Millisecond {
		t.Fatalf("the last details arrived %v after the first, want them held back about 500ms", d)
	}
	release.open()
	a := r.wait(t, id)
	if a.State != client.StateCompleted || string(a.LastHeartbeatDetails) != "50" {
		t.Fatalf("activity = %+v", a)
	}
	var beats []string
	for _, f := range run.wire.sentWhere(isHeartbeat(id)) {
		beats = append(beats, string(f.msg.GetActivityHeartbeat().GetDetails()))
	}
	if strings.Join(beats, ",") != "1,50" {
		t.Fatalf("heartbeats sent = %v, want 1 then 50", beats)
	}
}

func TestPingsKeepAnIdleWorkerRegistered(t *testing.T) {
	t.Parallel()
	// A worker silent for 300ms is deregistered; the server asks for a ping
	// every 100ms.
	r := newRig(t, servertest.HeartbeatWindow(300*time.Millisecond))
	run := r.start(t, Options{}, echo)
	first := r.registered(t, run)
	// Ten pongs take at least nine ping intervals (900ms), three heartbeat
	// windows of silence but for the pings.
	isPong := func(m *aionv1.ServerMessage) bool { return m.GetPong() != nil }
	servertest.Eventually(t, "ten pongs", func() bool { return len(run.wire.recvWhere(isPong)) >= 10 })
	if _, ok := r.srv.Registry().Lookup(first.ID); !ok {
		t.Fatalf("idle worker %v was deregistered", first.ID)
	}
	if n := run.wire.streamCount(); n != 1 {
		t.Fatalf("ten pings and pongs took %d streams, want 1", n)
	}
	// The worker still gets work.
	if a := r.wait(t, r.schedule(t, client.ScheduleOptions{ActivityType: "echo"}, 1)); a.State != client.StateCompleted {
		t.Fatalf("activity = %+v", a)
	}
}

func TestGracefulStopFinishesInFlightWorkAndTakesNoMore(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	release := r.gate()
	started := make(chan struct{}, 1)
	run := r.start(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (string, error) {
			started <- struct{}{}
			<-release.ch
			return "done", nil
		})
	})
	worker := r.registered(t, run)
	first := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, struct{}{})
	<-started // in flight on the worker, not only sent to it

	run.stop() // as SIGTERM would
	servertest.Eventually(t, "the worker to drain", func() bool {
		info, ok := r.srv.Registry().Lookup(worker.ID)
		return ok && info.Draining
	})
	// A free slot, but the worker is draining: nothing new reaches it. The
	// activity scheduled now waits for, and runs on, a worker that arrives
	// later, while the draining one still holds its free slot.
	second := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, struct{}{})
	other := r.registered(t, r.start(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "block", func(context.Context, struct{}) (string, error) { return "elsewhere", nil })
	}))
	if a := r.wait(t, second); a.State != client.StateCompleted || len(a.Attempts) != 1 || a.Attempts[0].WorkerID != uint64(other.ID) {
		t.Fatalf("activity scheduled during the drain: %+v, want it run once on the later worker %d", a, other.ID)
	}
	if got := run.wire.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetActivityTask().GetActivityId() == second }); len(got) != 0 {
		t.Fatalf("the draining worker was sent %v", got[0].msg)
	}
	release.open()
	if err := run.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if a := r.get(t, first); a.State != client.StateCompleted || string(a.Result) != `"done"` {
		t.Fatalf("in-flight activity after the stop: %+v", a)
	}
	if reason := r.srv.DisconnectReason(t, worker.ID); reason != registry.ReasonDrained {
		t.Fatalf("worker left as %q, want drained", reason)
	}
}

func TestStopTimeoutCancelsHandlersAsRetryableWorkerStopping(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	causes := make(chan error, 1)
	started := make(chan struct{}, 1)
	run := r.start(t, Options{StopTimeout: 50 * time.Millisecond}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (struct{}, error) {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return struct{}{}, ctx.Err()
		})
	})
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, struct{}{})
	<-started
	if err := run.shutdown(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := <-causes; !errors.Is(err, ErrWorkerStopping) {
		t.Fatalf("handler's cause = %v, want ErrWorkerStopping", err)
	}
	// The server has the failure and will retry the activity.
	a := r.get(t, id)
	if a.State != client.StateScheduled || len(a.Attempts) != 1 {
		t.Fatalf("activity = %+v", a)
	}
	if f := a.Attempts[0].Failure; f == nil || f.Type != "worker_stopping" || !f.Retryable {
		t.Fatalf("attempt failure = %+v, want retryable worker_stopping", f)
	}
}

func TestServerDrainFinishesWorkThenReconnectsToTheRestartedServer(t *testing.T) {
	t.Parallel()
	r := newRig(t, servertest.DrainTimeout(10*time.Second))
	release := r.gate()
	started := make(chan struct{}, 1)
	var calls atomic.Int32
	run := r.start(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, n int) (int, error) {
			calls.Add(1)
			if n == 1 {
				started <- struct{}{}
				<-release.ch
			}
			return n * 10, nil
		})
	})
	r.registered(t, run)
	first := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, 1)
	<-started

	shutdown := r.srv.StopAsync()
	servertest.Eventually(t, "the server to ask the worker to drain", func() bool {
		return len(run.wire.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetDrainRequest() != nil })) > 0
	})
	// Accepted while the server drains, but not given to the draining worker.
	second := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, 2)
	select {
	case err := <-shutdown:
		t.Fatalf("shutdown returned (%v) with work in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	release.open()
	if err := <-shutdown; err != nil {
		t.Fatalf("shutdown = %v", err)
	}
	// The worker closed the stream itself once done; the drain timeout did
	// not have to end it.
	if ends := run.wire.endedWith(); len(ends) == 0 || ends[0] != io.EOF {
		t.Fatalf("first stream ended with %v, want a clean close (EOF)", ends)
	}

	// Same address, same data: the worker comes back by itself.
	r.srv = r.srv.StartAgain(t)
	after := r.registered(t, run)
	if a := r.wait(t, second); a.State != client.StateCompleted || string(a.Result) != "20" || a.Attempts[0].WorkerID != uint64(after.ID) {
		t.Fatalf("activity scheduled during the drain, after the restart: %+v", a)
	}
	if a := r.get(t, first); a.State != client.StateCompleted || string(a.Result) != "10" || len(a.Attempts) != 1 {
		t.Fatalf("activity drained before the restart: %+v", a)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	select {
	case <-run.done:
		t.Fatalf("Run returned %v after the drain, want it to reconnect", run.err)
	default:
	}
	if err := run.shutdown(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestServerDrainWithExitOnDrainReturns(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	run := r.start(t, Options{ExitOnDrain: true}, echo)
	r.registered(t, run)
	shutdown := r.srv.StopAsync()
	if err := run.wait(t); err != nil {
		t.Fatalf("Run = %v, want nil after a drain with ExitOnDrain", err)
	}
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	if ends := run.wire.endedWith(); len(ends) != 1 || ends[0] != io.EOF || run.wire.streamCount() != 1 {
		t.Fatalf("streams ended with %v, want one clean close (EOF)", ends)
	}
}

func TestOperatorDrainRetiresTheWorkerAfterItsWork(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	release := r.gate()
	started := make(chan struct{}, 1)
	run := r.start(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (string, error) {
			started <- struct{}{}
			<-release.ch
			return "done", nil
		})
	})
	info := r.registered(t, run)
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, struct{}{})
	<-started
	if _, err := r.c.DrainWorker(waitCtx(t), uint64(info.ID)); err != nil {
		t.Fatal(err)
	}
	run.wire.waitRecv(t, "DrainRequest", func(m *aionv1.ServerMessage) bool { return m.GetDrainRequest() != nil })
	select {
	case <-run.done:
		t.Fatalf("Run returned %v with work in flight", run.err)
	case <-time.After(20 * time.Millisecond):
	}
	release.open()
	if err := run.wait(t); err != nil {
		t.Fatalf("Run = %v, want nil: an operator's drain retires the worker", err)
	}
	if a := r.get(t, id); a.State != client.StateCompleted {
		t.Fatalf("in-flight activity after the drain: %+v", a)
	}
	if reason := r.srv.DisconnectReason(t, info.ID); reason != registry.ReasonDrained {
		t.Fatalf("worker left as %q, want drained", reason)
	}
	if n := run.wire.streamCount(); n != 1 {
		t.Fatalf("the retired worker opened %d streams, want 1 (no reconnect)", n)
	}
}

func TestCancellationsReachTheHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// cancel asks the server to stop the running activity.
		cancel func(t *testing.T, r *rig, id string)
		// accepted: the server takes the worker's canceled report (the
		// server itself did not close the activity).
		accepted bool
	}{
		{"Cancel", func(t *testing.T, r *rig, id string) {
			if _, err := r.c.Cancel(waitCtx(t), "ns", id, "not needed"); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"cancel intervention", func(t *testing.T, r *rig, id string) {
			resp, err := r.c.ActivityService().Intervene(waitCtx(t), &aionv1.InterveneRequest{Namespace: "ns", Id: id,
				Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Cancel{Cancel: &aionv1.CancelCommand{Reason: "not needed"}}}})
			if err != nil || resp.GetOutcome() != aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED {
				t.Fatalf("Intervene = %v, %v", resp, err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			causes := make(chan error, 1)
			run := r.start(t, Options{Capabilities: []Capability{CapabilityCancel}}, func(w *Worker) {
				RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (struct{}, error) {
					RecordHeartbeat(ctx, "started")
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return struct{}{}, ctx.Err()
				})
			})
			id := r.schedule(t, client.ScheduleOptions{ActivityType: "block"}, struct{}{})
			r.until(t, id, "runs", func(a *client.Activity) bool { return len(a.LastHeartbeatDetails) > 0 })
			tc.cancel(t, r, id)
			select {
			case err := <-causes:
				if !errors.Is(err, ErrActivityCanceled) || !strings.Contains(err.Error(), "not needed") {
					t.Fatalf("handler's cause = %v, want ErrActivityCanceled with the reason", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler was never canceled")
			}
			ack := run.wire.waitRecv(t, "the canceled report's ack", isResultAck(id, 1))
			if refused := ack.msg.GetResultAck().GetRefused() != ""; refused == tc.accepted {
				t.Fatalf("report of the canceled attempt: %v, want accepted=%v", ack.msg, tc.accepted)
			}
			if res := run.wire.sentWhere(isResult(id, 1)); len(res) != 1 || res[0].msg.GetActivityResult().GetCanceled() == nil {
				t.Fatalf("report = %v, want canceled", res)
			}
			if a := r.wait(t, id); a.State != client.StateCanceled || a.Attempts[0].Outcome != client.OutcomeCanceled {
				t.Fatalf("activity = %+v", a)
			}
		})
	}
}

func TestRegistrationRefusedWhileTheServerShutsDownIsRetried(t *testing.T) {
	t.Parallel()
	r := newRig(t, servertest.DrainTimeout(10*time.Second))
	// A worker holding an attempt keeps the server draining.
	holder := r.srv.Connect(t, &aionv1.Register{Namespaces: []string{"ns"}, ActivityTypes: []string{"hold"}})
	r.schedule(t, client.ScheduleOptions{ActivityType: "hold"}, struct{}{})
	task := holder.Task()
	shutdown := r.srv.StopAsync()
	servertest.Eventually(t, "the server to start draining", func() bool {
		info, ok := r.srv.Registry().Lookup(registry.WorkerID(holder.ID))
		return ok && info.Draining
	})

	run := r.start(t, Options{}, echo)
	servertest.Eventually(t, "two refused registrations", func() bool {
		refused := 0
		for _, err := range run.wire.endedWith() {
			if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "shutting down") {
				refused++
			}
		}
		return refused >= 2
	})
	holder.Complete(task, nil)
	holder.Close()
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	r.srv = r.srv.StartAgain(t)
	r.registered(t, run)
	if a := r.wait(t, r.schedule(t, client.ScheduleOptions{ActivityType: "echo"}, "hi")); a.State != client.StateCompleted {
		t.Fatalf("activity = %+v", a)
	}
	if err := run.shutdown(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRefusedRegistrationEndsRun(t *testing.T) {
	t.Parallel()
	open := newRig(t)
	closed := newRig(t, servertest.AutoCreate(namespace.Closed))
	ctx := context.Background()
	if _, _, err := open.c.CreateNamespace(ctx, "gpu-only"); err != nil {
		t.Fatal(err)
	}
	if _, err := open.c.SetPlacement(ctx, "gpu-only", client.Pinned("gpu-a")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		rig      *rig
		opts     Options
		typ      string
		code     codes.Code
		contains string
	}{
		{"node outside a pinned placement", open, Options{Namespaces: []string{"ns", "gpu-only"}, Node: "cpu-1"}, "echo",
			codes.FailedPrecondition, "gpu-only"},
		{"no node in a pinned namespace", open, Options{Namespaces: []string{"gpu-only"}}, "echo", codes.FailedPrecondition, "gpu-only"},
		{"unknown namespace under closed auto-create", closed, Options{Namespaces: []string{"ghost"}}, "echo", codes.NotFound, `"ghost"`},
		{"activity type the server cannot name", open, Options{Namespaces: []string{"ns"}}, "bad type", codes.InvalidArgument, "activity_types[0]"},
		{"more slots than the server allows", open, Options{Namespaces: []string{"ns"}, Slots: 20000}, "echo", codes.InvalidArgument, "slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := tc.rig.start(t, tc.opts, func(w *Worker) {
				RegisterActivity(w, tc.typ, func(context.Context, int) (int, error) { return 0, nil })
			})
			err := run.wait(t)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("Run = %v, want %v naming %s", err, tc.code, tc.contains)
			}
			if n := run.wire.streamCount(); n != 1 {
				t.Fatalf("the worker opened %d streams, want 1 (no retry of a refusal)", n)
			}
		})
	}
	if ws := open.srv.Registry().Workers(); len(ws) != 0 {
		t.Fatalf("refused workers left registered: %+v", ws)
	}
	if _, err := closed.c.GetNamespace(ctx, "ghost"); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused registration minted its namespace: %v", err)
	}
	// A refused registration changes nothing: the namespace is still
	// pinned and the unplaced one untouched.
	if ns, err := open.c.GetNamespace(ctx, "gpu-only"); err != nil || ns.Placement.String() != "pinned{gpu-a}" {
		t.Fatalf("gpu-only = %+v, %v", ns, err)
	}
}

func TestUnacknowledgedResultIsResentAfterTheConnectionDies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// cut chooses where the connection dies.
		cut func(w *wire, id string)
		// attempts is how many attempts the activity takes.
		attempts int
		// resent is the answer to the re-sent copy of attempt 1's result.
		resent aionv1.ResultStatus
	}{
		{"the ack is lost after the result was made durable", func(w *wire, id string) {
			w.cutAfterRecv(isResultAck(id, 1))
		}, 1, aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED},
		{"the result is lost before it reached the server", func(w *wire, id string) {
			w.cutBeforeSend(isResult(id, 1))
		}, 2, aionv1.ResultStatus_RESULT_STATUS_STALE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			var calls atomic.Int32
			release := r.gate()
			started := make(chan struct{}, 2)
			run := r.start(t, Options{}, func(w *Worker) {
				RegisterActivity(w, "count", func(ctx context.Context, _ struct{}) (uint32, error) {
					calls.Add(1)
					started <- struct{}{}
					<-release.ch
					return Info(ctx).Attempt, nil
				})
			})
			id := r.schedule(t, client.ScheduleOptions{ActivityType: "count", RetryPolicy: quickRetry}, struct{}{})
			<-started
			tc.cut(run.wire, id)
			release.open()

			a := r.wait(t, id)
			if a.State != client.StateCompleted || len(a.Attempts) != tc.attempts || int(calls.Load()) != tc.attempts {
				t.Fatalf("activity %+v after %d handler calls, want completed after %d attempt(s)", a, calls.Load(), tc.attempts)
			}
			// The first result went out on the first stream and again,
			// unprompted, on the next one; the server answered the copy
			// ALREADY_RECORDED when the first had been recorded, and STALE
			// when the attempt had been lost with its stream.
			servertest.Eventually(t, "the re-sent result's ack", func() bool {
				return len(run.wire.recvWhere(isResultAck(id, 1))) > 0
			})
			sent := run.wire.sentWhere(isResult(id, 1))
			if len(sent) != 2 || sent[0].stream != 1 || sent[1].stream < 2 {
				t.Fatalf("result of attempt 1 sent %d time(s), want on stream 1 then on a later one: %v", len(sent), sent)
			}
			if ack := run.wire.recvWhere(isResultAck(id, 1))[0]; ack.stream != sent[1].stream || ack.msg.GetResultAck().GetStatus() != tc.resent {
				t.Fatalf("ack of the re-sent result = %v on stream %d, want %v on stream %d", ack.msg, ack.stream, tc.resent, sent[1].stream)
			}
			// Nothing is left unacknowledged: the stop is prompt and clean.
			start := time.Now()
			if err := run.shutdown(t); err != nil || time.Since(start) > 5*time.Second {
				t.Fatalf("Run = %v after %v", err, time.Since(start))
			}
		})
	}
}

func TestRefusedHeartbeatStopsTheStaleAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	causes := make(chan error, 1)
	run := r.start(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "beat", func(ctx context.Context, _ struct{}) (uint32, error) {
			if Info(ctx).Attempt > 1 {
				return Info(ctx).Attempt, nil
			}
			for i := 0; ctx.Err() == nil; i++ {
				RecordHeartbeat(ctx, i)
				time.Sleep(5 * time.Millisecond)
			}
			causes <- context.Cause(ctx)
			return 0, ctx.Err()
		})
	})
	// Heartbeats go out every 200ms at most.
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "beat", HeartbeatTimeout: 400 * time.Millisecond,
		RetryPolicy: quickRetry}, struct{}{})
	r.until(t, id, "heartbeats", func(a *client.Activity) bool { return len(a.LastHeartbeatDetails) > 0 })
	// The connection dies; the server fails the attempt as worker_lost and
	// the still running handler's next heartbeat, on the new stream, is
	// refused.
	run.wire.cut()
	select {
	case err := <-causes:
		if !errors.Is(err, ErrAttemptStale) {
			t.Fatalf("handler's cause = %v, want ErrAttemptStale", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stale attempt's handler was never canceled")
	}
	refused := run.wire.waitRecv(t, "a refused heartbeat ack", func(m *aionv1.ServerMessage) bool {
		return m.GetHeartbeatAck().GetActivityId() == id && m.GetHeartbeatAck().GetRefused() != ""
	})
	if refused.stream < 2 || refused.msg.GetHeartbeatAck().GetAttempt() != 1 {
		t.Fatalf("refused ack %v on stream %d, want attempt 1 on a later stream", refused.msg, refused.stream)
	}
	a := r.wait(t, id)
	if a.State != client.StateCompleted || len(a.Attempts) != 2 || a.Attempts[0].Failure.Type != "worker_lost" {
		t.Fatalf("activity = %+v, want completed on attempt 2 after worker_lost", a)
	}
}

func TestStartToCloseTimeoutEndsTheAttemptAndItsLateReportsAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	causes := make(chan error, 1)
	proceed := r.gate()
	run := r.start(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "slow", func(ctx context.Context, _ struct{}) (string, error) {
			if Info(ctx).Attempt > 1 {
				return "second", nil
			}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			<-proceed.ch
			RecordHeartbeat(ctx, "too late")
			return "", ctx.Err()
		})
	})
	start := time.Now()
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "slow", StartToCloseTimeout: 200 * time.Millisecond,
		RetryPolicy: quickRetry}, struct{}{})
	// The handler's context ends at the attempt's deadline: its own
	// deadline or the server's CancelActivity, whichever comes first (they
	// are due at the same instant).
	select {
	case err := <-causes:
		if !errors.Is(err, context.DeadlineExceeded) &&
			!(errors.Is(err, ErrActivityCanceled) && strings.Contains(err.Error(), "start_to_close_timeout")) {
			t.Fatalf("handler's cause = %v, want the attempt deadline or its cancellation", err)
		}
		if d := time.Since(start); d < 190*time.Millisecond {
			t.Fatalf("handler canceled after %v, before its 200ms start-to-close timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timed-out attempt's handler was never canceled")
	}
	// The server, its timer fired, asks the worker to stop the attempt.
	cancel := run.wire.waitRecv(t, "CancelActivity", func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil })
	if c := cancel.msg.GetCancelActivity(); c.GetActivityId() != id || c.GetAttempt() != 1 || c.GetReason() != "start_to_close_timeout" {
		t.Fatalf("cancel = %v", c)
	}
	proceed.open()
	// The late heartbeat and the late report of the stale attempt are both
	// refused...
	run.wire.waitRecv(t, "the late heartbeat's refusal", func(m *aionv1.ServerMessage) bool {
		return m.GetHeartbeatAck().GetAttempt() == 1 && m.GetHeartbeatAck().GetRefused() != ""
	})
	if ack := run.wire.waitRecv(t, "the late report's ack", isResultAck(id, 1)); ack.msg.GetResultAck().GetRefused() == "" {
		t.Fatalf("late report accepted: %v", ack.msg)
	}
	// ...and the report frees the slot: with one slot, the retry can only
	// run here once it was sent.
	a := r.wait(t, id)
	if a.State != client.StateCompleted || string(a.Result) != `"second"` || len(a.Attempts) != 2 {
		t.Fatalf("activity = %+v", a)
	}
	if at := a.Attempts[0]; at.Outcome != client.OutcomeTimedOut || at.Failure.Type != "start_to_close_timeout" || !at.Failure.Retryable {
		t.Fatalf("first attempt = %+v", at)
	}
}

func TestCancelActivityAfterAHeartbeatTimeoutCancelsTheHandler(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	causes := make(chan error, 1)
	run := r.start(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "quiet", func(ctx context.Context, _ struct{}) (string, error) {
			if Info(ctx).Attempt > 1 {
				return "second", nil
			}
			RecordHeartbeat(ctx, "started") // then nothing
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return "", ctx.Err()
		})
	})
	id := r.schedule(t, client.ScheduleOptions{ActivityType: "quiet", HeartbeatTimeout: 200 * time.Millisecond,
		RetryPolicy: quickRetry}, struct{}{})
	// Only the server's CancelActivity can stop this handler: its context
	// has no heartbeat deadline of its own.
	select {
	case err := <-causes:
		if !errors.Is(err, ErrActivityCanceled) || !strings.Contains(err.Error(), "heartbeat_timeout") {
			t.Fatalf("handler's cause = %v, want ErrActivityCanceled for heartbeat_timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timed-out attempt's handler was never canceled")
	}
	if res := run.wire.sentWhere(isResult(id, 1)); len(res) > 0 && res[0].msg.GetActivityResult().GetCanceled() == nil {
		t.Fatalf("report of attempt 1 = %v, want canceled", res[0].msg)
	}
	a := r.wait(t, id)
	if a.State != client.StateCompleted || string(a.Result) != `"second"` || len(a.Attempts) != 2 {
		t.Fatalf("activity = %+v", a)
	}
	if at := a.Attempts[0]; at.Outcome != client.OutcomeTimedOut || at.Failure.Type != "heartbeat_timeout" {
		t.Fatalf("first attempt = %+v", at)
	}
	if res := run.wire.sentWhere(isResult(id, 1)); len(res) != 1 || res[0].msg.GetActivityResult().GetCanceled() == nil {
		t.Fatalf("reports of attempt 1 = %v, want one, canceled", res)
	}
	if ack := run.wire.waitRecv(t, "the stale report's ack", isResultAck(id, 1)); ack.msg.GetResultAck().GetRefused() == "" {
		t.Fatalf("stale report accepted: %v", ack.msg)
	}
}

func TestSlotsBoundConcurrency(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var cur, peak atomic.Int32
	release := r.gate()
	r.start(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "work", func(ctx context.Context, _ struct{}) (struct{}, error) {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release.ch // held until both slots are seen busy
			cur.Add(-1)
			return struct{}{}, nil
		})
	})
	var ids []string
	for range 6 {
		ids = append(ids, r.schedule(t, client.ScheduleOptions{ActivityType: "work"}, struct{}{}))
	}
	servertest.Eventually(t, "both slots busy", func() bool { return cur.Load() >= 2 })
	release.open()
	for _, id := range ids {
		if a := r.wait(t, id); a.State != client.StateCompleted {
			t.Fatalf("activity = %+v", a)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrency %d, want exactly the 2 slots", p)
	}
}

// ExportedError is an error type whose name becomes the failure type.
type ExportedError struct{ Code int }

func (e *ExportedError) Error() string { return fmt.Sprintf("code %d", e.Code) }

func TestHandlerErrorsBecomeFailures(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(t, Options{Slots: 8}, func(w *Worker) {
		RegisterActivity(w, "plain", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, errors.New("boom")
		})
		RegisterActivity(w, "typed", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, fmt.Errorf("charge: %w", NewError("quota", "over quota", false, map[string]int{"limit": 3}))
		})
		RegisterActivity(w, "listed", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, NewError("flaky", "listed as non-retryable by the policy", true, nil)
		})
		RegisterActivity(w, "exported", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, NonRetryable(&ExportedError{Code: 7})
		})
		RegisterActivity(w, "panics", func(context.Context, struct{}) (struct{}, error) {
			panic("kaboom")
		})
		RegisterActivity(w, "unencodable", func(context.Context, struct{}) (chan int, error) {
			return make(chan int), nil
		})
		RegisterActivity(w, "recovers", func(ctx context.Context, _ struct{}) (string, error) {
			if Info(ctx).Attempt == 1 {
				return "", errors.New("first try fails")
			}
			return "ok", nil
		})
	})
	two := &client.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaximumAttempts: 2, NonRetryableErrorTypes: []string{"flaky"}}
	for _, tc := range []struct {
		name, typ, payload string
		state              client.State
		// failures are the failure types of the attempts, in order ("" for
		// one that completed).
		failures  []string
		retryable bool // of the failures
		message   string
	}{
		{"plain error is retryable", "plain", `{}`, client.StateFailed, []string{"error", "error"}, true, "boom"},
		{"typed error keeps its type and details", "typed", `{}`, client.StateFailed, []string{"quota"}, false, "charge: over quota"},
		{"type listed in the policy is not retried", "listed", `{}`, client.StateFailed, []string{"flaky"}, true, "listed"},
		{"exported error type names the failure", "exported", `{}`, client.StateFailed, []string{"worker.ExportedError"}, false, "code 7"},
		{"panic is a retryable failure", "panics", `{}`, client.StateFailed, []string{"panic", "panic"}, true, "kaboom"},
		{"payload that does not decode is not retried", "typed", `"text"`, client.StateFailed, []string{"payload_decode_error"}, false, "decode payload"},
		{"result that does not encode is not retried", "unencodable", `{}`, client.StateFailed, []string{"result_encode_error"}, false, "encode result"},
		{"retry after a failure completes", "recovers", `{}`, client.StateCompleted, []string{"error", ""}, true, "first try"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := r.schedule(t, client.ScheduleOptions{ActivityType: tc.typ, RetryPolicy: two}, json.RawMessage(tc.payload))
			a := r.wait(t, id)
			if a.State != tc.state || len(a.Attempts) != len(tc.failures) {
				t.Fatalf("activity ended %s after %d attempt(s), want %s after %d: %+v", a.State, len(a.Attempts), tc.state, len(tc.failures), a)
			}
			for i, want := range tc.failures {
				f := a.Attempts[i].Failure
				if want == "" {
					if f != nil || a.Attempts[i].Outcome != client.OutcomeCompleted {
						t.Errorf("attempt %d = %+v, want completed", i+1, a.Attempts[i])
					}
					continue
				}
				if f == nil || f.Type != want || f.Retryable != tc.retryable || !strings.Contains(f.Message, tc.message) {
					t.Errorf("attempt %d failure = %+v, want type %q retryable %v with %q", i+1, f, want, tc.retryable, tc.message)
				}
			}
		})
	}
	// Details travel as JSON; a panic's details are its stack.
	t.Run("details", func(t *testing.T) {
		t.Parallel()
		for typ, want := range map[string]string{"typed": `{"limit":3}`, "panics": "runtime/debug.Stack"} {
			a := r.wait(t, r.schedule(t, client.ScheduleOptions{ActivityType: typ,
				RetryPolicy: &client.RetryPolicy{MaximumAttempts: 1}}, struct{}{}))
			if d := string(a.Failure.Details); !strings.Contains(d, want) {
				t.Errorf("%s: details %s, want %s", typ, d, want)
			}
		}
	})
}

func TestRunTwiceAndNoActivities(t *testing.T) {
	t.Parallel()
	w, err := New("passthrough:///x", Options{Namespaces: []string{"a"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run with no activities = nil")
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("second Run = nil")
	}
}

func TestRunReturnsNilWhenCanceledWhileDisconnected(t *testing.T) {
	t.Parallel()
	w, err := New("127.0.0.1:1", Options{Namespaces: []string{"a"}, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	echo(w)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}
