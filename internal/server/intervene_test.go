package server_test

import (
	"context"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCancelWaitingAndRunningActivities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "c", Id: "waiting", ActivityType: "nobody"})
	resp, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "c", Id: "waiting", Reason: "not needed"})
	if err != nil || resp.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_CANCELED ||
		resp.GetActivity().GetFailure().GetMessage() != "not needed" {
		t.Fatalf("cancel waiting: %v, %v", resp, err)
	}

	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"c"}, ActivityTypes: []string{"long"}, Slots: 1})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "c", Id: "running", ActivityType: "long"})
	task := w.nextTask()
	resp, err = b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "c", Id: "running"})
	if err != nil || resp.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_CANCELED {
		t.Fatalf("cancel running: %v, %v", resp, err)
	}
	atts := resp.GetActivity().GetAttempts()
	if len(atts) != 1 || atts[0].GetOutcome() != aionv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELED {
		t.Fatalf("attempts after cancel: %v", atts)
	}
	stop := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if stop.GetActivityId() != "running" || stop.GetAttempt() != task.GetAttempt() {
		t.Fatalf("worker was sent %v", stop)
	}
	// The worker's late result is refused and changes nothing; its slot
	// comes back, so it can take the next task.
	if ack := w.complete(task, []byte(`"late"`)); ack.GetRefused() == "" {
		t.Fatal("a result after cancel was accepted")
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "c", Id: "next", ActivityType: "long"})
	next := w.nextTask()
	if next.GetActivityId() != "next" {
		t.Fatalf("after the late result the worker got %v", next)
	}
	if a := b.wait(t, "c", "running"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_CANCELED || len(a.GetResult()) != 0 {
		t.Fatalf("late result changed the activity: %v", a)
	}

	if _, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "c", Id: "running"}); err != nil {
		t.Fatalf("cancelling twice: %v", err)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "c", Id: "done", ActivityType: "long"})
	w.complete(next, nil)
	w.complete(w.nextTask(), nil)
	b.wait(t, "c", "done")
	if _, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "c", Id: "done"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("cancel a completed activity: %v, want FailedPrecondition", err)
	}
	if _, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "c", Id: "ghost"}); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel unknown: %v, want NotFound", err)
	}
}

func TestInterveneOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	agent := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"i"}, TaskQueue: "agents", ActivityTypes: []string{"chat"}, Slots: 1,
		Capabilities: []aionv1.InterventionPrimitive{aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE,
			aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_PAUSE_RESUME}})
	plain := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"i"}, TaskQueue: "plain", ActivityTypes: []string{"chat"}, Slots: 1})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "i", Id: "a1", TaskQueue: "agents", ActivityType: "chat"})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "i", Id: "p1", TaskQueue: "plain", ActivityType: "chat"})
	task := agent.nextTask()
	plainTask := plain.nextTask()

	inject := &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{
		Text: "look at the logs", Priority: aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT}}}
	resp, err := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "a1", Command: inject})
	if err != nil || resp.GetOutcome() != aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED || resp.GetInterventionId() == "" {
		t.Fatalf("inject to a capable worker: %v, %v", resp, err)
	}
	got := agent.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetIntervention() != nil }).GetIntervention()
	if got.GetInterventionId() != resp.GetInterventionId() || got.GetAttempt() != task.GetAttempt() ||
		got.GetCommand().GetInjectMessage().GetText() != "look at the logs" {
		t.Fatalf("worker received %v", got)
	}
	agent.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_InterventionAck{InterventionAck: &aionv1.InterventionAck{
		Namespace: "i", ActivityId: "a1", Attempt: task.GetAttempt(), InterventionId: got.GetInterventionId(), Accepted: true}}})

	budget := &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{UpdateBudget: &aionv1.UpdateBudgetCommand{MaxTurns: ptr(uint32(3))}}}
	if resp, _ := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "a1", Command: budget}); resp.GetOutcome() !=
		aionv1.InterventionOutcome_INTERVENTION_OUTCOME_CAPABILITY_NOT_SUPPORTED {
		t.Fatalf("unadvertised primitive: %v", resp)
	}
	if resp, _ := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "p1", Command: inject}); resp.GetOutcome() !=
		aionv1.InterventionOutcome_INTERVENTION_OUTCOME_CAPABILITY_NOT_SUPPORTED {
		t.Fatalf("worker with no capabilities: %v", resp)
	}
	if resp, _ := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "a1", Attempt: 7, Command: inject}); resp.GetOutcome() !=
		aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET {
		t.Fatalf("wrong attempt: %v", resp)
	}
	agent.complete(task, nil)
	b.wait(t, "i", "a1")
	if resp, _ := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "a1", Command: inject}); resp.GetOutcome() !=
		aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET {
		t.Fatalf("closed activity: %v", resp)
	}
	// Neither refused command reached a worker.
	plain.complete(plainTask, nil)
	for _, m := range plain.held {
		if m.GetIntervention() != nil {
			t.Fatalf("a worker without the capability was sent %v", m)
		}
	}

	bad := []*aionv1.InterveneRequest{
		{Namespace: "i", Id: "a1"},
		{Namespace: "i", Id: "a1", Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{}}}},
		{Namespace: "i", Id: "a1", Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{UpdateBudget: &aionv1.UpdateBudgetCommand{}}}},
		{Namespace: "i", Id: "a1", Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_RespondToApproval{RespondToApproval: &aionv1.RespondToApprovalCommand{}}}},
	}
	for _, r := range bad {
		if _, err := b.activities.Intervene(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("intervene %v: %v, want InvalidArgument", r.GetCommand(), err)
		}
	}
	if _, err := b.activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "i", Id: "ghost", Command: inject}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown activity: %v, want NotFound", err)
	}
}

func ptr[T any](v T) *T { return &v }
