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

func TestAttackHonestRefusesAServerNotOnLoopbackAndIsHidden(t *testing.T) {
	t.Parallel()
	env := map[string]string{"AION_ATTACK_HONEST_WORKER_KEY": "w", "AION_ATTACK_HONEST_CLIENT_KEY": "c"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"address elsewhere", env, []string{"attack", "honest", "--server", "10.0.0.1:50051"}, `--server "10.0.0.1:50051": not a loopback address`},
		{"all interfaces", env, []string{"attack", "honest", "--server", "0.0.0.0:50051"}, `--server "0.0.0.0:50051": not a loopback address`},
		{"a name", env, []string{"attack", "honest", "--server", "localhost:50051"}, `--server "localhost:50051": not a loopback address`},
		{"no server", env, []string{"attack", "honest"}, `--server "": not a loopback address`},
		{"--address", env, []string{"attack", "honest", "--server", "127.0.0.1:1", "--address", "10.0.0.1:50051"}, "connects only to --server"},
		{"no keys", nil, []string{"attack", "honest", "--server", "127.0.0.1:1"}, "AION_ATTACK_HONEST_WORKER_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := (&invocation{env: tc.env}).run(t, tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("code %d stdout %q stderr %q: want exit %d naming %q", code, stdout, stderr, exitError, tc.want)
			}
		})
	}
	code, stdout, _ := (&invocation{}).run(t, "attack", "--help")
	if code != exitOK || strings.Contains(stdout, "Available Commands") || strings.Contains(stdout, "honest --server") {
		t.Errorf("code %d; attack's help lists the hidden honest command:\n%s", code, stdout)
	}
}
