package client

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rpcCounter counts the unary calls a client makes, by method name, and
// the Wait requests written to the connection.
type rpcCounter struct{ list, wait, waitSent atomic.Int32 }

type methodKey struct{}

// TagRPC, HandleRPC, TagConn and HandleConn make rpcCounter a stats.Handler,
// which sees a request leave the client: an interceptor cannot.
func (r *rpcCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (r *rpcCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutPayload); ok && ctx.Value(methodKey{}) == aionv1.ActivityService_Wait_FullMethodName {
		r.waitSent.Add(1)
	}
}

func (r *rpcCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *rpcCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func (r *rpcCounter) interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch method {
		case aionv1.ActivityService_List_FullMethodName:
			r.list.Add(1)
		case aionv1.ActivityService_Wait_FullMethodName:
			r.wait.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// env is one test's real server and a client dialed to it.
type env struct {
	srv   *servertest.Server
	c     *Client
	calls *rpcCounter
}

func setup(t *testing.T, opts ...servertest.Option) *env {
	t.Helper()
	e := &env{srv: servertest.Start(t, opts...), calls: &rpcCounter{}}
	e.c = e.dial(t)
	return e
}

func (e *env) dial(t *testing.T, opts ...Option) *Client {
	t.Helper()
	dial := append(servertest.FastReconnect(), grpc.WithChainUnaryInterceptor(e.calls.interceptor()), grpc.WithStatsHandler(e.calls))
	c, err := Dial(context.Background(), e.srv.Addr, append(opts, WithDialOptions(dial...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestScheduleRecordsEveryOptionAndTheTypedPayload(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	type in struct {
		Name string `json:"name"`
	}
	opts := ScheduleOptions{
		Namespace: "ns", ID: "id1", TaskQueue: "gpu", ActivityType: "greet", Node: "n1",
		ScheduleToStartTimeout: time.Minute, StartToCloseTimeout: 2 * time.Minute,
		ScheduleToCloseTimeout: 3 * time.Minute, HeartbeatTimeout: 4 * time.Second,
		RetryPolicy: &RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 1.5, MaximumInterval: time.Minute,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{"bad"}},
	}
	h, err := Schedule(ctx, e.c, opts, in{Name: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != "id1" || h.Namespace != "ns" || h.Existing {
		t.Fatalf("handle = %+v, want id1 in ns, new", h)
	}
	got, err := h.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*Activity{h.Activity, got} {
		if a.ID != "id1" || a.TaskQueue != "gpu" || a.ActivityType != "greet" || a.Node != "n1" || a.State != StateScheduled ||
			string(a.Payload) != `{"name":"ada"}` || a.Attempt != 0 || a.ScheduledTime.IsZero() {
			t.Fatalf("activity = %+v", a)
		}
		if a.ScheduleToStartTimeout != time.Minute || a.StartToCloseTimeout != 2*time.Minute ||
			a.ScheduleToCloseTimeout != 3*time.Minute || a.HeartbeatTimeout != 4*time.Second {
			t.Fatalf("timeouts = %v %v %v %v", a.ScheduleToStartTimeout, a.StartToCloseTimeout, a.ScheduleToCloseTimeout, a.HeartbeatTimeout)
		}
		p := a.RetryPolicy
		if p.InitialInterval != time.Second || p.BackoffCoefficient != 1.5 || p.MaximumInterval != time.Minute ||
			p.MaximumAttempts != 5 || strings.Join(p.NonRetryableErrorTypes, ",") != "bad" {
			t.Fatalf("retry policy = %+v", p)
		}
	}

	// The same call again is idempotent: the existing activity.
	again, err := Schedule(ctx, e.c, opts, in{Name: "ada"})
	if err != nil || !again.Existing || again.ID != "id1" {
		t.Fatalf("second schedule = %+v, %v; want the existing activity", again, err)
	}

	// Zero options take the server's defaults and a server-chosen id; a
	// json.RawMessage is sent as is.
	h, err = Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, json.RawMessage(`[1, 2]`))
	if err != nil {
		t.Fatal(err)
	}
	a := h.Activity
	if a.ID == "" || a.TaskQueue != "default" || string(a.Payload) != `[1, 2]` || a.HeartbeatTimeout != 0 ||
		a.StartToCloseTimeout != 10*time.Minute || a.RetryPolicy.InitialInterval != time.Second || a.RetryPolicy.MaximumAttempts != 0 {
		t.Fatalf("defaults: %+v", a)
	}
}

func TestWithTokenWorksOverTheInsecureTransport(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// A token credential that demanded transport security would make every
	// call fail on the insecure connection.
	c := e.dial(t, WithToken("s3cret"))
	// (internal/target's tests show the token in the call's metadata.)
	if _, _, err := c.CreateNamespace(ctxFor(t), "tok"); err != nil {
		t.Fatalf("call with a token: %v", err)
	}
}

func TestErrorsKeepTheServersStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	closed := setup(t, servertest.AutoCreate(namespace.Closed))
	ctx := ctxFor(t)
	if _, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns", ID: "taken", ActivityType: "t"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.c.CreateNamespace(ctx, "pinned"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.SetPlacement(ctx, "pinned", Pinned("gpu-a")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		call    func() error
		code    codes.Code
		context string // the SDK's description of the call
		message string // part of the server's message
	}{
		{"same id, different request", func() error {
			_, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns", ID: "taken", ActivityType: "t"}, 2)
			return err
		}, codes.AlreadyExists, `schedule t in "ns"`, `"taken" already exists in namespace "ns" with a different request`},
		{"missing activity type", func() error {
			_, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns"}, 1)
			return err
		}, codes.InvalidArgument, `schedule  in "ns"`, "activity_type: must not be empty"},
		{"bad namespace name", func() error {
			_, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "a b", ActivityType: "t"}, 1)
			return err
		}, codes.InvalidArgument, `schedule t in "a b"`, `namespace: "a b" has ' '`},
		{"negative timeout", func() error {
			_, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "ns", ActivityType: "t", StartToCloseTimeout: -time.Second}, 1)
			return err
		}, codes.InvalidArgument, `schedule t in "ns"`, "start_to_close_timeout"},
		{"node outside a pinned placement", func() error {
			_, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "pinned", ActivityType: "t", Node: "cpu-1"}, 1)
			return err
		}, codes.FailedPrecondition, `schedule t in "pinned"`, `"cpu-1" is outside namespace "pinned"'s placement pinned{gpu-a}`},
		{"unknown namespace under closed auto-create", func() error {
			_, err := Schedule(ctx, closed.c, ScheduleOptions{Namespace: "nope", ActivityType: "t"}, 1)
			return err
		}, codes.NotFound, `schedule t in "nope"`, `namespace "nope" does not exist and auto-create is closed`},
		{"get an unknown activity", func() error {
			_, err := e.c.Get(ctx, "ns", "missing")
			return err
		}, codes.NotFound, `get activity "missing" in "ns"`, `activity "missing" in namespace "ns"`},
		{"wait for an unknown activity returns at once", func() error {
			_, err := e.c.Wait(ctx, "ns", "missing")
			return err
		}, codes.NotFound, `wait for activity "missing" in "ns"`, `activity "missing" in namespace "ns"`},
		{"list with a token the server never issued", func() error {
			_, err := e.c.List(ctx, ListOptions{Namespace: "ns", PageToken: "bogus"})
			return err
		}, codes.InvalidArgument, `list activities in "ns"`, `page_token: "bogus"`},
		{"get an unknown namespace", func() error {
			_, err := e.c.GetNamespace(ctx, "ghost")
			return err
		}, codes.NotFound, `get namespace "ghost"`, "ghost"},
		{"place an unknown namespace", func() error {
			_, err := e.c.SetPlacement(ctx, "ghost", Prefer("n1"))
			return err
		}, codes.NotFound, `set placement of "ghost" to prefer{n1}`, "ghost"},
		{"cancel an unknown activity", func() error {
			_, err := e.c.Cancel(ctx, "ns", "missing", "")
			return err
		}, codes.NotFound, `cancel activity "missing" in "ns"`, `activity "missing" in namespace "ns"`},
		{"drain a worker that is not connected", func() error {
			_, err := e.c.DrainWorker(ctx, 999)
			return err
		}, codes.NotFound, "drain worker 999", "worker 999 is not connected"},
		{"create a badly named namespace", func() error {
			_, _, err := e.c.CreateNamespace(ctx, "")
			return err
		}, codes.InvalidArgument, `create namespace ""`, "name: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if !strings.HasPrefix(err.Error(), "aion client: "+tc.context+": ") {
				t.Errorf("error %q lacks the call's context %q", err, tc.context)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.message) {
				t.Errorf("status message %q lacks the server's %q", msg, tc.message)
			}
		})
	}
}

func TestPayloadsThatCannotBeEncodedNeverReachTheServer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	opts := ScheduleOptions{Namespace: "never", ActivityType: "t"}
	for name, input := range map[string]any{
		"function":                func() {},
		"invalid json.RawMessage": json.RawMessage(`{`),
		"invalid Payload":         Payload(`nope`),
	} {
		if _, err := Schedule(ctx, e.c, opts, input); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A schedule that reached the server would have minted the namespace.
	if _, err := e.c.GetNamespace(ctx, "never"); status.Code(err) != codes.NotFound {
		t.Fatalf("namespace after refused schedules: %v, want NotFound", err)
	}
}

func TestScheduleBatchReportsEachItemOnItsOwn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	item := func(opts ScheduleOptions, in any) ScheduleRequest {
		t.Helper()
		r, err := NewScheduleRequest(opts, in)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if _, err := NewScheduleRequest(ScheduleOptions{}, func() {}); err == nil {
		t.Fatal("NewScheduleRequest encoded a function")
	}
	res, err := e.c.ScheduleBatch(ctx, []ScheduleRequest{
		item(ScheduleOptions{Namespace: "b", ActivityType: "t"}, map[string]int{"n": 0}),
		item(ScheduleOptions{Namespace: "b", ID: "dup", ActivityType: "t"}, 1),
		item(ScheduleOptions{Namespace: "b"}, 2),                               // no type
		item(ScheduleOptions{Namespace: "b", ID: "dup", ActivityType: "t"}, 3), // same id, other payload
		item(ScheduleOptions{Namespace: "b", ID: "dup", ActivityType: "t"}, 1), // same request again
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 {
		t.Fatalf("%d results for 5 items", len(res))
	}
	if r := res[0]; r.Err != nil || r.Handle.ID == "" || string(r.Handle.Activity.Payload) != `{"n":0}` || r.Handle.Existing {
		t.Errorf("item 0 = %+v", r)
	}
	if r := res[1]; r.Err != nil || r.Handle.ID != "dup" || r.Handle.Existing {
		t.Errorf("item 1 = %+v", r)
	}
	if r := res[2]; r.Handle != nil || status.Code(r.Err) != codes.InvalidArgument || !strings.Contains(r.Err.Error(), "requests[2]: ") {
		t.Errorf("item 2 = %+v, want InvalidArgument naming requests[2]", r)
	}
	if r := res[3]; r.Handle != nil || status.Code(r.Err) != codes.AlreadyExists {
		t.Errorf("item 3 = %+v, want AlreadyExists", r)
	}
	if r := res[4]; r.Err != nil || r.Handle.ID != "dup" || !r.Handle.Existing {
		t.Errorf("item 4 = %+v, want the existing activity", r)
	}
	// The accepted items are durable and readable through their handles.
	if a, err := res[0].Handle.Get(ctx); err != nil || a.State != StateScheduled {
		t.Errorf("get item 0: %+v, %v", a, err)
	}
	// A refusal of the whole call keeps its status.
	if _, err := e.c.ScheduleBatch(ctx, nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty batch: %v, want InvalidArgument", err)
	}
}

func TestWaitReturnsTheOutcomeOnceAWorkerReportsIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"w"}, ActivityTypes: []string{"sum", "boom"}, Slots: 2})

	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "w", ActivityType: "sum"}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		N int `json:"n"`
	}
	waited := make(chan error, 1)
	var got out
	go func() {
		var err error
		got, err = WaitResult[out](ctx, e.c, h.Namespace, h.ID)
		waited <- err
	}()
	task := w.Task()
	if string(task.GetPayload()) != `[1,2]` {
		t.Fatalf("task payload = %s", task.GetPayload())
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned before the outcome: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.Complete(task, []byte(`{"n":3}`))
	if err := <-waited; err != nil || got.N != 3 {
		t.Fatalf("WaitResult = %+v, %v", got, err)
	}
	a, err := h.Wait(ctx)
	if err != nil || a.State != StateCompleted || len(a.Attempts) != 1 || a.Attempts[0].WorkerID != w.ID ||
		a.Attempts[0].Outcome != OutcomeCompleted || a.ClosedTime.IsZero() {
		t.Fatalf("activity = %+v, %v", a, err)
	}

	h, err = Schedule(ctx, e.c, ScheduleOptions{Namespace: "w", ActivityType: "boom"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	w.Fail(w.Task(), &aionv1.Failure{Type: "quota", Message: "over", Details: []byte(`{"limit":3}`)})
	_, err = WaitResult[out](ctx, e.c, h.Namespace, h.ID)
	var ae *ActivityError
	if !errors.As(err, &ae) || ae.Type != "quota" || ae.Retryable || string(ae.Details) != `{"limit":3}` {
		t.Fatalf("WaitResult of a failed activity = %v (%+v)", err, ae)
	}
	if !strings.Contains(err.Error(), "failed after 1 attempt(s): quota: over") {
		t.Fatalf("error = %v", err)
	}
}

func TestWaitEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	e := setup(t)
	h, err := Schedule(ctxFor(t), e.c, ScheduleOptions{Namespace: "idle", ActivityType: "nobody"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := h.Wait(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Wait returned after %v, want about 100ms", d)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := h.Wait(ctx); status.Code(err) != codes.Canceled {
		t.Fatalf("Wait = %v, want Canceled", err)
	}
	if _, err := Result[int](h.Activity); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("Result of a scheduled activity = %v, want ErrNotTerminal", err)
	}
}

func TestWaitRidesOutAServerRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "r", ActivityType: "later"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	var got string
	go func() {
		var err error
		got, err = WaitResult[string](ctx, e.c, h.Namespace, h.ID)
		waited <- err
	}()
	servertest.Eventually(t, "the first Wait request on the wire", func() bool { return e.calls.waitSent.Load() >= 1 })

	// The shutdown ends the Wait with Unavailable; the client keeps trying
	// until the new server answers.
	restarted := e.srv.Restart(t)
	w := restarted.Connect(t, &aionv1.Register{Namespaces: []string{"r"}, ActivityTypes: []string{"later"}})
	w.Complete(w.Task(), []byte(`"after restart"`))
	if err := <-waited; err != nil || got != "after restart" {
		t.Fatalf("WaitResult = %q, %v", got, err)
	}
	if n := e.calls.wait.Load(); n < 2 {
		t.Fatalf("%d Wait calls, want a retry after the restart", n)
	}
}

func TestCancelClosesTheActivityAndStopsItsAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"c"}, ActivityTypes: []string{"run"}})

	// A waiting activity is closed at once.
	waiting, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "c", ActivityType: "nobody"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.c.Cancel(ctx, "c", waiting.ID, "not needed")
	if err != nil || a.State != StateCanceled || a.Failure == nil || a.Failure.Type != "canceled" || a.Failure.Message != "not needed" {
		t.Fatalf("Cancel of a waiting activity = %+v, %v", a, err)
	}
	// Cancelling again changes nothing.
	if again, err := e.c.Cancel(ctx, "c", waiting.ID, "twice"); err != nil || again.State != StateCanceled || again.Failure.Message != "not needed" {
		t.Fatalf("second Cancel = %+v, %v", again, err)
	}

	// A running one is closed too, and its worker told to stop; its late
	// result is refused.
	running, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "c", ActivityType: "run"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	task := w.Task()
	if a, err = e.c.Cancel(ctx, "c", running.ID, "operator"); err != nil || a.State != StateCanceled {
		t.Fatalf("Cancel of a running activity = %+v, %v", a, err)
	}
	if len(a.Attempts) != 1 || a.Attempts[0].Outcome != OutcomeCanceled {
		t.Fatalf("attempts after Cancel = %+v", a.Attempts)
	}
	stop := w.Frame("CancelActivity", func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if stop.GetActivityId() != running.ID || stop.GetAttempt() != 1 || stop.GetReason() != "operator" {
		t.Fatalf("CancelActivity = %v", stop)
	}
	if ack := w.Complete(task, []byte(`"late"`)); ack.GetRefused() == "" {
		t.Fatal("a result after the cancellation was accepted")
	}
	if _, err := WaitResult[string](ctx, e.c, "c", running.ID); !errors.As(err, new(*ActivityError)) {
		t.Fatalf("WaitResult of a canceled activity = %v, want an *ActivityError", err)
	}

	// A completed activity cannot be canceled.
	done, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "c", ActivityType: "run"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	w.Complete(w.Task(), []byte(`1`))
	if _, err := e.c.Wait(ctx, "c", done.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Cancel(ctx, "c", done.ID, ""); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Cancel of a completed activity = %v, want FailedPrecondition", err)
	}
}

func TestClusterCallsListDrainAndWatchWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	x := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"x"}, TaskQueue: "q", Node: "n1", ActivityTypes: []string{"t"}, Slots: 2})
	y := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"y"}, ActivityTypes: []string{"t"}})

	all, err := e.c.ListWorkers(ctx, "")
	if err != nil || len(all) != 2 || all[0].ID != x.ID || all[1].ID != y.ID {
		t.Fatalf("ListWorkers = %+v, %v; want workers %d and %d", all, err, x.ID, y.ID)
	}
	only, err := e.c.ListWorkers(ctx, "x")
	if err != nil || len(only) != 1 {
		t.Fatalf("ListWorkers(x) = %+v, %v", only, err)
	}
	if w := only[0]; w.ID != x.ID || strings.Join(w.Namespaces, ",") != "x" || w.TaskQueue != "q" || w.Node != "n1" ||
		w.Slots != 2 || w.Draining || w.Transport != "grpc" || w.ConnectedTime.IsZero() || w.Peer == "" {
		t.Fatalf("worker = %+v", w)
	}

	w, err := e.c.DrainWorker(ctx, x.ID)
	if err != nil || w.ID != x.ID || !w.Draining {
		t.Fatalf("DrainWorker = %+v, %v", w, err)
	}
	x.Frame("DrainRequest", func(m *aionv1.ServerMessage) bool { return m.GetDrainRequest() != nil })

	// Watch starts with the topology, then streams each change.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	created := false
	for ev, err := range e.c.Watch(wctx) {
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.GetSnapshot(); s != nil {
			if len(s.GetWorkers()) != 2 {
				t.Fatalf("snapshot workers = %v", s.GetWorkers())
			}
			if _, _, err := e.c.CreateNamespace(ctx, "fresh"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if ev.GetNamespaceCreated().GetNamespace().GetName() == "fresh" {
			created = true
			break
		}
	}
	if !created {
		t.Fatal("Watch ended without the namespace_created event")
	}
}

func TestListPagesNewestFirstAndFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5", "b1"} {
		if _, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "l", ID: id, ActivityType: id[:1]}, Payload(nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Finish a2 and a4, fail b1; the worker keeps running the others.
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"l"}, ActivityTypes: []string{"a", "b"}, Slots: 10})
	for range 6 {
		task := w.Task()
		switch task.GetActivityId() {
		case "a2", "a4":
			w.Complete(task, nil)
		case "b1":
			w.Fail(task, &aionv1.Failure{Type: "bad", Message: "no"})
		}
	}
	for _, id := range []string{"a2", "a4", "b1"} {
		if _, err := e.c.Wait(ctx, "l", id); err != nil {
			t.Fatal(err)
		}
	}

	ids := func(acts []*Activity) string {
		var s []string
		for _, a := range acts {
			s = append(s, a.ID)
		}
		return strings.Join(s, ",")
	}
	var pages []string
	opts := ListOptions{Namespace: "l", ActivityType: "a", PageSize: 2}
	for {
		page, err := e.c.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, ids(page.Activities))
		if page.NextPageToken == "" {
			break
		}
		opts.PageToken = page.NextPageToken
	}
	if got := strings.Join(pages, " | "); got != "a5,a4 | a3,a2 | a1" {
		t.Fatalf("pages = %s, want a5,a4 | a3,a2 | a1", got)
	}

	for _, tc := range []struct {
		opts ListOptions
		want string
	}{
		{ListOptions{Namespace: "l"}, "b1,a5,a4,a3,a2,a1"},
		{ListOptions{Namespace: "l", PageSize: 1}, "b1,a5,a4,a3,a2,a1"},
		{ListOptions{Namespace: "l", State: StateCompleted}, "a4,a2"},
		{ListOptions{Namespace: "l", State: StateFailed, PageSize: 1}, "b1"},
		{ListOptions{Namespace: "l", State: StateRunning, ActivityType: "a"}, "a5,a3,a1"},
		{ListOptions{Namespace: "l", State: StateScheduled, ActivityType: "a"}, ""},
		{ListOptions{Namespace: "empty"}, ""},
	} {
		var got []*Activity
		for a, err := range e.c.ListAll(ctx, tc.opts) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a)
		}
		if ids(got) != tc.want {
			t.Errorf("ListAll(%+v) = %s, want %s", tc.opts, ids(got), tc.want)
		}
	}

	// Stopping early fetches no further page.
	before := e.calls.list.Load()
	for range e.c.ListAll(ctx, ListOptions{Namespace: "l", PageSize: 1}) {
		break
	}
	if n := e.calls.list.Load() - before; n != 1 {
		t.Fatalf("breaking after the first item made %d List calls, want 1", n)
	}
	// A state the client does not know is refused before any call.
	before = e.calls.list.Load()
	if _, err := e.c.List(ctx, ListOptions{Namespace: "l", State: "bogus"}); err == nil {
		t.Fatal("bogus state accepted")
	}
	for a, err := range e.c.ListAll(ctx, ListOptions{Namespace: "l", State: "bogus"}) {
		if a != nil || err == nil {
			t.Fatalf("ListAll with a bogus state yielded %v, %v", a, err)
		}
	}
	if n := e.calls.list.Load() - before; n != 0 {
		t.Fatalf("bogus state made %d List calls", n)
	}
}

func TestNamespacesAreCreatedListedAndPlaced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	ns, created, err := e.c.CreateNamespace(ctx, "billing")
	if err != nil || !created || ns.Name != "billing" || ns.Origin != OriginExplicit || ns.Placement.Mode != PlacementUnplaced || ns.CreatedTime.IsZero() {
		t.Fatalf("create = %+v, %v, %v", ns, created, err)
	}
	if _, created, err := e.c.CreateNamespace(ctx, "billing"); err != nil || created {
		t.Fatalf("second create: created=%v, %v; want false, nil", created, err)
	}
	if _, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "sched", ActivityType: "t"}, Payload(nil)); err != nil {
		t.Fatal(err)
	}
	e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"wrk"}, ActivityTypes: []string{"t"}})

	nss, err := e.c.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nss {
		got = append(got, n.Name+"="+string(n.Origin))
	}
	if strings.Join(got, " ") != "billing=explicit sched=schedule wrk=worker" {
		t.Fatalf("namespaces = %v", got)
	}

	for _, p := range []Placement{Pinned("n1", "n2"), Prefer("n3"), Unplaced()} {
		ns, err := e.c.SetPlacement(ctx, "billing", p)
		if err != nil || ns.Placement.String() != p.String() {
			t.Fatalf("SetPlacement(%s) = %+v, %v", p, ns, err)
		}
		if ns, err := e.c.GetNamespace(ctx, "billing"); err != nil || ns.Placement.String() != p.String() {
			t.Fatalf("after SetPlacement(%s): %+v, %v", p, ns, err)
		}
	}
	if got := Pinned("a", "b").String(); got != "pinned{a,b}" {
		t.Fatalf("String = %q", got)
	}
	if _, err := e.c.SetPlacement(ctx, "billing", Placement{Mode: "sideways"}); err == nil {
		t.Fatal("bad mode accepted")
	}
	if ns, err := e.c.GetNamespace(ctx, "billing"); err != nil || ns.Placement.Mode != PlacementUnplaced {
		t.Fatalf("a refused placement changed the namespace: %+v, %v", ns, err)
	}
}

func TestResult(t *testing.T) {
	t.Parallel()
	done := &Activity{ID: "a", Namespace: "ns", State: StateCompleted, Result: Payload(`{"x":1}`)}
	out, err := Result[struct{ X int }](done)
	if err != nil || out.X != 1 {
		t.Fatalf("completed: %v %v", out, err)
	}
	failed := &Activity{ID: "a", Namespace: "ns", State: StateFailed, Attempt: 3,
		Failure: &ActivityError{Type: "quota", Message: "over", Retryable: false}}
	_, err = Result[int](failed)
	var ae *ActivityError
	if !errors.As(err, &ae) || ae.Type != "quota" {
		t.Fatalf("failed: %v", err)
	}
	if !strings.Contains(err.Error(), "failed after 3 attempt(s): quota: over") {
		t.Fatalf("failed message: %v", err)
	}
	_, err = Result[int](&Activity{State: StateTimedOut})
	if !errors.As(err, &ae) || ae.Type != "timed_out" {
		t.Fatalf("timed out without failure: %v", err)
	}
	if _, err = Result[int](&Activity{State: StateRunning}); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("running: %v", err)
	}
	if _, err = Result[int](&Activity{State: StateCompleted, Result: Payload(`"text"`)}); err == nil {
		t.Fatal("type mismatch decoded")
	}
	if v, err := Result[*int](&Activity{State: StateCompleted}); err != nil || v != nil {
		t.Fatalf("empty result: %v %v", v, err)
	}
	if _, err := Result[int](nil); err == nil {
		t.Fatal("nil activity decoded")
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]State{
		"running": StateRunning, "TIMED_OUT": StateTimedOut, "timed-out": StateTimedOut,
		"ACTIVITY_STATE_COMPLETED": StateCompleted, "": "",
	} {
		if got, err := ParseState(in); err != nil || got != want {
			t.Errorf("ParseState(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseState("done"); err == nil || !strings.Contains(err.Error(), `"done"`) {
		t.Errorf("ParseState(done) = %v", err)
	}
	for _, s := range States {
		p, err := stateToProto(s)
		if err != nil || stateFromProto(p) != s {
			t.Errorf("round trip %q", s)
		}
	}
	if !StateCanceled.Terminal() || StateRunning.Terminal() {
		t.Error("Terminal")
	}
}

// TestActivityJSON checks the stable JSON form of an activity as the real
// server reports it, and the edges a server may produce for other SDKs
// (non-JSON heartbeat details).
func TestActivityJSON(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"j"}, ActivityTypes: []string{"echo"}})
	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "j", ID: "a", ActivityType: "echo", StartToCloseTimeout: 90 * time.Second,
		RetryPolicy: &RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 2}}, map[string]string{"hello": "world"})
	if err != nil {
		t.Fatal(err)
	}
	w.Fail(w.Task(), &aionv1.Failure{Type: "flaky", Message: "x", Retryable: true})
	w.Complete(w.Task(), []byte(`{"hello":"world"}`))
	a, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		`"id":"a"`, `"payload":{"hello":"world"}`, `"result":{"hello":"world"}`, `"state":"completed"`, `"attempt":2`,
		`"start_to_close_timeout":"1m30s"`, `"initial_interval":"1ms"`, `"maximum_attempts":2`,
		`"outcome":"failed","failure":{"type":"flaky","message":"x","retryable":true}`, `"outcome":"completed"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"heartbeat_timeout"`) || strings.Contains(s, `"failure":null`) {
		t.Errorf("JSON has an unset field:\n%s", s)
	}
	if !strings.Contains(s, `"scheduled_time":"`+a.ScheduledTime.UTC().Format(time.RFC3339Nano)+`"`) {
		t.Errorf("JSON lacks the scheduled time in UTC:\n%s", s)
	}

	// Details another SDK wrote in some other encoding come out as base64,
	// marked as such.
	odd := activityFromProto(&aionv1.Activity{Id: "x", LastHeartbeatDetails: []byte{0xff, 0x00}})
	if b, err := json.Marshal(odd); err != nil || !strings.Contains(string(b), `"last_heartbeat_details":{"base64":"/wA="}`) {
		t.Errorf("non-JSON details: %s, %v", b, err)
	}
}

func TestListedActivityJSONLeavesAttemptsOutAndGetHasThem(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"l"}, ActivityTypes: []string{"echo"}})
	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "l", ID: "ran", ActivityType: "echo"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Complete(w.Task(), []byte(`2`))
	if _, err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	page, err := e.c.List(ctx, ListOptions{Namespace: "l"})
	if err != nil || len(page.Activities) != 1 {
		t.Fatalf("list = %+v, %v", page, err)
	}
	listed, err := json.Marshal(page.Activities[0])
	if err != nil {
		t.Fatal(err)
	}
	// A listing does not read attempts: no "attempts": [] that would say
	// the activity never ran; "attempt" says how far it got.
	if strings.Contains(string(listed), `"attempts"`) || !strings.Contains(string(listed), `"attempt":1`) {
		t.Errorf("listed activity JSON: %s", listed)
	}
	got, err := e.c.Get(ctx, "l", "ran")
	if err != nil {
		t.Fatal(err)
	}
	full, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(full), `"attempts":[{"number":1,`) {
		t.Errorf("activity JSON from Get lacks its attempt: %s", full)
	}
}

func TestPayloadJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Payload
		want string
	}{
		{nil, `null`},
		{Payload(`{ "a" : 1 }`), `{"a":1}`},
		{Payload(`"s"`), `"s"`},
		{Payload("not json"), `{"base64":"bm90IGpzb24="}`},
	} {
		b, err := json.Marshal(tc.p)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%q) = %s, %v; want %s", tc.p, b, err, tc.want)
		}
	}
	var p Payload
	if err := json.Unmarshal([]byte(`{"a":[1,2]}`), &p); err != nil || string(p) != `{"a":[1,2]}` {
		t.Errorf("Unmarshal = %q, %v", p, err)
	}
	if err := json.Unmarshal([]byte(`{"base64":"bm90IGpzb24="}`), &p); err != nil || string(p) != "not json" {
		t.Errorf("Unmarshal of marked bytes = %q, %v", p, err)
	}
}

func TestDialValidates(t *testing.T) {
	t.Parallel()
	if _, err := Dial(context.Background(), ""); err == nil {
		t.Error("empty address accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(ctx, "127.0.0.1:1"); err == nil {
		t.Error("canceled ctx accepted")
	}
	c, err := Dial(context.Background(), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: the first call reports Unavailable.
	callCtx, cancelCall := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelCall()
	if _, err := c.Get(callCtx, "ns", "a"); status.Code(err) != codes.Unavailable {
		t.Errorf("call to a closed port: %v, want Unavailable", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := New(nil).Close(); err != nil {
		t.Fatal(err)
	}
}
