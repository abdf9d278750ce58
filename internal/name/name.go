// Package name holds the rules for the names callers choose: namespaces, task
// queues, activity types, nodes and activity ids. A name is kept exactly as
// given; a name that breaks a rule is refused, never repaired.
package name

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every refusal; the message names the field and value.
var ErrInvalid = errors.New("invalid name")

// Limits on name length, in bytes.
const (
	MaxName = 128 // namespace, task queue, activity type, node
	MaxID   = 256 // activity id
)

// Check refuses value for field unless it is 1 to max bytes of letters,
// digits and - _ . : / @ + =. Spaces and control characters are refused so a
// name looks the same in every log and listing.
func Check(field, value string, max int) error {
	if value == "" {
		return fmt.Errorf("%s: must not be empty: %w", field, ErrInvalid)
	}
	if len(value) > max {
		return fmt.Errorf("%s: %q is %d bytes, at most %d allowed: %w", field, clip(value), len(value), max, ErrInvalid)
	}
	for i := 0; i < len(value); i++ {
		if !allowed(value[i]) {
			return fmt.Errorf("%s: %q has %q at byte %d; allowed are letters, digits and - _ . : / @ + =: %w",
				field, clip(value), value[i], i, ErrInvalid)
		}
	}
	return nil
}

// CheckOptional is Check for a name that may be empty.
func CheckOptional(field, value string, max int) error {
	if value == "" {
		return nil
	}
	return Check(field, value, max)
}

func allowed(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', ':', '/', '@', '+', '=':
		return true
	}
	return false
}

// clip keeps error messages short when a caller sends a huge value.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
