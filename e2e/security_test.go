package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/auth"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aion test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(priv)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

func TestTokensAndTLSAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	config := filepath.Join(dir, "aion.toml")
	cfg := `auth = "token"
[[tokens]]
name = "acme-worker"
sha256 = "` + auth.HashSecret("acme-worker-key") + `"
namespaces = ["acme"]
roles = ["worker"]
[[tokens]]
name = "acme-app"
sha256 = "` + auth.HashSecret("acme-app-key") + `"
namespaces = ["acme"]
roles = ["client"]
`
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freePort(t), freePort(t)
	srv := start(t, "server", "server", "--config", config, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--data-dir", filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key, "--sqlite-sync", "normal")
	srv.waitLine(regexp.MustCompile(`msg=serving`), 30*time.Second)

	// A worker with the wrong key is refused and exits.
	bad := start(t, "bad-worker", "worker", "demo", "--address", grpcAddr, "--tls-ca", cert, "--token", "nope", "--namespace", "acme")
	if code := bad.exit(30 * time.Second); code == 0 || !strings.Contains(bad.output(), "Unauthenticated") {
		t.Fatalf("worker with a bad key: exit %d\n%s", code, bad.output())
	}
	// A worker whose key does not grant the namespace is refused too.
	other := start(t, "other-ns", "worker", "demo", "--address", grpcAddr, "--tls-ca", cert, "--token", "acme-worker-key", "--namespace", "acme,globex")
	if code := other.exit(30 * time.Second); code == 0 || !strings.Contains(other.output(), "PermissionDenied") {
		t.Fatalf("worker asking for an ungranted namespace: exit %d\n%s", code, other.output())
	}
	w := start(t, "worker", "worker", "demo", "--address", grpcAddr, "--tls-ca", cert, "--token", "acme-worker-key", "--namespace", "acme")
	w.waitLine(registered, 30*time.Second)

	run := func(args ...string) (string, int) {
		cmd := exec(append([]string{"--address", grpcAddr, "--tls-ca", cert}, args...)...)
		return cmd()
	}
	out, code := run("--token", "acme-app-key", "activity", "schedule", "--namespace", "acme", "--type", "echo", "--input", `{"tls":true}`, "--wait")
	if code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("schedule over TLS with a client key: exit %d\n%s", code, out)
	}
	if out, code := run("--token", "acme-app-key", "activity", "schedule", "--namespace", "globex", "--type", "echo", "--input", "{}"); code == 0 || !strings.Contains(out, "PermissionDenied") {
		t.Fatalf("client key on another namespace: exit %d\n%s", code, out)
	}
	if out, code := run("activity", "list", "--namespace", "acme"); code == 0 || !strings.Contains(out, "Unauthenticated") {
		t.Fatalf("no key: exit %d\n%s", code, out)
	}
	// Plain text against a TLS server fails rather than leaking anything.
	cmd := exec("--address", grpcAddr, "--token", "acme-app-key", "--timeout", "3s", "activity", "list", "--namespace", "acme")
	if _, code := cmd(); code == 0 {
		t.Fatal("a plain-text client talked to the TLS server")
	}
}
