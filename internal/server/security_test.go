package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	// Well before the 15s heartbeat window could end it, with room for a
	// busy machine.
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("stream lasted %v past a 1.5s token", took)
	}
}

func TestServerRefusesOpenAddressWithoutAuth(t *testing.T) {
	t.Parallel()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "0.0.0.0:0", "127.0.0.1:0", t.TempDir()
	_, err := startServer(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "--insecure-allow-no-auth") {
		t.Fatalf("start on 0.0.0.0 with auth none: %v", err)
	}
	cfg.InsecureAllowNoAuth = true
	srv, err := startServer(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("with --insecure-allow-no-auth: %v", err)
	}
	srv.Stop(context.Background())
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A call refused from its headers ends at once on the server, whatever
// deadline its caller set: its context (and the timer of its deadline)
// does not stay in memory until then, so refusals in a loop with long
// deadlines cannot pile up.
func TestRefusedCallsEndTheirContextAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withTenantKeys)
	anon := b.as(t, "")
	limited := b.as(t, "tenant-a-worker-secret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for range 50 {
		if _, err := anon.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "x"}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no token: %v", err)
		}
		if _, err := limited.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "tenant-a", ActivityType: "job",
			Payload: make([]byte, 1<<20)}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("worker role scheduling: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for server.RefusedCallsOpen(b.srv) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused calls still hold their context after they were answered", server.RefusedCallsOpen(b.srv))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
