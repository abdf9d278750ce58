package client

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

func TestInterveneSendsEachCommandAndReportsEveryOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	w := e.srv.Connect(t, &aionv1.Register{Namespaces: []string{"i"}, ActivityTypes: []string{"agent"}, Capabilities: []aionv1.InterventionPrimitive{
		aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE, aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_PAUSE_RESUME,
		aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_UPDATE_BUDGET, aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_CANCEL}})
	// The workers list shows what the worker advertised.
	ws, err := e.c.ListWorkers(ctx, "i")
	if err != nil || len(ws) != 1 || strings.Join(ws[0].Capabilities, ",") != "inject_message,cancel,pause_resume,update_budget" {
		t.Fatalf("ListWorkers = %+v, %v", ws, err)
	}
	h, err := Schedule(ctx, e.c, ScheduleOptions{Namespace: "i", ID: "a1", ActivityType: "agent"}, Payload(nil))
	if err != nil {
		t.Fatal(err)
	}
	task := w.Task()

	for _, tc := range []struct {
		cmd  InterventionCommand
		kind string
		want *aionv1.InterventionCommand
	}{
		{InjectMessage("hello", PriorityInterrupt), "inject_message", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{
			InjectMessage: &aionv1.InjectMessageCommand{Text: "hello", Priority: aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT}}}},
		{InjectMessage("later", ""), "inject_message", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{
			InjectMessage: &aionv1.InjectMessageCommand{Text: "later", Priority: aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL}}}},
		{Pause(), "pause", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Pause{Pause: &aionv1.PauseCommand{}}}},
		{Resume(), "resume", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Resume{Resume: &aionv1.ResumeCommand{}}}},
		{UpdateBudget(Budget{MaxTurns: new(uint32(0))}), "update_budget", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{
			UpdateBudget: &aionv1.UpdateBudgetCommand{MaxTurns: new(uint32(0))}}}},
		{UpdateBudget(Budget{MaxTokens: new(uint64(900)), MaxTurns: new(uint32(4))}), "update_budget", &aionv1.InterventionCommand{
			Command: &aionv1.InterventionCommand_UpdateBudget{UpdateBudget: &aionv1.UpdateBudgetCommand{MaxTokens: new(uint64(900)), MaxTurns: new(uint32(4))}}}},
		{CancelCommand("stop"), "cancel", &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Cancel{Cancel: &aionv1.CancelCommand{Reason: "stop"}}}},
	} {
		if got := tc.cmd.Kind(); got != tc.kind {
			t.Errorf("Kind = %q, want %q", got, tc.kind)
		}
		res, err := e.c.Intervene(ctx, "i", h.ID, tc.cmd)
		if err != nil || res.Outcome != InterventionDelivered || !res.Delivered() || res.Attempt != 1 || res.InterventionID == "" {
			t.Fatalf("Intervene(%s) = %+v, %v", tc.kind, res, err)
		}
		got := w.Frame("an intervention", func(m *aionv1.ServerMessage) bool { return m.GetIntervention() != nil }).GetIntervention()
		if got.GetInterventionId() != res.InterventionID || got.GetActivityId() != h.ID || got.GetAttempt() != 1 || !proto.Equal(got.GetCommand(), tc.want) {
			t.Fatalf("the worker received %v, want %v as %s", got, tc.want, res.InterventionID)
		}
	}

	// Not advertised: never sent.
	res, err := e.c.Intervene(ctx, "i", h.ID, RespondToApproval("call-1", true, "ok"))
	if err != nil || res.Outcome != InterventionCapabilityNotSupported || res.Delivered() || res.InterventionID != "" {
		t.Fatalf("respond to approval = %+v, %v; want capability_not_supported", res, err)
	}
	if k := RespondToApproval("c", false, "").Kind(); k != "respond_to_approval" {
		t.Fatalf("Kind = %q", k)
	}
	// Another attempt than the running one: stale.
	if res, err := e.c.Intervene(ctx, "i", h.ID, Pause(), ForAttempt(2)); err != nil || res.Outcome != InterventionStaleTarget || res.InterventionID != "" {
		t.Fatalf("for attempt 2 = %+v, %v; want stale_target", res, err)
	}
	if res, err := e.c.Intervene(ctx, "i", h.ID, Pause(), ForAttempt(1)); err != nil || !res.Delivered() {
		t.Fatalf("for attempt 1 = %+v, %v; want delivered", res, err)
	}
	// Finished: stale.
	w.Complete(task, []byte(`1`))
	if _, err := e.c.Wait(ctx, "i", h.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := e.c.Intervene(ctx, "i", h.ID, Resume()); err != nil || res.Outcome != InterventionStaleTarget || res.Attempt != 0 {
		t.Fatalf("after completion = %+v, %v; want stale_target", res, err)
	}

	// Errors are for the call itself, with the server's code.
	for _, tc := range []struct {
		id   string
		cmd  InterventionCommand
		code codes.Code
		says string
	}{
		{h.ID, InterventionCommand{}, codes.InvalidArgument, "no command"},
		{h.ID, InjectMessage("", PriorityNormal), codes.InvalidArgument, "inject_message"},
		{h.ID, UpdateBudget(Budget{}), codes.InvalidArgument, "update_budget"},
		{h.ID, RespondToApproval("", true, ""), codes.InvalidArgument, "respond_to_approval"},
		{"ghost", Pause(), codes.NotFound, "pause"},
	} {
		res, err := e.c.Intervene(ctx, "i", tc.id, tc.cmd)
		if status.Code(err) != tc.code || res != nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Intervene(%s, %q) = %+v, %v; want %v naming %s", tc.id, tc.cmd.Kind(), res, err, tc.code, tc.says)
		}
	}
}

func TestEachCommandNamesItsKindAndTheCapabilityItNeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd              InterventionCommand
		kind, capability string
	}{
		{InjectMessage("hi", PriorityNormal), "inject_message", "inject_message"},
		{Pause(), "pause", "pause_resume"},
		{Resume(), "resume", "pause_resume"},
		{UpdateBudget(Budget{MaxTurns: new(uint32(1))}), "update_budget", "update_budget"},
		{RespondToApproval("call-1", true, ""), "respond_to_approval", "respond_to_approval"},
		{CancelCommand(""), "cancel", "cancel"},
		{InterventionCommand{}, "", ""},
	} {
		if tc.cmd.Kind() != tc.kind || tc.cmd.Capability() != tc.capability {
			t.Errorf("%v: Kind %q, Capability %q; want %q, %q", tc.cmd.Proto(), tc.cmd.Kind(), tc.cmd.Capability(), tc.kind, tc.capability)
		}
	}
}
