// Package limit is the one table of what a request or a worker frame may
// carry. The server enforces these sizes at its edge and the SDKs size their
// connections by them, so a value here is a promise to both sides; the same
// table is in docs/protocol.md.
package limit

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sizes, in bytes unless a name says otherwise.
const (
	// Payload bounds an activity's input and a result.
	Payload = 2 << 20
	// BatchRequests bounds the activities of one ScheduleBatch.
	BatchRequests = 1000
	// HeartbeatDetails bounds the details of one heartbeat; a larger
	// heartbeat is refused in its ack and recorded nowhere.
	HeartbeatDetails = 256 << 10
	// FailureMessage bounds a failure's message.
	FailureMessage = 16 << 10
	// FailureType bounds a failure's type (a name that retry policies match).
	FailureType = 128
	// FailureDetails bounds a failure's details.
	FailureDetails = 256 << 10
	// NonRetryableTypes bounds the entries of a retry policy's
	// non_retryable_error_types; each entry is at most FailureType bytes.
	NonRetryableTypes = 64
	// WorkerNamespaces bounds the namespaces one worker may serve.
	WorkerNamespaces = 1000
	// WorkerActivityTypes bounds the activity types one worker may serve.
	WorkerActivityTypes = 256
	// WorkerSlots bounds the slots one worker may register (0 means 1).
	WorkerSlots = 10000
	// Identity and SDKVersion bound what a worker says about itself; longer
	// values are clipped on a character boundary, not refused.
	Identity   = 256
	SDKVersion = 64
	// Reason bounds a cancel reason, a drain reason and an intervention
	// acknowledgement's message.
	Reason = 1 << 10
	// InjectText bounds the text of an inject_message intervention.
	InjectText = 64 << 10
	// ApprovalNote bounds the note of a respond_to_approval intervention;
	// its call_id is at most CallID bytes.
	ApprovalNote = 4 << 10
	CallID       = 256
	// Metadata bounds the headers (metadata) of one gRPC call, its bearer
	// token (at most auth.MaxTokenBytes) included.
	Metadata = 64 << 10
	// Message bounds any one gRPC message the server receives: the largest
	// legitimate one is a ScheduleBatch, which must fit in it whole.
	Message = 8 << 20
	// Response bounds any one gRPC message the SDKs accept from a server:
	// a Get carries an input and a result of Payload bytes each, and a list
	// page is cut short well below this.
	Response = 32 << 20
)

// Check refuses a free-text value for field that is longer than max bytes
// or is not valid UTF-8, naming the field, the size and the limit.
func Check(field, value string, max int) error {
	if len(value) > max {
		return fmt.Errorf("%s: %d bytes, at most %d allowed: %w", field, len(value), max, ErrTooLarge)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("%s: not valid UTF-8 (%q): %w", field, Clip(value, 32), ErrInvalid)
	}
	return nil
}

// Bytes refuses an opaque value for field longer than max bytes.
func Bytes(field string, value []byte, max int) error {
	if len(value) > max {
		return fmt.Errorf("%s: %d bytes, at most %d allowed: %w", field, len(value), max, ErrTooLarge)
	}
	return nil
}

// Clip returns at most max bytes of s, cut on a character boundary, with
// any invalid UTF-8 replaced, so the result is always valid UTF-8.
func Clip(s string, max int) string {
	if !utf8.ValidString(s) {
		s = toValid(s)
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func toValid(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		out = append(out, r) // invalid bytes decode as utf8.RuneError
	}
	return string(out)
}

// Errors wrapped by Check and Bytes, for callers that map them to codes.
var (
	ErrTooLarge = errors.New("too large")
	ErrInvalid  = errors.New("invalid")
)
