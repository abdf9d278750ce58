package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// A database written while payloads sat in the middle of each row is
// upgraded in place: every field of every activity survives, the bulky
// columns end up last, and a namespace listing merges index reads in order.
func TestUpgradeMovesBulkyColumnsLastAndKeepsEveryField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "aion.db")
	db := oldDatabase(ctx, path, sqlite.SchemaBeforeBulkyLast)
	payload := bytes.Repeat([]byte("p"), 300_000) // past one page: an overflow chain
	if _, err := db.ExecContext(ctx, `INSERT INTO activities (seq, namespace, id, task_queue, activity_type, node,
		payload, fingerprint, timeouts, retry, state, attempt, result, failure, heartbeat,
		scheduled_at, started_at, ready_at, closed_at)
		VALUES (7, 'orders', 'a-1', 'q', 'charge', 'eu', ?, 'fp', '{}', '{}', 'failed', 3, ?, ?, ?, 10, 20, 30, 40)`,
		payload, []byte("result"), `{"message":"card declined","type":"Declined"}`, []byte("beat")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	got, err := s.GetActivity(ctx, "orders", "a-1")
	if err != nil {
		t.Fatalf("get after upgrade: %v", err)
	}
	if got.Seq != 7 || got.TaskQueue != "q" || got.ActivityType != "charge" || got.Node != "eu" ||
		got.Fingerprint != "fp" || got.State != store.ActivityState("failed") || got.Attempt != 3 ||
		!bytes.Equal(got.Payload, payload) || string(got.Result) != "result" || string(got.HeartbeatDetails) != "beat" ||
		got.Failure == nil || got.Failure.Message != "card declined" ||
		got.ScheduledAt.UnixNano() != 10 || got.ClosedAt.UnixNano() != 40 {
		t.Fatalf("activity changed by the upgrade: %+v", got)
	}
	listed, err := s.ListActivities(ctx, store.ActivityFilter{Namespace: "orders", OmitPayloads: true})
	if err != nil || len(listed) != 1 || listed[0].PayloadSize != len(payload) || listed[0].Payload != nil {
		t.Fatalf("list after upgrade: %d activities, err %v", len(listed), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var cols []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('activities') ORDER BY cid`)
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
	// The closing attempt's columns, added since by ALTER TABLE and read
	// by a listing of attempts alone, follow the bulky ones.
	cols = slices.DeleteFunc(cols, func(c string) bool { return strings.HasPrefix(c, "closing_") })
	if tail := strings.Join(cols[len(cols)-4:], ","); tail != "failure,heartbeat,result,payload" {
		t.Fatalf("columns after upgrade end %q, want the bulky ones last", tail)
	}
	var plan strings.Builder
	// The shape of a listing without a state filter: one arm a state.
	var arms []string
	for _, st := range store.ActivityStates {
		arms = append(arms, fmt.Sprintf(`SELECT seq FROM activities WHERE namespace = 'orders' AND state = '%s'`, st))
	}
	rows, err = db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+strings.Join(arms, ` UNION ALL `)+` ORDER BY seq DESC LIMIT 10`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "; ")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := plan.String(); strings.Contains(p, "TEMP B-TREE") || !strings.Contains(p, "MERGE") || !strings.Contains(p, "activities_by_state") {
		t.Fatalf("namespace listing plan %q: want its arms merged from activities_by_state, no sort", p)
	}
}

// oldDatabase writes a database at path with an earlier schema, as an
// earlier version left it, and returns it open; it panics on failure, as
// only a broken test could make it fail.
func oldDatabase(ctx context.Context, path string, schema []string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	for _, m := range schema {
		if _, err := db.ExecContext(ctx, m); err != nil {
			panic(fmt.Sprintf("old schema: %v", err))
		}
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(schema))); err != nil {
		panic(err)
	}
	return db
}
