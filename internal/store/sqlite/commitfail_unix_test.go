//go:build unix

package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// failedCommitDir names, in a child process, the directory of the database
// the child writes to under a file-size limit.
const failedCommitDir = "AION_TEST_FAILED_COMMIT_DIR"

// TestFailedCommitAcknowledgesNothing makes commits fail for real: a child
// process writes under a file-size limit (RLIMIT_FSIZE) that a large commit
// crosses, so writing its write-ahead log frames fails inside SQLite's
// COMMIT, as on a full disk. The limit is process-wide, so it is set in a
// child of its own. Every write of a failed commit must be reported failed
// and be absent, now and after reopening, while the store keeps working and
// its mark still agrees with the database.
func TestFailedCommitAcknowledgesNothing(t *testing.T) {
	if dir := os.Getenv(failedCommitDir); dir != "" {
		failCommitsUnderAFileSizeLimit(t, dir)
		return
	}
	t.Parallel()
	dir := t.TempDir()
	cmd := osexec.Command(os.Args[0], "-test.run=^TestFailedCommitAcknowledgesNothing$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), failedCommitDir+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child writing under a file-size limit: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestFailedCommitAcknowledgesNothing")) {
		t.Fatalf("the child did not run the writes:\n%s", out)
	}

	// A plain open: no loss is reported, so the mark counted no failed commit.
	s := open(t, filepath.Join(dir, "aion.db"))
	ctx := context.Background()
	for _, id := range []string{"big", "group-1", "group-big", "group-2"} {
		if a, err := s.GetActivity(ctx, "orders", id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of a failed commit is in the database: %+v, %v", id, a, err)
		}
	}
	first := activity(0)
	a, err := s.GetActivity(ctx, first.Namespace, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != store.StateScheduled || a.Result != nil || a.Attempt != 0 {
		t.Errorf("a completion whose commit failed changed %s: state %s, result of %d bytes, attempt %d",
			a.ID, a.State, len(a.Result), a.Attempt)
	}
	if at, err := s.ListAttempts(ctx, first.Namespace, first.ID); err != nil || len(at) != 0 {
		t.Errorf("attempts of %s after a failed completion: %+v, %v", first.ID, at, err)
	}
	for _, id := range []string{activity(4).ID, "after"} {
		if _, err := s.GetActivity(ctx, "orders", id); err != nil {
			t.Errorf("acknowledged %s is missing: %v", id, err)
		}
	}
	if n := countActivities(t, s); n != 6 {
		t.Errorf("%d activities in the database, want the 6 acknowledged", n)
	}
}

// failCommitsUnderAFileSizeLimit is the child's part of
// TestFailedCommitAcknowledgesNothing.
func failCommitsUnderAFileSizeLimit(t *testing.T, dir string) {
	ctx := context.Background()
	path := filepath.Join(dir, "aion.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	schedule(t, s, 0, 5, 1) // acknowledged, one commit each

	var largest int64
	for _, suffix := range []string{"", "-wal", "-shm", ".mark"} {
		if fi, err := os.Stat(path + suffix); err == nil {
			largest = max(largest, fi.Size())
		}
	}
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	limit := uint64(largest + 256<<10)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: was.Max}); err != nil {
		t.Fatalf("set a file-size limit of %d bytes: %v", limit, err)
	}
	big := func(id string) store.Write {
		a := activity(0)
		a.ID, a.Fingerprint, a.Payload = id, "fp-"+id, bytes.Repeat([]byte{'y'}, 1<<20)
		return store.InsertActivity{Activity: a}
	}
	small := func(id string) store.Write {
		a := activity(0)
		a.ID, a.Fingerprint = id, "fp-"+id
		return store.InsertActivity{Activity: a}
	}
	now := time.Now().UTC()
	failing := []struct {
		name   string
		writes []store.Write
	}{
		{"one large insert", []store.Write{big("big")}},
		{"a group with one large insert", []store.Write{small("group-1"), big("group-big"), small("group-2")}},
		{"a completion with a large result", []store.Write{store.EndAttempt{Namespace: "orders", ID: activity(0).ID,
			State: store.StateCompleted, StartedAt: now, ClosedAt: now, Result: bytes.Repeat([]byte{'r'}, 1<<20),
			Attempt: &store.Attempt{Number: 1, WorkerID: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}}}},
	}
	for _, f := range failing {
		changed, err := s.Apply(ctx, f.writes)
		if err == nil {
			t.Fatalf("%s under a limit of %d bytes: committed (%v), want the commit to fail", f.name, limit, changed)
		}
		if changed != nil {
			t.Fatalf("%s failed (%v) yet reported %v", f.name, err, changed)
		}
		t.Logf("%s: %v", f.name, err)
		for _, w := range f.writes {
			if ins, ok := w.(store.InsertActivity); ok {
				if _, err := s.GetActivity(ctx, "orders", ins.Activity.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s of a failed commit can be read: %v", ins.Activity.ID, err)
				}
			}
		}
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, []store.Write{small("after")}); err != nil {
		t.Fatalf("a commit after the failed ones: %v", err)
	}
	closed = true
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
