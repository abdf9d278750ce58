package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// A reaping commit skips the sync of the write-ahead log; every other
// commit must still run in the mode the store was opened with.
func TestReapingLeavesTheWriterInItsSynchronousMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []string{"full", "normal"} {
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "aion.db"), sqlite.WithSynchronous(mode))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		a := store.Activity{Namespace: "ns", ID: "a", TaskQueue: "q", ActivityType: "t", Fingerprint: "f",
			State: store.StateScheduled, ScheduledAt: at}
		if _, err := s.Apply(ctx, []store.Write{store.InsertActivity{Activity: a},
			store.EndAttempt{Namespace: "ns", ID: "a", State: store.StateCompleted, ClosedAt: at}}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.ReapActivities(ctx, "ns", at.Add(time.Minute), 10); err != nil || n != 1 {
			t.Fatalf("%s: reaped %d, %v; want 1", mode, n, err)
		}
		if got, err := s.Synchronous(ctx); err != nil || got != mode {
			t.Fatalf("opened %s: after reaping the writer commits in %q (%v)", mode, got, err)
		}
	}
}
