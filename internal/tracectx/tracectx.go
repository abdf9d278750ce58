// Package tracectx is the W3C Trace Context (https://www.w3.org/TR/trace-context/)
// aion carries with its work: the traceparent and tracestate values a client
// sends with an activity or a run, which the store keeps beside it and the
// server hands to the worker with each task. It parses and checks them and
// nothing more; it depends on no tracing library, so the store and the
// engine can carry a trace context without one.
package tracectx

import (
	"encoding/hex"
	"fmt"
)

// Limits on what a trace context may hold. A version-00 traceparent is 55
// bytes; the bound leaves room for fields a later version may append. The
// W3C recommends propagating at least 512 bytes of tracestate.
const (
	MaxParent = 256
	MaxState  = 1024
)

// Context is one trace context. The zero value is none.
type Context struct {
	// Parent is the traceparent value: version, trace id, parent span id
	// and flags, "00-<32 hex>-<16 hex>-<2 hex>".
	Parent string
	// State is the tracestate value, vendor key=value pairs; empty when
	// there is none.
	State string
}

// IsZero reports whether c carries no trace context.
func (c Context) IsZero() bool { return c.Parent == "" && c.State == "" }

// Validate reports, naming the field (under prefix, such as
// "trace_context") and its value, why c is not a trace context aion
// accepts: a traceparent that is not W3C's, a tracestate without one, or a
// value over its limit or outside printable ASCII. The zero Context is
// valid.
func (c Context) Validate(prefix string) error {
	if c.IsZero() {
		return nil
	}
	if c.Parent == "" {
		return fmt.Errorf("%s.traceparent: missing while tracestate is set", prefix)
	}
	if n := len(c.Parent); n > MaxParent {
		return fmt.Errorf("%s.traceparent: %d bytes, at most %d allowed", prefix, n, MaxParent)
	}
	if _, ok := Parse(c.Parent); !ok {
		return fmt.Errorf("%s.traceparent: %q is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lower case, ids not all zero)",
			prefix, c.Parent)
	}
	if n := len(c.State); n > MaxState {
		return fmt.Errorf("%s.tracestate: %d bytes, at most %d allowed", prefix, n, MaxState)
	}
	for i := 0; i < len(c.State); i++ {
		if b := c.State[i]; b < 0x20 || b > 0x7e {
			return fmt.Errorf("%s.tracestate: byte %d is %#x, want printable ASCII", prefix, i, b)
		}
	}
	return nil
}

// Span names one span of a trace, as a traceparent does.
type Span struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are the trace flags; bit 0 is sampled.
	Flags byte
}

// Sampled reports whether the span's sampled flag is set.
func (s Span) Sampled() bool { return s.Flags&1 == 1 }

// Parse reads a traceparent the way W3C Trace Context says a receiver
// must: version 00 is exactly "00-<32 hex>-<16 hex>-<2 hex>"; a later
// version (not ff) may be longer, its extra fields after a "-" ignored;
// hex is lower case and neither id may be all zeros. ok is false for
// anything else.
func Parse(traceparent string) (s Span, ok bool) {
	const size = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	p := traceparent
	if len(p) < size || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return Span{}, false
	}
	var version [1]byte
	if !lowerHex(version[:], p[0:2]) || version[0] == 0xff {
		return Span{}, false
	}
	if (version[0] == 0 && len(p) != size) || (len(p) > size && p[size] != '-') {
		return Span{}, false
	}
	var flags [1]byte
	if !lowerHex(s.TraceID[:], p[3:35]) || !lowerHex(s.SpanID[:], p[36:52]) || !lowerHex(flags[:], p[53:55]) {
		return Span{}, false
	}
	if s.TraceID == ([16]byte{}) || s.SpanID == ([8]byte{}) {
		return Span{}, false
	}
	s.Flags = flags[0]
	return s, true
}

// lowerHex decodes src, lower-case hex only, into dst.
func lowerHex(dst []byte, src string) bool {
	for i := 0; i < len(src); i++ {
		if c := src[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(src))
	return err == nil
}

// Format is the version-00 traceparent of s.
func Format(s Span) string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], s.TraceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], s.SpanID[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{s.Flags})
	return string(b[:])
}
