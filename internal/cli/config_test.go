package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func printed(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := run(context.Background(), args, strings.NewReader(""), &out, &errOut, lookup)
	return out.String(), errOut.String(), code
}

func TestConfigFilePrecedence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.toml")
	file := "grpc_addr = \"127.0.0.1:6000\"\nhttp_addr = \"127.0.0.1:6001\"\ndrain_timeout = \"1m\"\nlog_format = \"json\"\npprof = true\nmax_namespaces = 20000\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AION_DRAIN_TIMEOUT": "5s"}
	out, errOut, code := printed(t, env, "server", "--config", path, "--http-addr", "127.0.0.1:7001", "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`grpc_addr = "127.0.0.1:6000"`, // from the file
		`http_addr = "127.0.0.1:7001"`, // the flag beats the file
		`drain_timeout = "5s"`,         // the environment beats the file
		`heartbeat_window = "15s"`,     // the default
		`log_format = "json"`,
		`pprof = true`,
		`max_namespaces = 20000`,
		`max_mint_per_request = 100`, // the default
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("--print-config lacks %s:\n%s", want, out)
		}
	}
}

func TestConfigFileRefusesBadKeysAndValues(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"grpc_adr = \"x\"\n":                  `unknown key "grpc_adr"`,
		"drain_timeout = \"soon\"\n":          "drain_timeout",
		"auto_create = \"sometimes\"\n":       "auto-create",
		"log_format = \"xml\"\n":              "log_format",
		"this is not toml\n":                  "aion.toml",
		"address = \"127.0.0.1:1\"\n":         `unknown key "address"`,
		"heartbeat_window = \"-1s\"\n":        "heartbeat-window",
		"sqlite_sync = \"sometimes\"\n":       "sqlite-sync",
		"pprof = \"yes please\"\n":            "pprof",
		"data_dir = \"\"\n":                   "data-dir",
		"log_level = \"chatty\"\n":            "log-level",
		"grpc_addr = \"\"\n":                  "grpc-addr",
		"drain_timeout = \"-5s\"\n":           "drain-timeout",
		"auto_create = \"open\"\nx = 1\n":     `unknown key "x"`,
		"sqlite_sync = \"full\"\npprof = 3\n": "pprof",
		"max_namespaces = -1\n":               "--max-namespaces",
	}
	for file, names := range cases {
		path := filepath.Join(t.TempDir(), "aion.toml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := printed(t, nil, "server", "--config", path, "--print-config")
		if code == 0 || !strings.Contains(errOut, names) {
			t.Errorf("config %q: exit %d, stderr %q; want a refusal naming %s", file, code, errOut, names)
		}
	}
	if _, errOut, code := printed(t, nil, "server", "--config", "/nonexistent/aion.toml"); code == 0 || !strings.Contains(errOut, "--config") {
		t.Errorf("missing config file: exit %d, %q", code, errOut)
	}
}
