package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// errNoServer stops a client command at dial time in tests that only look
// at flags.
var errNoServer = errors.New("test: no server")

// invocation is one run of the command line in a test.
type invocation struct {
	env   map[string]string
	stdin string
	// dial replaces the client dialer; nil records the address and fails.
	dial func(a *app) (*client.Client, error)
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
		if inv.dial != nil {
			return inv.dial(a)
		}
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
		}, nil, func(c *server.Config) {
			c.GRPCAddr, c.HTTPAddr, c.DataDir = "0.0.0.0:1", "0.0.0.0:2", "/env"
			c.DrainTimeout, c.HeartbeatWindow, c.AutoCreate, c.SQLiteSync = 5*time.Second, 2*time.Second, namespace.Closed, "normal"
		}},
		{"flags beat env", "dev", map[string]string{"AION_GRPC_ADDR": "0.0.0.0:1", "AION_DATA_DIR": "/env", "AION_AUTO_CREATE": "closed"},
			[]string{"--grpc-addr", "127.0.0.1:9", "--data-dir", "/flag", "--auto-create", "open", "--drain-timeout", "0s"},
			func(c *server.Config) {
				c.Dev, c.GRPCAddr, c.DataDir, c.AutoCreate, c.DrainTimeout = true, "127.0.0.1:9", "/flag", namespace.Open, 0
			}},
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
			if got != want {
				t.Fatalf("config = %+v\nwant     %+v", got, want)
			}
		})
	}
}

func TestServerFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--auto-create", "maybe"}, nil, "--auto-create"},
		{[]string{"--sqlite-sync", "off"}, nil, "--sqlite-sync"},
		{[]string{"--heartbeat-window", "0s"}, nil, "--heartbeat-window"},
		{[]string{"--drain-timeout", "-1s"}, nil, "--drain-timeout"},
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

func TestReadInput(t *testing.T) {
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
	// Exactly one mode reaches the server.
	for _, args := range [][]string{{"--unplaced"}, {"--prefer", "a,b"}, {"--pinned", "a", "--pinned", "b"}} {
		inv := &invocation{}
		code, _, stderr := inv.run(t, append([]string{"namespace", "place", "ns"}, args...)...)
		if code != exitError || !inv.dialed || !strings.Contains(stderr, errNoServer.Error()) {
			t.Errorf("%v: code %d dialed %v stderr %q", args, code, inv.dialed, stderr)
		}
	}
}

// fakeAPI is an in-memory ActivityService and NamespaceService.
type fakeAPI struct {
	aionv1.UnimplementedActivityServiceServer
	mu        sync.Mutex
	scheduled []*aionv1.ScheduleRequest
	state     aionv1.ActivityState
}

func (f *fakeAPI) Schedule(_ context.Context, r *aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error) {
	f.mu.Lock()
	f.scheduled = append(f.scheduled, r)
	f.mu.Unlock()
	return &aionv1.ScheduleResponse{Activity: &aionv1.Activity{Id: "id-1", Namespace: r.GetNamespace(),
		ActivityType: r.GetActivityType(), Payload: r.GetPayload(), State: aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED}}, nil
}

func (f *fakeAPI) Wait(_ context.Context, r *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
	act := &aionv1.Activity{Id: r.GetId(), Namespace: r.GetNamespace(), State: f.state, Attempt: 1}
	switch f.state {
	case aionv1.ActivityState_ACTIVITY_STATE_COMPLETED:
		act.Result = []byte(`{"ok":true}`)
	default:
		act.Failure = &aionv1.Failure{Type: "boom", Message: "it broke"}
	}
	return &aionv1.WaitResponse{Activity: act}, nil
}

type fakeNamespaces struct {
	aionv1.UnimplementedNamespaceServiceServer
	placed *aionv1.SetPlacementRequest
}

func (f *fakeNamespaces) SetPlacement(_ context.Context, r *aionv1.SetPlacementRequest) (*aionv1.SetPlacementResponse, error) {
	f.placed = r
	if r.GetName() == "missing" {
		return nil, status.Error(codes.NotFound, `namespace "missing" not found`)
	}
	return &aionv1.SetPlacementResponse{Namespace: &aionv1.Namespace{Name: r.GetName(), Placement: r.GetPlacement()}}, nil
}

func startAPI(t *testing.T, api *fakeAPI, ns *fakeNamespaces) func(*app) (*client.Client, error) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	aionv1.RegisterActivityServiceServer(srv, api)
	aionv1.RegisterNamespaceServiceServer(srv, ns)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return func(*app) (*client.Client, error) {
		return client.Dial(context.Background(), "passthrough:///bufnet", client.WithDialOptions(
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
}

func TestScheduleBuildsTheRequestFromFlags(t *testing.T) {
	api := &fakeAPI{}
	inv := &invocation{dial: startAPI(t, api, &fakeNamespaces{}), stdin: `{"from": "stdin"}`}
	code, stdout, stderr := inv.run(t, "activity", "schedule", "-n", "ns", "-q", "gpu", "-t", "render", "--input", "-",
		"--id", "r1", "--node", "gpu-a", "--schedule-to-start", "1s", "--start-to-close", "2s", "--schedule-to-close", "3s",
		"--heartbeat-timeout", "4s", "--max-attempts", "3", "--initial-interval", "100ms", "--backoff", "1.5",
		"--max-interval", "5s", "--non-retryable", "a,b", "--non-retryable", "c")
	if code != exitOK {
		t.Fatalf("code %d: %s", code, stderr)
	}
	want := &aionv1.ScheduleRequest{Namespace: "ns", Id: "r1", TaskQueue: "gpu", ActivityType: "render", Node: "gpu-a",
		Payload:                []byte(`{"from": "stdin"}`),
		ScheduleToStartTimeout: durationpb.New(time.Second), StartToCloseTimeout: durationpb.New(2 * time.Second),
		ScheduleToCloseTimeout: durationpb.New(3 * time.Second), HeartbeatTimeout: durationpb.New(4 * time.Second),
		RetryPolicy: &aionv1.RetryPolicy{MaximumAttempts: 3, InitialInterval: durationpb.New(100 * time.Millisecond),
			BackoffCoefficient: 1.5, MaximumInterval: durationpb.New(5 * time.Second), NonRetryableErrorTypes: []string{"a", "b", "c"}},
	}
	if len(api.scheduled) != 1 || !proto.Equal(api.scheduled[0], want) {
		t.Fatalf("request = %v\nwant %v", api.scheduled, want)
	}
	if !strings.Contains(stdout, "scheduled activity id-1 in namespace ns") {
		t.Fatalf("stdout = %q", stdout)
	}

	// Without retry flags the policy is left to the server.
	inv = &invocation{dial: startAPI(t, api, &fakeNamespaces{})}
	if code, _, stderr := inv.run(t, "activity", "schedule", "-n", "ns", "-t", "echo", "--input", "{}"); code != exitOK {
		t.Fatalf("code %d: %s", code, stderr)
	}
	if api.scheduled[1].GetRetryPolicy() != nil || api.scheduled[1].GetScheduleToStartTimeout() != nil {
		t.Fatalf("request = %v", api.scheduled[1])
	}
}

func TestScheduleWaitExitCodes(t *testing.T) {
	for _, tc := range []struct {
		state aionv1.ActivityState
		code  int
		out   string
	}{
		{aionv1.ActivityState_ACTIVITY_STATE_COMPLETED, exitOK, `"result": {`},
		{aionv1.ActivityState_ACTIVITY_STATE_FAILED, exitNotCompleted, `"type": "boom"`},
		{aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT, exitNotCompleted, `"state": "timed_out"`},
	} {
		api := &fakeAPI{state: tc.state}
		inv := &invocation{dial: startAPI(t, api, &fakeNamespaces{})}
		code, stdout, stderr := inv.run(t, "activity", "schedule", "-n", "ns", "-t", "echo", "--input", `{"a":1}`, "--wait", "-o", "json")
		if code != tc.code || !strings.Contains(stdout, tc.out) {
			t.Errorf("%v: code %d stdout %s stderr %s", tc.state, code, stdout, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Errorf("%v: stdout is not one JSON document: %v", tc.state, err)
		}
		code, stdout, _ = (&invocation{dial: startAPI(t, api, &fakeNamespaces{})}).run(t, "activity", "wait", "id-1", "-n", "ns")
		if code != tc.code || !strings.Contains(stdout, "id:") {
			t.Errorf("wait %v: code %d stdout %s", tc.state, code, stdout)
		}
	}
}

func TestNamespacePlaceSendsThePlacement(t *testing.T) {
	ns := &fakeNamespaces{}
	dial := startAPI(t, &fakeAPI{}, ns)
	code, stdout, stderr := (&invocation{dial: dial}).run(t, "namespace", "place", "vision", "--pinned", "gpu-a,gpu-b")
	if code != exitOK || !strings.Contains(stdout, "pinned{gpu-a,gpu-b}") {
		t.Fatalf("code %d stdout %q stderr %q", code, stdout, stderr)
	}
	want := &aionv1.SetPlacementRequest{Name: "vision", Placement: &aionv1.Placement{
		Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED, Nodes: []string{"gpu-a", "gpu-b"}}}
	if !proto.Equal(ns.placed, want) {
		t.Fatalf("request = %v", ns.placed)
	}
	code, _, stderr = (&invocation{dial: dial}).run(t, "namespace", "place", "missing", "--unplaced")
	if code != exitError || !strings.Contains(stderr, "(NotFound)") || strings.Contains(stderr, "rpc error") {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--namespace"},
		{[]string{"--namespace", "a,,b"}, "empty namespace"},
		{[]string{"--namespace", "a", "--slots", "0"}, "--slots"},
	} {
		code, _, stderr := (&invocation{}).run(t, append([]string{"worker", "demo"}, tc.args...)...)
		if code != exitError || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: code %d stderr %q", tc.args, code, stderr)
		}
	}
}
