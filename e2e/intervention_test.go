package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
)

// agentResult is the demo agent's result.
type agentResult struct {
	TurnsRun int `json:"turns_run"`
	Messages []struct {
		Text     string `json:"text"`
		Priority string `json:"priority"`
		Turn     int    `json:"turn"`
	} `json:"messages"`
	PausedMS         int64   `json:"paused_ms"`
	InterruptedTurns int     `json:"interrupted_turns"`
	MaxTurns         *uint32 `json:"max_turns"`
	MaxTokens        *uint64 `json:"max_tokens"`
}

// interveneResult is what `aion activity intervene -o json` prints.
type interveneResult struct {
	Namespace      string `json:"namespace"`
	ActivityID     string `json:"activity_id"`
	Command        string `json:"command"`
	Outcome        string `json:"outcome"`
	InterventionID string `json:"intervention_id"`
	Attempt        uint32 `json:"attempt"`
}

// intervene runs `aion activity intervene` and insists on delivery; it
// returns the intervention id.
func (c *cluster) intervene(ns, id string, flags ...string) string {
	c.t.Helper()
	out, code := c.cli(append([]string{"activity", "intervene", id, "--namespace", ns, "--output", "json"}, flags...)...)
	var res interveneResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != "delivered" || res.InterventionID == "" ||
		res.ActivityID != id || res.Attempt != 1 {
		c.t.Fatalf("aion activity intervene %s %v: exit %d\n%s", id, flags, code, out)
	}
	return res.InterventionID
}

// acknowledged waits until the server logs the worker's acknowledgement of
// intervention iv and returns the log line.
func (c *cluster) acknowledged(iv string) string {
	c.t.Helper()
	var line string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for l := range strings.Lines(c.server.output()) {
			if strings.Contains(l, `msg="intervention acknowledged"`) && strings.Contains(l, "intervention="+iv) {
				line = l
			}
		}
		if line != "" {
			return line
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("the server logged no acknowledgement of intervention %s", iv)
	return ""
}

// logged waits until p's output matches every pattern, in any order (a
// process's log lines about one event may come in either order).
func logged(t *testing.T, p *proc, patterns ...string) {
	t.Helper()
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := p.output()
		missing = missing[:0]
		for _, pat := range patterns {
			if !regexp.MustCompile(pat).MatchString(out) {
				missing = append(missing, pat)
			}
		}
		if len(missing) == 0 {
			return
		}
	}
	t.Fatalf("%s logged nothing matching %q", p.name, missing)
}

// running schedules activityType and waits until its attempt runs.
func (c *cluster) running(opts client.ScheduleOptions, input any) *client.Handle {
	c.t.Helper()
	h := c.schedule(opts, input)
	c.waitState(h.Namespace, h.ID, client.StateRunning)
	return h
}

func agentOf(t *testing.T, a *client.Activity) agentResult {
	t.Helper()
	r, err := client.Result[agentResult](a)
	if err != nil {
		t.Fatalf("agent %s: %v", a.ID, err)
	}
	return r
}

func TestCancelAcrossProcesses(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	w, wid := c.worker("w", "--namespace", "cx", "--slots", "1")
	ctx := context.Background()

	// A waiting activity: nothing serves its type; it is closed at once.
	waiting := c.schedule(client.ScheduleOptions{Namespace: "cx", ID: "waiting", ActivityType: "nobody-serves-this"}, echo{})
	out, code := c.cli("activity", "cancel", waiting.ID, "--namespace", "cx", "--reason", "not needed")
	if code != 0 || !strings.Contains(out, "canceled activity waiting in namespace cx") {
		t.Fatalf("cancel waiting: exit %d\n%s", code, out)
	}
	a, err := c.client.Get(ctx, "cx", waiting.ID)
	if err != nil || a.State != client.StateCanceled || a.Failure == nil || a.Failure.Message != "not needed" || len(a.Attempts) != 0 {
		t.Fatalf("waiting activity after cancel: %+v, %v", a, err)
	}

	// A running sleep: closed at once; the worker process is told to stop,
	// logs it, and its late (canceled) report is refused.
	nap := c.running(client.ScheduleOptions{Namespace: "cx", ID: "nap", ActivityType: "sleep"}, map[string]int{"ms": 60_000})
	out, code = c.cli("activity", "cancel", nap.ID, "--namespace", "cx", "--reason", "operator", "--output", "json")
	if code != 0 {
		t.Fatalf("cancel running: exit %d\n%s", code, out)
	}
	var printed struct {
		State    client.State `json:"state"`
		Attempts []struct {
			Outcome client.Outcome `json:"outcome"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed.State != client.StateCanceled ||
		len(printed.Attempts) != 1 || printed.Attempts[0].Outcome != client.OutcomeCanceled {
		t.Fatalf("cancel -o json printed %s (%v)", out, err)
	}
	logged(t, w, `aion worker: activity canceled" activity=cx/nap#1 reason=operator`,
		`msg="task failed" namespace=cx activity_id=nap attempt=1 type=sleep .*activity canceled: operator`,
		`result refused by the server" activity=cx/nap#1`)
	a, err = c.client.Get(ctx, "cx", nap.ID)
	if err != nil || a.State != client.StateCanceled || len(a.Result) != 0 || a.Failure == nil || a.Failure.Type != "canceled" ||
		len(a.Attempts) != 1 || a.Attempts[0].Outcome != client.OutcomeCanceled || a.Attempts[0].WorkerID != wid {
		t.Fatalf("running activity after cancel and the refused report: %+v, %v", a, err)
	}
	// The canceled attempt's slot is free again: the one-slot worker runs
	// the next activity.
	next := c.schedule(client.ScheduleOptions{Namespace: "cx", ID: "next", ActivityType: "echo"}, echo{Hello: "again"})
	if a := c.wait("cx", next.ID); a.State != client.StateCompleted || ranOn(a) != wid {
		t.Fatalf("after the cancel the worker ran %+v", a)
	}

	// Cancelling again is harmless; a finished or unknown activity is refused.
	if out, code := c.cli("activity", "cancel", nap.ID, "--namespace", "cx"); code != 0 {
		t.Fatalf("cancel twice: exit %d\n%s", code, out)
	}
	if out, code := c.cli("activity", "cancel", next.ID, "--namespace", "cx"); code != 1 || !strings.Contains(out, "(FailedPrecondition)") {
		t.Fatalf("cancel a completed activity: exit %d\n%s", code, out)
	}
	if out, code := c.cli("activity", "cancel", "ghost", "--namespace", "cx"); code != 1 || !strings.Contains(out, "(NotFound)") {
		t.Fatalf("cancel an unknown activity: exit %d\n%s", code, out)
	}
}

// turnsOf reads the turns an agent has run from its last heartbeat.
func (c *cluster) turnsOf(ns, id string) (int, client.State) {
	c.t.Helper()
	a, err := c.client.Get(context.Background(), ns, id)
	if err != nil {
		c.t.Fatal(err)
	}
	var p struct {
		TurnsRun int `json:"turns_run"`
	}
	if err := a.LastHeartbeatDetails.Decode(&p); err != nil {
		c.t.Fatalf("%s heartbeat details %s: %v", id, a.LastHeartbeatDetails, err)
	}
	return p.TurnsRun, a.State
}

// The agents below would run for minutes: each ends when a command says so,
// so no check depends on how fast a loaded machine starts processes.
const endless = 100_000

func TestInterventionsDeliveredToTheDemoAgent(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	w, _ := c.worker("agent-worker", "--namespace", "iv", "--slots", "4")

	// Four agents run at once, one per kind of steering.
	budget := c.running(client.ScheduleOptions{Namespace: "iv", ID: "budget", ActivityType: "agent"}, map[string]int{"turns": endless, "turn_ms": 300})
	nap := c.running(client.ScheduleOptions{Namespace: "iv", ID: "nap", ActivityType: "agent", HeartbeatTimeout: time.Second},
		map[string]int{"turns": endless, "turn_ms": 200})
	chat := c.running(client.ScheduleOptions{Namespace: "iv", ID: "chat", ActivityType: "agent"}, map[string]int{"turns": endless, "turn_ms": 200})
	stop := c.running(client.ScheduleOptions{Namespace: "iv", ID: "stop", ActivityType: "agent"}, map[string]int{"turns": endless, "turn_ms": 200})

	// update_budget: max_turns caps the turns; the agent ends after the turn
	// that reaches the cap (or the one in progress, if it is past it).
	capped := c.intervene("iv", budget.ID, "--max-turns", "2", "--max-tokens", "5000")

	// pause: no turn starts while paused, and heartbeats go on (the
	// heartbeat timeout is 1s, the pause over 3s).
	paused := c.intervene("iv", nap.ID, "--pause")
	pausedAt := time.Now()

	// inject_message: a normal message is recorded after the turn, an
	// interrupt cuts the turn short; a budget then ends the agent.
	normal := c.intervene("iv", chat.ID, "--inject", "look at the logs")
	urgent := c.intervene("iv", chat.ID, "--inject", "stop, wrong file", "--interrupt")
	chatEnd := c.intervene("iv", chat.ID, "--max-turns", "1")

	// cancel (the intervention): the SDK cancels the handler, which reports
	// the attempt canceled.
	canceled := c.intervene("iv", stop.ID, "--cancel", "--reason", "enough")

	time.Sleep(time.Until(pausedAt.Add(1500 * time.Millisecond)))
	before, _ := c.turnsOf("iv", nap.ID)
	time.Sleep(1500 * time.Millisecond)
	after, state := c.turnsOf("iv", nap.ID)
	if state != client.StateRunning || after != before {
		t.Fatalf("while paused the agent went from %d to %d turns (state %s)", before, after, state)
	}
	resumed := c.intervene("iv", nap.ID, "--resume")
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := c.turnsOf("iv", nap.ID); n == after; n, _ = c.turnsOf("iv", nap.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not advance after the resume (%d turns)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	napEnd := c.intervene("iv", nap.ID, "--max-turns", "1")

	r := agentOf(t, c.wait("iv", chat.ID))
	var got []string
	for _, m := range r.Messages {
		got = append(got, m.Priority+":"+m.Text)
	}
	if r.InterruptedTurns < 1 || r.TurnsRun < 1 || r.MaxTurns == nil || *r.MaxTurns != 1 || len(got) != 2 ||
		!strings.Contains(strings.Join(got, "|"), "normal:look at the logs") || !strings.Contains(strings.Join(got, "|"), "interrupt:stop, wrong file") {
		t.Fatalf("chat agent: %+v, messages %v", r, got)
	}
	if r := agentOf(t, c.wait("iv", nap.ID)); r.TurnsRun <= after || r.PausedMS < 2500 {
		t.Fatalf("paused agent: %+v, want over 2.5s paused and more than %d turns", r, after)
	}
	if r := agentOf(t, c.wait("iv", budget.ID)); r.TurnsRun < 2 || r.TurnsRun >= endless || r.MaxTurns == nil || *r.MaxTurns != 2 ||
		r.MaxTokens == nil || *r.MaxTokens != 5000 {
		t.Fatalf("budgeted agent: %+v", r)
	}
	if a := c.wait("iv", stop.ID); a.State != client.StateCanceled || len(a.Attempts) != 1 || a.Attempts[0].Outcome != client.OutcomeCanceled {
		t.Fatalf("agent canceled by intervention: %s %+v", a.State, a.Attempts)
	}

	// Every delivered intervention was acknowledged by the worker, as
	// accepted, and the server logged it.
	for _, iv := range []string{capped, paused, normal, urgent, chatEnd, canceled, resumed, napEnd} {
		if line := c.acknowledged(iv); !strings.Contains(line, "accepted=true") {
			t.Errorf("acknowledgement of %s: %s", iv, line)
		}
	}
	logged(t, w, `demo agent got a message" activity_id=chat priority=normal text="look at the logs"`,
		`demo agent got a message" activity_id=chat priority=interrupt`, `demo agent resumed" activity_id=nap`,
		`demo agent budget updated" activity_id=budget turn_limit=2`, `activity=iv/nap#1 intervention=\w+ command=pause accepted=true`,
		`activity=iv/stop#1 intervention=\w+ command=cancel accepted=true`)
}

func TestInterventionsNotDelivered(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	agent, _ := c.worker("agent-worker", "--namespace", "nd", "--slots", "2")
	plain, _ := c.worker("plain-worker", "--namespace", "nd", "--task-queue", "plain", "--capabilities", "none")
	notDelivered := func(id string, wantCode int, wantOut string, flags ...string) {
		t.Helper()
		out, code := c.cli(append([]string{"activity", "intervene", id, "--namespace", "nd"}, flags...)...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Errorf("intervene %s %v: exit %d, want %d with %q\n%s", id, flags, code, wantCode, wantOut, out)
		}
	}

	// stale_target (exit 3): the activity finished, never started, or runs
	// another attempt than the one named.
	done := c.schedule(client.ScheduleOptions{Namespace: "nd", ID: "done", ActivityType: "echo"}, echo{Hello: "x"})
	c.wait("nd", done.ID)
	notDelivered(done.ID, 3, "stale_target: inject_message not sent", "--inject", "too late")
	queued := c.schedule(client.ScheduleOptions{Namespace: "nd", ID: "queued", ActivityType: "nobody-serves-this"}, echo{})
	notDelivered(queued.ID, 3, "stale_target: pause not sent", "--pause")
	live := c.running(client.ScheduleOptions{Namespace: "nd", ID: "live", ActivityType: "agent"}, map[string]int{"turns": endless, "turn_ms": 100})
	notDelivered(live.ID, 3, "no live worker runs attempt 2 of activity live", "--inject", "hello", "--attempt", "2")
	out, code := c.cli("activity", "intervene", live.ID, "--namespace", "nd", "--pause", "--attempt", "7", "--output", "json")
	var res interveneResult
	if code != 3 || json.Unmarshal([]byte(strings.SplitAfter(out, "}")[0]), &res) != nil || res.Outcome != "stale_target" || res.InterventionID != "" {
		t.Fatalf("intervene --attempt 7 -o json: exit %d\n%s", code, out)
	}

	// capability_not_supported (exit 4): the demo worker takes no approvals,
	// and a worker started with --capabilities none takes nothing.
	notDelivered(live.ID, 4, "did not advertise respond_to_approval", "--approve", "call-1", "--note", "ok")
	notDelivered(live.ID, 4, "did not advertise respond_to_approval", "--deny", "call-1")
	bare := c.running(client.ScheduleOptions{Namespace: "nd", TaskQueue: "plain", ID: "bare", ActivityType: "agent"},
		map[string]int{"turns": endless, "turn_ms": 100})
	for _, flags := range [][]string{{"--inject", "hi"}, {"--inject", "now", "--interrupt"}, {"--pause"}, {"--resume"},
		{"--cancel"}, {"--max-turns", "1"}, {"--approve", "c"}} {
		notDelivered(bare.ID, 4, "capability_not_supported", flags...)
	}
	out, code = c.cli("activity", "intervene", bare.ID, "--namespace", "nd", "--pause", "--output", "json")
	if code != 4 || json.Unmarshal([]byte(strings.SplitAfter(out, "}")[0]), &res) != nil || res.Outcome != "capability_not_supported" ||
		res.Attempt != 1 || res.InterventionID != "" {
		t.Fatalf("intervene -o json to a worker without capabilities: exit %d\n%s", code, out)
	}

	// Nothing was sent: neither worker saw an intervention, and both
	// activities run on untouched until canceled.
	for _, w := range []*proc{agent, plain} {
		if strings.Contains(w.output(), "intervention") {
			t.Errorf("%s received an intervention:\n%s", w.name, w.output())
		}
	}
	for _, id := range []string{live.ID, bare.ID} {
		a, err := c.client.Get(context.Background(), "nd", id)
		if err != nil || a.State != client.StateRunning || a.Attempt != 1 {
			t.Fatalf("%s after the refused interventions: %+v, %v", id, a, err)
		}
		if out, code := c.cli("activity", "cancel", id, "--namespace", "nd"); code != 0 {
			t.Fatalf("cancel %s: exit %d\n%s", id, code, out)
		}
	}
	if strings.Contains(c.server.output(), "intervention delivered") {
		t.Fatalf("the server delivered an intervention:\n%s", c.server.output())
	}
}
