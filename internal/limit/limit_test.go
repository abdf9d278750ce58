package limit_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aion-run/aion/internal/limit"
)

func TestClipCutsOnACharacterBoundary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"Short", "abc", 8, "abc"},
		{"ASCII", "abcdef", 4, "abcd"},
		{"InsideATwoByteCharacter", "x" + strings.Repeat("é", 4), 4, "xé"},
		{"OnABoundary", "x" + strings.Repeat("é", 4), 5, "xéé"},
		{"FourByteCharacter", "a😀b", 3, "a"},
		{"InvalidBytesReplaced", "a\xffb", 16, "a\uFFFDb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := limit.Clip(c.in, c.max)
			if got != c.want || !utf8.ValidString(got) || len(got) > max(c.max, len(c.want)) {
				t.Fatalf("Clip(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
			}
		})
	}
}

func TestCheckNamesTheFieldAndTheLimit(t *testing.T) {
	t.Parallel()
	if err := limit.Check("failure.message", strings.Repeat("m", 11), 10); !errors.Is(err, limit.ErrTooLarge) ||
		!strings.Contains(err.Error(), "failure.message: 11 bytes, at most 10") {
		t.Fatalf("oversized: %v", err)
	}
	if err := limit.Check("failure.type", "a\xff", 10); !errors.Is(err, limit.ErrInvalid) || !strings.Contains(err.Error(), "failure.type: not valid UTF-8") {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	if err := limit.Check("failure.type", "ok é", 10); err != nil {
		t.Fatalf("valid: %v", err)
	}
	if err := limit.Bytes("details", make([]byte, 3), 2); !errors.Is(err, limit.ErrTooLarge) {
		t.Fatalf("bytes: %v", err)
	}
}
