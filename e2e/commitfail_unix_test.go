//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// In a child of this test binary, fileSizeLimitEnv holds a file-size limit
// in bytes and execEnv the binary to run under it.
const (
	fileSizeLimitEnv = "AION_E2E_FILE_SIZE_LIMIT"
	execEnv          = "AION_E2E_EXEC"
)

// init turns a child of this test binary started by underFileSizeLimit into
// the aion binary with RLIMIT_FSIZE set: a resource limit survives exec, and
// it is set here rather than in the test process, where it would limit every
// test. Go ignores SIGXFSZ, so a write past the limit fails with EFBIG, as
// on a full disk.
func init() {
	v := os.Getenv(fileSizeLimitEnv)
	if v == "" {
		return
	}
	limit, err := strconv.ParseUint(v, 10, 64)
	if err == nil {
		var was syscall.Rlimit
		if err = syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err == nil {
			err = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: was.Max})
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "set a file-size limit of %s bytes: %v\n", v, err)
		os.Exit(2)
	}
	path := os.Getenv(execEnv)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, fileSizeLimitEnv+"=") || strings.HasPrefix(kv, execEnv+"=")
	})
	err = syscall.Exec(path, append([]string{path}, os.Args[1:]...), env)
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", path, err)
	os.Exit(2)
}

// underFileSizeLimit launches the aion binary with no file growing past
// limit bytes.
func underFileSizeLimit(t *testing.T, limit int64) func(args ...string) *osexec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(args ...string) *osexec.Cmd {
		cmd := osexec.Command(self, args...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", fileSizeLimitEnv, limit), execEnv+"="+binary)
		return cmd
	}
}

// TestFailedCommitOnSQLiteAcknowledgesNothing runs the server with its
// files limited to 1 MiB, so the commit of a large activity fails writing
// the write-ahead log while small ones still fit. The schedule is refused
// and the activity is nowhere: not on the running server, not at its
// worker, not after a SIGKILL and a restart without the limit, which starts
// with no loss to report (its mark never counted the failed commit).
func TestFailedCommitOnSQLiteAcknowledgesNothing(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	c := startServerWith(t, underFileSizeLimit(t, limit))
	w, _ := c.worker("w", "--namespace", "dur", "--slots", "1")
	var ids []string
	for i := range 5 {
		h := c.schedule(client.ScheduleOptions{Namespace: "dur", ID: fmt.Sprintf("before-%d", i), ActivityType: "echo"}, echo{Hello: "x"})
		ids = append(ids, h.ID)
		if a := c.wait("dur", h.ID); a.State != client.StateCompleted {
			t.Fatalf("%s under the limit: %s, want completed", h.ID, a.State)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := echo{Hello: strings.Repeat("x", 1536<<10)} // past the limit, within the payload limit
	_, err := client.Schedule(ctx, c.client, client.ScheduleOptions{Namespace: "dur", ID: "big", ActivityType: "echo"}, big)
	if code := status.Code(err); code != codes.Internal && code != codes.Unavailable {
		t.Fatalf("schedule whose commit cannot be written: %v (%s), want the store's failure as Internal or Unavailable", err, code)
	}
	t.Logf("schedule whose commit failed: %v", err)
	if a, err := c.client.Get(ctx, "dur", "big"); status.Code(err) != codes.NotFound {
		t.Fatalf("get the activity of a failed commit on the running server: %+v, %v; want NotFound", a, err)
	}
	// Work scheduled after it still runs, on the one slot the failed
	// activity would have taken first had it been queued.
	after := c.schedule(client.ScheduleOptions{Namespace: "dur", ID: "after", ActivityType: "echo"}, echo{Hello: "y"})
	ids = append(ids, after.ID)
	if a := c.wait("dur", after.ID); a.State != client.StateCompleted {
		t.Fatalf("after the failed commit: %s, want completed", a.State)
	}
	if strings.Contains(w.output(), "activity_id=big") {
		t.Fatalf("the worker ran the activity of a failed commit:\n%s", w.output())
	}

	c.server.signal(syscall.SIGKILL)
	c.server.exit(10 * time.Second)
	c.boot() // without the limit; a refusal for lost commits would fail here
	if a, err := c.client.Get(ctx, "dur", "big"); status.Code(err) != codes.NotFound {
		t.Fatalf("get the activity of a failed commit after a restart: %+v, %v; want NotFound", a, err)
	}
	var found []string
	for a, err := range c.client.ListAll(ctx, client.ListOptions{Namespace: "dur", PageSize: 100}) {
		if err != nil {
			t.Fatal(err)
		}
		if a.State != client.StateCompleted {
			t.Errorf("%s after the restart: %s, want completed", a.ID, a.State)
		}
		found = append(found, a.ID)
	}
	slices.Sort(found)
	slices.Sort(ids)
	if !slices.Equal(found, ids) {
		t.Fatalf("after the restart the namespace holds %v, want exactly the acknowledged %v", found, ids)
	}
}
