package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/servertest"
)

// cliRig runs command lines in process against a real server.
type cliRig struct {
	srv *servertest.Server
	// env is the environment every command line sees; AION_ADDRESS points
	// at the server.
	env map[string]string
}

func newCLIRig(t *testing.T, opts ...servertest.Option) *cliRig {
	t.Helper()
	srv := servertest.Start(t, opts...)
	return &cliRig{srv: srv, env: map[string]string{"AION_ADDRESS": srv.Addr}}
}

func (r *cliRig) lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		v, ok := r.env[k]
		return v, ok
	}
}

// run executes one command line and returns its exit code and output.
func (r *cliRig) run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return r.runEnv(t, nil, stdin, args...)
}

// runEnv is run with extra environment variables.
func (r *cliRig) runEnv(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = newApp(strings.NewReader(stdin), &out, &errOut, r.lookup(env)).execute(ctx, args)
	return code, out.String(), errOut.String()
}

// ok runs a command line that must succeed and returns its stdout.
func (r *cliRig) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := r.run(t, "", args...)
	if code != exitOK {
		t.Fatalf("aion %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// background is a long-running command line (a worker, a server).
type background struct {
	log  *servertest.LogBuffer
	stop context.CancelFunc // as SIGTERM would
	done chan int           // its exit code
}

// start runs a long-running command line until the test ends.
func (r *cliRig) start(t *testing.T, args ...string) *background {
	t.Helper()
	return startCommand(t, r.lookup(nil), args...)
}

func startCommand(t *testing.T, lookup func(string) (string, bool), args ...string) *background {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	b := &background{log: &servertest.LogBuffer{}, stop: stop, done: make(chan int, 1)}
	go func() {
		b.done <- newApp(strings.NewReader(""), &bytes.Buffer{}, b.log, lookup).execute(ctx, args)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-b.done:
		case <-time.After(20 * time.Second):
			t.Errorf("aion %s did not exit", strings.Join(args, " "))
		}
	})
	return b
}

// exit waits for the command line to end and returns its exit code.
func (b *background) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("command did not exit; its log:\n%s", b.log.String())
		return 0
	}
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not one JSON document (%v):\n%s", err, s)
	}
	return v
}

// compact renders a JSON value from indented output on one line.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// activityJSON is the part of `activity get -o json` the tests read.
type activityJSON struct {
	ID                     string          `json:"id"`
	Namespace              string          `json:"namespace"`
	TaskQueue              string          `json:"task_queue"`
	ActivityType           string          `json:"activity_type"`
	Node                   string          `json:"node"`
	State                  string          `json:"state"`
	Attempt                int             `json:"attempt"`
	Payload                json.RawMessage `json:"payload"`
	PayloadSize            int             `json:"payload_size"`
	Result                 json.RawMessage `json:"result"`
	ScheduleToStartTimeout string          `json:"schedule_to_start_timeout"`
	StartToCloseTimeout    string          `json:"start_to_close_timeout"`
	ScheduleToCloseTimeout string          `json:"schedule_to_close_timeout"`
	HeartbeatTimeout       string          `json:"heartbeat_timeout"`
	LastHeartbeatDetails   json.RawMessage `json:"last_heartbeat_details"`
	RetryPolicy            struct {
		InitialInterval        string   `json:"initial_interval"`
		BackoffCoefficient     float64  `json:"backoff_coefficient"`
		MaximumInterval        string   `json:"maximum_interval"`
		MaximumAttempts        int      `json:"maximum_attempts"`
		NonRetryableErrorTypes []string `json:"non_retryable_error_types"`
	} `json:"retry_policy"`
	Failure *struct {
		Type      string `json:"type"`
		Retryable bool   `json:"retryable"`
	} `json:"failure"`
	Attempts []struct {
		Number  int    `json:"number"`
		Outcome string `json:"outcome"`
	} `json:"attempts"`
}

func TestScheduleFlagsReachTheServer(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	flags := []string{"activity", "schedule", "-n", "ns", "-q", "gpu", "-t", "render", "--input", "-",
		"--id", "r1", "--node", "gpu-a", "--schedule-to-start", "1m", "--start-to-close", "2m", "--schedule-to-close", "3m",
		"--heartbeat-timeout", "4s", "--max-attempts", "3", "--initial-interval", "100ms", "--backoff", "1.5",
		"--max-interval", "5s", "--non-retryable", "a,b", "--non-retryable", "c"}
	code, out, errOut := r.run(t, `{"from": "stdin"}`, flags...)
	if code != exitOK || out != "scheduled activity r1 in namespace ns\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	a := decode[activityJSON](t, r.ok(t, "activity", "get", "r1", "-n", "ns", "-o", "json"))
	p := a.RetryPolicy
	if a.ID != "r1" || a.TaskQueue != "gpu" || a.ActivityType != "render" || a.Node != "gpu-a" || a.State != "scheduled" ||
		compact(a.Payload) != `{"from":"stdin"}` || a.ScheduleToStartTimeout != "1m0s" || a.StartToCloseTimeout != "2m0s" ||
		a.ScheduleToCloseTimeout != "3m0s" || a.HeartbeatTimeout != "4s" || p.MaximumAttempts != 3 || p.InitialInterval != "100ms" ||
		p.BackoffCoefficient != 1.5 || p.MaximumInterval != "5s" || strings.Join(p.NonRetryableErrorTypes, ",") != "a,b,c" {
		t.Fatalf("the server recorded %+v", a)
	}

	// The same request again is idempotent; another input under the same id
	// is refused with the server's status.
	if code, out, _ := r.run(t, `{"from": "stdin"}`, flags...); code != exitOK || out != "already scheduled activity r1 in namespace ns\n" {
		t.Fatalf("repeat: exit %d, stdout %q", code, out)
	}
	if code, _, errOut := r.run(t, `{"other": true}`, flags...); code != exitError || !strings.Contains(errOut, "(AlreadyExists)") ||
		strings.Contains(errOut, "rpc error") {
		t.Fatalf("same id, other input: exit %d, stderr %q", code, errOut)
	}

	// One retry flag sets the policy; the server fills in the rest.
	file := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(file, []byte(`[1, 2]`), 0o600); err != nil {
		t.Fatal(err)
	}
	r.ok(t, "activity", "schedule", "-n", "ns", "-t", "echo", "--id", "r2", "--input", "@"+file, "--max-attempts", "2")
	a = decode[activityJSON](t, r.ok(t, "activity", "get", "r2", "-n", "ns", "-o", "json"))
	if a.TaskQueue != "default" || compact(a.Payload) != `[1,2]` || a.RetryPolicy.MaximumAttempts != 2 ||
		a.RetryPolicy.InitialInterval != "1s" || a.RetryPolicy.BackoffCoefficient != 2 || a.StartToCloseTimeout != "10m0s" {
		t.Fatalf("server defaults not applied: %+v", a)
	}
	// Refused input never reaches the server.
	if code, _, errOut := r.run(t, "", "activity", "schedule", "-n", "never", "-t", "echo", "--input", "{nope"); code != exitError ||
		!strings.Contains(errOut, "--input") {
		t.Fatalf("bad input: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := r.run(t, "", "namespace", "get", "never"); code != exitError || !strings.Contains(errOut, "(NotFound)") {
		t.Fatalf("a refused schedule minted its namespace: exit %d, %s", code, errOut)
	}
}

func TestActivityCommandsWithTheDemoWorker(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	w := r.start(t, "worker", "demo", "--namespace", "demo,other", "--slots", "2")

	code, out, errOut := r.run(t, "", "activity", "schedule", "--namespace", "demo", "--type", "echo",
		"--input", `{"hello":"world"}`, "--wait", "--wait-timeout", "20s", "-o", "json")
	if a := decode[activityJSON](t, out); code != exitOK || a.State != "completed" || compact(a.Result) != `{"hello":"world"}` {
		t.Fatalf("echo: exit %d\n%s\n%s\nworker log:\n%s", code, out, errOut, w.log.String())
	}

	// fail succeeds on the attempt after the failing ones, in the other
	// namespace the worker serves.
	code, out, errOut = r.run(t, "", "activity", "schedule", "-n", "other", "-t", "fail", "--input", `{"times":2}`,
		"--initial-interval", "10ms", "--max-attempts", "5", "--wait", "--wait-timeout", "20s")
	if code != exitOK || !strings.Contains(out, `{"attempts":3}`) || !strings.Contains(out, "attempt 2:") {
		t.Fatalf("fail twice: exit %d\n%s\n%s", code, out, errOut)
	}

	// sleep heartbeats its progress (every 200ms here); the server keeps it.
	code, out, errOut = r.run(t, `{"ms":300}`, "activity", "schedule", "-n", "demo", "-t", "sleep", "--input", "-",
		"--heartbeat-timeout", "600ms", "--id", "nap", "--wait", "--wait-timeout", "20s", "-o", "json")
	if a := decode[activityJSON](t, out); code != exitOK || compact(a.Result) != `{"slept_ms":300}` ||
		!strings.HasPrefix(compact(a.LastHeartbeatDetails), `{"slept_ms":`) {
		t.Fatalf("sleep: exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, errOut = r.run(t, "", "activity", "schedule", "-n", "demo", "-t", "fail", "--input", `{"times":9}`,
		"--initial-interval", "10ms", "--max-attempts", "2", "--id", "doomed", "--wait", "--wait-timeout", "20s")
	if code != exitNotCompleted || !strings.Contains(out, "demo_failure") || !strings.Contains(errOut, "activity doomed in namespace demo ended failed") {
		t.Fatalf("doomed: exit %d\n%s\n%s", code, out, errOut)
	}

	out = r.ok(t, "activity", "list", "-n", "demo", "--state", "failed")
	if !strings.Contains(out, "doomed") || strings.Contains(out, "nap") || !strings.HasPrefix(out, "ID ") {
		t.Fatalf("list --state failed:\n%s", out)
	}
	all := decode[[]activityJSON](t, r.ok(t, "activity", "list", "-n", "demo", "-o", "json"))
	if len(all) != 3 || all[0].ID != "doomed" || all[1].ID != "nap" || all[2].ActivityType != "echo" {
		t.Fatalf("list -o json = %+v, want doomed, nap, echo (newest first)", all)
	}
	if p := all[2].Payload; len(p) != 0 || all[2].PayloadSize != len(`{"hello":"world"}`) || len(all[2].Result) != 0 {
		t.Fatalf("list -o json: echo listed with payload %s (size %d) and result %s; want them left out, the size kept",
			p, all[2].PayloadSize, all[2].Result)
	}
	full := decode[[]activityJSON](t, r.ok(t, "activity", "list", "-n", "demo", "--payloads", "-o", "json"))
	if len(full) != 3 || compact(full[2].Payload) != `{"hello":"world"}` || compact(full[2].Result) != `{"hello":"world"}` {
		t.Fatalf("list --payloads -o json: %+v, want echo's payload and result", full)
	}
	if limited := decode[[]activityJSON](t, r.ok(t, "activity", "list", "-n", "demo", "--limit", "2", "-o", "json")); len(limited) != 2 {
		t.Fatalf("list --limit 2 printed %d", len(limited))
	}
	if got := decode[[]activityJSON](t, r.ok(t, "activity", "list", "-n", "nobody-here", "-o", "json")); len(got) != 0 {
		t.Fatalf("empty namespace listed %+v", got)
	}
	out = r.ok(t, "activity", "get", "nap", "-n", "demo")
	for _, want := range []string{"id:", "nap", "state:", "completed", "attempt 1:", "completed after"} {
		if !strings.Contains(out, want) {
			t.Fatalf("get nap lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := r.run(t, "", "activity", "get", "missing", "-n", "demo"); code != exitError ||
		!strings.Contains(errOut, "(NotFound)") || strings.Contains(errOut, "rpc error") {
		t.Fatalf("get missing: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{
		{"activity", "list", "-n", "demo", "--state", "done"},
		{"activity", "list", "-n", "demo", "--limit", "-1"},
		{"activity", "list"},
	} {
		if code, _, errOut := r.run(t, "", args...); code != exitError || errOut == "" {
			t.Errorf("aion %v: exit %d, stderr %q", args, code, errOut)
		}
	}

	w.stop()
	if code := w.exit(t); code != exitOK {
		t.Fatalf("worker exit %d\n%s", code, w.log.String())
	}
	// One log line per attempt: echo, 3 of fail, sleep, 2 of doomed.
	if n := strings.Count(w.log.String(), `msg="task `); n != 7 {
		t.Errorf("worker logged %d task lines, want 7:\n%s", n, w.log.String())
	}
}

func TestWaitExitCodes(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	r.start(t, "worker", "demo", "--namespace", "ns")
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		state string
	}{
		{"completed", []string{"-t", "echo", "--input", `{"a":1}`}, exitOK, "completed"},
		{"failed", []string{"-t", "fail", "--input", `{"times":1}`, "--max-attempts", "1"}, exitNotCompleted, "failed"},
		{"timed out", []string{"-t", "nobody-runs-this", "--schedule-to-start", "100ms"}, exitNotCompleted, "timed_out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := strings.ReplaceAll(tc.name, " ", "-")
			args := append([]string{"activity", "schedule", "-n", "ns", "--id", id, "--wait", "-o", "json"}, tc.flags...)
			code, out, errOut := r.run(t, "", args...)
			if a := decode[activityJSON](t, out); code != tc.code || a.State != tc.state {
				t.Fatalf("schedule --wait: exit %d, state %q; want %d, %q\n%s", code, a.State, tc.code, tc.state, errOut)
			}
			code, out, _ = r.run(t, "", "activity", "wait", id, "-n", "ns")
			if code != tc.code || !strings.Contains(out, "state:") || !strings.Contains(out, tc.state) {
				t.Fatalf("wait: exit %d, want %d\n%s", code, tc.code, out)
			}
		})
	}
	t.Run("wait timeout", func(t *testing.T) {
		t.Parallel()
		r.ok(t, "activity", "schedule", "-n", "ns", "-t", "nobody-runs-this", "--id", "forever")
		code, _, errOut := r.run(t, "", "activity", "wait", "forever", "-n", "ns", "--wait-timeout", "100ms")
		if code != exitError || !strings.Contains(errOut, "(DeadlineExceeded)") {
			t.Fatalf("exit %d, stderr %q; want 1 and DeadlineExceeded", code, errOut)
		}
	})
}

func TestNamespaceCommands(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	if out := r.ok(t, "namespace", "create", "billing"); out != "created namespace billing\n" {
		t.Fatalf("create: %q", out)
	}
	if out := r.ok(t, "namespace", "create", "billing"); out != "namespace billing already exists\n" {
		t.Fatalf("create again: %q", out)
	}
	type nsJSON struct {
		Name      string `json:"name"`
		Origin    string `json:"origin"`
		Placement struct {
			Mode  string   `json:"mode"`
			Nodes []string `json:"nodes"`
		} `json:"placement"`
		CreatedTime string `json:"created_time"`
	}
	if ns := decode[nsJSON](t, r.ok(t, "namespace", "get", "billing", "-o", "json")); ns.Origin != "explicit" ||
		ns.Placement.Mode != "unplaced" || ns.CreatedTime == "" {
		t.Fatalf("get: %+v", ns)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--pinned", "gpu-a,gpu-b"}, "pinned{gpu-a,gpu-b}"},
		{[]string{"--pinned", "gpu-a", "--pinned", "gpu-b"}, "pinned{gpu-a,gpu-b}"},
		{[]string{"--prefer", "n1"}, "prefer{n1}"},
		{[]string{"--unplaced"}, "unplaced"},
	} {
		out := r.ok(t, append([]string{"namespace", "place", "billing"}, tc.flags...)...)
		if out != "namespace billing placement is now "+tc.want+"\n" {
			t.Fatalf("place %v: %q", tc.flags, out)
		}
		if out := r.ok(t, "namespace", "get", "billing"); !strings.Contains(out, "placement: "+tc.want) {
			t.Fatalf("after place %v, get shows:\n%s", tc.flags, out)
		}
	}
	r.ok(t, "activity", "schedule", "-n", "minted", "-t", "echo")
	nss := decode[[]nsJSON](t, r.ok(t, "namespace", "list", "-o", "json"))
	if len(nss) != 2 || nss[0].Name != "billing" || nss[1].Name != "minted" || nss[1].Origin != "schedule" {
		t.Fatalf("list: %+v", nss)
	}
	if out := r.ok(t, "ns", "list"); !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "minted") {
		t.Fatalf("list text:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code string
	}{
		{[]string{"namespace", "place", "missing", "--unplaced"}, "(NotFound)"},
		{[]string{"namespace", "get", "missing"}, "(NotFound)"},
		{[]string{"namespace", "create", "bad name"}, "(InvalidArgument)"},
		{[]string{"namespace", "place", "billing", "--pinned", "bad node"}, "(InvalidArgument)"},
	} {
		code, _, errOut := r.run(t, "", tc.args...)
		if code != exitError || !strings.Contains(errOut, tc.code) || strings.Contains(errOut, "rpc error") {
			t.Errorf("aion %v: exit %d, stderr %q; want %s", tc.args, code, errOut, tc.code)
		}
	}
}

func TestNamespaceRetentionCommands(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	r.ok(t, "namespace", "create", "billing")
	if out := r.ok(t, "namespace", "get", "billing"); !strings.Contains(out, "retention: 168h0m0s") {
		t.Fatalf("get shows no default retention:\n%s", out)
	}
	if out := r.ok(t, "namespace", "retention", "set", "billing", "72h"); out != "namespace billing retention is now 72h0m0s\n" {
		t.Fatalf("retention set: %q", out)
	}
	type nsJSON struct {
		Retention string `json:"retention"`
	}
	if ns := decode[nsJSON](t, r.ok(t, "namespace", "get", "billing", "-o", "json")); ns.Retention != "72h0m0s" {
		t.Fatalf("get -o json after set: %+v", ns)
	}
	if out := r.ok(t, "namespace", "retention", "set", "billing", "default"); out != "namespace billing retention is now 168h0m0s\n" {
		t.Fatalf("retention set default: %q", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"billing", "30s"}, "(InvalidArgument)"},
		{[]string{"billing", "soon"}, `retention "soon"`},
		{[]string{"billing", "0s"}, `retention "0s": must be more than zero`},
		{[]string{"missing", "1h"}, "(NotFound)"},
	} {
		code, _, errOut := r.run(t, "", append([]string{"namespace", "retention", "set"}, tc.args...)...)
		if code != exitError || !strings.Contains(errOut, tc.want) {
			t.Errorf("retention set %v: exit %d, stderr %q; want %s", tc.args, code, errOut, tc.want)
		}
	}
}

func TestGlobalFlagsReachTheServer(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	const nobody = "127.0.0.1:1" // nothing listens there
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		err  string
	}{
		{"address from the environment", nil, nil, exitOK, ""},
		{"address flag beats the environment", map[string]string{"AION_ADDRESS": nobody}, []string{"--address", r.srv.Addr}, exitOK, ""},
		{"address flag to a closed port", nil, []string{"--address", nobody}, exitError, "(Unavailable)"},
		{"timeout bounds the call", nil, []string{"--timeout", "1ns"}, exitError, "(DeadlineExceeded)"},
		{"timeout from the environment", map[string]string{"AION_TIMEOUT": "1ns"}, nil, exitError, "(DeadlineExceeded)"},
		{"token over the insecure transport", map[string]string{"AION_TOKEN": "s3cret"}, nil, exitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := r.runEnv(t, tc.env, "", append([]string{"namespace", "list", "-o", "json"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.err) {
				t.Fatalf("exit %d, stderr %q; want %d with %q", code, errOut, tc.code, tc.err)
			}
			if code == exitOK {
				decode[[]json.RawMessage](t, out)
			}
		})
	}
}

func TestDemoWorkerRegistersWithItsFlags(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	w := r.start(t, "worker", "demo", "--namespace", "a,b", "--task-queue", "q", "--node", "n1", "--slots", "3", "--identity", "me",
		"--build-id", "b7", "--workflow-slots", "5")
	got := r.srv.WaitForWorker(t, nil)
	types := slices.Sorted(slices.Values(got.ActivityTypes))
	if strings.Join(got.Namespaces, ",") != "a,b" || got.TaskQueue != "q" || got.Node != "n1" || got.Slots != 3 ||
		strings.Join(types, ",") != "agent,charge,echo,fail,notify,refund,release,reserve,ship,sleep,tool" ||
		got.Capabilities.String() != "inject_message,cancel,pause_resume,update_budget" ||
		strings.Join(got.WorkflowTypes, ",") != "agent,order" || got.BuildID != "b7" || got.WorkflowSlots != 5 {
		t.Fatalf("the server registered %+v", got)
	}
	// A pinned activity reaches it through its node.
	code, out, errOut := r.run(t, "", "activity", "schedule", "-n", "b", "-q", "q", "-t", "echo", "--node", "n1", "--input", "1", "--wait", "-o", "json")
	if a := decode[activityJSON](t, out); code != exitOK || a.Node != "n1" || compact(a.Result) != "1" {
		t.Fatalf("pinned echo: exit %d\n%s\n%s", code, out, errOut)
	}
	w.stop()
	if code := w.exit(t); code != exitOK {
		t.Fatalf("worker exit %d\n%s", code, w.log.String())
	}
	if reason := r.srv.DisconnectReason(t, got.ID); reason != registry.ReasonDrained {
		t.Fatalf("worker left as %q, want drained", reason)
	}
}

func TestDemoWorkerExitsOnAServerDrainWhenAsked(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	w := r.start(t, "worker", "demo", "--namespace", "d", "--exit-on-drain")
	r.srv.WaitForWorker(t, nil)
	shutdown := r.srv.StopAsync()
	if code := w.exit(t); code != exitOK {
		t.Fatalf("worker exit %d\n%s", code, w.log.String())
	}
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.log.String(), "exiting") {
		t.Fatalf("worker log does not say it exits:\n%s", w.log.String())
	}
}

// servingAddr finds the gRPC address in a server's "serving" log line.
var servingAddr = regexp.MustCompile(`msg=serving grpc=(127\.0\.0\.1:\d+)`)

func TestDevServerServesUntilInterruptedAndKeepsItsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noEnv := func(string) (string, bool) { return "", false }
	serve := func(cmd string, extra ...string) (*background, *cliRig) {
		t.Helper()
		args := append([]string{cmd, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-dir", dir,
			"--drain-timeout", "1s"}, extra...)
		b := startCommand(t, noEnv, args...)
		var addr string
		servertest.Eventually(t, "the server's serving line", func() bool {
			m := servingAddr.FindStringSubmatch(b.log.String())
			if m != nil {
				addr = m[1]
			}
			return m != nil
		})
		return b, &cliRig{env: map[string]string{"AION_ADDRESS": addr}}
	}

	// Without --sqlite-sync both commit with synchronous=full, as the store
	// reads it back from the connection commits run on.
	syncFull := regexp.MustCompile(`msg="store opened" store="sqlite [^"]+ synchronous=full"`)
	dev, r := serve("dev", "--auto-create", "closed")
	if !syncFull.MatchString(dev.log.String()) {
		t.Fatalf("aion dev does not say it commits with synchronous=full:\n%s", dev.log.String())
	}
	if code, _, errOut := r.run(t, "", "activity", "schedule", "-n", "ghost", "-t", "echo"); code != exitError ||
		!strings.Contains(errOut, "(NotFound)") || !strings.Contains(errOut, "auto-create is closed") {
		t.Fatalf("schedule under --auto-create closed: exit %d, %q", code, errOut)
	}
	r.ok(t, "namespace", "create", "ghost")
	r.ok(t, "activity", "schedule", "-n", "ghost", "-t", "echo", "--id", "kept")
	dev.stop() // as SIGINT would
	if code := dev.exit(t); code != exitOK {
		t.Fatalf("dev exit %d\n%s", code, dev.log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "aion.db")); err != nil {
		t.Fatalf("no SQLite file in --data-dir: %v", err)
	}

	// `aion server` on the same data directory has the namespace and the
	// activity.
	srv, r := serve("server")
	if !syncFull.MatchString(srv.log.String()) {
		t.Fatalf("aion server does not say it commits with synchronous=full:\n%s", srv.log.String())
	}
	if a := decode[activityJSON](t, r.ok(t, "activity", "get", "kept", "-n", "ghost", "-o", "json")); a.State != "scheduled" {
		t.Fatalf("activity after the restart: %+v", a)
	}
	srv.stop()
	if code := srv.exit(t); code != exitOK {
		t.Fatalf("server exit %d\n%s", code, srv.log.String())
	}
}

// TestLargestActivityReadsBack: an activity whose input and result are both
// near the payload limit is more than gRPC's default 4 MiB message; get and
// list still read it.
func TestLargestActivityReadsBack(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	r.start(t, "worker", "demo", "--namespace", "big")
	input := `{"s":"` + strings.Repeat("x", limit.Payload-16) + `"}`
	code, out, errOut := r.run(t, input, "activity", "schedule", "-n", "big", "-t", "echo", "--id", "largest",
		"--input", "-", "--wait", "--wait-timeout", "20s", "-o", "json")
	if code != exitOK {
		t.Fatalf("schedule: exit %d\n%.300s\n%s", code, out, errOut)
	}
	code, out, errOut = r.run(t, "", "activity", "get", "largest", "-n", "big", "-o", "json")
	if a := decode[activityJSON](t, out); code != exitOK || a.State != "completed" || len(a.Result) < limit.Payload-16 {
		t.Fatalf("get: exit %d, %d result bytes\n%s", code, len(a.Result), errOut)
	}
	if code, out, errOut = r.run(t, "", "activity", "list", "-n", "big", "-o", "json"); code != exitOK || !strings.Contains(out, "largest") {
		t.Fatalf("list: exit %d\n%.300s\n%s", code, out, errOut)
	}
}

// eventually runs a command line until its output holds want, or fails the
// test after 20s.
func (r *cliRig) eventually(t *testing.T, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := r.ok(t, args...)
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("aion %s never said %q; last:\n%s", strings.Join(args, " "), want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The flow-limit commands set, show, list and clear a namespace's limits,
// refuse bad figures, and 'activity why' names the limit that holds an
// activity: the concurrency key with how many of its limit run, and the
// rate limit with when it allows the next start.
func TestNamespaceLimitsCommandsAndWhy(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	r.start(t, "worker", "demo", "--namespace", "billing", "--slots", "4")
	r.ok(t, "namespace", "create", "billing")
	if out := r.ok(t, "namespace", "limits", "set", "billing", "--activity-type", "sleep", "--concurrency", "1"); out !=
		"activity type sleep in namespace billing: concurrency 1 per key\n" {
		t.Fatalf("set concurrency: %q", out)
	}
	if out := r.ok(t, "namespace", "limits", "set", "billing", "--activity-type", "echo", "--rate", "0.001", "--burst", "1"); out !=
		"activity type echo in namespace billing: rate 0.001/s burst 1\n" {
		t.Fatalf("set rate: %q", out)
	}
	type limitJSON struct {
		Kind        string  `json:"kind"`
		Type        string  `json:"type"`
		Concurrency int     `json:"concurrency"`
		Rate        float64 `json:"rate"`
		Burst       int     `json:"burst"`
	}
	if ls := decode[[]limitJSON](t, r.ok(t, "namespace", "limits", "list", "billing", "-o", "json")); len(ls) != 2 ||
		ls[0] != (limitJSON{"activity", "echo", 0, 0.001, 1}) || ls[1] != (limitJSON{"activity", "sleep", 1, 0, 0}) {
		t.Fatalf("list: %+v", ls)
	}
	if out := r.ok(t, "namespace", "limits", "get", "billing", "--activity-type", "sleep"); !strings.HasPrefix(out, "KIND ") ||
		!strings.Contains(out, "1 per key") {
		t.Fatalf("get:\n%s", out)
	}

	// Concurrency: nap-2 waits for nap-1, whose key it shares.
	for _, id := range []string{"nap-1", "nap-2"} {
		r.ok(t, "activity", "schedule", "-n", "billing", "-t", "sleep", "--id", id, "--concurrency-key", "acct-7",
			"--input", `{"ms":60000}`)
	}
	r.eventually(t, "running", "activity", "why", "nap-1", "-n", "billing")
	out := r.ok(t, "activity", "why", "nap-2", "-n", "billing")
	for _, want := range []string{"concurrency_limit (scheduled)", `concurrency key "acct-7"`, "runs 1 of its limit of 1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("why nap-2 does not say %q:\n%s", want, out)
		}
	}
	type whyJSON struct {
		Reason         string `json:"reason"`
		ConcurrencyKey string `json:"concurrency_key"`
		Running        int    `json:"running"`
		Limit          int    `json:"limit"`
		Until          string `json:"until"`
	}
	if w := decode[whyJSON](t, r.ok(t, "activity", "why", "nap-2", "-n", "billing", "-o", "json")); w !=
		(whyJSON{Reason: "concurrency_limit", ConcurrencyKey: "acct-7", Running: 1, Limit: 1}) {
		t.Fatalf("why nap-2 -o json: %+v", w)
	}

	// Rate: the burst of 1 lets one echo through; the next waits ~17 minutes.
	r.ok(t, "activity", "schedule", "-n", "billing", "-t", "echo", "--id", "e-1", "--wait", "--wait-timeout", "20s")
	r.ok(t, "activity", "schedule", "-n", "billing", "-t", "echo", "--id", "e-2")
	out = r.ok(t, "activity", "why", "e-2", "-n", "billing")
	for _, want := range []string{"rate_limited (scheduled)", `activity type "echo"`, "0.001/s, burst 1", "allows its next start at"} {
		if !strings.Contains(out, want) {
			t.Fatalf("why e-2 does not say %q:\n%s", want, out)
		}
	}
	if w := decode[whyJSON](t, r.ok(t, "activity", "why", "e-2", "-n", "billing", "-o", "json")); w.Reason != "rate_limited" || w.Until == "" {
		t.Fatalf("why e-2 -o json: %+v", w)
	}

	// Where the two wait: held by their limits, apart from their queues.
	out = r.ok(t, "namespace", "waiting", "billing")
	for _, want := range []string{"TASK QUEUE", "concurrency_limit (acct-7)", "rate_limited", "sleep", "echo"} {
		if !strings.Contains(out, want) {
			t.Fatalf("namespace waiting does not say %q:\n%s", want, out)
		}
	}
	type groupJSON struct {
		Type   string `json:"type"`
		HeldBy string `json:"held_by"`
		Count  int    `json:"count"`
	}
	if gs := decode[[]groupJSON](t, r.ok(t, "namespace", "waiting", "billing", "-o", "json")); len(gs) != 2 {
		t.Fatalf("namespace waiting -o json: %+v, want the two held activities", gs)
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"set", "billing", "--activity-type", "t", "--concurrency", "0"}, "--concurrency: 0 is not above 0"},
		{[]string{"set", "billing", "--activity-type", "t", "--rate", "-2"}, "--rate: -2 is not above 0"},
		{[]string{"set", "billing", "--activity-type", "t", "--rate", "5", "--burst", "0"}, "--burst: 0 is less than 1"},
		{[]string{"set", "billing", "--concurrency", "2"}, "give --activity-type TYPE or --workflow-type TYPE"},
		{[]string{"set", "billing", "--activity-type", "t", "--workflow-type", "w", "--concurrency", "2"}, "not both"},
		{[]string{"set", "billing", "--activity-type", "t"}, "(InvalidArgument)"},
		{[]string{"set", "missing", "--activity-type", "t", "--concurrency", "2"}, "(NotFound)"},
		{[]string{"get", "billing", "--activity-type", "nope"}, "(NotFound)"},
		{[]string{"set", "billing", "--workflow-type", "w", "--rate", "5"}, "rate limits of workflow types are not enforced"},
	} {
		code, _, errOut := r.run(t, "", append([]string{"namespace", "limits"}, tc.args...)...)
		if code != exitError || !strings.Contains(errOut, tc.says) || strings.Contains(errOut, "rpc error") {
			t.Errorf("aion namespace limits %v: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.says)
		}
	}

	// A workflow type takes a concurrency limit.
	if out := r.ok(t, "namespace", "limits", "set", "billing", "--workflow-type", "w", "--concurrency", "3"); out !=
		"workflow type w in namespace billing: concurrency 3 per key\n" {
		t.Fatalf("set workflow concurrency: %q", out)
	}
	r.ok(t, "namespace", "limits", "clear", "billing", "--workflow-type", "w")

	// Clearing the limit lets nap-2 start beside nap-1.
	if out := r.ok(t, "namespace", "limits", "clear", "billing", "--activity-type", "sleep"); out !=
		"cleared the limit of activity type sleep in namespace billing\n" {
		t.Fatalf("clear: %q", out)
	}
	r.eventually(t, "running", "activity", "why", "nap-2", "-n", "billing")
	for _, id := range []string{"nap-1", "nap-2", "e-2"} {
		r.ok(t, "activity", "cancel", id, "-n", "billing")
	}
}
