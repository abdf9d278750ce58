package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// deadline bounds every wait for an event in these tests.
const deadline = time.Minute

func openWith(t *testing.T, path string, c sqlite.CheckpointConfig) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.WithCheckpoints(c))
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// bulky commits one activity with a payload of size bytes.
func bulky(t *testing.T, s *sqlite.Store, id string, size int) {
	t.Helper()
	a := activity(0)
	a.ID, a.Fingerprint, a.Payload = id, "fp-"+id, bytes.Repeat([]byte{'b'}, size)
	if _, err := s.Apply(context.Background(), []store.Write{store.InsertActivity{Activity: a}}); err != nil {
		t.Fatalf("apply %s: %v", id, err)
	}
}

// bulkyWithin is bulky that fails the test if the commit does not return
// within the deadline.
func bulkyWithin(t *testing.T, s *sqlite.Store, id string, size int) {
	t.Helper()
	a := activity(0)
	a.ID, a.Fingerprint, a.Payload = id, "fp-"+id, bytes.Repeat([]byte{'b'}, size)
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), []store.Write{store.InsertActivity{Activity: a}})
		done <- err
	}()
	if err := receive(t, done, "return from the commit of "+id); err != nil {
		t.Fatalf("apply %s: %v", id, err)
	}
}

func settle(t *testing.T, s *sqlite.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.SettleCheckpoints(ctx); err != nil {
		t.Fatalf("wait for the checkpointer: %v", err)
	}
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func walIndex(t *testing.T, s *sqlite.Store) (frames, copied uint32) {
	t.Helper()
	frames, copied, ok := s.WALIndex()
	if !ok {
		t.Fatal("the write-ahead log's index cannot be read")
	}
	return frames, copied
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, deadline)
		panic("unreachable")
	}
}

// A commit past SQLite's autocheckpoint threshold copies nothing into the
// database file, and commits go on while the checkpointer is held in the
// middle of its work: the commit path only signals it.
func TestCommitsNeitherCheckpointNorWaitForTheCheckpointer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	entered := make(chan string, 1)
	release := make(chan struct{})
	s := openWith(t, filepath.Join(t.TempDir(), "aion.db"), sqlite.CheckpointConfig{
		Hook: func(ctx context.Context, mode string) {
			select {
			case entered <- mode:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		},
	})
	if n, err := s.WriterAutocheckpoint(ctx); err != nil || n != 0 {
		t.Fatalf("writer's wal_autocheckpoint is %d (%v), want 0", n, err)
	}

	// About 1,300 pages: past the default threshold of 1,000.
	for i := range 10 {
		bulkyWithin(t, s, fmt.Sprintf("big-%d", i), 512<<10)
	}
	// The checkpointer is held before it copies anything, so whatever is
	// copied was copied by a commit.
	frames, copied := walIndex(t, s)
	if frames < 1000 || copied != 0 {
		t.Fatalf("log of %d frames, %d copied: a commit checkpointed", frames, copied)
	}
	if mode := receive(t, entered, "checkpoint"); mode != "PASSIVE" {
		t.Fatalf("first checkpoint is %s, want PASSIVE", mode)
	}

	// The checkpointer is held; more commits than its signal holds complete.
	for i := range 6 {
		bulkyWithin(t, s, fmt.Sprintf("held-%d", i), 512<<10)
	}
	if more, copied := walIndex(t, s); more <= frames || copied != 0 {
		t.Fatalf("while held: log of %d frames (was %d), %d copied", more, frames, copied)
	}

	close(release)
	settle(t, s)
	if frames, copied := walIndex(t, s); copied != frames {
		t.Fatalf("after the checkpointer ran: %d of %d frames copied", copied, frames)
	}
	if st := s.CheckpointStats(); st.Passive == 0 || st.Truncate != 0 || st.Err != nil {
		t.Fatalf("checkpoints: %+v, want PASSIVE ones only, no error", st)
	}
}

// Under a sustained load with no reader in the way, PASSIVE checkpoints keep
// the log's file small; without them it would hold all 8 MiB.
func TestWALStaysBoundedUnderSustainedWrites(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	path := filepath.Join(t.TempDir(), "aion.db")
	s := openWith(t, path, sqlite.CheckpointConfig{Frames: 64, MaxWAL: bound})
	var largest int64
	for i := range 64 {
		bulky(t, s, fmt.Sprintf("load-%d", i), 128<<10)
		settle(t, s)
		largest = max(largest, walSize(t, path))
	}
	if largest > bound {
		t.Fatalf("log grew to %d bytes after 8 MiB written, want at most %d", largest, bound)
	}
	if st := s.CheckpointStats(); st.Passive == 0 || st.Truncate != 0 || st.Err != nil {
		t.Fatalf("checkpoints: %+v, want PASSIVE ones only, no error", st)
	}
	if n := countActivities(t, s); n != 64 {
		t.Fatalf("%d activities, want 64", n)
	}
}

// A reader that keeps its snapshot keeps PASSIVE checkpoints from copying
// and the log from restarting; past the bound the checkpointer tries a
// TRUNCATE, backs off while it cannot finish, and cuts the log to nothing
// once the reader is gone.
func TestTruncateCheckpointBoundsTheWALWhenAReaderPinsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const bound = 1 << 20
	path := filepath.Join(t.TempDir(), "aion.db")
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openWith(t, path, sqlite.CheckpointConfig{Frames: 64, MaxWAL: bound, Wait: time.Millisecond, Backoff: time.Minute, Clock: clk})

	rdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	reader, err := rdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM activities`).Scan(&n); err != nil {
		t.Fatal(err)
	}

	for i := range 24 {
		bulky(t, s, fmt.Sprintf("pinned-%d", i), 128<<10)
		settle(t, s)
	}
	if size := walSize(t, path); size <= bound {
		t.Fatalf("log of %d bytes with a reader pinning it, want past the bound %d", size, bound)
	}
	if st := s.CheckpointStats(); st.Truncate != 1 || st.Truncated != 0 || st.Err != nil {
		t.Fatalf("with the reader in the way: %+v, want one TRUNCATE tried, none finished, no error", st)
	}

	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	bulky(t, s, "after-reader", 1<<10)
	settle(t, s)
	if st := s.CheckpointStats(); st.Truncate != 1 {
		t.Fatalf("a TRUNCATE was tried again before the backoff ended: %+v", st)
	}
	clk.Advance(time.Minute)
	bulky(t, s, "after-backoff", 1<<10)
	settle(t, s)
	if st := s.CheckpointStats(); st.Truncate != 2 || st.Truncated != 1 || st.Err != nil {
		t.Fatalf("after the backoff: %+v, want a second TRUNCATE that finished", st)
	}
	if size := walSize(t, path); size != 0 {
		t.Fatalf("log of %d bytes after a TRUNCATE checkpoint, want 0", size)
	}
	if n := countActivities(t, s); n != 26 {
		t.Fatalf("%d activities, want 26", n)
	}
}

// Close interrupts a checkpoint under way and waits for the checkpointer;
// the writer, closing last, still copies the whole log into the database
// file and removes it.
func TestCloseStopsTheCheckpointerAndTheLogIsStillCheckpointed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	entered := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	s, err := sqlite.Open(ctx, path, sqlite.WithCheckpoints(sqlite.CheckpointConfig{
		Frames: 64,
		Hook: func(ctx context.Context, _ string) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			select {
			case stopped <- ctx.Err():
			default:
			}
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		bulky(t, s, fmt.Sprintf("c-%d", i), 128<<10)
	}
	receive(t, entered, "checkpoint")

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if err := receive(t, closed, "return from Close"); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := receive(t, stopped, "end of the held checkpoint"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the held checkpoint ended with %v, want it canceled", err)
	}
	if st := s.CheckpointStats(); st.Passive != 0 {
		t.Fatalf("a checkpoint ran after Close began: %+v", st)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the log is still there after Close: %v", err)
	}
	if err := s.SettleCheckpoints(ctx); err == nil {
		t.Fatal("the checkpointer answers after Close")
	}

	reopened := open(t, path)
	if reopened.AcceptedLoss() != nil || countActivities(t, reopened) != 4 {
		t.Fatalf("after reopening: loss %v, %d activities, want none lost and 4", reopened.AcceptedLoss(), countActivities(t, reopened))
	}
}

// A checkpoint between commits copies history into the database file, where
// damage to the log cannot reach it. What the log still holds is lost with
// it, and the count of that loss stays exact: the checkpointed state is a
// whole commit, counters included.
func TestLossAfterBackgroundCheckpointsIsCountedExactly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		damage func(t *testing.T, path string, frames uint32)
		// allGone: every commit still in the log is lost.
		allGone bool
	}{
		{"log cut short", func(t *testing.T, path string, frames uint32) {
			wal := fileBytes(t, path+"-wal")
			pageSize := int64(binary.BigEndian.Uint32(wal[8:12]))
			if err := os.Truncate(path+"-wal", 32+int64(frames/2)*(24+pageSize)); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"log deleted", func(t *testing.T, path string, _ uint32) {
			for _, f := range []string{path + "-wal", path + "-shm"} {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "aion.db")
			s := openWith(t, path, sqlite.CheckpointConfig{Frames: 64})
			for i := 0; i < 300; i += 10 {
				schedule(t, s, i, i+10, 10)
				settle(t, s)
			}
			bulky(t, s, "bulky", 512<<10) // more than 64 pages: the log is then copied whole
			settle(t, s)
			if frames, copied := walIndex(t, s); copied != frames {
				t.Fatalf("%d of %d frames copied", copied, frames)
			}
			const inLog = 3 // few enough commits to stay under the 64-frame checkpoint
			for i := 300; i < 300+inLog*10; i += 10 {
				schedule(t, s, i, i+10, 10)
				settle(t, s)
			}
			frames, copied := walIndex(t, s)
			if frames == 0 || frames >= 64 || copied != 0 {
				t.Fatalf("log of %d frames, %d copied: want it restarted and holding only the last %d commits", frames, copied, inLog)
			}
			if st := s.CheckpointStats(); st.Passive < 2 || st.Err != nil {
				t.Fatalf("checkpoints: %+v, want several", st)
			}

			crashed := crashCopy(t, path, t.TempDir())
			tc.damage(t, crashed, frames)
			lost := refuse(t, crashed).Lost()
			s2, err := sqlite.Open(ctx, crashed, sqlite.WithAcceptDataLoss(true))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			const acknowledged = 300 + 1 + inLog*10
			left := countActivities(t, s2)
			if left < 301 || left+int(lost.Activities) != acknowledged {
				t.Fatalf("%d activities left, %d reported lost: want the %d checkpointed kept and the sum %d", left, lost.Activities, 301, acknowledged)
			}
			if lost.Commits == 0 || lost.Commits*10 != lost.Activities || (tc.allGone && lost.Commits != inLog) {
				t.Fatalf("lost %+v, want whole commits of 10 (all %d in the log: %v)", lost, inLog, tc.allGone)
			}
		})
	}
}

// The checkpointer reads how much of the log is copied from SQLite's
// shared-memory index; it says what SQLite itself reports.
func TestWALIndexAgreesWithSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	s := open(t, path)
	schedule(t, s, 0, 100, 10)
	settle(t, s)
	frames, copied := walIndex(t, s)
	if frames == 0 || copied != 0 {
		t.Fatalf("index: %d frames, %d copied; want some frames, none copied below the threshold", frames, copied)
	}
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var busy, log, done int
	if err := other.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		t.Fatal(err)
	}
	if busy != 0 || log != int(frames) || done != log {
		t.Fatalf("SQLite: busy %d, log %d, checkpointed %d; the index said %d frames", busy, log, done, frames)
	}
	if frames, copied := walIndex(t, s); int(frames) != log || int(copied) != done {
		t.Fatalf("index after the checkpoint: %d frames, %d copied; SQLite: %d, %d", frames, copied, log, done)
	}
}
