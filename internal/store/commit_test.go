package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T) *store.Committer {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"), sqlite.WithSynchronous("normal"))
	if err != nil {
		t.Fatal(err)
	}
	c := store.NewCommitter(st, store.CommitterOptions{MaxBatch: 7})
	t.Cleanup(func() {
		c.Close()
		st.Close()
	})
	return c
}

func insert(id string) store.Write {
	return store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id, TaskQueue: "default", ActivityType: "echo",
		Fingerprint: "fp-" + id, State: store.StateScheduled, ScheduledAt: time.Now().UTC()}}
}

func TestFlushReturnsOnlyOnceEveryEarlierWriteIsDone(t *testing.T) {
	t.Parallel()
	c := setup(t)
	const n = 50 // several batches of MaxBatch 7
	var done atomic.Int32
	for i := range n {
		c.Submit(insert(fmt.Sprintf("a%d", i)), func(changed bool, err error) {
			if err != nil || !changed {
				t.Errorf("insert a%d: changed %v, err %v", i, changed, err)
			}
			done.Add(1)
		})
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if got := done.Load(); got != n {
		t.Fatalf("flush returned with %d of %d earlier writes done", got, n)
	}
	// A flush with nothing queued returns too, and writes after a flush
	// still commit.
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("second flush: %v", err)
	}
	if changed, err := c.Commit(context.Background(), insert("after")); err != nil || !changed {
		t.Fatalf("write after flush: changed %v, err %v", changed, err)
	}
}

func TestFlushAfterCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	c := setup(t)
	c.Close()
	if err := c.Flush(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("flush after close: %v, want ErrClosed", err)
	}
}
