package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/worker"
)

// startServer runs a real in-process server on loopback ports.
func startServer(t *testing.T) string {
	t.Helper()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir, cfg.Dev = "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), true
	cfg.SQLiteSync = "normal"
	cfg.DrainTimeout = 5 * time.Second
	srv, err := server.Start(context.Background(), cfg, testLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return srv.GRPCAddr()
}

// testLog discards logs unless AION_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("AION_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCLIEndToEnd runs the demo worker and the client commands against a
// real server, in process.
func TestCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr := startServer(t)
	env := func(k string) (string, bool) {
		if k == "AION_ADDRESS" {
			return addr, true
		}
		return "", false
	}

	// The demo worker, stopped by canceling its context (as SIGTERM would).
	workerLog := &syncBuffer{}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan int, 1)
	go func() {
		a := newApp(strings.NewReader(""), &bytes.Buffer{}, workerLog, env)
		workerDone <- a.execute(wctx, []string{"worker", "demo", "--namespace", "demo,other", "--task-queue", "default", "--slots", "2"})
	}()

	cli := func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := newApp(strings.NewReader(stdin), &out, &errOut, env).execute(context.Background(), args)
		return code, out.String(), errOut.String()
	}

	code, out, stderr := cli("", "activity", "schedule", "--namespace", "demo", "--task-queue", "default", "--type", "echo",
		"--input", `{"hello":"world"}`, "--wait", "--wait-timeout", "20s", "-o", "json")
	if code != exitOK {
		t.Fatalf("echo: code %d\n%s\n%s\nworker log:\n%s", code, out, stderr, workerLog.String())
	}
	var act struct {
		State  string            `json:"state"`
		Result map[string]string `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &act); err != nil || act.State != "completed" || act.Result["hello"] != "world" {
		t.Fatalf("echo output %s (%v)", out, err)
	}

	code, out, stderr = cli("", "activity", "schedule", "-n", "other", "-t", "fail", "--input", `{"times":2}`,
		"--initial-interval", "20ms", "--max-attempts", "5", "--wait", "--wait-timeout", "20s")
	if code != exitOK || !strings.Contains(out, `{"attempts":3}`) {
		t.Fatalf("fail: code %d\n%s\n%s", code, out, stderr)
	}

	code, out, stderr = cli("", "activity", "schedule", "-n", "demo", "-t", "fail", "--input", `{"times":9}`,
		"--initial-interval", "20ms", "--max-attempts", "2", "--id", "doomed", "--wait", "--wait-timeout", "20s")
	if code != exitNotCompleted || !strings.Contains(out, "failed") || !strings.Contains(stderr, "ended failed") {
		t.Fatalf("doomed: code %d\n%s\n%s", code, out, stderr)
	}

	code, out, stderr = cli(`{"ms":300}`, "activity", "schedule", "-n", "demo", "-t", "sleep", "--input", "-",
		"--heartbeat-timeout", "1s", "--id", "nap", "--wait", "--wait-timeout", "20s", "-o", "json")
	if code != exitOK || !strings.Contains(out, `"slept_ms": 300`) {
		t.Fatalf("sleep: code %d\n%s\n%s", code, out, stderr)
	}

	code, out, _ = cli("", "activity", "list", "-n", "demo", "--state", "failed")
	if code != exitOK || !strings.Contains(out, "doomed") || strings.Contains(out, "nap") {
		t.Fatalf("list: code %d\n%s", code, out)
	}
	code, out, _ = cli("", "activity", "get", "nap", "-n", "demo")
	if code != exitOK || !strings.Contains(out, "state:") || !strings.Contains(out, "completed") {
		t.Fatalf("get: code %d\n%s", code, out)
	}

	code, _, stderr = cli("", "namespace", "create", "billing")
	if code != exitOK {
		t.Fatalf("create: %s", stderr)
	}
	code, out, stderr = cli("", "namespace", "place", "billing", "--prefer", "n1")
	if code != exitOK || !strings.Contains(out, "prefer{n1}") {
		t.Fatalf("place: code %d %s %s", code, out, stderr)
	}
	code, out, _ = cli("", "namespace", "list", "-o", "json")
	var nss []struct {
		Name string `json:"name"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &nss) != nil || len(nss) != 3 {
		t.Fatalf("namespace list: %s", out)
	}

	stopWorker()
	select {
	case code := <-workerDone:
		if code != exitOK {
			t.Fatalf("worker exit %d\n%s", code, workerLog.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop")
	}
	if n := strings.Count(workerLog.String(), `msg="task `); n < 6 {
		t.Errorf("worker logged %d task lines, want at least 6:\n%s", n, workerLog.String())
	}
}

// TestSDKEndToEnd drives the typed client and worker SDKs against a real
// server: typed payloads and results, failures, heartbeat details.
func TestSDKEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type In struct {
		A, B int
	}
	type Out struct {
		Sum     int
		Attempt uint32
	}
	w, err := worker.New(addr, worker.Options{Namespaces: []string{"sdk"}, TaskQueue: "math", Slots: 4,
		Logger: testLog(), StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	worker.RegisterActivity(w, "add", func(ctx context.Context, in In) (Out, error) {
		info := worker.Info(ctx)
		if in.A < 0 {
			return Out{}, worker.NewError("negative", "A is negative", false, in)
		}
		prev, err := worker.HeartbeatDetails[map[string]int](ctx)
		if errors.Is(err, worker.ErrNoHeartbeatDetails) {
			// First run: record progress, then fail retryably; the retry
			// resumes from the heartbeat.
			worker.RecordHeartbeat(ctx, map[string]int{"partial": in.A})
			return Out{}, errors.New("transient")
		} else if err != nil {
			return Out{}, worker.NonRetryable(err)
		}
		return Out{Sum: prev["partial"] + in.B, Attempt: info.Attempt}, nil
	})
	wctx, stopWorker := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(wctx) }()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := client.ScheduleOptions{Namespace: "sdk", TaskQueue: "math", ActivityType: "add", HeartbeatTimeout: 5 * time.Second,
		RetryPolicy: &client.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5}}
	h, err := client.Schedule(ctx, c, opts, In{A: 2, B: 3})
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.WaitResult[Out](ctx, c, h.Namespace, h.ID)
	if err != nil || out.Sum != 5 || out.Attempt < 2 {
		t.Fatalf("result %+v, %v", out, err)
	}

	opts.ID = "neg"
	h, err = client.Schedule(ctx, c, opts, In{A: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.WaitResult[Out](ctx, c, h.Namespace, h.ID)
	var ae *client.ActivityError
	if !errors.As(err, &ae) || ae.Type != "negative" || ae.Retryable || string(ae.Details) != `{"A":-1,"B":0}` {
		t.Fatalf("err = %v (%+v)", err, ae)
	}
	// Same id, same request: the existing activity.
	again, err := client.Schedule(ctx, c, opts, In{A: -1})
	if err != nil || !again.Existing || again.ID != "neg" {
		t.Fatalf("idempotent schedule: %+v, %v", again, err)
	}

	var reqs []client.ScheduleRequest
	for i := range 5 {
		r, err := client.NewScheduleRequest(client.ScheduleOptions{Namespace: "sdk", TaskQueue: "math", ActivityType: "add",
			RetryPolicy: &client.RetryPolicy{InitialInterval: 10 * time.Millisecond}}, In{A: i, B: i})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	reqs = append(reqs, client.ScheduleRequest{Options: client.ScheduleOptions{Namespace: "sdk"}}) // no type
	res, err := c.ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:5] {
		if r.Err != nil {
			t.Fatalf("batch item %d: %v", i, r.Err)
		}
		out, err := client.WaitResult[Out](ctx, c, r.Handle.Namespace, r.Handle.ID)
		if err != nil || out.Sum != 2*i {
			t.Fatalf("batch item %d: %+v, %v", i, out, err)
		}
	}
	if res[5].Err == nil {
		t.Fatal("batch item without a type was accepted")
	}

	stopWorker()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
