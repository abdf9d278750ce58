package cli

import (
	"strings"
	"testing"
)

func TestAttackRefusesAnotherTargetAndUnknownKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"address given", []string{"attack", "unauth-large", "--address", "10.0.0.1:50051"}, `--address "10.0.0.1:50051": attack never targets another server`},
		{"unknown kind", []string{"attack", "ddos"}, `attack "ddos": want one of none, unauth-large`},
		{"no kind", []string{"attack"}, "accepts 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := (&invocation{}).run(t, tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("code %d stdout %q stderr %q: want exit %d naming %q", code, stdout, stderr, exitError, tc.want)
			}
		})
	}
}

func TestAttackHelpSaysItOnlyTargetsItsOwnLoopbackServer(t *testing.T) {
	t.Parallel()
	code, stdout, _ := (&invocation{}).run(t, "attack", "--help")
	for _, want := range []string{"starts its own aion server", "127.0.0.1", "never targets any other server",
		"unauth-large", "worker-fields", "stalled-reader", "pending-memory", "connections",
		"early-eof", "undecided", "refused-streams", "--priority-bytes", "--max-server-rss"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("code %d; help does not say %q:\n%s", code, want, stdout)
		}
	}
}
