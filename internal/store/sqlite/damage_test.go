package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

func activity(i int) store.Activity {
	id := fmt.Sprintf("act-%06d", i)
	return store.Activity{
		Namespace: "orders", ID: id, TaskQueue: "default", ActivityType: "echo",
		Payload: bytes.Repeat([]byte{'x'}, 512), Fingerprint: "fp-" + id,
		Timeouts: store.Timeouts{StartToClose: time.Minute}, State: store.StateScheduled,
		ScheduledAt: time.Now().UTC(),
	}
}

// schedule inserts activities from..to-1, batch by batch, one commit each,
// as the group committer would: each returns only once durable.
func schedule(t *testing.T, s *sqlite.Store, from, to, batch int) {
	t.Helper()
	for i := from; i < to; i += batch {
		var ws []store.Write
		for j := i; j < min(i+batch, to); j++ {
			ws = append(ws, store.InsertActivity{Activity: activity(j)})
		}
		if _, err := s.Apply(context.Background(), ws); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
}

func countActivities(t *testing.T, s *sqlite.Store) int {
	t.Helper()
	all, err := s.ListActivities(context.Background(), store.ActivityFilter{Namespace: "orders", Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// crashCopy copies the files of the open, idle database at path into dir as
// a SIGKILL would leave them: the database, its write-ahead log not yet
// checkpointed, its shared memory and its mark, all as the page cache holds
// them. It returns the copy's database path.
func crashCopy(t *testing.T, path, dir string) string {
	t.Helper()
	to := filepath.Join(dir, filepath.Base(path))
	for _, suffix := range []string{"", "-wal", "-shm", ".mark"} {
		copyFile(t, path+suffix, to+suffix)
	}
	return to
}

func refuse(t *testing.T, path string) *sqlite.LossError {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatalf("open %s: started on a damaged database, want a refusal", path)
	}
	var loss *sqlite.LossError
	if !errors.As(err, &loss) || !errors.Is(err, sqlite.ErrDataLoss) {
		t.Fatalf("open %s: %v, want a *LossError wrapping ErrDataLoss", path, err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("refusal %q does not name the database %s", err, path)
	}
	return loss
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// populated is a closed database at dir/aion.db holding n activities.
func populated(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "aion.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	schedule(t, s, 0, n, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDamagedDatabaseIsRefusedNamingTheProblem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		damage  func(t *testing.T, path string)
		problem string
		lost    sqlite.Counters
	}{
		{"missing", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, "is missing", sqlite.Counters{Commits: 14, Writes: 140, Activities: 140}},
		{"zero length", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, "is empty (0 bytes)", sqlite.Counters{Commits: 14, Writes: 140, Activities: 140}},
		{"another database", func(t *testing.T, path string) {
			other := populated(t, 10)
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}, "not", sqlite.Counters{Commits: 14, Writes: 140, Activities: 140}},
		{"older copy", func(t *testing.T, path string) {
			// The copy taken now lacks what is written next.
			old := filepath.Join(t.TempDir(), "old.db")
			copyFile(t, path, old)
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			schedule(t, s, 140, 170, 10)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(old, path); err != nil {
				t.Fatal(err)
			}
		}, "is behind its mark", sqlite.Counters{Commits: 3, Writes: 30, Activities: 30}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := populated(t, 140)
			tc.damage(t, path)
			before := fileBytes(t, path)
			loss := refuse(t, path)
			if !strings.Contains(loss.Problem, tc.problem) || !strings.Contains(loss.Problem, sqlite.MarkPath(path)) {
				t.Fatalf("problem %q, want it to say %q and name the mark", loss.Problem, tc.problem)
			}
			if got := loss.Lost(); got != tc.lost {
				t.Fatalf("lost %+v, want %+v", got, tc.lost)
			}
			if after := fileBytes(t, path); !bytes.Equal(before, after) {
				t.Fatalf("the refusal changed %s: %d bytes before, %d after", path, len(before), len(after))
			}
		})
	}
}

func TestAcceptDataLossStartsOnWhatIsLeftAndRearmsTheMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := populated(t, 50)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.WithAcceptDataLoss(true))
	if err != nil {
		t.Fatalf("open accepting the loss: %v", err)
	}
	loss := s.AcceptedLoss()
	if loss == nil || loss.Lost().Activities != 50 {
		t.Fatalf("accepted loss %v, want 50 activities reported", loss)
	}
	if n := countActivities(t, s); n != 0 {
		t.Fatalf("%d activities on an emptied database", n)
	}
	schedule(t, s, 0, 5, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The mark now records the new database: a plain start is clean, and a
	// new loss is caught again.
	s = open(t, path)
	if s.AcceptedLoss() != nil || countActivities(t, s) != 5 {
		t.Fatalf("after accepting: loss %v, %d activities", s.AcceptedLoss(), countActivities(t, s))
	}
	s.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := refuse(t, path).Lost().Activities; got != 5 {
		t.Fatalf("second loss: %d activities, want 5", got)
	}
}

func TestNewDirectoryStartsAndWritesItsMark(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.db")
	s := open(t, path)
	if s.AcceptedLoss() != nil {
		t.Fatalf("a new database reported a loss: %v", s.AcceptedLoss())
	}
	mark := string(fileBytes(t, sqlite.MarkPath(path)))
	if !strings.HasPrefix(mark, "aion-mark 1\nid ") || !strings.Contains(mark, "commits 0 writes 0 activities 0 crc ") {
		t.Fatalf("mark of a new database:\n%s", mark)
	}
}

func TestDatabaseWithoutMarkIsAdopted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A data directory written before marks existed: the old schema, three
	// activities, no mark file.
	path := filepath.Join(t.TempDir(), "aion.db")
	if err := oldDatabase(ctx, path, sqlite.SchemaBeforeMark).Close(); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	schedule(t, s, 0, 3, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sqlite.MarkPath(path)); err != nil {
		t.Fatalf("no mark written when adopting: %v", err)
	}
	// From now on the database is protected.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if got := refuse(t, path).Lost().Activities; got != 3 {
		t.Fatalf("adopted database emptied: %d activities reported, want 3", got)
	}
}

// A write-ahead log cut in half after a crash drops every commit after the
// cut; SQLite opens what is left without a word. The mark, advanced after
// each acknowledged commit, tells how many are gone.
func TestWALCutShortAfterCrashIsReportedNotSilent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	s := open(t, path)
	const acknowledged = 300
	schedule(t, s, 0, acknowledged, 10)
	crashed := crashCopy(t, path, t.TempDir())
	wal, err := os.Stat(crashed + "-wal")
	if err != nil || wal.Size() == 0 {
		t.Fatalf("no write-ahead log to damage: %v", err)
	}
	if err := os.Truncate(crashed+"-wal", wal.Size()/2); err != nil {
		t.Fatal(err)
	}
	walBefore, dbBefore := fileBytes(t, crashed+"-wal"), fileBytes(t, crashed)

	loss := refuse(t, crashed)
	lost := loss.Lost()
	if lost.Commits == 0 || lost.Activities == 0 {
		t.Fatalf("refused without counting the loss: %v", loss)
	}
	if !strings.Contains(loss.Error(), fmt.Sprintf("%d activities", lost.Activities)) || !strings.Contains(loss.Error(), "write-ahead log") {
		t.Fatalf("refusal %q does not say what was lost and where", loss)
	}
	if !bytes.Equal(walBefore, fileBytes(t, crashed+"-wal")) || !bytes.Equal(dbBefore, fileBytes(t, crashed)) {
		t.Fatal("the refusal changed the database or its write-ahead log")
	}

	// Accepting shows the count was exact: what is left plus what was
	// reported lost is what was acknowledged.
	s2, err := sqlite.Open(ctx, crashed, sqlite.WithAcceptDataLoss(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	left := countActivities(t, s2)
	if left+int(lost.Activities) != acknowledged || left == 0 {
		t.Fatalf("%d activities left and %d reported lost, want them to add up to %d", left, lost.Activities, acknowledged)
	}
	if lost.Commits != int64(acknowledged-left)/10 {
		t.Fatalf("%d commits reported lost, want %d", lost.Commits, (acknowledged-left)/10)
	}
}

// The mark is synced about once a second, so after a power loss it may be
// behind the database: that is never taken for a loss.
func TestMarkBehindTheDatabaseIsNotALoss(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.db")
	s := open(t, path)
	schedule(t, s, 0, 10, 10)
	stale := fileBytes(t, sqlite.MarkPath(path))
	schedule(t, s, 10, 40, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sqlite.MarkPath(path), stale, 0o640); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if n := countActivities(t, s); n != 40 {
		t.Fatalf("%d activities, want 40", n)
	}
}

// The counters are written to two blocks in turn: a record torn by a crash
// leaves the other one whole, and the start goes on from it.
func TestTornMarkRecordFallsBackToTheOther(t *testing.T) {
	t.Parallel()
	path := populated(t, 30)
	mark := fileBytes(t, sqlite.MarkPath(path))
	for _, block := range []int{1, 2} {
		torn := bytes.Clone(mark)
		copy(torn[block*512+3:], "garbage")
		if err := os.WriteFile(sqlite.MarkPath(path), torn, 0o640); err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("block %d torn: %v", block, err)
		}
		s.Close()
	}
	if err := os.WriteFile(sqlite.MarkPath(path), []byte("aion-mark 1\nid nonsense\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if loss := refuse(t, path); !strings.Contains(loss.Problem, "is damaged") {
		t.Fatalf("damaged mark: %v", loss)
	}
}

// Deleting the write-ahead log after a crash takes with it every commit not
// yet checkpointed; for a young database that is its whole history.
func TestWALDeletedAfterCrashIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aion.db")
	s := open(t, path)
	schedule(t, s, 0, 100, 10)
	crashed := crashCopy(t, path, t.TempDir())
	for _, f := range []string{crashed + "-wal", crashed + "-shm"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	loss := refuse(t, crashed)
	if got := loss.Lost(); got.Activities != 100 || got.Commits != 10 || !strings.Contains(loss.Problem, "write-ahead log") {
		t.Fatalf("log deleted: %v, want 10 commits and 100 activities gone, blaming the log", loss)
	}
}
