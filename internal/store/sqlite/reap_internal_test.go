package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// reapSetup opens a store in a fresh directory and inserts activities
// with the given scheduled_at (seq 1, 2, … in order), closed or not.
func reapSetup(t *testing.T, scheduled []int64) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "aion.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i, at := range scheduled {
		if _, err := s.writer.ExecContext(ctx, `INSERT INTO activities (seq, namespace, id, task_queue, activity_type,
			node, fingerprint, timeouts, retry, state, attempt, scheduled_at, started_at, ready_at, closed_at)
			VALUES (?, 'ns', ?, 'q', 't', '', 'fp', '{}', '{}', 'completed', 1, ?, ?, ?, ?)`,
			i+1, "a"+string(rune('A'+i)), at, at, at, at+1); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func scheduledBeforeIn(t *testing.T, s *Store, cutoff int64) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	seq, err := scheduledBefore(ctx, tx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// The bound is the last activity scheduled before the cutoff, over gaps in
// seq, and none when the first was scheduled at or after it.
func TestScheduledBeforeFindsTheLastActivityScheduledBeforeTheCutoff(t *testing.T) {
	t.Parallel()
	s := reapSetup(t, []int64{10, 20, 30, 40, 50, 60, 70, 80})
	if _, err := s.writer.Exec(`DELETE FROM activities WHERE seq IN (3, 4, 6)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cutoff, want int64 }{
		{5, 0}, {10, 0}, {11, 1}, {21, 2}, {45, 2}, {51, 5}, {65, 5}, {71, 7}, {81, 8}, {1000, 8},
	} {
		if got := scheduledBeforeIn(t, s, c.cutoff); got != c.want {
			t.Errorf("cutoff %d: bound %d, want %d", c.cutoff, got, c.want)
		}
	}
	empty := reapSetup(t, nil)
	if got := scheduledBeforeIn(t, empty, 100); got != 0 {
		t.Errorf("empty table: bound %d, want 0", got)
	}
}

// With scheduled_at out of order (a clock set back) the bound may stop
// short, never past an activity scheduled at or after the cutoff that it
// read, and every row it admits is still checked against the cutoff.
func TestScheduledBeforeStaysBelowTheCutoffWhenTheClockWentBack(t *testing.T) {
	t.Parallel()
	s := reapSetup(t, []int64{10, 20, 90, 30, 40})
	got := scheduledBeforeIn(t, s, 50)
	if got == 0 || got == 3 {
		t.Fatalf("bound %d: want a row scheduled before the cutoff", got)
	}
	var at int64
	if err := s.reader.QueryRow(`SELECT scheduled_at FROM activities WHERE seq = ?`, got).Scan(&at); err != nil || at >= 50 {
		t.Fatalf("bound %d scheduled at %d, %v; want before 50", got, at, err)
	}
}

// The lowest and highest seq come from the ends of the rowid b-tree, not a
// scan of the table, and the reaper's pick reads activities_by_state.
func TestReapQueriesReadIndexesNotTheTable(t *testing.T) {
	t.Parallel()
	s := reapSetup(t, []int64{10, 20})
	for _, q := range []string{seqRangeSQL,
		`SELECT seq, id FROM activities INDEXED BY activities_by_state
			WHERE namespace = 'ns' AND state = 'completed' AND seq > 0 AND seq <= 10 AND closed_at < 5 ORDER BY seq LIMIT 5`} {
		rows, err := s.reader.Query(`EXPLAIN QUERY PLAN ` + q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notUsed int
			var detail string
			if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		if strings.Contains(joined, "SCAN activities") {
			t.Errorf("plan of %q scans the table: %s", q, joined)
		}
	}
}

// The batches of one pass go on from where the last one stopped, state by
// state; a new cutoff starts from the beginning.
func TestReapBatchesOfOnePassGoOnFromTheLast(t *testing.T) {
	t.Parallel()
	s := reapSetup(t, []int64{10, 20, 30, 40, 50})
	ctx := context.Background()
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	seqs, _, next, err := pickActivities(ctx, tx, "ns", 45, 2, reapCursor{})
	if err != nil || len(seqs) != 2 || seqs[1] != 2 || next != (reapCursor{cutoff: 45, seq: 2}) {
		t.Fatalf("first batch: %v, next %+v, %v", seqs, next, err)
	}
	seqs, _, next, err = pickActivities(ctx, tx, "ns", 45, 2, next)
	if err != nil || len(seqs) != 2 || seqs[0] != 3 || seqs[1] != 4 {
		t.Fatalf("second batch: %v, next %+v, %v; want 3 and 4", seqs, next, err)
	}
	seqs, _, next, err = pickActivities(ctx, tx, "ns", 45, 2, next)
	if err != nil || len(seqs) != 0 || next.state != len(closedStates) {
		t.Fatalf("third batch: %v, next %+v, %v; want none and every state done", seqs, next, err)
	}
	seqs, _, _, err = pickActivities(ctx, tx, "ns", 55, 10, next)
	if err != nil || len(seqs) != 5 {
		t.Fatalf("a new cutoff: %v, %v; want all 5 from the start", seqs, err)
	}
}
