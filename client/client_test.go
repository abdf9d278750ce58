package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer answers ActivityService and NamespaceService from functions the
// test sets.
type fakeServer struct {
	aionv1.UnimplementedActivityServiceServer

	mu       sync.Mutex
	auth     []string
	schedule func(*aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error)
	batch    func(*aionv1.ScheduleBatchRequest) (*aionv1.ScheduleBatchResponse, error)
	wait     func(context.Context, *aionv1.WaitRequest) (*aionv1.WaitResponse, error)
	list     func(*aionv1.ListActivitiesRequest) (*aionv1.ListActivitiesResponse, error)
	nsList   func(*aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error)
	place    func(*aionv1.SetPlacementRequest) (*aionv1.SetPlacementResponse, error)
}

func (f *fakeServer) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.auth = append(f.auth, md.Get("authorization")...)
	f.mu.Unlock()
}

func (f *fakeServer) Schedule(ctx context.Context, r *aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error) {
	f.record(ctx)
	return f.schedule(r)
}

func (f *fakeServer) ScheduleBatch(_ context.Context, r *aionv1.ScheduleBatchRequest) (*aionv1.ScheduleBatchResponse, error) {
	return f.batch(r)
}

func (f *fakeServer) Wait(ctx context.Context, r *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
	return f.wait(ctx, r)
}

func (f *fakeServer) Get(_ context.Context, r *aionv1.GetActivityRequest) (*aionv1.GetActivityResponse, error) {
	return nil, status.Errorf(codes.NotFound, "activity %q in namespace %q not found", r.GetId(), r.GetNamespace())
}

func (f *fakeServer) List(_ context.Context, r *aionv1.ListActivitiesRequest) (*aionv1.ListActivitiesResponse, error) {
	return f.list(r)
}

type nsServer struct {
	aionv1.UnimplementedNamespaceServiceServer
	f *fakeServer
}

func (n nsServer) SetPlacement(_ context.Context, r *aionv1.SetPlacementRequest) (*aionv1.SetPlacementResponse, error) {
	return n.f.place(r)
}

func (n nsServer) List(_ context.Context, r *aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error) {
	return n.f.nsList(r)
}

func start(t *testing.T, f *fakeServer, opts ...Option) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	aionv1.RegisterActivityServiceServer(srv, f)
	aionv1.RegisterNamespaceServiceServer(srv, nsServer{f: f})
	go func() { _ = srv.Serve(lis) }()
	opts = append(opts, WithDialOptions(
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials())))
	c, err := Dial(context.Background(), "passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
	})
	return c
}

func TestScheduleEncodesOptionsAndPayload(t *testing.T) {
	var got *aionv1.ScheduleRequest
	f := &fakeServer{schedule: func(r *aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error) {
		got = r
		return &aionv1.ScheduleResponse{Existing: true, Activity: &aionv1.Activity{
			Id: "id1", Namespace: r.GetNamespace(), State: aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED, Payload: r.GetPayload()}}, nil
	}}
	c := start(t, f, WithToken("s3cret"))
	type in struct {
		Name string `json:"name"`
	}
	h, err := Schedule(context.Background(), c, ScheduleOptions{
		Namespace: "ns", ID: "id1", TaskQueue: "gpu", ActivityType: "greet", Node: "n1",
		ScheduleToStartTimeout: time.Second, StartToCloseTimeout: 2 * time.Second,
		ScheduleToCloseTimeout: 3 * time.Second, HeartbeatTimeout: 4 * time.Second,
		RetryPolicy: &RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{"bad"}},
	}, in{Name: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	want := &aionv1.ScheduleRequest{
		Namespace: "ns", Id: "id1", TaskQueue: "gpu", ActivityType: "greet", Node: "n1", Payload: []byte(`{"name":"ada"}`),
		ScheduleToStartTimeout: durationpb.New(time.Second), StartToCloseTimeout: durationpb.New(2 * time.Second),
		ScheduleToCloseTimeout: durationpb.New(3 * time.Second), HeartbeatTimeout: durationpb.New(4 * time.Second),
		RetryPolicy: &aionv1.RetryPolicy{InitialInterval: durationpb.New(time.Second), BackoffCoefficient: 2,
			MaximumInterval: durationpb.New(time.Minute), MaximumAttempts: 5, NonRetryableErrorTypes: []string{"bad"}},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("request = %v\nwant %v", got, want)
	}
	if h.ID != "id1" || h.Namespace != "ns" || !h.Existing || h.Activity.State != StateScheduled {
		t.Fatalf("handle = %+v", h)
	}
	if len(f.auth) != 1 || f.auth[0] != "Bearer s3cret" {
		t.Fatalf("authorization metadata = %v", f.auth)
	}

	// Zero options leave the durations and the policy unset.
	if _, err := Schedule(context.Background(), c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, json.RawMessage(`[1, 2]`)); err != nil {
		t.Fatal(err)
	}
	if got.ScheduleToStartTimeout != nil || got.HeartbeatTimeout != nil || got.RetryPolicy != nil || string(got.Payload) != `[1, 2]` {
		t.Fatalf("zero options: %v", got)
	}
}

func TestScheduleErrorsKeepTheirStatus(t *testing.T) {
	f := &fakeServer{schedule: func(r *aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error) {
		return nil, status.Errorf(codes.AlreadyExists, "activity %q exists with a different request", r.GetId())
	}}
	c := start(t, f)
	_, err := Schedule(context.Background(), c, ScheduleOptions{Namespace: "ns", ID: "x", ActivityType: "t"}, 1)
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("code = %v (%v)", status.Code(err), err)
	}
	if !strings.Contains(err.Error(), `schedule t in "ns"`) || !strings.Contains(err.Error(), "different request") {
		t.Fatalf("error lacks context: %v", err)
	}
	if s := status.Convert(err); s.Message() != `activity "x" exists with a different request` {
		t.Fatalf("status message = %q", s.Message())
	}
	_, err = c.Get(context.Background(), "ns", "nope")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("get: %v", err)
	}
	// A payload that cannot be encoded never reaches the server.
	if _, err := Schedule(context.Background(), c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, func() {}); err == nil {
		t.Fatal("unencodable payload accepted")
	}
	if _, err := Schedule(context.Background(), c, ScheduleOptions{Namespace: "ns", ActivityType: "t"}, json.RawMessage(`{`)); err == nil {
		t.Fatal("invalid raw JSON accepted")
	}
}

func TestScheduleBatchMapsPerItemResults(t *testing.T) {
	f := &fakeServer{batch: func(r *aionv1.ScheduleBatchRequest) (*aionv1.ScheduleBatchResponse, error) {
		return &aionv1.ScheduleBatchResponse{Results: []*aionv1.ScheduleBatchResult{
			{Result: &aionv1.ScheduleBatchResult_Activity{Activity: &aionv1.Activity{Id: "a", Namespace: "ns"}}},
			{Result: &aionv1.ScheduleBatchResult_Error{Error: &aionv1.Status{Code: int32(codes.InvalidArgument), Message: "activity_type: empty"}}},
		}}, nil
	}}
	c := start(t, f)
	r1, _ := NewScheduleRequest(ScheduleOptions{Namespace: "ns", ActivityType: "t"}, 1)
	r2, _ := NewScheduleRequest(ScheduleOptions{Namespace: "ns"}, 2)
	res, err := c.ScheduleBatch(context.Background(), []ScheduleRequest{r1, r2})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Handle.ID != "a" {
		t.Fatalf("item 0 = %+v", res[0])
	}
	if res[1].Handle != nil || status.Code(res[1].Err) != codes.InvalidArgument {
		t.Fatalf("item 1 = %+v", res[1])
	}
	// A response with the wrong number of results is an error.
	if _, err := c.ScheduleBatch(context.Background(), []ScheduleRequest{r1}); err == nil {
		t.Fatal("mismatched batch accepted")
	}
}

func TestWaitPollsAgainOnServerDeadline(t *testing.T) {
	var calls atomic.Int32
	f := &fakeServer{wait: func(ctx context.Context, r *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
		switch calls.Add(1) {
		case 1:
			return nil, status.Error(codes.DeadlineExceeded, "still running")
		case 2:
			return nil, status.Error(codes.Unavailable, "restarting")
		}
		return &aionv1.WaitResponse{Activity: &aionv1.Activity{Id: r.GetId(), Namespace: r.GetNamespace(),
			State: aionv1.ActivityState_ACTIVITY_STATE_COMPLETED, Result: []byte(`{"n":3}`)}}, nil
	}}
	c := start(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := WaitResult[map[string]int](ctx, c, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	if out["n"] != 3 || calls.Load() != 3 {
		t.Fatalf("out = %v after %d calls", out, calls.Load())
	}
}

func TestWaitEndsWithTheCallersDeadline(t *testing.T) {
	f := &fakeServer{wait: func(ctx context.Context, _ *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	c := start(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Wait(ctx, "ns", "a")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v", err)
	}
}

func TestWaitReturnsOtherErrorsAtOnce(t *testing.T) {
	f := &fakeServer{wait: func(context.Context, *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
		return nil, status.Error(codes.NotFound, "no such activity")
	}}
	c := start(t, f)
	if _, err := c.Wait(context.Background(), "ns", "a"); status.Code(err) != codes.NotFound {
		t.Fatalf("err = %v", err)
	}
}

func TestListAllFollowsPages(t *testing.T) {
	f := &fakeServer{list: func(r *aionv1.ListActivitiesRequest) (*aionv1.ListActivitiesResponse, error) {
		if r.GetState() != aionv1.ActivityState_ACTIVITY_STATE_FAILED || r.GetActivityType() != "t" {
			return nil, status.Error(codes.InvalidArgument, "filters not passed")
		}
		switch r.GetPageToken() {
		case "":
			return &aionv1.ListActivitiesResponse{Activities: []*aionv1.Activity{{Id: "1"}, {Id: "2"}}, NextPageToken: "p2"}, nil
		case "p2":
			return &aionv1.ListActivitiesResponse{Activities: []*aionv1.Activity{{Id: "3"}}}, nil
		}
		return nil, status.Error(codes.InvalidArgument, "bad token")
	}}
	c := start(t, f)
	var ids []string
	for a, err := range c.ListAll(context.Background(), ListOptions{Namespace: "ns", State: StateFailed, ActivityType: "t"}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	if strings.Join(ids, ",") != "1,2,3" {
		t.Fatalf("ids = %v", ids)
	}
	// Stopping early does not fetch more pages.
	for range c.ListAll(context.Background(), ListOptions{Namespace: "ns", State: StateFailed, ActivityType: "t"}) {
		break
	}
	if _, err := c.List(context.Background(), ListOptions{Namespace: "ns", State: "bogus"}); err == nil {
		t.Fatal("bogus state accepted")
	}
}

func TestNamespacesListAndPlacement(t *testing.T) {
	f := &fakeServer{
		nsList: func(r *aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error) {
			if r.GetPageToken() == "" {
				return &aionv1.ListNamespacesResponse{Namespaces: []*aionv1.Namespace{{Name: "a"}}, NextPageToken: "b"}, nil
			}
			return &aionv1.ListNamespacesResponse{Namespaces: []*aionv1.Namespace{{Name: "b", Origin: aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_WORKER}}}, nil
		},
		place: func(r *aionv1.SetPlacementRequest) (*aionv1.SetPlacementResponse, error) {
			return &aionv1.SetPlacementResponse{Namespace: &aionv1.Namespace{Name: r.GetName(), Placement: r.GetPlacement()}}, nil
		},
	}
	c := start(t, f)
	nss, err := c.ListNamespaces(context.Background())
	if err != nil || len(nss) != 2 || nss[1].Origin != OriginWorker || nss[0].Placement.Mode != PlacementUnplaced {
		t.Fatalf("namespaces = %v, %v", nss, err)
	}
	ns, err := c.SetPlacement(context.Background(), "a", Pinned("n1", "n2"))
	if err != nil || ns.Placement.Mode != PlacementPinned || strings.Join(ns.Placement.Nodes, ",") != "n1,n2" {
		t.Fatalf("placement = %+v, %v", ns, err)
	}
	if ns.Placement.String() != "pinned{n1,n2}" {
		t.Fatalf("String = %q", ns.Placement.String())
	}
	if _, err := c.SetPlacement(context.Background(), "a", Placement{Mode: "sideways"}); err == nil {
		t.Fatal("bad mode accepted")
	}
}

func TestResult(t *testing.T) {
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
}

func TestParseState(t *testing.T) {
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

func TestActivityConversionAndJSON(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := &aionv1.Activity{
		Id: "a", Namespace: "ns", TaskQueue: "default", ActivityType: "echo", Payload: []byte(`{"hello":"world"}`),
		State: aionv1.ActivityState_ACTIVITY_STATE_FAILED, Attempt: 2,
		Failure:                &aionv1.Failure{Type: "worker_lost", Message: "gone", Retryable: true},
		ScheduleToStartTimeout: durationpb.New(time.Minute), StartToCloseTimeout: durationpb.New(90 * time.Second),
		RetryPolicy:   &aionv1.RetryPolicy{MaximumAttempts: 2, BackoffCoefficient: 2, InitialInterval: durationpb.New(time.Second)},
		ScheduledTime: timestamppb.New(now),
		Attempts: []*aionv1.Attempt{
			{Number: 1, WorkerId: 9, StartedTime: timestamppb.New(now), Outcome: aionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED,
				Failure: &aionv1.Failure{Type: "error", Message: "x", Retryable: true}},
		},
		LastHeartbeatDetails: []byte{0xff, 0x00},
	}
	a := activityFromProto(p)
	if a.State != StateFailed || a.Failure.Type != "worker_lost" || a.StartToCloseTimeout != 90*time.Second ||
		a.HeartbeatTimeout != 0 || !a.StartedTime.IsZero() || a.Attempts[0].Outcome != OutcomeFailed || a.RetryPolicy.MaximumAttempts != 2 {
		t.Fatalf("activity = %+v", a)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		`"payload":{"hello":"world"}`, `"state":"failed"`, `"start_to_close_timeout":"1m30s"`,
		`"scheduled_time":"2026-01-02T03:04:05Z"`, `"failure":{"type":"worker_lost","message":"gone","retryable":true}`,
		`"last_heartbeat_details":"/wA="`, `"initial_interval":"1s"`, `"outcome":"failed"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s:\n%s", want, s)
		}
	}
	for _, absent := range []string{`"started_time"`, `"heartbeat_timeout"`, `"result"`} {
		if strings.Contains(strings.ReplaceAll(s, `"attempts":[{`, ""), absent+`:null`) {
			t.Errorf("JSON has %s", absent)
		}
	}
}

func TestPayloadJSON(t *testing.T) {
	for _, tc := range []struct {
		p    Payload
		want string
	}{
		{nil, `null`},
		{Payload(`{ "a" : 1 }`), `{"a":1}`},
		{Payload(`"s"`), `"s"`},
		{Payload("not json"), `"bm90IGpzb24="`},
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
}

func TestDialValidates(t *testing.T) {
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
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := New(nil).Close(); err != nil {
		t.Fatal(err)
	}
}
