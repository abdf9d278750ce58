package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"github.com/aion-run/aion/internal/tracectx"
)

// A database from before trace contexts is upgraded in place: its
// activities and runs keep every field (runs their seq too), read with no
// trace context, and the new columns sit before the bulky ones, so a
// listing that leaves payloads out still reads no overflow page.
func TestUpgradeAddsTraceContextBeforeTheBulkyColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	db := oldDatabase(ctx, path, sqlite.SchemaBeforeTrace)
	for _, q := range []string{
		`INSERT INTO activities (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
			state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, fairness_key, fairness_weight,
			concurrency_key, schedule_id, schedule_time, payload)
			VALUES (5, 'orders', 'a-1', 'q', 'charge', '', 'fp', '{}', '{}', 'scheduled', 0, 10, 0, 10, 0, 2, 'tenant', 7,
			'card', 'nightly', 99, x'01')`,
		`INSERT INTO runs (seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
			parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at, task_failure,
			priority, fairness_key, fairness_weight, concurrency_key, input)
			VALUES (41, 'orders', 'r1', 'wf', 'checkout', 'q', 'b1', 'running', 'fp', '', '', 0, '', 1, 10, 0, '', 4, 'tenant', 3, 'k', x'02')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	a, err := s.GetActivity(ctx, "orders", "a-1")
	if err != nil || a.Seq != 5 || a.Priority != 2 || a.Flow != (store.Flow{FairnessKey: "tenant", FairnessWeight: 7, ConcurrencyKey: "card"}) ||
		a.Origin.ScheduleID != "nightly" || a.Origin.Time.UnixNano() != 99 || string(a.Payload) != "\x01" || !a.Trace.IsZero() {
		t.Fatalf("activity after the upgrade: %+v, %v", a, err)
	}
	r, err := s.GetRun(ctx, "orders", "r1")
	if err != nil || r.Seq != 41 || r.BuildID != "b1" || r.Priority != 4 || r.Flow.FairnessWeight != 3 || string(r.Input) != "\x02" || !r.Trace.IsZero() {
		t.Fatalf("run after the upgrade: %+v, %v", r, err)
	}
	// A run inserted after the upgrade keeps counting from the old high mark.
	tc := tracectx.Context{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	if _, err := s.Apply(ctx, []store.Write{store.InsertRun{Run: store.Run{Namespace: "orders", WorkflowID: "wf2", RunID: "r2",
		WorkflowType: "checkout", Trace: tc}, Events: []store.Event{{Seq: 1, Data: []byte("started")}}}}); err != nil {
		t.Fatal(err)
	}
	if r2, err := s.GetRun(ctx, "orders", "r2"); err != nil || r2.Seq <= 41 || r2.Trace != tc {
		t.Fatalf("run inserted after the upgrade: seq %d trace %+v, %v", r2.Seq, r2.Trace, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for table, bulky := range map[string][]string{
		"activities": {"failure", "heartbeat", "result", "payload"},
		"runs":       {"failure", "result", "input"},
	} {
		var cols []string
		rows, err := raw.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		// Columns added since by ALTER TABLE (runs.admitted, read by
		// admissions alone, never by a listing) follow the bulky ones.
		if table == "runs" && cols[len(cols)-1] == "admitted" {
			cols = cols[:len(cols)-1]
		}
		// A later rebuild put activities' wait_deadline and lane after
		// the trace context, still before the bulky columns.
		// The closing attempt's columns, added by ALTER TABLE and read by a
		// listing of attempts alone, follow the bulky ones.
		if table == "activities" {
			cols = slices.DeleteFunc(cols, func(c string) bool {
				return c == "wait_deadline" || c == "lane" || strings.HasPrefix(c, "closing_")
			})
		}
		want := append([]string{"traceparent", "tracestate"}, bulky...)
		if tail := cols[len(cols)-len(want):]; !slices.Equal(tail, want) {
			t.Errorf("%s columns end %s, want %s", table, strings.Join(tail, ","), strings.Join(want, ","))
		}
	}
}
