package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// errNoServer stops a client command at dial time, in tests of what the
// command line resolves before it talks to a server (the commands against a
// real server are in e2e_test.go).
var errNoServer = errors.New("test: no server")

// invocation is one run of the command line that records what it would
// dial, and what server configuration it would run, instead of doing so.
type invocation struct {
	env   map[string]string
	stdin string
	// serve replaces server.Run.
	serve serverRunner

	dialed  bool
	address string
	token   string
	timeout time.Duration
}

func (inv *invocation) run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) {
		v, ok := inv.env[k]
		return v, ok
	}
	a := newApp(strings.NewReader(inv.stdin), &out, &errOut, lookup)
	a.dialClient = func(context.Context) (*client.Client, error) {
		inv.dialed, inv.address, inv.token, inv.timeout = true, a.address, a.token, a.timeout
		return nil, errNoServer
	}
	if inv.serve != nil {
		a.runServer = inv.serve
	} else {
		a.runServer = func(context.Context, server.Config, *slog.Logger) error {
			t.Fatal("server started unexpectedly")
			return nil
		}
	}
	code = a.execute(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestGlobalFlagEnvPrecedence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		env         map[string]string
		args        []string
		wantAddress string
		wantToken   string
		wantTimeout time.Duration
	}{
		{"defaults", nil, nil, "127.0.0.1:50051", "", 10 * time.Second},
		{"env", map[string]string{"AION_ADDRESS": "env:1", "AION_TOKEN": "envtok", "AION_TIMEOUT": "3s"}, nil, "env:1", "envtok", 3 * time.Second},
		{"flag beats env", map[string]string{"AION_ADDRESS": "env:1", "AION_TOKEN": "envtok", "AION_TIMEOUT": "3s"},
			[]string{"--address", "flag:2", "--token", "flagtok", "--timeout", "1m"}, "flag:2", "flagtok", time.Minute},
		{"flag without env", nil, []string{"--address=flag:3"}, "flag:3", "", 10 * time.Second},
		{"empty env still counts", map[string]string{"AION_TOKEN": ""}, nil, "127.0.0.1:50051", "", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := &invocation{env: tc.env}
			args := append([]string{"activity", "get", "x", "--namespace", "ns"}, tc.args...)
			code, _, stderr := inv.run(t, args...)
			if code != exitError || !strings.Contains(stderr, errNoServer.Error()) {
				t.Fatalf("code %d, stderr %q", code, stderr)
			}
			if inv.address != tc.wantAddress || inv.token != tc.wantToken || inv.timeout != tc.wantTimeout {
				t.Fatalf("address %q token %q timeout %v; want %q %q %v", inv.address, inv.token, inv.timeout,
					tc.wantAddress, tc.wantToken, tc.wantTimeout)
			}
		})
	}
}

func TestBadEnvAndOutputAreRefused(t *testing.T) {
	t.Parallel()
	inv := &invocation{env: map[string]string{"AION_TIMEOUT": "soon"}}
	code, _, stderr := inv.run(t, "namespace", "list")
	if code != exitError || !strings.Contains(stderr, "AION_TIMEOUT") || inv.dialed {
		t.Fatalf("code %d stderr %q dialed %v", code, stderr, inv.dialed)
	}
	inv = &invocation{}
	code, _, stderr = inv.run(t, "namespace", "list", "--output", "yaml")
	if code != exitError || !strings.Contains(stderr, "--output") || inv.dialed {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
}

func TestServerConfigPrecedence(t *testing.T) {
	t.Parallel()
	def := server.Defaults()
	for _, tc := range []struct {
		name string
		cmd  string
		env  map[string]string
		args []string
		want func(*server.Config)
	}{
		{"server defaults", "server", nil, nil, func(*server.Config) {}},
		{"dev defaults", "dev", nil, nil, func(c *server.Config) { c.Dev, c.DataDir = true, "./.aion" }},
		{"env", "server", map[string]string{
			"AION_GRPC_ADDR": "0.0.0.0:1", "AION_HTTP_ADDR": "0.0.0.0:2", "AION_DATA_DIR": "/env",
			"AION_DRAIN_TIMEOUT": "5s", "AION_HEARTBEAT_WINDOW": "2s", "AION_AUTO_CREATE": "closed", "AION_SQLITE_SYNC": "normal",
			"AION_INSECURE_ALLOW_NO_AUTH": "true",
		}, nil, func(c *server.Config) {
			c.GRPCAddr, c.HTTPAddr, c.DataDir, c.InsecureAllowNoAuth = "0.0.0.0:1", "0.0.0.0:2", "/env", true
			c.DrainTimeout, c.HeartbeatWindow, c.AutoCreate, c.SQLiteSync = 5*time.Second, 2*time.Second, namespace.Closed, "normal"
		}},
		{"flags beat env", "dev", map[string]string{"AION_GRPC_ADDR": "0.0.0.0:1", "AION_DATA_DIR": "/env", "AION_AUTO_CREATE": "closed"},
			[]string{"--grpc-addr", "127.0.0.1:9", "--data-dir", "/flag", "--auto-create", "open", "--drain-timeout", "0s"},
			func(c *server.Config) {
				c.Dev, c.GRPCAddr, c.DataDir, c.AutoCreate, c.DrainTimeout = true, "127.0.0.1:9", "/flag", namespace.Open, 0
			}},
		{"namespace caps", "server", map[string]string{"AION_MAX_NAMESPACES": "50", "AION_MAX_MINT_PER_REQUEST": "7"},
			[]string{"--max-mint-per-request", "0"},
			func(c *server.Config) { c.MaxNamespaces, c.MaxMintPerRequest = 50, 0 }},
		{"memory limit from env", "server", map[string]string{"AION_MEMORY_LIMIT": "300"}, nil,
			func(c *server.Config) { c.MemoryLimit = 300 << 20 }},
		{"memory limit flag beats env", "dev", map[string]string{"AION_MEMORY_LIMIT": "300"}, []string{"--memory-limit", "512"},
			func(c *server.Config) { c.Dev, c.DataDir, c.MemoryLimit = true, "./.aion", 512<<20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got server.Config
			inv := &invocation{env: tc.env, serve: func(ctx context.Context, cfg server.Config, log *slog.Logger) error {
				got = cfg
				if ctx.Err() != nil || log == nil {
					t.Error("server run without a live context or a logger")
				}
				return nil
			}}
			code, _, stderr := inv.run(t, append([]string{tc.cmd}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("code %d: %s", code, stderr)
			}
			want := def
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("config = %+v\nwant     %+v", got, want)
			}
		})
	}
}

func TestServerFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--auto-create", "maybe"}, nil, "--auto-create"},
		{[]string{"--sqlite-sync", "off"}, nil, "--sqlite-sync"},
		{[]string{"--heartbeat-window", "0s"}, nil, "--heartbeat-window"},
		{[]string{"--drain-timeout", "-1s"}, nil, "--drain-timeout"},
		{[]string{"--max-namespaces", "-1"}, nil, "--max-namespaces -1"},
		{[]string{"--max-mint-per-request", "-3"}, nil, "--max-mint-per-request -3"},
		{[]string{"--max-pending-per-namespace", "-2"}, nil, "--max-pending-per-namespace -2"},
		{[]string{"--max-in-flight-per-namespace", "-4"}, nil, "--max-in-flight-per-namespace -4"},
		{[]string{"--max-receive-memory", "8"}, nil, "--max-receive-memory 8: want at least 16"},
		{[]string{"--memory-limit", "-1"}, nil, "--memory-limit -1: must not be negative"},
		{[]string{"--lease", "100ms"}, nil, "--lease 100ms: want at least 300ms"},
		{[]string{"--store", "mysql://db/aion"}, nil, `--store "mysql://db/aion"`},
		{[]string{"--server-name", "a b"}, nil, `--server-name: "a b"`},
		{[]string{"--grpc-addr", ""}, nil, "--grpc-addr: must not be empty"},
		{[]string{"--grpc-addr", "0.0.0.0:50051"}, nil, "--grpc-addr 0.0.0.0:50051 is not a loopback address"},
		{[]string{"--tls-cert", "cert.pem"}, nil, `--tls-cert "cert.pem" / --tls-key "": set both`},
		{[]string{"--auth", "jwt"}, nil, "--auth jwt: needs --jwt-secret-file (HS256) or --jwks-file (RS256)"},
		{[]string{"--auth", "token"}, nil, "--auth token: no API keys configured"},
		{[]string{"--auth", "kerberos"}, nil, `--auth "kerberos": want none, token or jwt`},
		{[]string{"--auto-create", "maybe"}, nil, `--auto-create "maybe": want "open" or "closed"`},
		{[]string{"--sqlite-sync", "off"}, nil, `--sqlite-sync "off": want full or normal`},
		{nil, map[string]string{"AION_DRAIN_TIMEOUT": "forever"}, "AION_DRAIN_TIMEOUT"},
		{[]string{"extra-arg"}, nil, "unknown command"},
	} {
		inv := &invocation{env: tc.env}
		code, _, stderr := inv.run(t, append([]string{"server"}, tc.args...)...)
		if code != exitError || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v %v: code %d stderr %q, want mention of %s", tc.args, tc.env, code, stderr, tc.want)
		}
	}
}

func TestDevRefusesAuthentication(t *testing.T) {
	t.Parallel()
	inv := &invocation{}
	code, _, stderr := inv.run(t, "dev", "--auth", "jwt", "--jwt-secret-file", "secret")
	if code != exitError || !strings.Contains(stderr, `--auth "jwt": aion dev always runs with authorization off`) {
		t.Fatalf("aion dev --auth jwt: code %d stderr %q, want a refusal naming --auth", code, stderr)
	}
}

func TestReadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte("  {\"a\": [1, 2]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("{\"a\": "), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, value, stdin string
		want               string // payload, when no error
		wantErr            string // substring of the error
	}{
		{"empty means no payload", "", "", "", ""},
		{"inline object", `{"hello":"world"}`, "", `{"hello":"world"}`, ""},
		{"inline scalar", `42`, "", `42`, ""},
		{"inline string", `"hi"`, "", `"hi"`, ""},
		{"file", "@" + good, "", `{"a": [1, 2]}`, ""},
		{"stdin", "-", "[true, null]\n", `[true, null]`, ""},
		{"inline invalid", `{bad`, "", "", "--input: inline value is not valid JSON"},
		{"inline bare word", `hello`, "", "", "--input: inline value is not valid JSON"},
		{"two documents", `{} {}`, "", "", "--input: inline value is not valid JSON"},
		{"file invalid", "@" + bad, "", "", "--input: file " + bad + " is not valid JSON"},
		{"file missing", "@" + filepath.Join(dir, "nope.json"), "", "", "--input \"@"},
		{"file name missing", "@", "", "", "--input \"@\""},
		{"stdin invalid", "-", "nope", "", "--input: stdin is not valid JSON"},
		{"stdin empty", "-", "  \n", "", "--input: stdin is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readInput("--input", tc.value, strings.NewReader(tc.stdin))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestScheduleRefusesBadInputBeforeAnyRPC(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--namespace", "ns", "--type", "echo", "--input", "{nope"},
		{"--namespace", "ns", "--type", "echo", "--input", "-"}, // stdin is not JSON
		{"--type", "echo", "--input", "{}"},
		{"--namespace", "ns", "--input", "{}"},
	} {
		inv := &invocation{stdin: "not json"}
		code, _, stderr := inv.run(t, append([]string{"activity", "schedule"}, args...)...)
		if code != exitError || inv.dialed {
			t.Errorf("%v: code %d, dialed %v", args, code, inv.dialed)
		}
		if !strings.Contains(stderr, "--input") && !strings.Contains(stderr, "required") {
			t.Errorf("%v: stderr %q names neither --input nor a required flag", args, stderr)
		}
	}
}

func TestNamespacePlaceFlagsAreExclusive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give exactly one of --unplaced, --prefer NODES or --pinned NODES"},
		{[]string{"--unplaced", "--pinned", "a"}, "[--unplaced --pinned]: give exactly one"},
		{[]string{"--prefer", "a", "--pinned", "b"}, "[--prefer --pinned]: give exactly one"},
		{[]string{"--unplaced", "--prefer", "a", "--pinned", "b"}, "[--unplaced --prefer --pinned]"},
		{[]string{"--pinned", ""}, "--pinned: at least one node"},
		{[]string{"--prefer="}, "--prefer: at least one node"},
		{[]string{"--unplaced=false"}, "--unplaced=false"},
	} {
		inv := &invocation{}
		code, _, stderr := inv.run(t, append([]string{"namespace", "place", "ns"}, tc.args...)...)
		if code != exitError || !strings.Contains(stderr, tc.want) || inv.dialed {
			t.Errorf("%v: code %d dialed %v stderr %q, want %q", tc.args, code, inv.dialed, stderr, tc.want)
		}
	}
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	t.Parallel()
	a := newApp(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}, func(string) (string, bool) { return "", false })
	stack := []*cobra.Command{a.rootCommand()}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		stack = append(stack, c.Commands()...)
		if c.Name() == "help" {
			continue
		}
		if c.Short == "" || c.Long == "" || c.Example == "" {
			t.Errorf("%q: Short, Long and Example are all required", c.CommandPath())
		}
	}
}

func TestDemoActivities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out, err := demoEcho(ctx, json.RawMessage(`{"x":[1]}`))
	if err != nil || string(out) != `{"x":[1]}` {
		t.Fatalf("echo = %s, %v", out, err)
	}
	if out, _ := demoEcho(ctx, nil); string(out) != "null" {
		t.Fatalf("echo of nothing = %s", out)
	}
	start := time.Now()
	s, err := demoSleep(ctx, sleepInput{MS: 30})
	if err != nil || s.SleptMS != 30 || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("sleep = %v, %v after %v", s, err, time.Since(start))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := demoSleep(cctx, sleepInput{MS: 10_000}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sleep = %v", err)
	}
	if _, err := demoSleep(ctx, sleepInput{MS: -1}); err == nil {
		t.Fatal("negative sleep accepted")
	}
	// Outside a worker the attempt number is 0, which fails for any times.
	var we *worker.Error
	if _, err := demoFail(ctx, failInput{Times: 1}); !errors.As(err, &we) || !we.Retryable || we.Type != "demo_failure" {
		t.Fatalf("fail = %v, want a retryable demo_failure", err)
	}
	for in, want := range map[time.Duration]time.Duration{
		0: time.Second, 300 * time.Millisecond: 100 * time.Millisecond, 30 * time.Millisecond: 50 * time.Millisecond,
		time.Minute: time.Second, 1500 * time.Millisecond: 500 * time.Millisecond,
	} {
		if got := heartbeatEvery(in); got != want {
			t.Errorf("heartbeatEvery(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestDemoWorkerChecksFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--namespace"},
		{[]string{"--namespace", "a,,b"}, "empty namespace"},
		{[]string{"--namespace", "a", "--slots", "0"}, "--slots"},
		{[]string{"--namespace", "a", "--capabilities", "cancel,fly"}, `--capabilities "fly"`},
		{[]string{"--namespace", "a", "--capabilities", "none,cancel"}, `--capabilities "none"`},
	} {
		code, _, stderr := (&invocation{}).run(t, append([]string{"worker", "demo"}, tc.args...)...)
		if code != exitError || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: code %d stderr %q", tc.args, code, stderr)
		}
	}
}

func TestStartFlagsGiveADelayOrATimeNotBoth(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		f      startFlags
		delay  time.Duration
		at     time.Time
		errHas string
	}{
		{"none", startFlags{}, 0, time.Time{}, ""},
		{"a delay", startFlags{in: 10 * time.Minute}, 10 * time.Minute, time.Time{}, ""},
		{"a time", startFlags{at: "2026-12-24T18:00:00Z"}, 0, at, ""},
		{"both", startFlags{in: time.Minute, at: "2026-12-24T18:00:00Z"}, 0, time.Time{}, "give at most one"},
		{"a negative delay", startFlags{in: -time.Second}, 0, time.Time{}, "--start-in -1s"},
		{"not a time", startFlags{at: "tomorrow"}, 0, time.Time{}, `--start-at "tomorrow"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, a, err := tc.f.parse()
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("parse: %v, want an error with %q", err, tc.errHas)
				}
				return
			}
			if err != nil || d != tc.delay || !a.Equal(tc.at) {
				t.Fatalf("parse = %v, %v, %v; want %v, %v", d, a, err, tc.delay, tc.at)
			}
		})
	}
}
