package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// An activity closed before closing attempts were kept in the row still
// lists the attempt it closed with, and one retried before the upgrade and
// closed after it lists both of its attempts.
func TestUpgradeKeepsAttemptsRecordedBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	db := oldDatabase(ctx, path, sqlite.SchemaBeforeClosingAttempt)
	for _, r := range []struct{ id, state string }{{"closed", "completed"}, {"retried", "scheduled"}} {
		if _, err := db.ExecContext(ctx, `INSERT INTO activities (namespace, id, task_queue, activity_type, node,
			fingerprint, timeouts, retry, state, attempt, scheduled_at, started_at, ready_at, closed_at)
			VALUES ('orders', ?, 'q', 'charge', '', 'fp', '{}', '{}', ?, 1, 10, 20, 10, 30)`, r.id, r.state); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO attempts (namespace, activity_id, number, worker_id, node,
			started_at, ended_at, outcome, failure) VALUES ('orders', ?, 1, 7, 'n1', 20, 30, 'failed', NULL)`, r.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	if got, err := s.ListAttempts(ctx, "orders", "closed"); err != nil || len(got) != 1 || got[0].WorkerID != 7 ||
		got[0].Outcome != store.OutcomeFailed {
		t.Fatalf("attempts of an activity closed before the upgrade: %+v, %v", got, err)
	}
	now := time.Unix(0, 100)
	if _, err := s.Apply(ctx, []store.Write{store.EndAttempt{Namespace: "orders", ID: "retried", State: store.StateCompleted,
		ClosedAt: now, Attempt: &store.Attempt{Number: 2, WorkerID: 8, StartedAt: now, EndedAt: now,
			Outcome: store.OutcomeCompleted}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListAttempts(ctx, "orders", "retried")
	if err != nil || len(got) != 2 || got[0].Number != 1 || got[0].WorkerID != 7 || got[1].Number != 2 ||
		got[1].WorkerID != 8 || got[1].Outcome != store.OutcomeCompleted {
		t.Fatalf("attempts of an activity retried before the upgrade and closed after: %+v, %v", got, err)
	}
}
