package payload_test

import (
	"bytes"
	"testing"

	"github.com/aion-run/aion/internal/payload"
)

func TestJSONShowsJSONAsItselfAndOtherBytesMarked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"object", `{ "a": [1, 2] }`, `{"a":[1,2]}`},
		{"string", `"hello"`, `"hello"`},
		{"number", `42`, `42`},
		{"empty", ``, `null`},
		{"text that is not JSON", `hello`, `{"base64":"aGVsbG8="}`},
		{"binary", "\x00\xff", `{"base64":"AP8="}`},
		{"JSON that looks like the marker", `{"base64":"aGk="}`, `{"base64":"eyJiYXNlNjQiOiJhR2s9In0="}`},
		{"an object with the key and another", `{"base64":"x","n":1}`, `{"base64":"x","n":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := payload.JSON([]byte(tc.in))
			if string(got) != tc.want {
				t.Fatalf("JSON(%q) = %s, want %s", tc.in, got, tc.want)
			}
			back, err := payload.FromJSON(got)
			if err != nil {
				t.Fatalf("FromJSON(%s): %v", got, err)
			}
			want := []byte(tc.in)
			if tc.name == "object" {
				want = []byte(tc.want) // compacted
			}
			if !bytes.Equal(back, want) && !(len(back) == 0 && len(want) == 0) {
				t.Fatalf("FromJSON(%s) = %q, want %q", got, back, want)
			}
		})
	}
}

func TestFromJSONRefusesABadMarker(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"base64":"***"}`, `{"base64":1}`, `not json`} {
		if _, err := payload.FromJSON([]byte(in)); err == nil {
			t.Errorf("FromJSON(%s) = nil error", in)
		}
	}
}
