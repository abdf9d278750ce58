package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type echo struct {
	Hello string `json:"hello"`
}

func TestRoutingRulesHoldAcrossProcesses(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	ctx := context.Background()
	if _, _, err := c.client.CreateNamespace(ctx, "iso"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.SetPlacement(ctx, "iso", client.Pinned("gpu-1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.client.CreateNamespace(ctx, "pref"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.SetPlacement(ctx, "pref", client.Prefer("fast")); err != nil {
		t.Fatal(err)
	}
	_, tenantA := c.worker("tenant-a", "--namespace", "tenant-a", "--task-queue", "default")
	_, tenantB := c.worker("tenant-b", "--namespace", "tenant-b", "--task-queue", "default")
	_, gpuQueue := c.worker("gpu-queue", "--namespace", "tenant-a", "--task-queue", "gpu")
	_, onN1 := c.worker("node-n1", "--namespace", "tenant-a", "--task-queue", "pinq", "--node", "n1")
	_, onN2 := c.worker("node-n2", "--namespace", "tenant-a", "--task-queue", "pinq", "--node", "n2")
	_, isoGPU := c.worker("iso-gpu", "--namespace", "iso", "--node", "gpu-1")
	_, prefFast := c.worker("pref-fast", "--namespace", "pref", "--node", "fast", "--slots", "1")
	_, prefSlow := c.worker("pref-slow", "--namespace", "pref", "--node", "slow", "--slots", "1")

	// A worker on the wrong node is refused whole and exits.
	refused := start(t, "iso-cpu", "worker", "demo", "--address", c.grpc, "--namespace", "iso,tenant-a", "--node", "cpu-1")
	if code := refused.exit(30 * time.Second); code == 0 || !strings.Contains(refused.output(), "FailedPrecondition") {
		t.Fatalf("worker on cpu-1 into pinned{gpu-1}: exit %d, output:\n%s", code, refused.output())
	}

	cases := []struct {
		opts client.ScheduleOptions
		want uint64
	}{
		{client.ScheduleOptions{Namespace: "tenant-a", ActivityType: "echo"}, tenantA},
		{client.ScheduleOptions{Namespace: "tenant-b", ActivityType: "echo"}, tenantB},
		{client.ScheduleOptions{Namespace: "tenant-a", TaskQueue: "gpu", ActivityType: "echo"}, gpuQueue},
		{client.ScheduleOptions{Namespace: "tenant-a", TaskQueue: "pinq", Node: "n1", ActivityType: "echo"}, onN1},
		{client.ScheduleOptions{Namespace: "tenant-a", TaskQueue: "pinq", Node: "n2", ActivityType: "echo"}, onN2},
		{client.ScheduleOptions{Namespace: "iso", ActivityType: "echo"}, isoGPU},
	}
	for round := range 3 {
		for i, tc := range cases {
			tc.opts.ID = fmt.Sprintf("route-%d-%d", round, i)
			h := c.schedule(tc.opts, echo{Hello: tc.opts.ID})
			a := c.wait(h.Namespace, h.ID)
			if a.State != client.StateCompleted || ranOn(a) != tc.want {
				t.Fatalf("%+v ran on worker %d (state %s), want worker %d", tc.opts, ranOn(a), a.State, tc.want)
			}
			var got echo
			if err := json.Unmarshal(a.Result, &got); err != nil || got.Hello != tc.opts.ID {
				t.Fatalf("%s result = %s", tc.opts.ID, a.Result)
			}
		}
	}

	// Prefer: the preferred node first; with it busy, the other node.
	busy := c.schedule(client.ScheduleOptions{Namespace: "pref", ID: "pref-busy", ActivityType: "sleep"}, map[string]int{"ms": 1500})
	if a := c.waitState("pref", busy.ID, client.StateRunning); ranOn(a) != prefFast {
		t.Fatalf("first prefer activity on worker %d, want the fast node's %d", ranOn(a), prefFast)
	}
	spill := c.schedule(client.ScheduleOptions{Namespace: "pref", ID: "pref-spill", ActivityType: "echo"}, echo{Hello: "spill"})
	if a := c.wait("pref", spill.ID); ranOn(a) != prefSlow {
		t.Fatalf("with the preferred node busy the activity ran on %d, want the slow node's %d", ranOn(a), prefSlow)
	}
	c.wait("pref", busy.ID)
}

func TestWorkerKilledMidActivityIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	victim, victimID := c.worker("victim", "--namespace", "k", "--slots", "1")
	h := c.schedule(client.ScheduleOptions{Namespace: "k", ID: "long", ActivityType: "sleep",
		RetryPolicy: &client.RetryPolicy{InitialInterval: 50 * time.Millisecond}}, map[string]int{"ms": 1500})
	if a := c.waitState("k", h.ID, client.StateRunning); ranOn(a) != victimID {
		t.Fatalf("running on %d, want %d", ranOn(a), victimID)
	}
	_, survivorID := c.worker("survivor", "--namespace", "k", "--slots", "1")
	victim.signal(syscall.SIGKILL)
	a := c.wait("k", h.ID)
	if a.State != client.StateCompleted || ranOn(a) != survivorID || len(a.Attempts) != 2 {
		t.Fatalf("after SIGKILL: %+v", a)
	}
	if f := a.Attempts[0].Failure; f == nil || f.Type != "worker_lost" || a.Attempts[0].WorkerID != victimID {
		t.Fatalf("first attempt = %+v, want worker_lost on the killed worker", a.Attempts[0])
	}
}

// TestServerKilledUnderLoadLosesNothing SIGKILLs the server while clients
// schedule and workers run, restarts it on the same data, and checks that
// every activity Schedule acknowledged reaches a terminal state. The server
// runs as deployed, with synchronous=full, which it reads back from its
// store and logs.
func TestServerKilledUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	c := startServer(t, "--sqlite-sync", "full")
	syncFull := regexp.MustCompile(`msg="store opened" store="sqlite [^"]+ synchronous=full"`)
	c.server.waitLine(syncFull, 10*time.Second)
	for i := range 3 {
		c.worker(fmt.Sprintf("w%d", i), "--namespace", "load", "--slots", "8")
	}
	l := startLoad(t, 30, func(int, int) *client.Client { return c.client })
	// Kill once real load has built up, however busy the machine is.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := l.count()
		if n >= 150 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d activities acknowledged in 60s", n)
		}
	}
	c.server.signal(syscall.SIGKILL)
	c.server.exit(10 * time.Second)
	killedAt := l.count()
	c.boot() // same ports, same data dir; workers reconnect by themselves
	c.server.waitLine(syncFull, 10*time.Second)
	// Schedules go on after the restart before the load stops.
	for deadline := time.Now().Add(60 * time.Second); l.count() < killedAt+30; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d activities acknowledged after the restart in 60s", l.count()-killedAt)
		}
	}
	ids := l.finish()
	if len(ids) < 150 {
		t.Fatalf("only %d activities acknowledged; the load was too light to mean anything", len(ids))
	}
	completed := 0
	for _, id := range ids {
		a := c.wait("load", id)
		if a.State == client.StateCompleted {
			completed++
		} else {
			t.Errorf("%s ended %s: %+v", id, a.State, a.Failure)
		}
	}
	t.Logf("%d activities acknowledged across the crash, %d completed", len(ids), completed)
	if completed != len(ids) {
		t.Fatalf("%d of %d acknowledged activities did not complete", len(ids)-completed, len(ids))
	}
}

func TestSIGTERMDrainLosesNothing(t *testing.T) {
	t.Parallel()
	c := startServer(t, "--drain-timeout", "60s")
	w, _ := c.worker("w", "--namespace", "drain", "--slots", "4")
	var ids []string
	for i := range 4 {
		h := c.schedule(client.ScheduleOptions{Namespace: "drain", ID: fmt.Sprintf("d%d", i), ActivityType: "sleep"}, map[string]int{"ms": 800})
		ids = append(ids, h.ID)
	}
	for _, id := range ids {
		c.waitState("drain", id, client.StateRunning)
	}
	queued := c.schedule(client.ScheduleOptions{Namespace: "drain", ID: "queued", ActivityType: "sleep"}, map[string]int{"ms": 10})
	began := time.Now()
	c.server.signal(syscall.SIGTERM)
	if code := c.server.exit(45 * time.Second); code != 0 {
		t.Fatalf("server exited %d after SIGTERM", code)
	}
	took := time.Since(began)
	w.waitLine(regexp.MustCompile(`drained by the server`), 10*time.Second)
	// The drain ends when the in-flight work (under a second) is done, far
	// before its 60s timeout, however busy the machine.
	if took > 30*time.Second {
		t.Fatalf("drain took %v; the in-flight work needed under a second", took)
	}
	c.boot()
	for _, id := range append(ids, queued.ID) {
		a := c.wait("drain", id)
		if a.State != client.StateCompleted {
			t.Fatalf("%s after drain and restart: %s", id, a.State)
		}
		if id != queued.ID && len(a.Attempts) != 1 {
			t.Fatalf("%s needed %d attempts; drain should have let the first finish", id, len(a.Attempts))
		}
	}
}

func TestTimeoutsAndStaleResultsAcrossProcesses(t *testing.T) {
	t.Parallel()
	c := startServer(t, "--heartbeat-window", "20s")
	noRetry := &client.RetryPolicy{MaximumAttempts: 1}

	h := c.schedule(client.ScheduleOptions{Namespace: "to", ID: "nobody", ActivityType: "echo",
		ScheduleToStartTimeout: 300 * time.Millisecond}, echo{})
	if a := c.wait("to", h.ID); a.State != client.StateTimedOut || a.Failure.Type != "schedule_to_start_timeout" {
		t.Fatalf("schedule-to-start: %s %+v", a.State, a.Failure)
	}

	stuck, stuckID := c.worker("stuck", "--namespace", "to", "--slots", "2")
	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "too-slow", ActivityType: "sleep",
		StartToCloseTimeout: 300 * time.Millisecond, RetryPolicy: noRetry}, map[string]int{"ms": 3000})
	if a := c.wait("to", h.ID); a.State != client.StateTimedOut || a.Failure.Type != "start_to_close_timeout" {
		t.Fatalf("start-to-close: %s %+v", a.State, a.Failure)
	}

	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "whole", ActivityType: "sleep",
		ScheduleToCloseTimeout: 500 * time.Millisecond, StartToCloseTimeout: 10 * time.Second}, map[string]int{"ms": 3000})
	if a := c.wait("to", h.ID); a.State != client.StateTimedOut || a.Failure.Type != "schedule_to_close_timeout" {
		t.Fatalf("schedule-to-close: %s %+v", a.State, a.Failure)
	}

	// Heartbeat: a stopped worker process sends nothing.
	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "frozen", ActivityType: "sleep",
		HeartbeatTimeout: 600 * time.Millisecond, RetryPolicy: noRetry}, map[string]int{"ms": 5000})
	c.waitState("to", h.ID, client.StateRunning)
	stuck.signal(syscall.SIGSTOP)
	a := c.wait("to", h.ID)
	if a.State != client.StateTimedOut || a.Failure.Type != "heartbeat_timeout" {
		t.Fatalf("heartbeat: %s %+v", a.State, a.Failure)
	}

	// Stale result: attempt 1 goes to the stopped worker and times out,
	// attempt 2 completes elsewhere; when the stopped worker resumes, its
	// late results are refused and change nothing.
	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "stale", ActivityType: "echo",
		StartToCloseTimeout: 500 * time.Millisecond,
		RetryPolicy:         &client.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 3}}, echo{Hello: "x"})
	if a := c.waitState("to", h.ID, client.StateRunning); ranOn(a) != stuckID {
		t.Fatalf("attempt 1 ran on %d, want the stopped worker %d", ranOn(a), stuckID)
	}
	_, freshID := c.worker("fresh", "--namespace", "to", "--slots", "1")
	a = c.wait("to", h.ID)
	if a.State != client.StateCompleted || len(a.Attempts) != 2 || a.Attempts[0].WorkerID != stuckID ||
		a.Attempts[0].Outcome != client.OutcomeTimedOut || a.Attempts[1].WorkerID != freshID {
		t.Fatalf("stale case before the late result: %s %+v", a.State, a.Attempts)
	}
	stuck.signal(syscall.SIGCONT)
	// The resumed worker runs attempt 1 and reports it; the server refuses it.
	stuck.waitLine(regexp.MustCompile(`result refused by the server" activity=to/stale#1 `), 30*time.Second)
	after, err := c.client.Get(context.Background(), "to", h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != client.StateCompleted || len(after.Attempts) != 2 || after.Attempts[0].Outcome != client.OutcomeTimedOut ||
		string(after.Result) != string(a.Result) {
		t.Fatalf("a late result changed the activity: %s %+v", after.State, after.Attempts)
	}

	// Retries follow the policy: fail twice, then succeed on attempt 3.
	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "flaky", ActivityType: "fail",
		RetryPolicy: &client.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaximumAttempts: 5}},
		map[string]int{"times": 2})
	a = c.wait("to", h.ID)
	if a.State != client.StateCompleted || a.Attempt != 3 || len(a.Attempts) != 3 {
		t.Fatalf("fail twice: %s after %d attempts", a.State, a.Attempt)
	}
	if gap := a.Attempts[2].StartedTime.Sub(a.Attempts[1].EndedTime); gap < 190*time.Millisecond {
		t.Fatalf("second retry started %v after the failure, want the 200ms backoff", gap)
	}
	h = c.schedule(client.ScheduleOptions{Namespace: "to", ID: "capped", ActivityType: "fail",
		RetryPolicy: &client.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 2}}, map[string]int{"times": 5})
	if a := c.wait("to", h.ID); a.State != client.StateFailed || a.Attempt != 2 {
		t.Fatalf("capped at 2 attempts: %s after %d", a.State, a.Attempt)
	}
}

func TestCLIRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	c := startServer(t, "--auto-create", "closed")
	if out, code := c.cli("namespace", "create", "ok"); code != 0 {
		t.Fatalf("namespace create: %d %s", code, out)
	}
	cases := []struct {
		args  []string
		names string
	}{
		{[]string{"activity", "schedule", "--namespace", "ok", "--type", "echo", "--input", "{not json"}, "--input"},
		{[]string{"activity", "schedule", "--namespace", "ghost", "--type", "echo", "--input", "{}"}, "ghost"},
		{[]string{"activity", "schedule", "--namespace", "ok", "--type", "bad type", "--input", "{}"}, "activity_type"},
		{[]string{"activity", "schedule", "--namespace", "ok", "--type", "echo", "--input", "{}", "--max-attempts", "-1"}, "maximum_attempts"},
		{[]string{"namespace", "place", "ok", "--pinned", ""}, "pinned"},
		{[]string{"activity", "get", "missing", "--namespace", "ok"}, "missing"},
	}
	for _, tc := range cases {
		out, code := c.cli(tc.args...)
		if code == 0 || !strings.Contains(out, tc.names) {
			t.Errorf("aion %s: exit %d, output %q; want a failure naming %s", strings.Join(tc.args, " "), code, out, tc.names)
		}
	}
	page, err := c.client.List(context.Background(), client.ListOptions{Namespace: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Activities) != 0 {
		t.Fatalf("refused commands created %d activities", len(page.Activities))
	}
	if _, err := c.client.GetNamespace(context.Background(), "ghost"); status.Code(err) != codes.NotFound {
		t.Fatalf("closed auto-create minted ghost: %v", err)
	}
}

func TestWorkersAndEventsCommands(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	events := start(t, "events", "events", "--address", c.grpc)
	events.waitLine(regexp.MustCompile(`snapshot: 0 workers`), 30*time.Second)
	w, id := c.worker("w", "--namespace", "ops", "--node", "n7", "--slots", "3")
	events.waitLine(regexp.MustCompile(fmt.Sprintf(`worker %d connected: namespaces=ops task_queue=default node=n7 slots=3`, id)), 10*time.Second)

	out, code := c.cli("workers", "list", "--output", "json")
	var ws []client.Worker
	if code != 0 || json.Unmarshal([]byte(out), &ws) != nil || len(ws) != 1 || ws[0].ID != id || ws[0].Node != "n7" || ws[0].Slots != 3 {
		t.Fatalf("workers list: exit %d, %s", code, out)
	}
	if out, code := c.cli("workers", "drain", fmt.Sprint(id)); code != 0 || !strings.Contains(out, "draining") {
		t.Fatalf("workers drain: exit %d, %s", code, out)
	}
	events.waitLine(regexp.MustCompile(fmt.Sprintf(`worker %d draining`, id)), 10*time.Second)
	events.waitLine(regexp.MustCompile(fmt.Sprintf(`worker %d disconnected: reason=drained`, id)), 10*time.Second)
	// An operator's drain retires the worker: the process exits cleanly
	// instead of reconnecting as a new worker.
	if code := w.exit(10 * time.Second); code != 0 {
		t.Fatalf("drained worker exited %d", code)
	}
	if out, code := c.cli("workers", "drain", "999"); code == 0 || !strings.Contains(out, "999") {
		t.Fatalf("draining an unknown worker: exit %d, %s", code, out)
	}
}
