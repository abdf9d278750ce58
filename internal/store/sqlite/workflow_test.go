package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// A database written before workflows is upgraded in place: its activities
// stay, runs and histories can be written, and they survive a reopen that
// checks the database against its mark.
func TestUpgradeAddsWorkflowsAndKeepsActivities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	db := oldDatabase(ctx, path, sqlite.SchemaBeforeWorkflows)
	if _, err := db.ExecContext(ctx, `INSERT INTO activities (seq, namespace, id, task_queue, activity_type, node,
		fingerprint, timeouts, retry, state, attempt, scheduled_at, started_at, ready_at, closed_at, payload)
		VALUES (3, 'orders', 'a-1', 'q', 'charge', '', 'fp', '{}', '{}', 'scheduled', 0, 10, 0, 10, 0, x'01')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("open the old database: %v", err)
	}
	if a, err := s.GetActivity(ctx, "orders", "a-1"); err != nil || a.Seq != 3 || a.ActivityType != "charge" {
		t.Fatalf("activity after the upgrade: %+v, %v", a, err)
	}
	got, err := s.Apply(ctx, []store.Write{
		store.InsertRun{Run: store.Run{Namespace: "orders", WorkflowID: "wf", RunID: "r1", WorkflowType: "checkout"},
			Events: []store.Event{{Seq: 1, Data: []byte("started")}}},
		store.AppendEvents{Namespace: "orders", RunID: "r1", After: 1, Events: []store.Event{{Seq: 2, Data: []byte("step")}}},
	})
	if err != nil || !got[0] || !got[1] {
		t.Fatalf("workflow writes after the upgrade: %v, %v", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := open(t, path)
	r, err := reopened.GetRun(ctx, "orders", "r1")
	if err != nil || r.WorkflowType != "checkout" || r.HistoryLength != 2 || r.Status != store.RunRunning {
		t.Fatalf("run after reopen: %+v, %v", r, err)
	}
	history, err := reopened.ReadHistory(ctx, "orders", "r1", 0, 0)
	if err != nil || len(history) != 2 || string(history[1].Data) != "step" {
		t.Fatalf("history after reopen: %v, %v", history, err)
	}
}
