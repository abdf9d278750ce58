package name_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/name"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		value string
		ok    bool
	}{
		{"tenant-a", true},
		{"gpu.pool_1:eu/west@2+x=y", true},
		{strings.Repeat("a", name.MaxName), true},
		{"", false},
		{strings.Repeat("a", name.MaxName+1), false},
		{"has space", false},
		{"tab\there", false},
		{"new\nline", false},
		{"ünïcode", false},
		{"semi;colon", false},
	}
	for _, c := range cases {
		err := name.Check("namespace", c.value, name.MaxName)
		if c.ok && err != nil {
			t.Errorf("Check(%q) = %v, want ok", c.value, err)
		}
		if !c.ok {
			if !errors.Is(err, name.ErrInvalid) {
				t.Errorf("Check(%q) = %v, want ErrInvalid", c.value, err)
			} else if !strings.HasPrefix(err.Error(), "namespace: ") {
				t.Errorf("Check(%q) error %q does not name the field first", c.value, err)
			}
		}
	}
	if err := name.CheckOptional("node", "", name.MaxName); err != nil {
		t.Errorf("CheckOptional empty = %v", err)
	}
}
