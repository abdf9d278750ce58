package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/servertest"
)

// waitState polls `activity get` until activity id in namespace ns is in
// state.
func (r *cliRig) waitState(t *testing.T, id, state string) {
	t.Helper()
	servertest.Eventually(t, id+" to be "+state, func() bool {
		code, out, _ := r.run(t, "", "activity", "get", id, "-n", "ns", "-o", "json")
		return code == exitOK && decode[activityJSON](t, out).State == state
	})
}

func TestInterveneFlagsAreCheckedBeforeAnyRPC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"x"}, "--namespace"},
		{[]string{"x", "-n", "ns"}, "no command"},
		{[]string{"x", "-n", "ns", "--pause", "--resume"}, "--pause, --resume: give exactly one command"},
		{[]string{"x", "-n", "ns", "--inject", "hi", "--max-turns", "2"}, "give exactly one command"},
		{[]string{"x", "-n", "ns", "--approve", "c1", "--deny", "c1"}, "give exactly one command"},
		{[]string{"x", "-n", "ns", "--pause", "--interrupt"}, "--interrupt: only with --inject"},
		{[]string{"x", "-n", "ns", "--pause", "--reason", "r"}, "--reason: only with --cancel"},
		{[]string{"x", "-n", "ns", "--pause", "--note", "n"}, "--note: only with --approve or --deny"},
		{[]string{"x", "-n", "ns", "--inject", ""}, "--inject: the message must not be empty"},
		{[]string{"x", "-n", "ns", "--approve", ""}, "--approve: the call id must not be empty"},
		{[]string{"x", "-n", "ns", "--deny", ""}, "--deny: the call id must not be empty"},
		{[]string{"x", "-n", "ns", "--pause=false"}, "leave the flag out"},
		{[]string{"x", "-n", "ns", "--pause", "--attempt", "0"}, "--attempt 0"},
		{[]string{"x", "-n", "ns", "--max-turns", "-1"}, "--max-turns"},
		{[]string{"-n", "ns", "--pause"}, "accepts 1 arg"},
	} {
		inv := &invocation{}
		code, _, stderr := inv.run(t, append([]string{"activity", "intervene"}, tc.args...)...)
		if code != exitError || !strings.Contains(stderr, tc.want) || inv.dialed {
			t.Errorf("intervene %v: exit %d, stderr %q, dialed %v; want exit 1 naming %q before dialing", tc.args, code, stderr, inv.dialed, tc.want)
		}
	}
	inv := &invocation{}
	if code, _, stderr := inv.run(t, "activity", "cancel", "x"); code != exitError || !strings.Contains(stderr, "--namespace") || inv.dialed {
		t.Errorf("cancel without --namespace: exit %d, stderr %q", code, stderr)
	}
}

func TestCancelAndInterveneCommandsWithTheDemoWorker(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	w := r.start(t, "worker", "demo", "--namespace", "ns", "--slots", "4")
	plain := r.start(t, "worker", "demo", "--namespace", "ns", "--task-queue", "plain", "--capabilities", "none")
	r.srv.WaitForWorker(t, func(w registry.WorkerInfo) bool { return w.TaskQueue == "plain" })

	// cancel: a waiting activity, then a running one; the output is the
	// activity, canceled.
	r.ok(t, "activity", "schedule", "-n", "ns", "-t", "nobody-runs-this", "--id", "waiting")
	if out := r.ok(t, "activity", "cancel", "waiting", "-n", "ns", "--reason", "not needed"); !strings.HasPrefix(out,
		"canceled activity waiting in namespace ns\n") || !strings.Contains(out, "canceled: not needed") {
		t.Fatalf("cancel text:\n%s", out)
	}
	r.ok(t, "activity", "schedule", "-n", "ns", "-t", "sleep", "--input", `{"ms":20000}`, "--id", "nap")
	r.waitState(t, "nap", "running")
	a := decode[activityJSON](t, r.ok(t, "activity", "cancel", "nap", "-n", "ns", "-o", "json"))
	if a.State != "canceled" || len(a.Attempts) != 1 || a.Attempts[0].Outcome != "canceled" || a.Failure == nil || a.Failure.Type != "canceled" {
		t.Fatalf("cancel -o json = %+v", a)
	}
	servertest.Eventually(t, "the worker to log the cancellation", func() bool {
		return strings.Contains(w.log.String(), "activity canceled") && strings.Contains(w.log.String(), "result refused")
	})
	if code, _, errOut := r.run(t, "", "activity", "cancel", "ghost", "-n", "ns"); code != exitError || !strings.Contains(errOut, "(NotFound)") {
		t.Fatalf("cancel ghost: exit %d, %q", code, errOut)
	}

	// intervene: delivered, in text and JSON. The agent would run for
	// hours; the budget below ends it.
	r.ok(t, "activity", "schedule", "-n", "ns", "-t", "agent", "--input", `{"turns":100000,"turn_ms":300}`, "--id", "ag")
	r.waitState(t, "ag", "running")
	out := r.ok(t, "activity", "intervene", "ag", "-n", "ns", "--inject", "hello there")
	if !strings.HasPrefix(out, "delivered inject_message to attempt 1 of activity ag in namespace ns (intervention ") {
		t.Fatalf("inject text: %q", out)
	}
	type result struct {
		Namespace      string `json:"namespace"`
		ActivityID     string `json:"activity_id"`
		Command        string `json:"command"`
		Outcome        string `json:"outcome"`
		InterventionID string `json:"intervention_id"`
		Attempt        int    `json:"attempt"`
	}
	// capability_not_supported: exit 4; the demo worker does not take approvals.
	code, out, errOut := r.run(t, "", "activity", "intervene", "ag", "-n", "ns", "--approve", "call-1", "--note", "fine", "-o", "json")
	if res := decode[result](t, out); code != exitCapabilityNotSupported || res.Outcome != "capability_not_supported" ||
		res.InterventionID != "" || res.Attempt != 1 || !strings.Contains(errOut, "respond_to_approval") {
		t.Fatalf("approve: exit %d, %+v, stderr %q", code, res, errOut)
	}
	code, out, _ = r.run(t, "", "activity", "intervene", "ag", "-n", "ns", "--deny", "call-1")
	if code != exitCapabilityNotSupported || out != "capability_not_supported: respond_to_approval not sent: the worker running attempt 1 of activity ag in namespace ns did not advertise respond_to_approval\n" {
		t.Fatalf("deny: exit %d, %q", code, out)
	}
	// stale_target: exit 3, for another attempt (and below, for a finished activity).
	code, out, errOut = r.run(t, "", "activity", "intervene", "ag", "-n", "ns", "--pause", "--attempt", "2")
	if code != exitStaleTarget || out != "stale_target: pause not sent: no live worker runs attempt 2 of activity ag in namespace ns\n" ||
		!strings.Contains(errOut, "stale target") {
		t.Fatalf("attempt 2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	res := decode[result](t, r.ok(t, "activity", "intervene", "ag", "-n", "ns", "--max-turns", "3", "--attempt", "1", "-o", "json"))
	if res != (result{"ns", "ag", "update_budget", "delivered", res.InterventionID, 1}) || res.InterventionID == "" {
		t.Fatalf("budget -o json = %+v", res)
	}
	a = decode[activityJSON](t, r.ok(t, "activity", "wait", "ag", "-n", "ns", "-o", "json"))
	var agentOut agentOutput
	if err := json.Unmarshal(a.Result, &agentOut); err != nil || agentOut.TurnsRun < 3 || agentOut.TurnsRun > 30 {
		t.Fatalf("agent result = %s (%v), want about 3 turns", a.Result, err)
	}
	if a.State != "completed" ||
		!strings.Contains(compact(a.Result), `{"text":"hello there","priority":"normal","turn":`) || !strings.Contains(compact(a.Result), `"max_turns":3`) {
		t.Fatalf("agent result = %s", a.Result)
	}
	code, out, _ = r.run(t, "", "activity", "intervene", "ag", "-n", "ns", "--resume", "-o", "json")
	if res := decode[result](t, out); code != exitStaleTarget || res.Outcome != "stale_target" || res.Attempt != 0 {
		t.Fatalf("after completion: exit %d, %+v", code, res)
	}
	// A worker that advertised nothing gets nothing, not even a cancel.
	r.ok(t, "activity", "schedule", "-n", "ns", "-q", "plain", "-t", "agent", "--input", `{"turns":100000,"turn_ms":100}`, "--id", "plain-ag")
	r.waitState(t, "plain-ag", "running")
	for _, flag := range [][]string{{"--inject", "x"}, {"--pause"}, {"--cancel", "--reason", "r"}, {"--max-tokens", "10"}} {
		code, out, _ := r.run(t, "", append([]string{"activity", "intervene", "plain-ag", "-n", "ns"}, flag...)...)
		if code != exitCapabilityNotSupported || !strings.HasPrefix(out, "capability_not_supported: ") {
			t.Fatalf("%v to a worker without capabilities: exit %d, %q", flag, code, out)
		}
	}
	r.ok(t, "activity", "cancel", "plain-ag", "-n", "ns")
	if code, _, errOut := r.run(t, "", "activity", "intervene", "ghost", "-n", "ns", "--pause"); code != exitError || !strings.Contains(errOut, "(NotFound)") {
		t.Fatalf("intervene ghost: exit %d, %q", code, errOut)
	}
	plain.stop()
	w.stop()
	if plain.exit(t) != exitOK || w.exit(t) != exitOK {
		t.Fatalf("workers did not exit cleanly:\n%s\n%s", w.log.String(), plain.log.String())
	}
}

func TestDemoAgentOnItsOwn(t *testing.T) {
	t.Parallel()
	agent := demoAgent(slog.New(slog.DiscardHandler))
	start := time.Now()
	out, err := agent(context.Background(), agentInput{Turns: 3, TurnMS: 10})
	if err != nil || out.TurnsRun != 3 || out.Messages == nil || len(out.Messages) != 0 || out.PausedMS != 0 || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("agent = %+v, %v after %v", out, err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := agent(ctx, agentInput{Turns: 3, TurnMS: 10}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled agent = %v", err)
	}
	if _, err := agent(context.Background(), agentInput{Turns: -1}); err == nil {
		t.Fatal("negative turns accepted")
	}
}
