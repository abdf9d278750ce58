package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// Activities spilled before lanes had ids are found in their lanes after the
// upgrade, in order, and a held one stays held.
func TestUpgradeGivesSpilledActivitiesTheirLaneIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	db := oldDatabase(ctx, path, sqlite.SchemaBeforeLanes)
	for _, r := range []struct {
		seq     int
		id, key string
		spilled int
	}{{1, "a-1", "tenant-a", 1}, {2, "b-1", "tenant-b", 1}, {3, "a-2", "tenant-a", 1}, {4, "h-1", "tenant-a", 0}} {
		if _, err := db.ExecContext(ctx, `INSERT INTO activities (seq, namespace, id, task_queue, activity_type, node,
			fingerprint, timeouts, retry, state, attempt, scheduled_at, started_at, ready_at, closed_at, priority,
			fairness_key, spilled) VALUES (?, 'orders', ?, 'q', 'charge', '', 'fp', '{}', '{}', 'scheduled', 0, 10, 0, ?, 0, 3, ?, ?)`,
			r.seq, r.id, 100+r.seq, r.key, r.spilled); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	lane := func(key string) store.Lane {
		return store.Lane{Namespace: "orders", TaskQueue: "q", ActivityType: "charge", Priority: 3, FairnessKey: key}
	}
	now := time.Unix(0, 1_000)
	for key, want := range map[string]string{"tenant-a": "a-1,a-2", "tenant-b": "b-1"} {
		page, _, err := s.PageWaiting(ctx, store.WaitingPage{Lane: lane(key), Now: now, Inline: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := joinIDs(page); got != want {
			t.Errorf("lane %s after upgrade: %q, want %q", key, got, want)
		}
	}
	counts, err := s.CountWaiting(ctx, false)
	if err != nil || len(counts) != 2 || counts[0].FairnessKey != "tenant-a" || counts[0].Count != 2 ||
		counts[1].FairnessKey != "tenant-b" || counts[1].Count != 1 {
		t.Fatalf("counts after upgrade: %+v, err %v; want tenant-a 2, tenant-b 1", counts, err)
	}
	held, err := s.HeldActivities(ctx, -1)
	if err != nil || joinIDs(held) != "h-1" {
		t.Fatalf("held after upgrade: %q, err %v; want h-1", joinIDs(held), err)
	}
}

// Lanes created in one commit, two of them at once and one again for a
// second activity, are found by a store opened later over the same file.
func TestSpilledActivitiesAreFoundInTheirLanesAfterReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	spilled := func(i int, key string) store.Write {
		a := activity(i)
		a.Priority, a.Flow = 3, store.Flow{FairnessKey: key, FairnessWeight: 1}
		a.ReadyAt = a.ScheduledAt
		return store.InsertActivity{Activity: a, Spilled: true}
	}
	if _, err := s.Apply(ctx, []store.Write{spilled(1, "a"), spilled(2, "b"), spilled(3, "a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, []store.Write{spilled(4, "b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := open(t, path)
	for key, want := range map[string]string{"a": "act-000001,act-000003", "b": "act-000002,act-000004"} {
		page, _, err := reopened.PageWaiting(ctx, store.WaitingPage{Lane: store.Lane{Namespace: "orders",
			TaskQueue: "default", ActivityType: "echo", Priority: 3, FairnessKey: key}, Now: time.Now(), Inline: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := joinIDs(page); got != want {
			t.Errorf("lane %q after reopen: %q, want %q", key, got, want)
		}
	}
	counts, err := reopened.CountWaiting(ctx, false)
	if err != nil || len(counts) != 2 || counts[0].Count != 2 || counts[1].Count != 2 {
		t.Fatalf("counts after reopen: %+v, err %v; want two lanes of 2", counts, err)
	}
}

func joinIDs(as []store.Activity) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += ","
		}
		out += a.ID
	}
	return out
}
