package server_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/server"
)

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	if err := server.Defaults().Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}

// Validate is the one place settings are checked; each refusal names the
// flag and the value, and every refusal is reported at once.
func TestValidateNamesTheFlagAndValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  func(*server.Config)
		want string
	}{
		{func(c *server.Config) { c.HeartbeatWindow = 0 }, "--heartbeat-window 0s: must be more than zero"},
		{func(c *server.Config) { c.DrainTimeout = -time.Second }, "--drain-timeout -1s: must not be negative"},
		{func(c *server.Config) { c.SQLiteSync = "off" }, `--sqlite-sync "off"`},
		{func(c *server.Config) { c.AutoCreate = "" }, `--auto-create ""`},
		{func(c *server.Config) { c.Lease = 10 * time.Millisecond }, "--lease 10ms: want at least 300ms"},
		{func(c *server.Config) { c.MaxReceiveMemory = limit.Message }, "--max-receive-memory 8: want at least 16"},
		{func(c *server.Config) { c.MaxReceiveRate = -1 << 20 }, "--max-receive-rate -1: must not be negative"},
		{func(c *server.Config) { c.MaxListBytes = -1 }, "--max-list-bytes -1: must not be negative"},
		{func(c *server.Config) { c.Conn.HTTPIdleTimeout = -time.Second }, "--http-idle-timeout -1s: must not be negative"},
		{func(c *server.Config) { c.Store = "postgres:/x"; c.ServerName = "bad name" }, `--store "postgres:/x"`},
		{func(c *server.Config) { c.Store = "postgres:/x"; c.ServerName = "bad name" }, `--server-name: "bad name"`},
		{func(c *server.Config) { c.Auth.Mode, c.Dev = "token", true }, "aion dev always runs with authorization off"},
		{func(c *server.Config) { c.Auth.Mode, c.Auth.JWTSecretFile, c.Auth.JWKSFile = "jwt", "s", "k" }, "set one, not both"},
		{func(c *server.Config) { c.HTTPAddr = ":8080" }, "--http-addr :8080 is not a loopback address"},
		{func(c *server.Config) { c.TLSKey = "key.pem" }, `--tls-cert "" / --tls-key "key.pem": set both`},
	} {
		cfg := server.Defaults()
		tc.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate: %v, want an error with %q", err, tc.want)
		}
	}
}

// New refuses a bad configuration before it listens, opens or creates
// anything.
func TestNewRefusesABadConfigBeforeAcquiringAnything(t *testing.T) {
	t.Parallel()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.HeartbeatWindow = 0
	if s, err := server.New(context.Background(), cfg, nil); err == nil {
		_ = s.Stop(context.Background())
		t.Fatal("New with a zero heartbeat window: no error")
	}
	if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused configuration touched its data directory: %v", err)
	}
}

// A server built but never started stops cleanly and lets go of its
// listeners (goleak, in TestMain, checks that nothing it started is left).
func TestStopWithoutStartReleasesEverything(t *testing.T) {
	t.Parallel()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir, cfg.SQLiteSync = "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), "normal"
	s, err := server.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{s.GRPCAddr(), s.HTTPAddr()}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("stop without start: %v", err)
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Stop", a)
		}
	}
}
