package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// withFleetKeys: an operator, and a worker and a client key granted every
// namespace (a shared fleet), under open auto-create and the default caps.
func withFleetKeys(c *server.Config) {
	c.Auth.Mode = "token"
	c.Auth.Keys = []auth.APIKey{
		key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*"),
		key("fleet-worker", "fleet-worker-secret", []auth.Role{auth.RoleWorker}, "*"),
		key("fleet-client", "fleet-client-secret", []auth.Role{auth.RoleClient}, "*"),
	}
}

func manyNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// wantRefusal checks err has code and a message naming every part.
func wantRefusal(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Fatalf("%s: %q does not name %s", what, status.Convert(err).Message(), p)
		}
	}
}

// countNamespaces and countWorkers read what the operator sees.
func countNamespaces(t *testing.T, admin *bundle) int {
	t.Helper()
	all, err := admin.namespaces.List(context.Background(), &aionv1.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return len(all.GetNamespaces())
}

func countWorkers(t *testing.T, admin *bundle) int {
	t.Helper()
	ws, err := aionv1.NewClusterServiceClient(admin.cc).ListWorkers(context.Background(), &aionv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return len(ws.GetWorkers())
}

// The attack: one Register frame from a worker key granted "*" listed
// 25,000 namespaces and minted every one. Now a worker serves at most 1,000
// namespaces, and one frame mints at most --max-mint-per-request new ones;
// past either the registration is refused whole: nothing minted, no worker.
func TestRegisterFrameCannotMintThousandsOfNamespaces(t *testing.T) {
	t.Parallel()
	b := setup(t, withFleetKeys)
	admin := b.as(t, "admin-secret")
	fleet := b.as(t, "fleet-worker-secret")

	_, err := fleet.connect(t, &aionv1.Register{Namespaces: manyNames("flood", 25000), ActivityTypes: []string{"job"}})
	wantRefusal(t, "25,000 namespaces in one frame", err, codes.InvalidArgument, "namespaces", "25000 given", "at most 1000")

	_, err = fleet.connect(t, &aionv1.Register{Namespaces: manyNames("flood", 1000), ActivityTypes: []string{"job"}})
	wantRefusal(t, "1,000 new namespaces in one frame", err, codes.ResourceExhausted,
		"1000 new namespaces", "the 100 one request may", "--max-mint-per-request")
	if n := countNamespaces(t, admin); n != 0 {
		t.Fatalf("refused registrations minted %d namespaces", n)
	}
	if n := countWorkers(t, admin); n != 0 {
		t.Fatalf("refused registrations left %d workers", n)
	}

	// Up to the cap registers, and then the same set again mints nothing new.
	set := manyNames("tenant", 100)
	w := fleet.mustConnect(t, &aionv1.Register{Namespaces: set, ActivityTypes: []string{"job"}})
	w.cancel()
	fleet.mustConnect(t, &aionv1.Register{Namespaces: append(set, "tenant-extra"), ActivityTypes: []string{"job"}})
	if n := countNamespaces(t, admin); n != 101 {
		t.Fatalf("%d namespaces after registering 100 and then one more, want 101", n)
	}
}

// Schedules, batches and explicit creation count against --max-namespaces;
// a batch's new namespaces share one --max-mint-per-request budget.
func TestTotalNamespaceCapHoldsForEveryWayOfMinting(t *testing.T) {
	t.Parallel()
	b := setup(t, withFleetKeys, func(c *server.Config) { c.MaxNamespaces, c.MaxMintPerRequest = 6, 3 })
	ctx := context.Background()
	admin := b.as(t, "admin-secret")
	client := b.as(t, "fleet-client-secret")
	fleet := b.as(t, "fleet-worker-secret")

	// A batch naming four new namespaces: the fourth is past its budget.
	var reqs []*aionv1.ScheduleRequest
	for _, ns := range manyNames("batch", 4) {
		reqs = append(reqs, &aionv1.ScheduleRequest{Namespace: ns, ActivityType: "job"})
	}
	resp, err := client.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		if i < 3 && r.GetError() != nil {
			t.Fatalf("requests[%d]: %v", i, r.GetError())
		}
		if i == 3 && (codes.Code(r.GetError().GetCode()) != codes.ResourceExhausted || !strings.Contains(r.GetError().GetMessage(), "--max-mint-per-request")) {
			t.Fatalf("requests[3], a fourth new namespace in one batch: %v", r.GetError())
		}
	}
	if _, err := client.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "single", ActivityType: "job"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "explicit"}); err != nil {
		t.Fatal(err)
	}
	w := fleet.mustConnect(t, &aionv1.Register{Namespaces: []string{"worker-made"}, ActivityTypes: []string{"job"}})
	if n := countNamespaces(t, admin); n != 6 {
		t.Fatalf("%d namespaces, want the cap of 6", n)
	}

	// Full: every way of minting is refused, naming the cap and the flag.
	_, err = client.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "seventh", ActivityType: "job"})
	wantRefusal(t, "schedule into a 7th namespace", err, codes.ResourceExhausted, "would make 7", "6", "--max-namespaces")
	_, err = admin.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "seventh"})
	wantRefusal(t, "create a 7th namespace", err, codes.ResourceExhausted, `"seventh"`, "--max-namespaces")
	_, err = fleet.connect(t, &aionv1.Register{Namespaces: []string{"single", "seventh"}, ActivityTypes: []string{"job"}})
	wantRefusal(t, "register for a 7th namespace", err, codes.ResourceExhausted, "--max-namespaces")
	if n := countNamespaces(t, admin); n != 6 {
		t.Fatalf("refusals at the cap left %d namespaces, want 6", n)
	}
	// Existing namespaces stay fully usable.
	if _, err := client.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "worker-made", Id: "x", ActivityType: "job"}); err != nil {
		t.Fatalf("schedule into an existing namespace at the cap: %v", err)
	}
	if got := w.nextTask(); got.GetActivityId() != "x" {
		t.Fatalf("task %v", got)
	}
	if _, err := admin.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "explicit"}); err != nil {
		t.Fatalf("re-create an existing namespace at the cap: %v", err)
	}
}
