package intervention

import (
	"errors"
	"strings"
	"testing"
)

func TestUnknownWordsAndNumbersAreRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "pause", "inject-message", "INJECT_MESSAGE", "none"} {
		if p, err := Parse(name); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "inject_message, cancel, pause_resume") {
			t.Errorf("Parse(%q) = %v, %v; want ErrUnknown listing the words", name, p, err)
		}
	}
	for _, n := range []int32{0, 6, 42, -1} {
		if p, ok := FromNumber(n); ok {
			t.Errorf("FromNumber(%d) = %v, want not ok", n, p)
		}
	}
	if got := Primitive(42).String(); got != "primitive(42)" {
		t.Errorf("Primitive(42).String() = %q", got)
	}
}

func TestSetHoldsWhatWasAddedInWireOrder(t *testing.T) {
	t.Parallel()
	var s Set
	if s.String() != "none" || len(s.Primitives()) != 0 {
		t.Fatalf("empty set: %q, %v", s, s.Primitives())
	}
	s = s.With(UpdateBudget).With(InjectMessage).With(UpdateBudget)
	if !s.Has(InjectMessage) || !s.Has(UpdateBudget) || s.Has(Cancel) || s.Has(PauseResume) {
		t.Fatalf("set %q has the wrong members", s)
	}
	if s.String() != "inject_message,update_budget" {
		t.Errorf("String() = %q", s)
	}
	got := s.Primitives()
	if len(got) != 2 || got[0] != InjectMessage || got[1] != UpdateBudget {
		t.Errorf("Primitives() = %v", got)
	}
}
