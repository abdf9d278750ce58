package auth_test

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/aion-run/aion/gen/aion/v1" // registers the schema TestEveryRPCHasARole reads
	"github.com/aion-run/aion/internal/auth"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	keys, err := auth.NewKeys([]auth.APIKey{
		{Name: "tenant-a", SHA256: auth.HashSecret("secret-a"), Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleWorker}},
		{Name: "ops", SHA256: auth.HashSecret("secret-ops"), Namespaces: []string{"*"}, Roles: []auth.Role{auth.RoleAdmin}},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id, err := keys.Authenticate("secret-a", now)
	if err != nil || id.Name != "tenant-a" || !id.Has(auth.RoleWorker) || id.Has(auth.RoleClient) ||
		!id.Caller().Allows("a") || id.Caller().Allows("b") {
		t.Fatalf("tenant-a key: %+v, %v", id, err)
	}
	ops, err := keys.Authenticate("secret-ops", now)
	if err != nil || !ops.Has(auth.RoleClient) || !ops.Caller().Allows("anything") {
		t.Fatalf("ops key: %+v, %v", ops, err)
	}
	for _, bad := range []string{"", "secret-b", "secret-a "} {
		if _, err := keys.Authenticate(bad, now); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("key %q: %v, want ErrUnauthenticated", bad, err)
		}
	}
	for _, cfg := range [][]auth.APIKey{
		{{SHA256: auth.HashSecret("x"), Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}}},
		{{Name: "n", SHA256: "not-hex", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}}},
		{{Name: "n", SHA256: auth.HashSecret("x"), Namespaces: []string{"a"}}},
		{{Name: "n", SHA256: auth.HashSecret("x"), Roles: []auth.Role{auth.RoleClient}}},
		{{Name: "n", SHA256: auth.HashSecret("x"), Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}},
			{Name: "m", SHA256: auth.HashSecret("x"), Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}}},
	} {
		if _, err := auth.NewKeys(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func sign(t *testing.T, header, claims map[string]any, signer func([]byte) []byte) string {
	t.Helper()
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	head := seg(header) + "." + seg(claims)
	return head + "." + base64.RawURLEncoding.EncodeToString(signer([]byte(head)))
}

func TestJWTHS256(t *testing.T) {
	t.Parallel()
	secret := []byte(strings.Repeat("k", 32))
	j, err := auth.NewHS256(secret)
	if err != nil {
		t.Fatal(err)
	}
	hs := func(key []byte) func([]byte) []byte {
		return func(b []byte) []byte { m := hmac.New(sha256.New, key); m.Write(b); return m.Sum(nil) }
	}
	now := time.Now()
	good := map[string]any{"sub": "svc", "namespaces": []string{"a", "b"}, "roles": []string{"client"}, "exp": now.Add(time.Hour).Unix()}
	id, err := j.Authenticate(sign(t, map[string]any{"alg": "HS256"}, good, hs(secret)), now)
	if err != nil || id.Name != "svc" || !id.Has(auth.RoleClient) || !id.Caller().Allows("b") || id.Caller().Allows("c") || id.Expires.IsZero() {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	cases := map[string]string{
		"wrong key":     sign(t, map[string]any{"alg": "HS256"}, good, hs([]byte(strings.Repeat("x", 32)))),
		"alg none":      sign(t, map[string]any{"alg": "none"}, good, func([]byte) []byte { return nil }),
		"alg RS256":     sign(t, map[string]any{"alg": "RS256"}, good, hs(secret)),
		"expired":       sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "s", "roles": []string{"client"}, "exp": now.Add(-time.Hour).Unix()}, hs(secret)),
		"no exp":        sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "s", "roles": []string{"client"}}, hs(secret)),
		"no sub":        sign(t, map[string]any{"alg": "HS256"}, map[string]any{"roles": []string{"client"}, "exp": now.Add(time.Hour).Unix()}, hs(secret)),
		"unknown role":  sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "s", "roles": []string{"root"}, "exp": now.Add(time.Hour).Unix()}, hs(secret)),
		"not yet valid": sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "s", "roles": []string{"client"}, "exp": now.Add(2 * time.Hour).Unix(), "nbf": now.Add(time.Hour).Unix()}, hs(secret)),
		"garbage":       "a.b",
	}
	for name, tok := range cases {
		if _, err := j.Authenticate(tok, now); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	if _, err := auth.NewHS256([]byte("short")); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
}

func TestJWTRS256FromJWKS(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k1", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes())}}}
	path := filepath.Join(t.TempDir(), "jwks.json")
	b, _ := json.Marshal(jwks)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := auth.NewRS256FromJWKS(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := func(k *rsa.PrivateKey) func([]byte) []byte {
		return func(b []byte) []byte {
			sum := sha256.Sum256(b)
			s, _ := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
			return s
		}
	}
	now := time.Now()
	claims := map[string]any{"sub": "w", "namespaces": []string{"*"}, "roles": []string{"worker"}, "exp": now.Add(time.Hour).Unix()}
	id, err := j.Authenticate(sign(t, map[string]any{"alg": "RS256", "kid": "k1"}, claims, rs(key)), now)
	if err != nil || !id.Has(auth.RoleWorker) || !id.Caller().Allows("x") {
		t.Fatalf("RS256 token: %+v, %v", id, err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := j.Authenticate(sign(t, map[string]any{"alg": "RS256", "kid": "k1"}, claims, rs(other)), now); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("token signed by another key: %v", err)
	}
	if _, err := j.Authenticate(sign(t, map[string]any{"alg": "RS256", "kid": "k9"}, claims, rs(key)), now); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("unknown kid: %v", err)
	}
	// An HS256 token made with the public key as secret is refused.
	hs := func(b []byte) []byte { m := hmac.New(sha256.New, key.N.Bytes()); m.Write(b); return m.Sum(nil) }
	if _, err := j.Authenticate(sign(t, map[string]any{"alg": "HS256", "kid": "k1"}, claims, hs), now); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("alg confusion: %v", err)
	}
}

// TestEveryRPCHasARole checks who may call every method of every aion.v1
// service, read from the compiled schema: a method added to the schema and
// not to this table fails here, and until it is added to the policy it
// needs admin.
func TestEveryRPCHasARole(t *testing.T) {
	t.Parallel()
	callers := map[string]auth.Identity{
		"worker":     {Name: "w", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleWorker}},
		"client":     {Name: "c", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleClient}},
		"reader":     {Name: "r", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleReader}},
		"reader-all": {Name: "r*", AllNamespaces: true, Roles: []auth.Role{auth.RoleReader}},
		"admin":      {Name: "o", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleAdmin}},
		"nobody":     {Name: "n", AllNamespaces: true},
	}
	const all = "worker client reader reader-all admin nobody"
	want := map[string]string{
		"/aion.v1.WorkerService/Connect":                            "worker admin",
		"/aion.v1.ActivityService/Schedule":                         "client admin",
		"/aion.v1.ActivityService/ScheduleBatch":                    "client admin",
		"/aion.v1.ActivityService/Get":                              "client reader reader-all admin",
		"/aion.v1.ActivityService/Wait":                             "client reader reader-all admin",
		"/aion.v1.ActivityService/Cancel":                           "client admin",
		"/aion.v1.ActivityService/List":                             "client reader reader-all admin",
		"/aion.v1.ActivityService/Intervene":                        "client admin",
		"/aion.v1.ActivityService/Why":                              "client reader reader-all admin",
		"/aion.v1.WorkflowService/Start":                            "client admin",
		"/aion.v1.WorkflowService/Get":                              "client reader reader-all admin",
		"/aion.v1.WorkflowService/List":                             "client reader reader-all admin",
		"/aion.v1.WorkflowService/Wait":                             "client reader reader-all admin",
		"/aion.v1.WorkflowService/Signal":                           "client admin",
		"/aion.v1.WorkflowService/Query":                            "client reader reader-all admin",
		"/aion.v1.WorkflowService/Cancel":                           "client admin",
		"/aion.v1.WorkflowService/Terminate":                        "client admin",
		"/aion.v1.WorkflowService/History":                          "client reader reader-all admin",
		"/aion.v1.WorkflowService/Why":                              "client reader reader-all admin",
		"/aion.v1.ClusterService/ListWaiting":                       "client reader reader-all admin",
		"/aion.v1.ScheduleService/Create":                           "client admin",
		"/aion.v1.ScheduleService/Get":                              "client reader reader-all admin",
		"/aion.v1.ScheduleService/List":                             "client reader reader-all admin",
		"/aion.v1.ScheduleService/Update":                           "client admin",
		"/aion.v1.ScheduleService/Pause":                            "client admin",
		"/aion.v1.ScheduleService/Resume":                           "client admin",
		"/aion.v1.ScheduleService/Trigger":                          "client admin",
		"/aion.v1.ScheduleService/Backfill":                         "client admin",
		"/aion.v1.ScheduleService/Delete":                           "client admin",
		"/aion.v1.NamespaceService/Get":                             "client reader reader-all admin",
		"/aion.v1.NamespaceService/List":                            "client reader reader-all admin",
		"/aion.v1.NamespaceService/Create":                          "admin",
		"/aion.v1.NamespaceService/SetPlacement":                    "admin",
		"/aion.v1.NamespaceService/SetRetention":                    "admin",
		"/aion.v1.NamespaceService/SetFlowLimit":                    "admin",
		"/aion.v1.NamespaceService/ClearFlowLimit":                  "admin",
		"/aion.v1.NamespaceService/GetFlowLimit":                    "client reader reader-all admin",
		"/aion.v1.NamespaceService/ListFlowLimits":                  "client reader reader-all admin",
		"/aion.v1.ClusterService/ListWorkers":                       "reader reader-all admin",
		"/aion.v1.ClusterService/DrainWorker":                       "admin",
		"/aion.v1.ClusterService/Watch":                             "reader-all admin",
		auth.MetricsMethod:                                          "reader-all admin",
		"/aion.v1.ActivityService/SomethingNew":                     "admin",
		"/grpc.health.v1.Health/Check":                              all,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": all,
	}
	var inSchema []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if fd.Package() != "aion.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				inSchema = append(inSchema, fmt.Sprintf("/%s/%s", sd.FullName(), sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(inSchema) < 15 {
		t.Fatalf("found only %d aion.v1 methods in the schema: %v", len(inSchema), inSchema)
	}
	for _, m := range inSchema {
		if _, ok := want[m]; !ok {
			t.Errorf("%s is in the schema but not in this test: decide who may call it, in policy.go and here", m)
		}
	}
	for m, allowed := range want {
		for name, id := range callers {
			err := auth.Authorize(id, m)
			if got, exp := err == nil, slices.Contains(strings.Fields(allowed), name); got != exp {
				t.Errorf("%s by %s: allowed %v (%v), want %v", m, name, got, err, exp)
			}
		}
	}
	if public := auth.Public("/grpc.health.v1.Health/Check"); !public {
		t.Error("health check is not public")
	}
	if auth.Public("/aion.v1.ActivityService/Get") {
		t.Error("ActivityService/Get is public")
	}
}

func TestRefusalNamesTheRolesThatWouldBeAllowed(t *testing.T) {
	t.Parallel()
	scoped := auth.Identity{Name: "dash", Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleReader}}
	err := auth.Authorize(scoped, "/aion.v1.ClusterService/Watch")
	if err == nil || !strings.Contains(err.Error(), `reader (with namespaces "*"`) || !strings.Contains(err.Error(), "admin") ||
		!strings.Contains(err.Error(), `"dash" has roles [reader]`) {
		t.Fatalf("scoped reader watching: %v", err)
	}
	err = auth.Authorize(scoped, "/aion.v1.ActivityService/Schedule")
	if err == nil || !strings.Contains(err.Error(), "one of the roles client, admin is needed") {
		t.Fatalf("reader scheduling: %v", err)
	}
}

func TestParseRoleKnowsTheReaderRole(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"worker", "client", "reader", "admin"} {
		if r, err := auth.ParseRole(name); err != nil || string(r) != name {
			t.Errorf("ParseRole(%q) = %q, %v", name, r, err)
		}
	}
	_, err := auth.ParseRole("viewer")
	if err == nil || !strings.Contains(err.Error(), `"viewer"`) || !strings.Contains(err.Error(), "reader") {
		t.Fatalf("ParseRole(viewer): %v, want an error naming the value and listing reader", err)
	}
	if _, err := auth.NewKeys([]auth.APIKey{{Name: "dash", SHA256: auth.HashSecret("x"), Namespaces: []string{"a"}, Roles: []auth.Role{auth.RoleReader}}}); err != nil {
		t.Fatalf("a reader key: %v", err)
	}
}

func hs256(secret []byte) func([]byte) []byte {
	return func(b []byte) []byte { m := hmac.New(sha256.New, secret); m.Write(b); return m.Sum(nil) }
}

func TestJWTIssuerAndAudienceAreChecked(t *testing.T) {
	t.Parallel()
	secret := []byte(strings.Repeat("k", 32))
	now := time.Now()
	claims := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "svc", "namespaces": []string{"a"}, "roles": []string{"client"}, "exp": now.Add(time.Hour).Unix()}
		maps.Copy(c, extra)
		return c
	}
	tok := func(extra map[string]any) string {
		return sign(t, map[string]any{"alg": "HS256"}, claims(extra), hs256(secret))
	}
	strict, err := auth.NewHS256(secret)
	if err != nil {
		t.Fatal(err)
	}
	strict.Issuer, strict.Audience = "https://idp.example", "aion"
	lax, _ := auth.NewHS256(secret)

	for _, tc := range []struct {
		name  string
		extra map[string]any
		// refusal is what the strict authenticator's error names; empty
		// means accepted.
		refusal string
	}{
		{"aud string", map[string]any{"iss": "https://idp.example", "aud": "aion"}, ""},
		{"aud list", map[string]any{"iss": "https://idp.example", "aud": []string{"billing", "aion"}}, ""},
		{"other audience", map[string]any{"iss": "https://idp.example", "aud": "billing"}, `claim aud ["billing"]: does not contain "aion"`},
		{"other audiences", map[string]any{"iss": "https://idp.example", "aud": []string{"billing", "crm"}}, `claim aud ["billing" "crm"]: does not contain "aion"`},
		{"no audience", map[string]any{"iss": "https://idp.example"}, `claim aud: missing, want "aion"`},
		{"aud not a string", map[string]any{"iss": "https://idp.example", "aud": 7}, "aud: want a string or a list of strings, got 7"},
		{"other issuer", map[string]any{"iss": "https://evil.example", "aud": "aion"}, `claim iss "https://evil.example": want "https://idp.example"`},
		{"no issuer", map[string]any{"aud": "aion"}, `claim iss: missing, want "https://idp.example"`},
	} {
		_, err := strict.Authenticate(tok(tc.extra), now)
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refusal != "" && (!errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: %v, want Unauthenticated naming %s", tc.name, err, tc.refusal)
		}
		// Without an expected issuer and audience, the claims are not
		// checked (only their shape): tokens of before stay valid.
		if _, err := lax.Authenticate(tok(tc.extra), now); err != nil && tc.name != "aud not a string" {
			t.Errorf("%s without expectations: %v", tc.name, err)
		}
	}
}

// TestOversizedTokensAreRefusedBeforeDecoding presents credentials of over a
// megabyte to every authenticator: a validly signed JWT whose claims list
// 100,000 namespaces, and a 1.4 MB API key that is configured. Each is
// refused for its size, naming the size and the limit, not for its content.
func TestOversizedTokensAreRefusedBeforeDecoding(t *testing.T) {
	t.Parallel()
	now := time.Now()
	secret := []byte(strings.Repeat("k", 32))
	j, err := auth.NewHS256(secret)
	if err != nil {
		t.Fatal(err)
	}
	nss := make([]string, 100_000)
	for i := range nss {
		nss[i] = fmt.Sprintf("ns-%07d", i)
	}
	huge := sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "big", "namespaces": nss, "roles": []string{"admin"},
		"exp": now.Add(time.Hour).Unix()}, hs256(secret))
	hugeKey := strings.Repeat("s", 1_400_000)
	keys, err := auth.NewKeys([]auth.APIKey{{Name: "big", SHA256: auth.HashSecret(hugeKey), Namespaces: []string{"*"}, Roles: []auth.Role{auth.RoleAdmin}}})
	if err != nil {
		t.Fatal(err)
	}
	justFits := sign(t, map[string]any{"alg": "HS256"}, map[string]any{"sub": "fits", "namespaces": nss[:700], "roles": []string{"client"},
		"exp": now.Add(time.Hour).Unix()}, hs256(secret))
	if len(justFits) <= 8<<10 || len(justFits) > auth.MaxTokenBytes {
		t.Fatalf("the token meant to fit is %d bytes; adjust the test", len(justFits))
	}
	if _, err := j.Authenticate(justFits, now); err != nil {
		t.Fatalf("a %d-byte JWT listing 700 namespaces: %v", len(justFits), err)
	}
	for _, tc := range []struct {
		name  string
		authn auth.Authenticator
		token string
	}{
		{"jwt", j, huge},
		{"keys", keys, hugeKey},
		{"anonymous", auth.Anonymous{}, hugeKey},
		{"jwt, one byte over", j, strings.Repeat("x", auth.MaxTokenBytes+1)},
	} {
		_, err := tc.authn.Authenticate(tc.token, now)
		want := fmt.Sprintf("bearer token of %d bytes is over the %d-byte limit", len(tc.token), auth.MaxTokenBytes)
		if !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want Unauthenticated: %s", tc.name, err, want)
		}
	}
}

// BenchmarkOversizedJWTRefusal measures refusing a 1.4 MB JWT-shaped token
// (a real header, a huge claims segment, a wrong signature).
func BenchmarkOversizedJWTRefusal(b *testing.B) {
	j, _ := auth.NewHS256([]byte(strings.Repeat("k", 32)))
	token := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + strings.Repeat("x", 1_400_000) + "." +
		base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Authenticate(token, now); err == nil {
			b.Fatal("accepted")
		}
	}
}
