package tracectx_test

import (
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/tracectx"
)

const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseAcceptsW3CTraceparentsOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"version 00", valid, true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"later version with more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true},
		{"later version of the plain size", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"empty", "", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"version 00 with more fields", valid + "-extra", false},
		{"later version, extra not after a dash", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, ok := tracectx.Parse(c.in); ok != c.ok {
				t.Errorf("Parse(%q) ok = %v, want %v", c.in, ok, c.ok)
			}
		})
	}
}

func TestParseThenFormatGivesTheSameTraceparent(t *testing.T) {
	t.Parallel()
	s, ok := tracectx.Parse(valid)
	if !ok {
		t.Fatalf("Parse(%q) refused it", valid)
	}
	if !s.Sampled() {
		t.Errorf("flags %#x: sampled not seen", s.Flags)
	}
	if got := tracectx.Format(s); got != valid {
		t.Errorf("Format(Parse(x)) = %q, want %q", got, valid)
	}
}

func TestValidateNamesTheFieldAndValue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   tracectx.Context
		want string // substring of the error; "" for valid
	}{
		{"none", tracectx.Context{}, ""},
		{"parent only", tracectx.Context{Parent: valid}, ""},
		{"parent and state", tracectx.Context{Parent: valid, State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}, ""},
		{"state without parent", tracectx.Context{State: "a=b"}, "tc.traceparent: missing"},
		{"bad parent", tracectx.Context{Parent: "nope"}, `tc.traceparent: "nope" is not a W3C traceparent`},
		{"parent too long", tracectx.Context{Parent: "01" + valid[2:] + "-" + strings.Repeat("a", 300)}, "tc.traceparent: 356 bytes, at most 256"},
		{"state too long", tracectx.Context{Parent: valid, State: strings.Repeat("a", 1025)}, "tc.tracestate: 1025 bytes, at most 1024"},
		{"state not printable", tracectx.Context{Parent: valid, State: "a=b\n"}, "tc.tracestate: byte 3 is 0xa"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.in.Validate("tc")
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Validate(%+v) = %v, want nil", c.in, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Validate(%+v) = %v, want an error containing %q", c.in, err, c.want)
			}
		})
	}
}
