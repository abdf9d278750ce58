package client

import (
	"context"
	"fmt"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	"github.com/aion-run/aion/internal/intervention/wire"
)

// InterventionCommand is one mid-run command for the worker running an
// activity. Build one with InjectMessage, Pause, Resume, UpdateBudget,
// RespondToApproval or CancelCommand; the zero value carries no command and
// the server refuses it (InvalidArgument).
type InterventionCommand struct {
	p *aionv1.InterventionCommand
}

// Kind names the command: "inject_message", "pause", "resume",
// "update_budget", "respond_to_approval" or "cancel"; empty for the zero
// value.
func (c InterventionCommand) Kind() string {
	kind, _, _ := wire.Of(c.p)
	return kind
}

// Capability names the worker capability the command needs (pause and
// resume both need "pause_resume"); empty for the zero value.
func (c InterventionCommand) Capability() string {
	if _, p, ok := wire.Of(c.p); ok {
		return p.String()
	}
	return ""
}

// Proto returns the wire form of the command.
func (c InterventionCommand) Proto() *aionv1.InterventionCommand { return c.p }

// MessagePriority says how urgently an injected message is handled.
type MessagePriority string

// The message priorities.
const (
	// PriorityNormal: at the next natural boundary (for an agent, after
	// the current turn).
	PriorityNormal MessagePriority = intervention.PriorityNormal
	// PriorityInterrupt: at once, interrupting the current step.
	PriorityInterrupt MessagePriority = intervention.PriorityInterrupt
)

// InjectMessage adds a message to the running work (for an agent, a user
// turn). Needs the worker capability inject_message. An empty priority
// means PriorityNormal; any other value than the two priorities is sent
// as normal.
func InjectMessage(text string, priority MessagePriority) InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{
		InjectMessage: &aionv1.InjectMessageCommand{Text: text, Priority: wire.Priority(string(priority))}}}}
}

// Pause suspends the running work at its next safe point until Resume.
// Needs the worker capability pause_resume.
func Pause() InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Pause{Pause: &aionv1.PauseCommand{}}}}
}

// Resume continues work suspended by Pause. Needs the worker capability
// pause_resume.
func Resume() InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Resume{Resume: &aionv1.ResumeCommand{}}}}
}

// Budget is a new resource budget for running work. A nil field leaves that
// limit unchanged; at least one must be set.
//
//	client.UpdateBudget(client.Budget{MaxTurns: new(uint32(5))})
type Budget struct {
	// MaxTokens is the new ceiling on tokens the work may consume.
	MaxTokens *uint64
	// MaxTurns is the new ceiling on turns (model round trips).
	MaxTurns *uint32
}

// UpdateBudget changes the running work's budget. Needs the worker
// capability update_budget.
func UpdateBudget(b Budget) InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{
		UpdateBudget: &aionv1.UpdateBudgetCommand{MaxTokens: b.MaxTokens, MaxTurns: b.MaxTurns}}}}
}

// RespondToApproval answers an approval request the running work is
// waiting on (for an agent, a tool call awaiting consent): approve or deny
// the call callID, with an optional note. Needs the worker capability
// respond_to_approval.
func RespondToApproval(callID string, approve bool, note string) InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_RespondToApproval{
		RespondToApproval: &aionv1.RespondToApprovalCommand{CallId: callID, Approve: approve, Note: note}}}}
}

// CancelCommand asks the worker to wind the running attempt down
// cooperatively; the worker then reports the attempt, usually as canceled.
// Needs the worker capability cancel. Client.Cancel is the durable cancel:
// it closes the activity at once and needs no capability.
func CancelCommand(reason string) InterventionCommand {
	return InterventionCommand{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Cancel{
		Cancel: &aionv1.CancelCommand{Reason: reason}}}}
}

// InterventionOutcome says what became of an Intervene call.
type InterventionOutcome string

// The intervention outcomes.
const (
	// InterventionDelivered: the command is on the stream of the worker
	// running the attempt. Whether the worker applied it is its own
	// verdict, which it acknowledges to the server (the server logs it).
	InterventionDelivered InterventionOutcome = "delivered"
	// InterventionStaleTarget: no attempt is running on a live worker, or
	// the attempt asked for is not the current one. Nothing was sent.
	InterventionStaleTarget InterventionOutcome = "stale_target"
	// InterventionCapabilityNotSupported: the worker running the attempt
	// did not advertise the command's primitive. Nothing was sent.
	InterventionCapabilityNotSupported InterventionOutcome = "capability_not_supported"
)

// InterventionResult is the answer to Intervene.
type InterventionResult struct {
	// Outcome is what became of the command.
	Outcome InterventionOutcome `json:"outcome"`
	// InterventionID is the server's identifier of the command; set when
	// delivered (the worker's acknowledgement carries it).
	InterventionID string `json:"intervention_id,omitempty"`
	// Attempt is the current attempt the command was for; 0 when the
	// outcome is InterventionStaleTarget.
	Attempt uint32 `json:"attempt,omitempty"`
}

// Delivered reports whether the command reached the worker.
func (r *InterventionResult) Delivered() bool { return r != nil && r.Outcome == InterventionDelivered }

// InterveneOption adjusts an Intervene call.
type InterveneOption func(*aionv1.InterveneRequest)

// ForAttempt targets attempt n only: if another attempt is current, the
// outcome is InterventionStaleTarget. Without it (or with 0) the command
// goes to whichever attempt is running.
func ForAttempt(n uint32) InterveneOption {
	return func(r *aionv1.InterveneRequest) { r.Attempt = n }
}

// Intervene sends cmd to the worker running the activity's current attempt
// and returns what became of it. An outcome other than delivered is not an
// error: the result says which. Errors are for the call itself: NotFound
// for an unknown activity, InvalidArgument for a malformed command (empty
// message text, a budget with no limit, an approval with no call id),
// PermissionDenied, and so on.
func (c *Client) Intervene(ctx context.Context, namespace, id string, cmd InterventionCommand, opts ...InterveneOption) (*InterventionResult, error) {
	req := &aionv1.InterveneRequest{Namespace: namespace, Id: id, Command: cmd.p}
	for _, o := range opts {
		o(req)
	}
	op := fmt.Sprintf("intervene (%s) in activity %q in %q", orNone(cmd.Kind()), id, namespace)
	resp, err := c.activities.Intervene(ctx, req)
	if err != nil {
		return nil, rpcError(op, err)
	}
	out := &InterventionResult{InterventionID: resp.GetInterventionId(), Attempt: resp.GetAttempt()}
	switch resp.GetOutcome() {
	case aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED:
		out.Outcome = InterventionDelivered
	case aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET:
		out.Outcome = InterventionStaleTarget
	case aionv1.InterventionOutcome_INTERVENTION_OUTCOME_CAPABILITY_NOT_SUPPORTED:
		out.Outcome = InterventionCapabilityNotSupported
	default:
		return nil, fmt.Errorf("aion client: %s: the server answered with outcome %v", op, resp.GetOutcome())
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "no command"
	}
	return s
}
