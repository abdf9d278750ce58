// Package wire maps the intervention table (package intervention) to and
// from the generated wire types: primitives and their enum, the command a
// wire InterventionCommand carries and the primitive it needs, message
// priorities, and the checks a command passes before the server sends it.
package wire

import (
	"errors"
	"fmt"
	"slices"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	"github.com/aion-run/aion/internal/limit"
)

// Primitive is p's wire enum.
func Primitive(p intervention.Primitive) aionv1.InterventionPrimitive {
	return aionv1.InterventionPrimitive(p)
}

// FromProto reads a wire enum; false for UNSPECIFIED or a number outside
// the table.
func FromProto(p aionv1.InterventionPrimitive) (intervention.Primitive, bool) {
	return intervention.FromNumber(int32(p))
}

// Primitives lists s's wire enums in wire order.
func Primitives(s intervention.Set) []aionv1.InterventionPrimitive {
	var out []aionv1.InterventionPrimitive
	for _, p := range s.Primitives() {
		out = append(out, Primitive(p))
	}
	return out
}

// Of names cmd's command and the primitive it needs; ok is false for an
// empty command or one this build does not know.
func Of(cmd *aionv1.InterventionCommand) (kind string, p intervention.Primitive, ok bool) {
	switch cmd.GetCommand().(type) {
	case *aionv1.InterventionCommand_InjectMessage:
		return intervention.KindInjectMessage, intervention.InjectMessage, true
	case *aionv1.InterventionCommand_Cancel:
		return intervention.KindCancel, intervention.Cancel, true
	case *aionv1.InterventionCommand_Pause:
		return intervention.KindPause, intervention.PauseResume, true
	case *aionv1.InterventionCommand_Resume:
		return intervention.KindResume, intervention.PauseResume, true
	case *aionv1.InterventionCommand_UpdateBudget:
		return intervention.KindUpdateBudget, intervention.UpdateBudget, true
	case *aionv1.InterventionCommand_RespondToApproval:
		return intervention.KindRespondToApproval, intervention.RespondToApproval, true
	}
	return "", 0, false
}

// ErrInvalid matches Check's error for a command that is missing or whose
// fields are missing or malformed (a field over its limit matches
// limit.ErrTooLarge, one that is not UTF-8 limit.ErrInvalid).
var ErrInvalid = errors.New("invalid intervention command")

// Check returns the primitive cmd needs after checking its fields as the
// server does before sending it: a message with text and a known priority,
// a budget with at least one limit, an approval naming its call, and every
// free-text field within its limit. The error names the field.
func Check(cmd *aionv1.InterventionCommand) (intervention.Primitive, error) {
	kind, p, ok := Of(cmd)
	if !ok {
		return 0, invalid("command: missing; want inject_message, cancel, pause, resume, update_budget or respond_to_approval")
	}
	var errs []error
	switch kind {
	case intervention.KindInjectMessage:
		m := cmd.GetInjectMessage()
		if m.GetText() == "" {
			return 0, invalid("command.inject_message.text: must not be empty")
		}
		errs = append(errs, limit.Check("command.inject_message.text", m.GetText(), limit.InjectText))
		if !slices.Contains([]aionv1.MessagePriority{aionv1.MessagePriority_MESSAGE_PRIORITY_UNSPECIFIED,
			aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL, aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT}, m.GetPriority()) {
			errs = append(errs, invalid(fmt.Sprintf("command.inject_message.priority: %v is not normal or interrupt", m.GetPriority())))
		}
	case intervention.KindCancel:
		errs = append(errs, limit.Check("command.cancel.reason", cmd.GetCancel().GetReason(), limit.Reason))
	case intervention.KindUpdateBudget:
		if b := cmd.GetUpdateBudget(); b.MaxTokens == nil && b.MaxTurns == nil {
			return 0, invalid("command.update_budget: set max_tokens, max_turns or both")
		}
	case intervention.KindRespondToApproval:
		r := cmd.GetRespondToApproval()
		if r.GetCallId() == "" {
			return 0, invalid("command.respond_to_approval.call_id: must not be empty")
		}
		errs = append(errs, limit.Check("command.respond_to_approval.call_id", r.GetCallId(), limit.CallID),
			limit.Check("command.respond_to_approval.note", r.GetNote(), limit.ApprovalNote))
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return p, nil
}

// invalid is a malformed command: its text names the field, and it matches
// ErrInvalid without repeating it.
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

// PriorityWord is the word for a wire priority; UNSPECIFIED and unknown
// numbers read as normal, as the protocol says.
func PriorityWord(p aionv1.MessagePriority) string {
	if p == aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT {
		return intervention.PriorityInterrupt
	}
	return intervention.PriorityNormal
}

// Priority is the wire priority for a word; anything but "interrupt"
// is normal.
func Priority(name string) aionv1.MessagePriority {
	if name == intervention.PriorityInterrupt {
		return aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT
	}
	return aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL
}
