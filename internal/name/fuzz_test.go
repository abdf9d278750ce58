package name_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/name"
)

// FuzzCheck: a name is accepted exactly when it is 1 to MaxName bytes of
// the allowed characters, and a refusal always names the field first.
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{"tenant-a", "", "a b", "ü", "x/y:z@w+v=u_t.s", strings.Repeat("n", 129), "\x00", "ns\n"} {
		f.Add(seed)
	}
	const allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+="
	f.Fuzz(func(t *testing.T, s string) {
		err := name.Check("task_queue", s, name.MaxName)
		valid := len(s) > 0 && len(s) <= name.MaxName
		for i := 0; i < len(s) && valid; i++ {
			valid = strings.IndexByte(allowed, s[i]) >= 0
		}
		if valid != (err == nil) {
			t.Fatalf("Check(%q) = %v; the rules say valid=%v", s, err, valid)
		}
		if err != nil && (!errors.Is(err, name.ErrInvalid) || !strings.HasPrefix(err.Error(), "task_queue: ")) {
			t.Fatalf("Check(%q) error %q does not wrap ErrInvalid or name the field first", s, err)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Fatalf("Check(%q) error is %d bytes; a huge input must not make a huge message", s, len(err.Error()))
		}
	})
}
