package server_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// withReaderKeys adds, to the tenant keys, a reader of tenant-a and a
// reader of every namespace (a dashboard or a Prometheus scraper).
func withReaderKeys(c *server.Config) {
	withTenantKeys(c)
	c.Auth.Keys = append(c.Auth.Keys,
		key("tenant-a-reader", "tenant-a-reader-secret", []auth.Role{auth.RoleReader}, "tenant-a"),
		key("dashboard", "dashboard-secret", []auth.Role{auth.RoleReader}, "*"))
}

// httpCall sends one HTTP request with token as bearer (none when empty)
// and returns the status and the body.
func httpCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(raw)
}

// firstSSELine opens the event stream at url with token as bearer (none
// when empty) and returns its status and, on 200, the first event line.
func firstSSELine(t *testing.T, url, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, ""
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			return 200, sc.Text()
		}
	}
	t.Fatalf("event stream ended without an event: %v", sc.Err())
	return 0, ""
}

// TestQueryTokenIsRefusedOutsideTheEventStream: a token in the query string
// schedules or cancels nothing; it is refused with 401 saying to use the
// Authorization header. Only the event stream, which browsers open with
// EventSource and so cannot send headers, takes one.
func TestQueryTokenIsRefusedOutsideTheEventStream(t *testing.T) {
	t.Parallel()
	b := setup(t, withTenantKeys)
	ctx := context.Background()
	base := "http://" + b.srv.HTTPAddr()
	admin := b.as(t, "admin-secret")
	admin.schedule(t, &aionv1.ScheduleRequest{Namespace: "tenant-a", Id: "standing", ActivityType: "job"})
	const q = "access_token=tenant-a-client-secret"
	schedule := `{"namespace":"tenant-a","id":"via-query","activity_type":"job"}`

	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/activities?" + q, schedule},
		{"POST", "/api/v1/activities/tenant-a/standing/cancel?" + q, ""},
		{"GET", "/api/v1/activities?namespace=tenant-a&" + q, ""},
		{"GET", "/api/v1/activities/tenant-a/standing?" + q, ""},
		{"GET", "/api/v1/namespaces?" + q, ""},
		{"GET", "/api/v1/workers?access_token=admin-secret", ""},
		{"POST", "/api/v1/namespaces?access_token=admin-secret", `{"name":"via-query"}`},
		{"GET", "/metrics?access_token=admin-secret", ""},
	} {
		code, body := httpCall(t, c.method, base+c.path, "", c.body)
		if code != 401 || !strings.Contains(body, "Authorization") || !strings.Contains(body, "access_token") {
			t.Errorf("%s %s: %d %s, want 401 pointing at the Authorization header", c.method, c.path, code, body)
		}
	}
	// Nothing was scheduled, canceled or created.
	if _, err := admin.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "via-query"}); status.Code(err) != codes.NotFound {
		t.Errorf("activity scheduled through a query token: %v", err)
	}
	got, err := admin.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "standing"})
	if err != nil || got.GetActivity().GetState() == aionv1.ActivityState_ACTIVITY_STATE_CANCELED {
		t.Errorf("activity canceled through a query token: %v %v", got, err)
	}
	if _, err := admin.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "via-query"}); status.Code(err) != codes.NotFound {
		t.Errorf("namespace created through a query token: %v", err)
	}
	// A query token is refused even beside a valid header: it is the
	// query that is wrong, wherever the credential came from.
	if code, body := httpCall(t, "POST", base+"/api/v1/activities?"+q, "tenant-a-client-secret", schedule); code != 401 {
		t.Errorf("header and query token: %d %s, want 401", code, body)
	}

	// The same calls with the header work.
	if code, body := httpCall(t, "POST", base+"/api/v1/activities", "tenant-a-client-secret", schedule); code != 200 {
		t.Fatalf("schedule with the header: %d %s", code, body)
	}
	// The event stream takes the token from the query.
	if code, line := firstSSELine(t, base+"/api/v1/events?access_token=admin-secret", ""); code != 200 || line != "event: snapshot" {
		t.Fatalf("event stream with a query token: %d %q", code, line)
	}
	if code, _ := firstSSELine(t, base+"/api/v1/events?access_token=no-such-key", ""); code != 401 {
		t.Fatalf("event stream with an unknown query token: %d, want 401", code)
	}

	// The rule is the same with auth none, so a client built against a
	// development server does not break against a production one.
	open := setup(t)
	if code, body := httpCall(t, "POST", "http://"+open.srv.HTTPAddr()+"/api/v1/activities?access_token=x", "", schedule); code != 401 ||
		!strings.Contains(body, "Authorization") {
		t.Errorf("query token with auth none: %d %s, want 401", code, body)
	}
}

// TestMetricsNeedAReaderOrAdminWhenAuthIsOn: /metrics names every
// namespace and task queue; with authentication on, only an admin or a
// reader of every namespace may read it, with the Authorization header.
func TestMetricsNeedAReaderOrAdminWhenAuthIsOn(t *testing.T) {
	t.Parallel()
	b := setup(t, withReaderKeys)
	b.as(t, "admin-secret").schedule(t, &aionv1.ScheduleRequest{Namespace: "tenant-a", Id: "m1", ActivityType: "job"})
	url := "http://" + b.srv.HTTPAddr() + "/metrics"
	const tenantLabel = `namespace="tenant-a"`
	for _, c := range []struct {
		token string
		code  int
	}{
		{"", 401},
		{"no-such-key", 401},
		{"tenant-a-worker-secret", 403},
		{"tenant-a-client-secret", 403},
		{"tenant-a-reader-secret", 403}, // metrics show other tenants too
		{"dashboard-secret", 200},
		{"admin-secret", 200},
	} {
		code, body := httpCall(t, "GET", url, c.token, "")
		if code != c.code {
			t.Errorf("GET /metrics with %q: %d, want %d: %.200s", c.token, code, c.code, body)
		}
		if leaked := strings.Contains(body, tenantLabel); leaked != (c.code == 200) {
			t.Errorf("GET /metrics with %q: tenant label present %v, want %v", c.token, leaked, c.code == 200)
		}
	}
	if _, body := httpCall(t, "GET", url, "tenant-a-reader-secret", ""); !strings.Contains(body, `namespaces \"*\"`) {
		t.Errorf("a scoped reader's refusal does not say a \"*\" grant is needed: %s", body)
	}

	// With auth none, metrics stay open.
	open := setup(t)
	if code, body := httpCall(t, "GET", "http://"+open.srv.HTTPAddr()+"/metrics", "", ""); code != 200 || !strings.Contains(body, "aion_") {
		t.Errorf("GET /metrics with auth none: %d %.200s", code, body)
	}
}

// TestReaderCanReadButChangeNothing: the reader role reads activities,
// namespaces and workers of its namespaces over gRPC and the JSON API, and
// every call that would change something is PermissionDenied (403) and
// changes nothing. A reader of some namespaces may not watch the cluster,
// whose events are not filtered; a reader of every namespace may.
func TestReaderCanReadButChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, withReaderKeys)
	ctx := context.Background()
	client := b.as(t, "tenant-a-client-secret")
	client.schedule(t, &aionv1.ScheduleRequest{Namespace: "tenant-a", Id: "a1", ActivityType: "job"})
	client.schedule(t, &aionv1.ScheduleRequest{Namespace: "tenant-a", Id: "a2", ActivityType: "job"})
	if _, err := client.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "tenant-a", Id: "a2"}); err != nil {
		t.Fatal(err)
	}
	b.as(t, "tenant-b-client-secret").schedule(t, &aionv1.ScheduleRequest{Namespace: "tenant-b", Id: "b1", ActivityType: "job"})
	wa := b.as(t, "tenant-a-worker-secret").mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-a"}, TaskQueue: "q", ActivityTypes: []string{"other"}})
	b.as(t, "tenant-b-worker-secret").mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-b"}, TaskQueue: "q", ActivityTypes: []string{"other"}})

	r := b.as(t, "tenant-a-reader-secret")
	cluster := aionv1.NewClusterServiceClient(r.cc)

	// Reads within its namespaces.
	if got, err := r.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "a1"}); err != nil || got.GetActivity().GetId() != "a1" {
		t.Errorf("reader get: %v %v", got, err)
	}
	if got, err := r.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "tenant-a"}); err != nil || len(got.GetActivities()) != 2 {
		t.Errorf("reader list: %v %v", got, err)
	}
	if got, err := r.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: "tenant-a", Id: "a2"}); err != nil ||
		got.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_CANCELED {
		t.Errorf("reader wait: %v %v", got, err)
	}
	if _, err := r.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "tenant-a"}); err != nil {
		t.Errorf("reader namespace get: %v", err)
	}
	if got, err := r.namespaces.List(ctx, &aionv1.ListNamespacesRequest{}); err != nil || len(got.GetNamespaces()) != 1 ||
		got.GetNamespaces()[0].GetName() != "tenant-a" {
		t.Errorf("reader namespace list: %v %v, want tenant-a alone", got, err)
	}
	if got, err := cluster.ListWorkers(ctx, &aionv1.ListWorkersRequest{}); err != nil || len(got.GetWorkers()) != 1 ||
		got.GetWorkers()[0].GetId() != wa.id {
		t.Errorf("reader list workers: %v %v, want tenant-a's worker alone", got, err)
	}
	// Namespace grants hold for readers too.
	if _, err := r.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-b", Id: "b1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader of tenant-a reading tenant-b: %v", err)
	}
	if _, err := r.namespaces.ListFlowLimits(ctx, &aionv1.ListFlowLimitsRequest{Namespace: "tenant-a"}); err != nil {
		t.Errorf("reader list flow limits: %v", err)
	}
	if _, err := r.namespaces.ListFlowLimits(ctx, &aionv1.ListFlowLimitsRequest{Namespace: "tenant-b"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader of tenant-a listing tenant-b's flow limits: %v", err)
	}

	// Nothing that changes state.
	calls := map[string]error{}
	_, calls["schedule"] = r.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "tenant-a", Id: "by-reader", ActivityType: "job"})
	_, calls["schedule batch"] = r.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: []*aionv1.ScheduleRequest{
		{Namespace: "tenant-a", Id: "by-reader", ActivityType: "job"}}})
	_, calls["cancel"] = r.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "tenant-a", Id: "a1"})
	_, calls["intervene"] = r.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "tenant-a", Id: "a1",
		Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{Text: "hi"}}}})
	_, calls["create namespace"] = r.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "by-reader"})
	_, calls["place"] = r.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "tenant-a",
		Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED, Nodes: []string{"n1"}}})
	_, calls["set flow limit"] = r.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: &aionv1.FlowLimit{
		Namespace: "tenant-a", Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: "job", Concurrency: proto.Int32(1)}})
	_, calls["clear flow limit"] = r.namespaces.ClearFlowLimit(ctx, &aionv1.ClearFlowLimitRequest{Namespace: "tenant-a",
		Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: "job"})
	_, calls["drain"] = cluster.DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: wa.id})
	_, calls["connect a worker"] = r.connect(t, &aionv1.Register{Namespaces: []string{"tenant-a"}, ActivityTypes: []string{"job"}})
	watch, err := cluster.Watch(ctx, &aionv1.WatchRequest{})
	if err == nil {
		_, err = watch.Recv()
	}
	calls["watch (tenant-a only)"] = err
	for what, err := range calls {
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "tenant-a-reader") {
			t.Errorf("reader %s: %v, want PermissionDenied naming the caller", what, err)
		}
	}

	// The JSON API: GET routes read, everything else is 403.
	base := "http://" + b.srv.HTTPAddr()
	for _, c := range []struct {
		method, path, body string
		code               int
	}{
		{"GET", "/api/v1/activities?namespace=tenant-a", "", 200},
		{"GET", "/api/v1/activities/tenant-a/a1", "", 200},
		{"GET", "/api/v1/namespaces", "", 200},
		{"GET", "/api/v1/namespaces/tenant-a", "", 200},
		{"GET", "/api/v1/workers", "", 200},
		{"GET", "/api/v1/activities/tenant-b/b1", "", 403},
		{"POST", "/api/v1/activities", `{"namespace":"tenant-a","id":"by-reader","activity_type":"job"}`, 403},
		{"POST", "/api/v1/activities/tenant-a/a1/cancel", "", 403},
		{"POST", "/api/v1/namespaces", `{"name":"by-reader"}`, 403},
		{"PUT", "/api/v1/namespaces/tenant-a/placement", `{"mode":"PLACEMENT_MODE_PINNED","nodes":["n1"]}`, 403},
		{"POST", fmt.Sprintf("/api/v1/workers/%d/drain", wa.id), "", 403},
		{"GET", "/api/v1/events", "", 403},
	} {
		if code, body := httpCall(t, c.method, base+c.path, "tenant-a-reader-secret", c.body); code != c.code {
			t.Errorf("reader %s %s: %d %.200s, want %d", c.method, c.path, code, body, c.code)
		}
	}

	// Nothing changed.
	admin := b.as(t, "admin-secret")
	if _, err := admin.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "by-reader"}); status.Code(err) != codes.NotFound {
		t.Errorf("a reader scheduled: %v", err)
	}
	if got, _ := admin.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "tenant-a", Id: "a1"}); got.GetActivity().GetState() == aionv1.ActivityState_ACTIVITY_STATE_CANCELED {
		t.Error("a reader canceled a1")
	}
	if got, _ := admin.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "tenant-a"}); got.GetNamespace().GetPlacement().GetMode() == aionv1.PlacementMode_PLACEMENT_MODE_PINNED {
		t.Error("a reader pinned tenant-a")
	}
	if all, _ := admin.namespaces.List(ctx, &aionv1.ListNamespacesRequest{}); len(all.GetNamespaces()) != 2 {
		t.Errorf("namespaces = %v, want tenant-a and tenant-b only", all.GetNamespaces())
	}
	workers, err := aionv1.NewClusterServiceClient(admin.cc).ListWorkers(ctx, &aionv1.ListWorkersRequest{})
	if err != nil || len(workers.GetWorkers()) != 2 {
		t.Fatalf("workers = %v %v, want the two tenants' workers", workers, err)
	}
	for _, w := range workers.GetWorkers() {
		if w.GetState() != aionv1.WorkerState_WORKER_STATE_CONNECTED {
			t.Errorf("worker %d is %v after a reader's drain", w.GetId(), w.GetState())
		}
	}

	// A reader of every namespace watches the cluster, over gRPC and SSE.
	dash := b.as(t, "dashboard-secret")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err = aionv1.NewClusterServiceClient(dash.cc).Watch(wctx, &aionv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetSnapshot() == nil || len(first.GetSnapshot().GetWorkers()) != 2 {
		t.Fatalf("dashboard watch: %v %v, want a snapshot with both workers", first, err)
	}
	cancel()
	if code, line := firstSSELine(t, base+"/api/v1/events", "dashboard-secret"); code != 200 || line != "event: snapshot" {
		t.Fatalf("dashboard event stream: %d %q", code, line)
	}
}

// hsToken signs claims with HS256.
func hsToken(secret string, claims map[string]any) string {
	seg := func(v any) string { j, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(j) }
	head := seg(map[string]string{"alg": "HS256"}) + "." + seg(claims)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(head))
	return head + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func jwtServer(t *testing.T, issuer, audience string) (*bundle, string) {
	t.Helper()
	secret := strings.Repeat("s", 40)
	path := filepath.Join(t.TempDir(), "jwt.secret")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *server.Config) {
		c.Auth = server.AuthConfig{Mode: "jwt", JWTSecretFile: path, JWTIssuer: issuer, JWTAudience: audience, ExpiryGrace: time.Second}
	})
	return b, secret
}

// TestJWTWithWrongAudienceIsRefused: a server configured with an issuer and
// an audience refuses tokens the same identity provider signed for another
// service, or that another issuer signed with the shared key, over gRPC and
// the JSON API, naming the claim and its value.
func TestJWTWithWrongAudienceIsRefused(t *testing.T) {
	t.Parallel()
	b, secret := jwtServer(t, "https://idp.example", "aion")
	ctx := context.Background()
	claims := func(iss string, aud any) map[string]any {
		return map[string]any{"sub": "svc", "namespaces": []string{"*"}, "roles": []string{"admin"},
			"exp": time.Now().Add(time.Hour).Unix(), "iss": iss, "aud": aud}
	}
	good := hsToken(secret, claims("https://idp.example", []string{"billing", "aion"}))
	if _, err := b.as(t, good).namespaces.List(ctx, &aionv1.ListNamespacesRequest{}); err != nil {
		t.Fatalf("token for aion: %v", err)
	}
	for _, c := range []struct {
		name, token, names string
	}{
		{"another audience", hsToken(secret, claims("https://idp.example", "billing")), `claim aud ["billing"]: does not contain "aion"`},
		{"another issuer", hsToken(secret, claims("https://other.example", "aion")), `claim iss "https://other.example": want "https://idp.example"`},
	} {
		_, err := b.as(t, c.token).namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), c.names) {
			t.Errorf("%s over gRPC: %v, want Unauthenticated naming %s", c.name, err, c.names)
		}
		code, body := httpCall(t, "GET", "http://"+b.srv.HTTPAddr()+"/api/v1/namespaces", c.token, "")
		var out struct{ Code, Message string }
		_ = json.Unmarshal([]byte(body), &out)
		if code != 401 || !strings.Contains(out.Message, c.names) {
			t.Errorf("%s over the JSON API: %d %s, want 401 naming %s", c.name, code, body, c.names)
		}
	}
}

// TestOversizedBearerTokenIsRefusedForItsSize: a validly signed admin JWT
// just over auth.MaxTokenBytes (its claims list 1,500 namespaces) is
// refused over gRPC and the JSON API for its size, before it is decoded.
func TestOversizedBearerTokenIsRefusedForItsSize(t *testing.T) {
	t.Parallel()
	b, secret := jwtServer(t, "", "")
	nss := make([]string, 1500)
	for i := range nss {
		nss[i] = fmt.Sprintf("ns-%04d", i)
	}
	token := hsToken(secret, map[string]any{"sub": "big", "namespaces": nss, "roles": []string{"admin"}, "exp": time.Now().Add(time.Hour).Unix()})
	if len(token) <= auth.MaxTokenBytes || len(token) > 2*auth.MaxTokenBytes {
		t.Fatalf("token of %d bytes, want just over %d", len(token), auth.MaxTokenBytes)
	}
	want := fmt.Sprintf("bearer token of %d bytes is over the %d-byte limit", len(token), auth.MaxTokenBytes)
	_, err := b.as(t, token).namespaces.List(context.Background(), &aionv1.ListNamespacesRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("over gRPC: %v, want Unauthenticated: %s", err, want)
	}
	if code, body := httpCall(t, "GET", "http://"+b.srv.HTTPAddr()+"/api/v1/namespaces", token, ""); code != 401 || !strings.Contains(body, want) {
		t.Errorf("over the JSON API: %d %s, want 401: %s", code, body, want)
	}
}

// rpcsOf returns every method of every service in the generated files of
// package pkg, as gRPC full method names with their descriptors.
func rpcsOf(pkg protoreflect.FullName) map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage(pkg, func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out[fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())] = md
			}
		}
		return true
	})
	return out
}

// callRPC calls the method md over cc with a request naming namespace ns
// wherever the request has a namespace, and returns the call's error: for a
// stream, the error of its first answer.
func callRPC(cc *grpc.ClientConn, full string, md protoreflect.MethodDescriptor, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newMessage := func(d protoreflect.MessageDescriptor) (proto.Message, error) {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			return nil, err
		}
		return mt.New().Interface(), nil
	}
	in, err := newMessage(md.Input())
	if err != nil {
		return err
	}
	out, err := newMessage(md.Output())
	if err != nil {
		return err
	}
	if f := md.Input().Fields().ByName("namespace"); f != nil && f.Kind() == protoreflect.StringKind && !f.IsList() {
		in.ProtoReflect().Set(f, protoreflect.ValueOfString(ns))
	}
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return cc.Invoke(ctx, full, in, out)
	}
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: string(md.Name()),
		ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, full)
	if err != nil {
		return err
	}
	if err := s.SendMsg(in); err != nil && !errors.Is(err, io.EOF) {
		return err // io.EOF: the server already ended the stream; RecvMsg says how
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(out)
}

// TestEveryRPCHasARole calls every RPC of every aion.v1 service, read from
// the generated descriptors, and the health service, over the wire with
// each kind of key and with none. The server must refuse exactly the calls
// the policy refuses, with its reason, and let every other one through to
// its handler: an RPC that skipped the interceptors, or a new one served
// without a decision, fails here.
func TestEveryRPCHasARole(t *testing.T) {
	t.Parallel()
	callers := []struct {
		secret string
		id     auth.Identity
	}{
		{"worker-secret", auth.Identity{Name: "worker", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleWorker}}},
		{"client-secret", auth.Identity{Name: "client", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}}},
		{"reader-secret", auth.Identity{Name: "reader", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleReader}}},
		{"reader-all-secret", auth.Identity{Name: "reader-all", AllNamespaces: true, Roles: []auth.Role{auth.RoleReader}}},
		{"admin-secret", auth.Identity{Name: "admin", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleAdmin}}},
		{"worker-client-secret", auth.Identity{Name: "worker-client", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleWorker, auth.RoleClient}}},
	}
	b := setup(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = nil
		for _, k := range callers {
			ns := k.id.Namespaces
			if k.id.AllNamespaces {
				ns = []string{"*"}
			}
			c.Auth.Keys = append(c.Auth.Keys, key(k.id.Name, k.secret, k.id.Roles, ns...))
		}
	})
	rpcs := rpcsOf("aion.v1")
	if len(rpcs) < 15 {
		t.Fatalf("found only %d aion.v1 methods in the generated descriptors: %v", len(rpcs), rpcs)
	}
	maps.Copy(rpcs, rpcsOf("grpc.health.v1"))

	for full, md := range rpcs {
		t.Run(strings.TrimPrefix(full, "/"), func(t *testing.T) {
			t.Parallel()
			err := callRPC(b.as(t, "").cc, full, md, "a")
			switch code := status.Code(err); {
			case auth.Public(full) && (code == codes.Unauthenticated || code == codes.PermissionDenied || code == codes.Unimplemented):
				t.Errorf("without a token: %v, want the public method served", err)
			case !auth.Public(full) && code != codes.Unauthenticated:
				t.Errorf("without a token: %v, want Unauthenticated", err)
			}
			for _, c := range callers {
				err := callRPC(b.as(t, c.secret).cc, full, md, "a")
				code := status.Code(err)
				if refusal := auth.Authorize(c.id, full); refusal != nil {
					if code != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), refusal.Error()) {
						t.Errorf("%s: %v, want PermissionDenied saying %q", c.id.Name, err, refusal)
					}
					continue
				}
				switch code {
				case codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
					t.Errorf("%s, whom the policy allows: %v, want the call to reach its handler", c.id.Name, err)
				}
			}
		})
	}
}
