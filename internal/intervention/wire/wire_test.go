package wire

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	"github.com/aion-run/aion/internal/limit"
)

func TestEveryWireEnumIsInTheTableAndRoundTrips(t *testing.T) {
	t.Parallel()
	values := aionv1.InterventionPrimitive(0).Descriptor().Values()
	if got, want := len(intervention.All()), values.Len()-1; got != want {
		t.Fatalf("the table has %d primitives, the wire enum %d (UNSPECIFIED aside)", got, want)
	}
	for i := range values.Len() {
		enum := aionv1.InterventionPrimitive(values.Get(i).Number())
		p, ok := FromProto(enum)
		if enum == aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_UNSPECIFIED {
			if ok {
				t.Errorf("FromProto(UNSPECIFIED) = %v, want not ok", p)
			}
			continue
		}
		if !ok || Primitive(p) != enum {
			t.Fatalf("FromProto(%v) = %v, %v; want a primitive whose wire enum is the same", enum, p, ok)
		}
		// The word is the enum's name without its prefix, in lower case.
		want := strings.ToLower(strings.TrimPrefix(enum.String(), "INTERVENTION_PRIMITIVE_"))
		if p.String() != want {
			t.Errorf("%v: word %q, want %q", enum, p, want)
		}
		if back, err := intervention.Parse(p.String()); err != nil || back != p {
			t.Errorf("Parse(%q) = %v, %v; want %v", p, back, err, p)
		}
	}
}

func TestEveryCommandOfTheWireNamesItsKindAndPrimitive(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		kind string
		p    intervention.Primitive
	}{
		"inject_message":      {intervention.KindInjectMessage, intervention.InjectMessage},
		"cancel":              {intervention.KindCancel, intervention.Cancel},
		"pause":               {intervention.KindPause, intervention.PauseResume},
		"resume":              {intervention.KindResume, intervention.PauseResume},
		"update_budget":       {intervention.KindUpdateBudget, intervention.UpdateBudget},
		"respond_to_approval": {intervention.KindRespondToApproval, intervention.RespondToApproval},
	}
	// Enumerate the oneof from the descriptor, so a command added to the
	// wire fails here until the table knows it.
	oneof := (&aionv1.InterventionCommand{}).ProtoReflect().Descriptor().Oneofs().ByName("command")
	fields := oneof.Fields()
	if fields.Len() != len(want) {
		t.Fatalf("the wire has %d commands, the test knows %d", fields.Len(), len(want))
	}
	for i := range fields.Len() {
		f := fields.Get(i)
		cmd := &aionv1.InterventionCommand{}
		m := cmd.ProtoReflect()
		m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
		kind, p, ok := Of(cmd)
		w := want[string(f.Name())]
		if !ok || kind != w.kind || p != w.p {
			t.Errorf("Of(%s) = %q, %v, %v; want %q, %v", f.Name(), kind, p, ok, w.kind, w.p)
		}
	}
	if kind, _, ok := Of(&aionv1.InterventionCommand{}); ok || kind != "" {
		t.Errorf("Of(empty command) = %q, %v; want not ok", kind, ok)
	}
	if _, _, ok := Of(nil); ok {
		t.Error("Of(nil) is ok")
	}
}

func TestCheckRefusesMalformedCommandsNamingTheField(t *testing.T) {
	t.Parallel()
	cmd := func(c any) *aionv1.InterventionCommand {
		switch c := c.(type) {
		case *aionv1.InjectMessageCommand:
			return &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: c}}
		case *aionv1.CancelCommand:
			return &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Cancel{Cancel: c}}
		case *aionv1.UpdateBudgetCommand:
			return &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{UpdateBudget: c}}
		case *aionv1.RespondToApprovalCommand:
			return &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_RespondToApproval{RespondToApproval: c}}
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		cmd  *aionv1.InterventionCommand
		is   error
		text string
	}{
		{"NoCommand", &aionv1.InterventionCommand{}, ErrInvalid, "command: missing; want inject_message, cancel, pause, resume, update_budget or respond_to_approval"},
		{"EmptyText", cmd(&aionv1.InjectMessageCommand{}), ErrInvalid, "command.inject_message.text: must not be empty"},
		{"LongText", cmd(&aionv1.InjectMessageCommand{Text: strings.Repeat("x", limit.InjectText+1)}), limit.ErrTooLarge, "command.inject_message.text"},
		{"UnknownPriority", cmd(&aionv1.InjectMessageCommand{Text: "hi", Priority: 9}), ErrInvalid, "command.inject_message.priority: 9 is not normal or interrupt"},
		{"LongReason", cmd(&aionv1.CancelCommand{Reason: strings.Repeat("x", limit.Reason+1)}), limit.ErrTooLarge, "command.cancel.reason"},
		{"EmptyBudget", cmd(&aionv1.UpdateBudgetCommand{}), ErrInvalid, "command.update_budget: set max_tokens, max_turns or both"},
		{"NoCallID", cmd(&aionv1.RespondToApprovalCommand{Approve: true}), ErrInvalid, "command.respond_to_approval.call_id: must not be empty"},
		{"LongNote", cmd(&aionv1.RespondToApprovalCommand{CallId: "c", Note: strings.Repeat("x", limit.ApprovalNote+1)}), limit.ErrTooLarge, "command.respond_to_approval.note"},
		{"NoteNotUTF8", cmd(&aionv1.RespondToApprovalCommand{CallId: "c", Note: "\xff"}), limit.ErrInvalid, "command.respond_to_approval.note: not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Check(tc.cmd)
			if !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), tc.text) {
				t.Fatalf("Check = %v, %v; want an error matching %v that starts %q", p, err, tc.is, tc.text)
			}
		})
	}
}

func TestCheckAcceptsWellFormedCommands(t *testing.T) {
	t.Parallel()
	turns := uint32(3)
	for _, tc := range []struct {
		cmd  *aionv1.InterventionCommand
		want intervention.Primitive
	}{
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{InjectMessage: &aionv1.InjectMessageCommand{Text: "hi"}}}, intervention.InjectMessage},
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Cancel{Cancel: &aionv1.CancelCommand{}}}, intervention.Cancel},
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Pause{Pause: &aionv1.PauseCommand{}}}, intervention.PauseResume},
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_Resume{Resume: &aionv1.ResumeCommand{}}}, intervention.PauseResume},
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_UpdateBudget{UpdateBudget: &aionv1.UpdateBudgetCommand{MaxTurns: &turns}}}, intervention.UpdateBudget},
		{&aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_RespondToApproval{RespondToApproval: &aionv1.RespondToApprovalCommand{CallId: "c"}}}, intervention.RespondToApproval},
	} {
		if p, err := Check(tc.cmd); err != nil || p != tc.want {
			t.Errorf("Check(%v) = %v, %v; want %v", tc.cmd, p, err, tc.want)
		}
	}
}

func TestPriorityWordsRoundTripAndDefaultToNormal(t *testing.T) {
	t.Parallel()
	for _, w := range []string{intervention.PriorityNormal, intervention.PriorityInterrupt} {
		if got := PriorityWord(Priority(w)); got != w {
			t.Errorf("PriorityWord(Priority(%q)) = %q", w, got)
		}
	}
	if Priority("") != aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL || Priority("urgent") != aionv1.MessagePriority_MESSAGE_PRIORITY_NORMAL {
		t.Error("an empty or unknown priority word is not normal")
	}
	if PriorityWord(aionv1.MessagePriority_MESSAGE_PRIORITY_UNSPECIFIED) != intervention.PriorityNormal || PriorityWord(7) != intervention.PriorityNormal {
		t.Error("UNSPECIFIED or an unknown wire priority does not read as normal")
	}
}
