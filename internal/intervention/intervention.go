// Package intervention is the one table of intervention primitives and
// commands: the word for each primitive (the SDKs' capability names, the
// CLI's --capabilities words, logs, JSON) and its number on the wire, the
// words for commands and message priorities. Its subpackage wire maps them
// to and from the generated wire types and checks commands as the server
// does. The client and worker SDKs, the registry, the server and the CLI
// all read these two, so a primitive or a command is added here once.
//
// This package imports nothing generated, so the registry can hold a set
// of primitives without depending on the wire.
package intervention

import (
	"errors"
	"fmt"
	"strings"
)

// Primitive is an intervention primitive: what a worker advertises as a
// capability, and what a command needs the worker running an attempt to
// have advertised. Its value is its number in the wire enum
// InterventionPrimitive (package wire's tests hold the two together).
type Primitive uint8

// The intervention primitives.
const (
	InjectMessage     Primitive = 1
	Cancel            Primitive = 2
	PauseResume       Primitive = 3
	UpdateBudget      Primitive = 4
	RespondToApproval Primitive = 5
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

// ErrUnknown is wrapped by Parse for a word that is not in the table.
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

// FromNumber reads a wire number; false for 0 (unspecified) or a number
// outside the table.
func FromNumber(n int32) (Primitive, bool) {
	for _, e := range primitives {
		if int32(e.p) == n {
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

// The message priority words, as the SDKs and JSON spell them.
const (
	PriorityNormal    = "normal"
	PriorityInterrupt = "interrupt"
)
