package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/server"
)

func TestLimitFlagsReachTheServerConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.toml")
	if err := os.WriteFile(path, []byte("http_idle_timeout = \"7s\"\ngrpc_max_streams = 50\ngrpc_max_stream_rate = 300\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got server.Config
	inv := &invocation{
		env: map[string]string{"AION_GRPC_IDLE_TIMEOUT": "3m"},
		serve: func(_ context.Context, cfg server.Config, _ *slog.Logger) error {
			got = cfg
			return nil
		},
	}
	code, _, stderr := inv.run(t, "server", "--config", path, "--max-pending-bytes-per-namespace", "1048576",
		"--max-list-bytes", "65536", "--grpc-handshake-timeout", "2s", "--http-read-header-timeout", "1s",
		"--http-read-timeout", "4s", "--http-write-timeout", "5s", "--worker-transport", "lean")
	if code != exitOK {
		t.Fatalf("code %d: %s", code, stderr)
	}
	want := server.ConnLimits{GRPCHandshakeTimeout: 2 * time.Second, GRPCIdleTimeout: 3 * time.Minute, GRPCMaxStreams: 50, GRPCMaxStreamRate: 300,
		HTTPReadHeaderTimeout: time.Second, HTTPReadTimeout: 4 * time.Second, HTTPWriteTimeout: 5 * time.Second,
		HTTPIdleTimeout: 7 * time.Second, WorkerTransport: server.WorkerTransportLean}
	if got.Conn != want || got.MaxPendingBytesPerNamespace != 1<<20 || got.MaxListBytes != 64<<10 {
		t.Fatalf("config: conn %+v, pending bytes %d, list bytes %d; want %+v, 1048576, 65536",
			got.Conn, got.MaxPendingBytesPerNamespace, got.MaxListBytes, want)
	}
}

func TestLimitFlagsRefuseNegativeValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--max-pending-bytes-per-namespace", "-1"},
		{"--max-list-bytes", "-1"},
		{"--grpc-handshake-timeout", "-1s"},
		{"--grpc-idle-timeout", "-1s"},
		{"--http-read-header-timeout", "-1s"},
		{"--http-read-timeout", "-1s"},
		{"--http-write-timeout", "-1s"},
		{"--http-idle-timeout", "-1s"},
		{"--grpc-max-streams", "-1"},
		{"--worker-transport", "quic"},
	} {
		inv := &invocation{}
		code, _, stderr := inv.run(t, append([]string{"server"}, args...)...)
		if code != exitError || !strings.Contains(stderr, args[0]) {
			t.Errorf("%v: code %d stderr %q, want a refusal naming %s", args, code, stderr, args[0])
		}
	}
}
