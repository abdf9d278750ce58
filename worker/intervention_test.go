package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
)

// intervene sends cmd to activity id in namespace ns and insists it is
// delivered.
func (r *rig) intervene(t *testing.T, id string, cmd client.InterventionCommand) *client.InterventionResult {
	t.Helper()
	res, err := r.c.Intervene(waitCtx(t), "ns", id, cmd)
	if err != nil || !res.Delivered() || res.InterventionID == "" {
		t.Fatalf("Intervene(%s) = %+v, %v; want delivered", cmd.Kind(), res, err)
	}
	return res
}

// interventionAck waits for the worker's acknowledgement of intervention id.
func (run *running) interventionAck(t *testing.T, id string) *aionv1.InterventionAck {
	t.Helper()
	var ack *aionv1.InterventionAck
	servertest.Eventually(t, "the acknowledgement of intervention "+id, func() bool {
		for _, f := range run.wire.sentWhere(func(m *aionv1.WorkerMessage) bool {
			return m.GetInterventionAck().GetInterventionId() == id
		}) {
			if ack != nil {
				t.Fatalf("intervention %s acknowledged twice: %v and %v", id, ack, f.msg)
			}
			ack = f.msg.GetInterventionAck()
		}
		return ack != nil
	})
	return ack
}

// runningWith schedules activityType and waits until its handler has
// recorded its first heartbeat.
func (r *rig) runningWith(t *testing.T, activityType string, opts client.ScheduleOptions) string {
	t.Helper()
	opts.ActivityType = activityType
	id := r.schedule(t, opts, struct{}{})
	r.until(t, id, "runs", func(a *client.Activity) bool { return len(a.LastHeartbeatDetails) > 0 })
	return id
}

func TestInterventionsReachTheHandlerWhichAcknowledgesThem(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	release := r.gate()
	got := make(chan Intervention, 8)
	run := r.start(t, Options{Capabilities: []Capability{CapabilityInjectMessage, CapabilityUpdateBudget, CapabilityRespondToApproval}},
		func(w *Worker) {
			RegisterActivity(w, "agent", func(ctx context.Context, _ struct{}) (string, error) {
				ivs := Interventions(ctx)
				RecordHeartbeat(ctx, "started")
				for {
					select {
					case iv := <-ivs:
						got <- iv // the test acknowledges it
					case <-release.ch:
						return "done", nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
			})
		})
	id := r.runningWith(t, "agent", client.ScheduleOptions{})
	take := func() Intervention {
		t.Helper()
		select {
		case iv := <-got:
			return iv
		case <-time.After(10 * time.Second):
			t.Fatal("the handler received no intervention")
			return Intervention{}
		}
	}

	res := r.intervene(t, id, client.InjectMessage("look at the logs", client.PriorityInterrupt))
	iv := take()
	if iv.ID != res.InterventionID || iv.Kind != InterventionInjectMessage || iv.Message == nil ||
		*iv.Message != (InjectedMessage{Text: "look at the logs", Priority: PriorityInterrupt}) || iv.Budget != nil || iv.Approval != nil {
		t.Fatalf("handler got %+v (message %+v), want the interrupt message %s", iv, iv.Message, res.InterventionID)
	}
	iv.Accept()
	iv.Decline("too late") // only the first acknowledgement counts
	if ack := run.interventionAck(t, iv.ID); !ack.GetAccepted() || ack.GetMessage() != "" || ack.GetActivityId() != id || ack.GetAttempt() != 1 {
		t.Fatalf("ack = %v, want accepted for attempt 1", ack)
	}

	r.intervene(t, id, client.InjectMessage("and then", ""))
	if iv = take(); iv.Message.Priority != PriorityNormal {
		t.Fatalf("a message without priority arrived as %+v", iv.Message)
	}
	iv.Ack(true, "queued")
	if ack := run.interventionAck(t, iv.ID); !ack.GetAccepted() || ack.GetMessage() != "queued" {
		t.Fatalf("ack = %v", ack)
	}

	r.intervene(t, id, client.UpdateBudget(client.Budget{MaxTurns: new(uint32(3))}))
	if iv = take(); iv.Kind != InterventionUpdateBudget || iv.Budget.MaxTokens != nil || iv.Budget.MaxTurns == nil || *iv.Budget.MaxTurns != 3 {
		t.Fatalf("handler got %+v (budget %+v)", iv, iv.Budget)
	}
	iv.Accept()
	r.intervene(t, id, client.UpdateBudget(client.Budget{MaxTokens: new(uint64(5000)), MaxTurns: new(uint32(0))}))
	if iv = take(); *iv.Budget.MaxTokens != 5000 || *iv.Budget.MaxTurns != 0 {
		t.Fatalf("handler got budget %+v", iv.Budget)
	}
	iv.Accept()

	r.intervene(t, id, client.RespondToApproval("call-7", false, "not on prod"))
	if iv = take(); iv.Kind != InterventionRespondToApproval || *iv.Approval != (ApprovalResponse{CallID: "call-7", Note: "not on prod"}) {
		t.Fatalf("handler got %+v (approval %+v)", iv, iv.Approval)
	}
	iv.Decline("no approval pending for call-7")
	if ack := run.interventionAck(t, iv.ID); ack.GetAccepted() || ack.GetMessage() != "no approval pending for call-7" {
		t.Fatalf("ack = %v, want declined with the handler's reason", ack)
	}

	// A zero Intervention (not from the channel) acknowledges nothing.
	Intervention{}.Accept()
	release.open()
	if a := r.wait(t, id); a.State != client.StateCompleted || string(a.Result) != `"done"` {
		t.Fatalf("activity = %+v", a)
	}
	if acks := run.wire.sentWhere(func(m *aionv1.WorkerMessage) bool { return m.GetInterventionAck() != nil }); len(acks) != 5 {
		t.Fatalf("%d acknowledgements for 5 interventions", len(acks))
	}
}

func TestPauseHoldsTheHandlerAtWaitWhilePausedAndKeepsItsHeartbeats(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	proceed := r.gate()
	type report struct {
		PausedBefore bool  `json:"paused_before"`
		PausedMS     int64 `json:"paused_ms"`
		PausedAfter  bool  `json:"paused_after"`
	}
	run := r.start(t, Options{Capabilities: []Capability{CapabilityPauseResume}}, func(w *Worker) {
		RegisterActivity(w, "agent", func(ctx context.Context, _ struct{}) (report, error) {
			if d, err := WaitWhilePaused(ctx); d != 0 || err != nil {
				return report{}, fmt.Errorf("not paused yet, WaitWhilePaused = %v, %v", d, err)
			}
			RecordHeartbeat(ctx, "started")
			<-proceed.ch
			rep := report{PausedBefore: Paused(ctx)}
			d, err := WaitWhilePaused(ctx)
			rep.PausedMS, rep.PausedAfter = d.Milliseconds(), Paused(ctx)
			return rep, err
		})
	})
	// A heartbeat timeout far below the pause: the SDK heartbeats for the
	// paused handler.
	id := r.runningWith(t, "agent", client.ScheduleOptions{HeartbeatTimeout: 500 * time.Millisecond,
		RetryPolicy: &client.RetryPolicy{MaximumAttempts: 1}})

	// Resuming what is not paused is harmless.
	resume := r.intervene(t, id, client.Resume())
	if ack := run.interventionAck(t, resume.InterventionID); !ack.GetAccepted() || ack.GetMessage() != "not paused" {
		t.Fatalf("resume ack = %v", ack)
	}
	pause := r.intervene(t, id, client.Pause())
	if ack := run.interventionAck(t, pause.InterventionID); !ack.GetAccepted() || ack.GetMessage() != "" {
		t.Fatalf("pause ack = %v", ack)
	}
	again := r.intervene(t, id, client.Pause())
	if ack := run.interventionAck(t, again.InterventionID); !ack.GetAccepted() || ack.GetMessage() != "already paused" {
		t.Fatalf("second pause ack = %v", ack)
	}
	// The handler now waits paused, and the SDK heartbeats for it every
	// 250ms (half the timeout). Seven more heartbeat acks take at least
	// 1.5s, three heartbeat timeouts (the first may answer the handler's
	// own heartbeat from before the pause); every one must be accepted.
	hbAck := func(m *aionv1.ServerMessage) bool { return m.GetHeartbeatAck().GetActivityId() == id }
	before := len(run.wire.recvWhere(hbAck))
	proceed.open()
	servertest.Eventually(t, "heartbeats acknowledged across three heartbeat timeouts", func() bool {
		return len(run.wire.recvWhere(hbAck)) >= before+7
	})
	for _, f := range run.wire.recvWhere(hbAck) {
		if refused := f.msg.GetHeartbeatAck().GetRefused(); refused != "" {
			t.Fatalf("a heartbeat of the paused attempt was refused: %s", refused)
		}
	}
	if a := r.get(t, id); a.State != client.StateRunning {
		t.Fatalf("paused for three 500ms heartbeat timeouts, the activity is %s (%+v)", a.State, a.Failure)
	}
	resume = r.intervene(t, id, client.Resume())
	if ack := run.interventionAck(t, resume.InterventionID); !ack.GetAccepted() || ack.GetMessage() != "" {
		t.Fatalf("resume ack = %v", ack)
	}
	a := r.wait(t, id)
	rep, err := client.Result[report](a)
	if err != nil || !rep.PausedBefore || rep.PausedAfter || rep.PausedMS < 1400 {
		t.Fatalf("report = %+v, %v; want paused for at least 1.5s, then not", rep, err)
	}
}

func TestWaitWhilePausedEndsWithTheContext(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	proceed := r.gate()
	errs := make(chan error, 1)
	run := r.start(t, Options{Capabilities: []Capability{CapabilityPauseResume, CapabilityCancel}}, func(w *Worker) {
		RegisterActivity(w, "agent", func(ctx context.Context, _ struct{}) (struct{}, error) {
			RecordHeartbeat(ctx, "started")
			<-proceed.ch
			_, err := WaitWhilePaused(ctx)
			errs <- err
			return struct{}{}, err
		})
	})
	// With a heartbeat timeout, WaitWhilePaused heartbeats for the handler
	// (every second here): a heartbeat after the handler's own shows it is
	// waiting.
	id := r.runningWith(t, "agent", client.ScheduleOptions{HeartbeatTimeout: time.Minute})
	pause := r.intervene(t, id, client.Pause())
	run.interventionAck(t, pause.InterventionID)
	proceed.open()
	servertest.Eventually(t, "a heartbeat from WaitWhilePaused", func() bool {
		return len(run.wire.sentWhere(isHeartbeat(id))) >= 2
	})
	select {
	case err := <-errs:
		t.Fatalf("WaitWhilePaused returned %v while paused", err)
	default:
	}
	cancel := r.intervene(t, id, client.CancelCommand("enough"))
	if ack := run.interventionAck(t, cancel.InterventionID); !ack.GetAccepted() {
		t.Fatalf("cancel ack = %v", ack)
	}
	select {
	case err := <-errs:
		if err != context.Canceled {
			t.Fatalf("WaitWhilePaused = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitWhilePaused did not return when the attempt was canceled")
	}
	if a := r.wait(t, id); a.State != client.StateCanceled {
		t.Fatalf("activity = %s, want canceled", a.State)
	}
	// Outside a handler nothing is ever paused and there is no channel.
	if Paused(context.Background()) || Interventions(context.Background()) != nil {
		t.Fatal("a plain context looks like an attempt")
	}
	if d, err := WaitWhilePaused(context.Background()); d != 0 || err != nil {
		t.Fatalf("WaitWhilePaused outside a handler = %v, %v", d, err)
	}
}

func TestInterventionsTheHandlerLeavesAreDeclined(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	release := r.gate()
	took := make(chan string, 1)
	run := r.start(t, Options{Capabilities: []Capability{CapabilityInjectMessage}}, func(w *Worker) {
		RegisterActivity(w, "agent", func(ctx context.Context, _ struct{}) (string, error) {
			RecordHeartbeat(ctx, "started")
			select {
			case iv := <-Interventions(ctx):
				took <- iv.ID // and never acknowledged
			case <-ctx.Done():
				return "", ctx.Err()
			}
			<-release.ch
			return "done", nil
		})
	})
	id := r.runningWith(t, "agent", client.ScheduleOptions{})
	taken := r.intervene(t, id, client.InjectMessage("first", client.PriorityNormal))
	if got := <-took; got != taken.InterventionID {
		t.Fatalf("handler took %s, want %s", got, taken.InterventionID)
	}
	// The handler reads no more: 64 wait for it, the next is declined at once.
	var waiting []string
	for i := range interventionBuffer {
		waiting = append(waiting, r.intervene(t, id, client.InjectMessage(fmt.Sprint("msg ", i), client.PriorityNormal)).InterventionID)
	}
	over := r.intervene(t, id, client.InjectMessage("one too many", client.PriorityNormal))
	if ack := run.interventionAck(t, over.InterventionID); ack.GetAccepted() || !strings.Contains(ack.GetMessage(), "64 interventions are already waiting") {
		t.Fatalf("ack of the 65th waiting intervention = %v", ack)
	}
	if n := len(run.wire.sentWhere(func(m *aionv1.WorkerMessage) bool { return m.GetInterventionAck() != nil })); n != 1 {
		t.Fatalf("%d acknowledgements before the handler returned, want only the overflow's", n)
	}

	release.open()
	if a := r.wait(t, id); a.State != client.StateCompleted {
		t.Fatalf("activity = %s", a.State)
	}
	if ack := run.interventionAck(t, taken.InterventionID); ack.GetAccepted() || !strings.Contains(ack.GetMessage(), "without acknowledging") {
		t.Fatalf("ack of the taken intervention = %v", ack)
	}
	for _, iv := range waiting {
		if ack := run.interventionAck(t, iv); ack.GetAccepted() || !strings.Contains(ack.GetMessage(), "before the handler took") {
			t.Fatalf("ack of a waiting intervention = %v", ack)
		}
	}
}
