package attack

import (
	"slices"
	"testing"
)

func TestOnlyLoopbackAddressesAreTargets(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "[::1]:8080": true, "127.0.0.2:1": true,
		"0.0.0.0:50051": false, "[::]:1": false, "10.0.0.1:50051": false, "example.com:80": false,
		"localhost:1": false, // a name is resolved elsewhere; the server logs an IP
		"127.0.0.1":   false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestChildEnvironmentHasNoAionSettings(t *testing.T) {
	t.Parallel()
	got := childEnv([]string{"PATH=/bin", "AION_GRPC_ADDR=0.0.0.0:50051", "AION_AUTH=none", "HOME=/root", "XAION=1"})
	if want := []string{"PATH=/bin", "HOME=/root", "XAION=1"}; !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}
