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
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/auth"
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

func TestEveryRPCHasARole(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		role   auth.Role
		public bool
	}{
		"/aion.v1.WorkerService/Connect":                            {auth.RoleWorker, false},
		"/aion.v1.ActivityService/Schedule":                         {auth.RoleClient, false},
		"/aion.v1.NamespaceService/SetPlacement":                    {auth.RoleAdmin, false},
		"/aion.v1.ClusterService/Watch":                             {auth.RoleAdmin, false},
		"/grpc.health.v1.Health/Check":                              {"", true},
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {"", true},
		"/aion.v1.ActivityService/SomethingNew":                     {auth.RoleAdmin, false},
	}
	for m, want := range cases {
		role, public := auth.Required(m)
		if role != want.role || public != want.public {
			t.Errorf("%s: role %q public %v, want %q %v", m, role, public, want.role, want.public)
		}
	}
}
