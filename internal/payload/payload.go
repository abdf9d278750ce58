// Package payload is the one rule for showing payload bytes (an activity's
// input, its result, heartbeat and failure details) in JSON: the HTTP API,
// the SDK's JSON forms and the CLI all use it, and the console follows it.
// The server itself never parses a payload; JSON is a convention.
package payload

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// MarkerKey is the only key of the object that stands for bytes that are
// not shown as JSON.
const MarkerKey = "base64"

// JSON returns b as one JSON value: b itself, compacted, when it is valid
// JSON, otherwise {"base64":"<standard base64 of b>"}. A document that is
// itself an object whose only key is "base64" is shown the second way too,
// so a reader can always tell the two apart. Empty b is null.
func JSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	if json.Valid(b) && !isMarker(b) {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			return buf.Bytes()
		}
	}
	out, _ := json.Marshal(map[string]string{MarkerKey: base64.StdEncoding.EncodeToString(b)})
	return out
}

// FromJSON returns the bytes a value made by JSON stands for.
func FromJSON(v []byte) ([]byte, error) {
	v = bytes.TrimSpace(v)
	if string(v) == "null" || len(v) == 0 {
		return nil, nil
	}
	if !json.Valid(v) {
		return nil, errors.New("payload: not JSON")
	}
	if isMarker(v) {
		var m map[string]string
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("payload: %q must be a base64 string: %w", MarkerKey, err)
		}
		b, err := base64.StdEncoding.DecodeString(m[MarkerKey])
		if err != nil {
			return nil, fmt.Errorf("payload: %q: %w", MarkerKey, err)
		}
		return b, nil
	}
	return append([]byte(nil), v...), nil
}

// isMarker reports whether valid JSON v is an object whose only key is
// MarkerKey.
func isMarker(v []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || len(m) != 1 {
		return false
	}
	_, ok := m[MarkerKey]
	return ok
}
