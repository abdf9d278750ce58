package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup is one test's worker wired to a fake server.
type setup struct {
	srv  *fakeServer
	w    *Worker
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{} // closed when Run returned
	err  error         // what Run returned
}

func newSetup(t *testing.T, opts Options, register func(*Worker)) *setup {
	t.Helper()
	srv := newFakeServer(t)
	if opts.Namespaces == nil {
		opts.Namespaces = []string{"ns"}
	}
	opts.DialOptions = srv.dialOptions()
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 5*time.Millisecond, 20*time.Millisecond
	}
	opts.Logger = testLogger()
	w, err := New("passthrough:///bufnet", opts)
	if err != nil {
		t.Fatal(err)
	}
	w.ackGrace = time.Second
	w.closeWait = time.Second
	register(w)
	ctx, stop := context.WithCancel(context.Background())
	s := &setup{srv: srv, w: w, ctx: ctx, stop: stop, done: make(chan struct{})}
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
func (s *setup) registered(t *testing.T) {
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

func (s *setup) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func echo(w *Worker) {
	RegisterActivity(w, "echo", func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
}

func task(id string, attempt uint32, typ, payload string) *aionv1.ActivityTask {
	return &aionv1.ActivityTask{Namespace: "ns", ActivityId: id, Attempt: attempt, TaskQueue: "default",
		ActivityType: typ, Payload: []byte(payload), StartedTime: timestamppb.Now()}
}

func TestRegisterCarriesOptions(t *testing.T) {
	s := newSetup(t, Options{Namespaces: []string{"a", "b"}, TaskQueue: "gpu", Node: "n1", Slots: 3, Identity: "me",
		Capabilities: []Capability{CapabilityCancel}}, echo)
	c := s.srv.accept(t)
	r := c.reg
	if r == nil {
		t.Fatal("first frame was not Register")
	}
	if got := r.GetNamespaces(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("namespaces = %v", got)
	}
	if r.GetTaskQueue() != "gpu" || r.GetNode() != "n1" || r.GetSlots() != 3 || r.GetIdentity() != "me" || r.GetSdkVersion() != SDKVersion {
		t.Errorf("register = %v", r)
	}
	if got := r.GetActivityTypes(); len(got) != 1 || got[0] != "echo" {
		t.Errorf("activity types = %v", got)
	}
	if got := r.GetCapabilities(); len(got) != 1 || got[0] != aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_CANCEL {
		t.Errorf("capabilities = %v", got)
	}
	c.ack(time.Second, time.Hour)
	s.registered(t)
	s.stop()
	if m := c.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

func TestTaskCompletesAndStopIsGraceful(t *testing.T) {
	s := newSetup(t, Options{}, echo)
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.task(task("a1", 1, "echo", `{"hello":"world"}`))
	r := c.result()
	if r.GetActivityId() != "a1" || r.GetAttempt() != 1 || string(r.GetCompleted().GetResult()) != `{"hello":"world"}` {
		t.Fatalf("result = %v", r)
	}
	c.resultAck(r, "")
	s.stop()
	if m := c.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestPingsAtTheAckedInterval(t *testing.T) {
	s := newSetup(t, Options{}, echo)
	c := s.srv.accept(t)
	c.ack(time.Second, 20*time.Millisecond)
	s.registered(t)
	pings := 0
	deadline := time.After(5 * time.Second)
	for pings < 3 {
		select {
		case m := <-c.in:
			if m.GetPing() != nil {
				pings++
			}
		case <-deadline:
			t.Fatalf("saw %d pings", pings)
		}
	}
	s.stop()
	if m := c.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c.expectClosed()
	_ = s.wait(t)
}

func TestUnackedResultIsResentAfterReconnect(t *testing.T) {
	s := newSetup(t, Options{}, echo)
	c1 := s.srv.accept(t)
	c1.ack(time.Second, time.Hour)
	s.registered(t)
	c1.task(task("a1", 1, "echo", `1`))
	c1.task(task("a2", 1, "echo", `2`))
	got := map[string]bool{}
	for range 2 {
		got[c1.result().GetActivityId()] = true
	}
	if !got["a1"] || !got["a2"] {
		t.Fatalf("results = %v", got)
	}
	// Acknowledge a1 only, then lose the stream.
	c1.resultAck(&aionv1.ActivityResult{Namespace: "ns", ActivityId: "a1", Attempt: 1}, "")
	time.Sleep(50 * time.Millisecond)
	c1.finish(status.Error(codes.Unavailable, "server restarting"))

	c2 := s.srv.accept(t)
	c2.ack(time.Second, time.Hour)
	s.registered(t)
	r := c2.result()
	if r.GetActivityId() != "a2" || string(r.GetCompleted().GetResult()) != "2" {
		t.Fatalf("re-sent result = %v, want a2", r)
	}
	c2.resultAck(r, "")
	s.stop()
	if m := c2.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain (a1 must not be re-sent)", m)
	}
	c2.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRefusedRegistrationIsReturned(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.NotFound, codes.FailedPrecondition} {
		t.Run(code.String(), func(t *testing.T) {
			srv := newFakeServer(t)
			srv.setRefuse(status.Error(code, "namespace \"x\": refused"))
			w, err := New("passthrough:///bufnet", Options{Namespaces: []string{"x"}, DialOptions: srv.dialOptions(),
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			echo(w)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = w.Run(ctx)
			if status.Code(err) != code {
				t.Fatalf("Run = %v, want code %s", err, code)
			}
		})
	}
}

func TestUnavailableRegistrationIsRetried(t *testing.T) {
	srv := newFakeServer(t)
	srv.setRefuse(status.Error(codes.Unavailable, "shutting down"))
	w, err := New("passthrough:///bufnet", Options{Namespaces: []string{"x"}, DialOptions: srv.dialOptions(),
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	echo(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	srv.setRefuse(nil)
	c := srv.accept(t)
	c.ack(time.Second, time.Hour)
	cancel()
	// Drain if the worker saw the ack before the cancel, then CloseSend.
	if m := c.next(); m != nil && m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain or CloseSend", m)
	} else if m != nil {
		c.expectClosed()
	} else {
		c.finish(nil)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestTaskBeforeRegisterAckIsAProtocolErrorThatReconnects(t *testing.T) {
	s := newSetup(t, Options{}, echo)
	c1 := s.srv.accept(t)
	c1.task(task("a1", 1, "echo", `1`)) // before RegisterAck: a server bug
	if m := c1.next(); m != nil {
		t.Fatalf("got %v, want the worker to drop the stream", m)
	}
	c1.finish(nil)
	c2 := s.srv.accept(t)
	c2.ack(time.Second, time.Hour)
	s.registered(t)
	s.stop()
	if m := c2.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c2.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestServerDrainFinishesWorkThenReconnects(t *testing.T) {
	release := make(chan struct{})
	s := newSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (string, error) {
			<-release
			return "done", nil
		})
	})
	c1 := s.srv.accept(t)
	c1.ack(time.Second, time.Hour)
	s.registered(t)
	c1.task(task("a1", 1, "block", `{}`))
	time.Sleep(20 * time.Millisecond)
	c1.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_DrainRequest{DrainRequest: &aionv1.DrainRequest{
		Deadline: timestamppb.New(time.Now().Add(time.Minute))}}})
	close(release)
	r := c1.result()
	if string(r.GetCompleted().GetResult()) != `"done"` {
		t.Fatalf("result = %v", r)
	}
	c1.resultAck(r, "")
	c1.expectClosed()

	c2 := s.srv.accept(t) // reconnected
	c2.ack(time.Second, time.Hour)
	s.registered(t)
	s.stop()
	if m := c2.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c2.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestServerDrainWithExitOnDrainReturns(t *testing.T) {
	s := newSetup(t, Options{ExitOnDrain: true}, echo)
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_DrainRequest{DrainRequest: &aionv1.DrainRequest{}}})
	c.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestStopTimeoutCancelsHandlers(t *testing.T) {
	var cause atomic.Value
	s := newSetup(t, Options{StopTimeout: 50 * time.Millisecond}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (struct{}, error) {
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return struct{}{}, ctx.Err()
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.task(task("a1", 1, "block", `{}`))
	time.Sleep(20 * time.Millisecond)
	s.stop()
	if m := c.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	r := c.result()
	f := r.GetFailed()
	if f.GetType() != "worker_stopping" || !f.GetRetryable() {
		t.Fatalf("failure = %v, want retryable worker_stopping", f)
	}
	if err, _ := cause.Load().(error); !errors.Is(err, ErrWorkerStopping) {
		t.Fatalf("cause = %v", err)
	}
	c.resultAck(r, "")
	c.expectClosed()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestStopGivesUpWhenResultsAreNeverAcknowledged(t *testing.T) {
	s := newSetup(t, Options{StopTimeout: 20 * time.Millisecond}, echo)
	s.w.ackGrace = 100 * time.Millisecond
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.task(task("a1", 1, "echo", `1`))
	_ = c.result() // never acknowledged
	s.stop()
	err := s.wait(t)
	if err == nil {
		t.Fatal("Run = nil, want an error about unacknowledged results")
	}
	go drainFrames(c)
}

func TestCancelActivityReportsCanceled(t *testing.T) {
	s := newSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (struct{}, error) {
			<-ctx.Done()
			return struct{}{}, context.Cause(ctx)
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.task(task("a1", 1, "block", `{}`))
	time.Sleep(20 * time.Millisecond)
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_CancelActivity{CancelActivity: &aionv1.CancelActivity{
		Namespace: "ns", ActivityId: "a1", Attempt: 1, Reason: "operator"}}})
	r := c.result()
	if r.GetCanceled() == nil {
		t.Fatalf("result = %v, want canceled", r)
	}
	c.resultAck(r, "")
	s.stop()
	c.next()
	c.expectClosed()
	_ = s.wait(t)
}

func TestHeartbeatsAreThrottledAndCarryTheLastDetails(t *testing.T) {
	s := newSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "progress", func(ctx context.Context, _ struct{}) (int, error) {
			for i := 1; i <= 50; i++ {
				RecordHeartbeat(ctx, i)
				time.Sleep(time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // let the throttle flush the last details
			return 50, nil
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	tk := task("a1", 1, "progress", `{}`)
	tk.HeartbeatTimeout = durationpb.New(200 * time.Millisecond) // throttle interval 100ms
	c.task(tk)
	var beats []string
	for {
		m := c.next()
		if hb := m.GetActivityHeartbeat(); hb != nil {
			if hb.GetActivityId() != "a1" || hb.GetAttempt() != 1 {
				t.Fatalf("heartbeat = %v", hb)
			}
			beats = append(beats, string(hb.GetDetails()))
			continue
		}
		c.resultAck(m.GetActivityResult(), "")
		break
	}
	// 50 calls over ~60ms at one per 100ms: the first at once, then one
	// flush (plus at most one more if the loop ran slow).
	if len(beats) < 2 || len(beats) > 3 {
		t.Fatalf("heartbeats = %v, want 2 or 3", beats)
	}
	if beats[0] != "1" || beats[len(beats)-1] != "50" {
		t.Fatalf("heartbeats = %v, want first 1 and last 50", beats)
	}
	s.stop()
	c.next()
	c.expectClosed()
	_ = s.wait(t)
}

func TestHeartbeatAckCancelsTheHandler(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  *aionv1.HeartbeatAck
		want error
	}{
		{"refused", &aionv1.HeartbeatAck{Refused: "stale attempt"}, ErrAttemptStale},
		{"cancel_requested", &aionv1.HeartbeatAck{CancelRequested: true}, ErrActivityCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			causes := make(chan error, 1)
			s := newSetup(t, Options{}, func(w *Worker) {
				RegisterActivity(w, "hb", func(ctx context.Context, _ struct{}) (struct{}, error) {
					RecordHeartbeat(ctx, "x")
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return struct{}{}, ctx.Err()
				})
			})
			c := s.srv.accept(t)
			c.ack(time.Second, time.Hour)
			s.registered(t)
			c.task(task("a1", 2, "hb", `{}`))
			if hb := c.next().GetActivityHeartbeat(); hb == nil {
				t.Fatal("want a heartbeat")
			}
			tc.ack.Namespace, tc.ack.ActivityId, tc.ack.Attempt = "ns", "a1", 2
			c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_HeartbeatAck{HeartbeatAck: tc.ack}})
			if err := <-causes; !errors.Is(err, tc.want) {
				t.Fatalf("cause = %v, want %v", err, tc.want)
			}
			r := c.result()
			c.resultAck(r, "")
			s.stop()
			c.next()
			c.expectClosed()
			_ = s.wait(t)
		})
	}
}

func TestInfoAndHeartbeatDetailsReachTheHandler(t *testing.T) {
	type progress struct{ Done int }
	got := make(chan string, 1)
	s := newSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "resume", func(ctx context.Context, _ struct{}) (int, error) {
			info := Info(ctx)
			p, err := HeartbeatDetails[progress](ctx)
			if err != nil {
				return 0, err
			}
			dl, ok := ctx.Deadline()
			if !ok || !dl.Equal(info.Deadline) {
				got <- "deadline not on ctx"
			} else {
				got <- info.Namespace + "/" + info.ActivityID + "#" + strconv.FormatUint(uint64(info.Attempt), 10) + " " + info.ActivityType
			}
			return p.Done, nil
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	tk := task("a9", 3, "resume", `{}`)
	tk.LastHeartbeatDetails = []byte(`{"Done":41}`)
	tk.Deadline = timestamppb.New(time.Now().Add(time.Minute))
	c.task(tk)
	r := c.result()
	if string(r.GetCompleted().GetResult()) != "41" {
		t.Fatalf("result = %v", r)
	}
	if g := <-got; g != "ns/a9#3 resume" {
		t.Fatalf("info = %q", g)
	}
	c.resultAck(r, "")
	s.stop()
	c.next()
	c.expectClosed()
	_ = s.wait(t)
}

func TestSlotsBoundConcurrencyEvenIfTheServerOversends(t *testing.T) {
	var cur, peak atomic.Int32
	s := newSetup(t, Options{Slots: 2}, func(w *Worker) {
		RegisterActivity(w, "work", func(ctx context.Context, _ struct{}) (struct{}, error) {
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			cur.Add(-1)
			return struct{}{}, nil
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	for i := range 6 {
		c.task(task("a"+strconv.Itoa(i), 1, "work", `{}`))
	}
	for range 6 {
		c.resultAck(c.result(), "")
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("peak concurrency %d, want at most 2", p)
	}
	s.stop()
	c.next()
	c.expectClosed()
	_ = s.wait(t)
}

func TestHandlerErrorsBecomeFailures(t *testing.T) {
	s := newSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "plain", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, errors.New("boom")
		})
		RegisterActivity(w, "typed", func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, NewError("quota", "over quota", false, map[string]int{"limit": 3})
		})
		RegisterActivity(w, "panics", func(context.Context, struct{}) (struct{}, error) {
			panic("kaboom")
		})
	})
	c := s.srv.accept(t)
	c.ack(time.Second, time.Hour)
	s.registered(t)
	c.task(task("p", 1, "plain", `{}`))
	c.task(task("t", 1, "typed", `{}`))
	c.task(task("x", 1, "panics", `{}`))
	c.task(task("d", 1, "typed", `not json`))
	c.task(task("u", 1, "unknown", `{}`))
	got := map[string]*aionv1.Failure{}
	for range 5 {
		r := c.result()
		got[r.GetActivityId()] = r.GetFailed()
		c.resultAck(r, "")
	}
	check := func(id, typ string, retryable bool) {
		t.Helper()
		f := got[id]
		if f.GetType() != typ || f.GetRetryable() != retryable {
			t.Errorf("%s: failure = %v, want type %q retryable %v", id, f, typ, retryable)
		}
	}
	check("p", "error", true)
	check("t", "quota", false)
	check("x", "panic", true)
	check("d", "payload_decode_error", false)
	check("u", "activity_type_not_registered", false)
	if d := string(got["t"].GetDetails()); d != `{"limit":3}` {
		t.Errorf("details = %s", d)
	}
	s.stop()
	c.next()
	c.expectClosed()
	_ = s.wait(t)
}

func TestRunTwiceAndNoActivities(t *testing.T) {
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
