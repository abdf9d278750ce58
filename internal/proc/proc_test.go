package proc_test

import (
	"os"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/proc"
)

func TestReadMemoryOfThisProcess(t *testing.T) {
	t.Parallel()
	m, err := proc.ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("memory of this process: %+v, want RSS above 0 and HWM at least RSS", m)
	}
}

func TestReadMemoryOfAMissingProcessNamesItsFile(t *testing.T) {
	t.Parallel()
	_, err := proc.ReadMemory(-1)
	if err == nil || !strings.Contains(err.Error(), "/proc/-1/status") {
		t.Fatalf("error %v, want one naming /proc/-1/status", err)
	}
}
