// Package intervention is the one table of intervention primitives and
// commands: the word for each primitive (the SDKs' capability names, the
// CLI's --capabilities words, JSON), its wire enum, the commands each one
// covers, the message priorities, and the checks a command passes before
// the server sends it. The client and worker SDKs, the server and the CLI
// all read it, so a primitive or a command is added here once.
package intervention

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
)

// Primitive is an intervention primitive: what a worker advertises as a
// capability, and what a command needs the worker running an attempt to
// have advertised. Its value is the wire enum's number.
type Primitive uint8

// The intervention primitives.
const (
	InjectMessage     = Primitive(aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE)
	Cancel            = Primitive(aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_CANCEL)
	PauseResume       = Primitive(aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_PAUSE_RESUME)
	UpdateBudget      = Primitive(aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_UPDATE_BUDGET)
	RespondToApproval = Primitive(aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_RESPOND_TO_APPROVAL)
)

// primitives is the table: every primitive, in wire order, with its word.
var primitives = []struct {
	p    Primitive
	name string
}{
	{InjectMessage, "inject_message"},
	{Cancel, "cancel"},
	{PauseResume, "pause_resume"},
	{UpdateBudget, "update_budget"},
	{RespondToApproval, "respond_to_approval"},
}

// All returns every primitive, in wire order.
func All() []Primitive {
	out := make([]Primitive, len(primitives))
	for i, e := range primitives {
		out[i] = e.p
	}
	return out
}

// Names returns the word of every primitive, in wire order.
func Names() []string {
	out := make([]string, len(primitives))
	for i, e := range primitives {
		out[i] = e.name
	}
	return out
}

// String is the primitive's word ("pause_resume"), or "primitive(N)" for a
// number outside the table.
func (p Primitive) String() string {
	for _, e := range primitives {
		if e.p == p {
			return e.name
		}
	}
	return fmt.Sprintf("primitive(%d)", uint8(p))
}

// Proto is the primitive's wire enum.
func (p Primitive) Proto() aionv1.InterventionPrimitive { return aionv1.InterventionPrimitive(p) }

// ErrUnknown is wrapped by Parse and Check for a word, number or command
// that is not in the table.
var ErrUnknown = errors.New("not an intervention primitive")

// Parse reads a primitive's word.
func Parse(name string) (Primitive, error) {
	for _, e := range primitives {
		if e.name == name {
			return e.p, nil
		}
	}
	return 0, fmt.Errorf("%q: %w (want one of %s)", name, ErrUnknown, strings.Join(Names(), ", "))
}

// FromProto reads a wire enum; false for UNSPECIFIED or a number outside the
// table.
func FromProto(p aionv1.InterventionPrimitive) (Primitive, bool) {
	for _, e := range primitives {
		if e.p.Proto() == p {
			return e.p, true
		}
	}
	return 0, false
}

// Set is a set of primitives, such as the capabilities a worker advertised.
// The zero value is empty.
type Set uint32

// Has reports whether p is in the set.
func (s Set) Has(p Primitive) bool { return s&(1<<p) != 0 }

// With returns the set with p added.
func (s Set) With(p Primitive) Set { return s | 1<<p }

// Primitives lists the set's primitives in wire order.
func (s Set) Primitives() []Primitive {
	var out []Primitive
	for _, e := range primitives {
		if s.Has(e.p) {
			out = append(out, e.p)
		}
	}
	return out
}

// Proto lists the set's wire enums in wire order.
func (s Set) Proto() []aionv1.InterventionPrimitive {
	var out []aionv1.InterventionPrimitive
	for _, p := range s.Primitives() {
		out = append(out, p.Proto())
	}
	return out
}

// String lists the set's words, comma-separated, or "none".
func (s Set) String() string {
	var names []string
	for _, p := range s.Primitives() {
		names = append(names, p.String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// The command kinds: the word for each command an InterventionCommand can
// carry. Pause and resume both need PauseResume.
const (
	KindInjectMessage     = "inject_message"
	KindCancel            = "cancel"
	KindPause             = "pause"
	KindResume            = "resume"
	KindUpdateBudget      = "update_budget"
	KindRespondToApproval = "respond_to_approval"
)

// Of names cmd's command and the primitive it needs; ok is false for an
// empty command or one this build does not know.
func Of(cmd *aionv1.InterventionCommand) (kind string, p Primitive, ok bool) {
	switch cmd.GetCommand().(type) {
	case *aionv1.InterventionCommand_InjectMessage:
		return KindInjectMessage, InjectMessage, true
	case *aionv1.InterventionCommand_Cancel:
		return KindCancel, Cancel, true
	case *aionv1.InterventionCommand_Pause:
		return KindPause, PauseResume, true
	case *aionv1.InterventionCommand_Resume:
		return KindResume, PauseResume, true
	case *aionv1.InterventionCommand_UpdateBudget:
		return KindUpdateBudget, UpdateBudget, true
	case *aionv1.InterventionCommand_RespondToApproval:
		return KindRespondToApproval, RespondToApproval, true
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
func Check(cmd *aionv1.InterventionCommand) (Primitive, error) {
	kind, p, ok := Of(cmd)
	if !ok {
		return 0, invalid("command: missing; want inject_message, cancel, pause, resume, update_budget or respond_to_approval")
	}
	var errs []error
	switch kind {
	case KindInjectMessage:
		m := cmd.GetInjectMessage()
		if m.GetText() == "" {
			return 0, invalid("command.inject_message.text: must not be empty")
		}
		errs = append(errs, limit.Check("command.inject_message.text", m.GetText(), limit.InjectText))
		if !slices.Contains([]aionv1.MessagePriority{aionv1.MessagePriority_MESSAGE_PRIORITY_UNSPECIFIED,
			aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL, aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT}, m.GetPriority()) {
			errs = append(errs, invalid(fmt.Sprintf("command.inject_message.priority: %v is not normal or interrupt", m.GetPriority())))
		}
	case KindCancel:
		errs = append(errs, limit.Check("command.cancel.reason", cmd.GetCancel().GetReason(), limit.Reason))
	case KindUpdateBudget:
		if b := cmd.GetUpdateBudget(); b.MaxTokens == nil && b.MaxTurns == nil {
			return 0, invalid("command.update_budget: set max_tokens, max_turns or both")
		}
	case KindRespondToApproval:
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

// The message priority words, as the SDKs and JSON spell them.
const (
	PriorityNormal    = "normal"
	PriorityInterrupt = "interrupt"
)

// PriorityName is the word for a wire priority; UNSPECIFIED and unknown
// numbers read as normal, as the protocol says.
func PriorityName(p aionv1.MessagePriority) string {
	if p == aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT {
		return PriorityInterrupt
	}
	return PriorityNormal
}

// PriorityProto is the wire priority for a word; anything but "interrupt"
// is normal.
func PriorityProto(name string) aionv1.MessagePriority {
	if name == PriorityInterrupt {
		return aionv1.MessagePriority_MESSAGE_PRIORITY_INTERRUPT
	}
	return aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL
}
