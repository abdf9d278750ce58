package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"github.com/aion-run/aion/internal/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "aion.db"))
	})
}

func TestRecordsSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "aion.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RegisterNamespace(ctx, "orders", store.OriginWorker); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPlacement(ctx, "orders", store.Placement{Mode: store.Pinned, Nodes: []string{"gpu-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := open(t, path)
	ns, err := reopened.GetNamespace(ctx, "orders")
	if err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	if ns.Origin != store.OriginWorker || ns.Placement.String() != "pinned{gpu-1}" {
		t.Fatalf("after reopen: got %+v", ns)
	}
}

func TestWaitingConformance(t *testing.T) {
	t.Parallel()
	storetest.RunWaiting(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "aion.db"))
	})
}

// The embedded store has no cluster members: an insert started on one is
// refused by name, and with it the whole Apply.
func TestStartedInsertIsClusterOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "aion.db"))
	now := time.Now()
	plain := store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "plain", TaskQueue: "q", ActivityType: "t",
		Fingerprint: "f", State: store.StateScheduled, ScheduledAt: now, ReadyAt: now}}
	started := plain
	started.Activity.ID = "started"
	started.Start = &store.InsertStart{Owner: 1, Worker: 2, At: now}
	_, err := s.Apply(ctx, []store.Write{plain, started})
	if !errors.Is(err, store.ErrClusterOnly) || !strings.Contains(err.Error(), `"started"`) {
		t.Fatalf("apply a started insert: %v, want ErrClusterOnly naming the activity", err)
	}
	for _, id := range []string{"plain", "started"} {
		if _, err := s.GetActivity(ctx, "ns", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get %s after the refused apply: %v, want not found", id, err)
		}
	}
}
