package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// as returns gRPC clients that present token.
func (b *bundle) as(t *testing.T, token string) *bundle {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	cc, err := grpc.NewClient(b.srv.GRPCAddr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &bundle{srv: b.srv, cc: cc, activities: aionv1.NewActivityServiceClient(cc),
		namespaces: aionv1.NewNamespaceServiceClient(cc), workers: aionv1.NewWorkerServiceClient(cc)}
}

func key(name, secret string, roles []auth.Role, namespaces ...string) auth.APIKey {
	return auth.APIKey{Name: name, SHA256: auth.HashSecret(secret), Namespaces: namespaces, Roles: roles}
}

var tenants = []string{"tenant-a", "tenant-b", "tenant-c"}

func withTenantKeys(c *server.Config) {
	c.Auth.Mode = "token"
	c.Auth.Keys = []auth.APIKey{key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*")}
	for _, tn := range tenants {
		c.Auth.Keys = append(c.Auth.Keys,
			key(tn+"-worker", tn+"-worker-secret", []auth.Role{auth.RoleWorker}, tn),
			key(tn+"-client", tn+"-client-secret", []auth.Role{auth.RoleClient}, tn))
	}
}

// TestTenantIsolationUnderRandomInterleaving: three tenants with their own
// keys, workers and activities, scheduled in a random order. No activity
// reaches another tenant's worker; no tenant can read, cancel or intervene
// in another's; no unauthorized caller mints a namespace.
func TestTenantIsolationUnderRandomInterleaving(t *testing.T) {
	t.Parallel()
	b := setup(t, withTenantKeys)
	ctx := context.Background()

	type tenant struct {
		client  *bundle
		workers []*rawWorker
	}
	ts := map[string]*tenant{}
	for _, tn := range tenants {
		wb := b.as(t, tn+"-worker-secret")
		te := &tenant{client: b.as(t, tn+"-client-secret")}
		for range 2 {
			te.workers = append(te.workers, wb.mustConnect(t, &aionv1.Register{Namespaces: []string{tn}, ActivityTypes: []string{"job"}, Slots: 50,
				Capabilities: []aionv1.InterventionPrimitive{aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE}}))
		}
		ts[tn] = te
	}

	// Workers record every task they get, answering none until the end.
	var mu sync.Mutex
	got := map[string][]*aionv1.ActivityTask{}
	var wg sync.WaitGroup
	for tn, te := range ts {
		for _, w := range te.workers {
			wg.Go(func() {
				for {
					m, err := w.stream.Recv()
					if err != nil {
						return
					}
					if task := m.GetActivityTask(); task != nil {
						mu.Lock()
						got[tn] = append(got[tn], task)
						mu.Unlock()
					}
				}
			})
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var order []string
	for i := range 90 {
		order = append(order, fmt.Sprintf("%s/%d", tenants[i%3], i))
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, ref := range order {
		tn, id, _ := strings.Cut(ref, "/")
		if _, err := ts[tn].client.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: tn, Id: id, ActivityType: "job"}); err != nil {
			t.Fatalf("%s schedules %s: %v", tn, id, err)
		}
		// Every other tenant tries to schedule into, read, cancel and
		// intervene in this one's namespace and activity.
		for _, other := range tenants {
			if other == tn {
				continue
			}
			o := ts[other].client
			calls := map[string]error{}
			_, calls["schedule"] = o.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: tn, Id: "intruder-" + id, ActivityType: "job"})
			_, calls["get"] = o.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: tn, Id: id})
			_, calls["list"] = o.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: tn})
			_, calls["cancel"] = o.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: tn, Id: id})
			_, calls["intervene"] = o.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: tn, Id: id,
				Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{Text: "hi"}}}})
			for what, err := range calls {
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("%s %s on %s's %s: %v, want PermissionDenied", other, what, tn, id, err)
				}
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got["tenant-a"]) + len(got["tenant-b"]) + len(got["tenant-c"])
		mu.Unlock()
		if n == 90 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 90 tasks reached workers", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	for tn, tasks := range got {
		if len(tasks) != 30 {
			t.Errorf("%s's workers got %d tasks, want its 30", tn, len(tasks))
		}
		for _, task := range tasks {
			if task.GetNamespace() != tn {
				t.Errorf("%s's worker got %s/%s", tn, task.GetNamespace(), task.GetActivityId())
			}
		}
	}
	mu.Unlock()
	for _, te := range ts {
		for _, w := range te.workers {
			w.cancel()
		}
	}
	wg.Wait()

	// Nothing minted for intruders; a cross-tenant worker is refused whole.
	admin := b.as(t, "admin-secret")
	all, err := admin.namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetNamespaces()) != 3 {
		t.Fatalf("namespaces = %v, want only the three tenants", all.GetNamespaces())
	}
	if _, err := b.as(t, "tenant-a-worker-secret").connect(t, &aionv1.Register{Namespaces: []string{"tenant-a", "tenant-b"}, ActivityTypes: []string{"job"}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("tenant-a worker registering for tenant-b too: %v", err)
	}
	if _, err := b.as(t, "tenant-a-client-secret").activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "brand-new", ActivityType: "job"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("minting an ungranted namespace: %v", err)
	}
	list, _ := admin.namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
	if len(list.GetNamespaces()) != 3 {
		t.Fatalf("a refused caller minted a namespace: %v", list.GetNamespaces())
	}
}

func TestRolesAndCredentialsAreEnforced(t *testing.T) {
	t.Parallel()
	b := setup(t, withTenantKeys)
	ctx := context.Background()
	anon := b.as(t, "")
	wrong := b.as(t, "no-such-key")
	workerKey := b.as(t, "tenant-a-worker-secret")
	clientKey := b.as(t, "tenant-a-client-secret")

	if _, err := anon.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v", err)
	}
	if _, err := wrong.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("unknown token: %v", err)
	}
	if _, err := workerKey.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "tenant-a", ActivityType: "job"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("worker role scheduling: %v", err)
	}
	if _, err := clientKey.connect(t, &aionv1.Register{Namespaces: []string{"tenant-a"}, ActivityTypes: []string{"job"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("client role connecting a worker: %v", err)
	}
	if _, err := clientKey.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "tenant-a"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("client role creating a namespace: %v", err)
	}
	if _, err := aionv1.NewClusterServiceClient(clientKey.cc).ListWorkers(ctx, &aionv1.ListWorkersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("client role listing workers: %v", err)
	}
	if _, err := anon.workers.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	// Health stays public for load balancers.
	if resp, err := httpGet("http://" + b.srv.HTTPAddr() + "/readyz"); err != nil || resp != 200 {
		t.Errorf("readyz without a token: %v %v", resp, err)
	}
	if code, _ := httpGet("http://" + b.srv.HTTPAddr() + "/api/v1/workers"); code != 401 {
		t.Errorf("JSON API without a token: %d, want 401", code)
	}
}

func TestExpiredJWTEndsAWorkerStream(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 40)
	path := filepath.Join(t.TempDir(), "jwt.secret")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *server.Config) {
		c.Auth = server.AuthConfig{Mode: "jwt", JWTSecretFile: path, ExpiryGrace: 300 * time.Millisecond}
	})
	seg := func(v any) string { j, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(j) }
	head := seg(map[string]string{"alg": "HS256"}) + "." + seg(map[string]any{"sub": "short-lived",
		"namespaces": []string{"jwt"}, "roles": []string{"worker"}, "exp": time.Now().Add(1500 * time.Millisecond).Unix()})
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(head))
	token := head + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))

	w := b.as(t, token).mustConnect(t, &aionv1.Register{Namespaces: []string{"jwt"}, ActivityTypes: []string{"t"}})
	began := time.Now()
	var err error
	for err == nil {
		_, err = w.stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "expired") {
		t.Fatalf("stream ended with %v, want Unauthenticated naming the expiry", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("stream lasted %v past a 1.5s token", took)
	}
}

func TestServerRefusesOpenAddressWithoutAuth(t *testing.T) {
	t.Parallel()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "0.0.0.0:0", "127.0.0.1:0", t.TempDir()
	_, err := server.Start(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "--insecure-allow-no-auth") {
		t.Fatalf("start on 0.0.0.0 with auth none: %v", err)
	}
	cfg.InsecureAllowNoAuth = true
	srv, err := server.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("with --insecure-allow-no-auth: %v", err)
	}
	srv.Shutdown(context.Background())
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
