package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
)

func TestJWTIssuerAndAudienceReachTheServer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.toml")
	file := "auth = \"jwt\"\njwt_secret_file = \"/etc/aion/jwt\"\njwt_issuer = \"https://idp.example\"\njwt_audience = \"from-file\"\n" +
		"[[tokens]]\nname = \"dash\"\nsha256 = \"" + auth.HashSecret("x") + "\"\nnamespaces = [\"*\"]\nroles = [\"reader\"]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	var got server.Config
	inv := &invocation{env: map[string]string{"AION_JWT_AUDIENCE": "aion"}, serve: func(_ context.Context, cfg server.Config, _ *slog.Logger) error {
		got = cfg
		return nil
	}}
	if code, _, errOut := inv.run(t, "server", "--config", path); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The environment beats the file; the file sets what nothing else does.
	if got.Auth.JWTIssuer != "https://idp.example" || got.Auth.JWTAudience != "aion" {
		t.Fatalf("auth config = %+v, want issuer from the file, audience from the environment", got.Auth)
	}
	if len(got.Auth.Keys) != 1 || len(got.Auth.Keys[0].Roles) != 1 || got.Auth.Keys[0].Roles[0] != auth.RoleReader {
		t.Fatalf("keys = %+v, want one reader", got.Auth.Keys)
	}
	out, errOut, code := printed(t, nil, "server", "--config", path, "--jwt-audience", "flag", "--print-config")
	if code != 0 || !strings.Contains(out, "jwt_issuer = \"https://idp.example\"\n") || !strings.Contains(out, "jwt_audience = \"flag\"\n") ||
		!strings.Contains(out, `roles = ["reader"]`) {
		t.Fatalf("--print-config: exit %d %s\n%s", code, errOut, out)
	}
}

func TestTokenNewMakesReaderKeys(t *testing.T) {
	t.Parallel()
	code, out, errOut := (&invocation{}).run(t, "token", "new", "--name", "prometheus", "--namespaces", "*", "--roles", "reader")
	if code != 0 || !strings.Contains(out, `roles = ["reader"]`) || !strings.Contains(out, `namespaces = ["*"]`) {
		t.Fatalf("token new --roles reader: exit %d %s\n%s", code, errOut, out)
	}
	code, _, errOut = (&invocation{}).run(t, "token", "new", "--name", "x", "--namespaces", "a", "--roles", "viewer")
	if code == 0 || !strings.Contains(errOut, `"viewer"`) || !strings.Contains(errOut, "reader") {
		t.Fatalf("token new --roles viewer: exit %d, stderr %q; want a refusal naming the value and listing reader", code, errOut)
	}
}
