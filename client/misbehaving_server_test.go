package client

// The tests in this file use a hand-written gRPC server, not the real one,
// because they check how the client copes with answers the real aion server
// never gives: a batch reply with the wrong number of results, a page token
// repeated forever, namespace listings split into pages (the real server
// returns them in one), and a long poll cut short with DeadlineExceeded
// while the caller's own deadline is far off (what a proxy does; the real
// server only returns DeadlineExceeded at the client's one-minute poll
// deadline). Everything the real server can produce is tested against it in
// client_test.go.

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

type misbehavingServer struct {
	aionv1.UnimplementedActivityServiceServer

	batchResults []*aionv1.ScheduleBatchResult
	waitCalls    atomic.Int32
	listCalls    atomic.Int32
	nsCalls      atomic.Int32
}

func (m *misbehavingServer) ScheduleBatch(context.Context, *aionv1.ScheduleBatchRequest) (*aionv1.ScheduleBatchResponse, error) {
	return &aionv1.ScheduleBatchResponse{Results: m.batchResults}, nil
}

// Wait cuts the first call short with DeadlineExceeded, then answers.
func (m *misbehavingServer) Wait(_ context.Context, r *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
	if m.waitCalls.Add(1) == 1 {
		return nil, status.Error(codes.DeadlineExceeded, "proxy timeout")
	}
	return &aionv1.WaitResponse{Activity: &aionv1.Activity{Id: r.GetId(), Namespace: r.GetNamespace(),
		State: aionv1.ActivityState_ACTIVITY_STATE_COMPLETED, Result: []byte(`{"n":3}`)}}, nil
}

// List returns the same page and the same next token forever.
func (m *misbehavingServer) List(context.Context, *aionv1.ListActivitiesRequest) (*aionv1.ListActivitiesResponse, error) {
	m.listCalls.Add(1)
	return &aionv1.ListActivitiesResponse{Activities: []*aionv1.Activity{{Id: "1"}}, NextPageToken: "again"}, nil
}

// ListNamespaces pages one namespace at a time, then repeats its last
// token.
func (m *misbehavingServer) ListNamespaces(_ context.Context, r *aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error) {
	m.nsCalls.Add(1)
	switch r.GetPageToken() {
	case "":
		return &aionv1.ListNamespacesResponse{Namespaces: []*aionv1.Namespace{{Name: "a"}}, NextPageToken: "b"}, nil
	case "b":
		return &aionv1.ListNamespacesResponse{Namespaces: []*aionv1.Namespace{{Name: "b",
			Origin: aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_WORKER}}, NextPageToken: "c"}, nil
	}
	return &aionv1.ListNamespacesResponse{Namespaces: []*aionv1.Namespace{{Name: "c"}}, NextPageToken: "c"}, nil
}

// nsAdapter serves misbehavingServer's namespace methods under the
// NamespaceService names.
type nsAdapter struct {
	aionv1.UnimplementedNamespaceServiceServer
	m *misbehavingServer
}

func (n nsAdapter) List(ctx context.Context, r *aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error) {
	return n.m.ListNamespaces(ctx, r)
}

func startMisbehaving(t *testing.T, m *misbehavingServer) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	aionv1.RegisterActivityServiceServer(srv, m)
	aionv1.RegisterNamespaceServiceServer(srv, nsAdapter{m: m})
	go func() { _ = srv.Serve(lis) }()
	c, err := Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Stop()
	})
	return c
}

func TestScheduleBatchRefusesAReplyThatDoesNotMatchTheRequest(t *testing.T) {
	t.Parallel()
	r, _ := NewScheduleRequest(ScheduleOptions{Namespace: "ns", ActivityType: "t"}, 1)
	for _, tc := range []struct {
		name    string
		results []*aionv1.ScheduleBatchResult
		want    string
	}{
		{"too many results", []*aionv1.ScheduleBatchResult{{}, {}}, "server returned 2 results"},
		{"an empty result", []*aionv1.ScheduleBatchResult{{}}, "neither activity nor error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startMisbehaving(t, &misbehavingServer{batchResults: tc.results})
			res, err := c.ScheduleBatch(context.Background(), []ScheduleRequest{r})
			if err == nil && len(res) == 1 {
				err = res[0].Err
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ScheduleBatch = %v, %v; want an error about %q", res, err, tc.want)
			}
		})
	}
}

func TestWaitPollsAgainWhenTheCallIsCutShort(t *testing.T) {
	t.Parallel()
	m := &misbehavingServer{}
	c := startMisbehaving(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := WaitResult[map[string]int](ctx, c, "ns", "a")
	if err != nil || out["n"] != 3 {
		t.Fatalf("WaitResult = %v, %v", out, err)
	}
	if n := m.waitCalls.Load(); n != 2 {
		t.Fatalf("%d Wait calls, want 2", n)
	}
}

func TestListingsStopWhenTheServerRepeatsItsPageToken(t *testing.T) {
	t.Parallel()
	m := &misbehavingServer{}
	c := startMisbehaving(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for _, err := range c.ListAll(ctx, ListOptions{Namespace: "ns"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 || m.listCalls.Load() != 2 {
		t.Fatalf("ListAll yielded %d activities in %d calls, want 2 in 2 (stop at the repeated token)", n, m.listCalls.Load())
	}

	nss, err := c.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range nss {
		names = append(names, ns.Name)
	}
	if strings.Join(names, ",") != "a,b,c" || nss[1].Origin != OriginWorker || m.nsCalls.Load() != 3 {
		t.Fatalf("ListNamespaces = %v in %d calls, want a,b,c in 3", names, m.nsCalls.Load())
	}
}
