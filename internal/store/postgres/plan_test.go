package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL keeps the generic plan of a prepared statement that it made
// after five runs, while the table was new and had no statistics, until
// the statistics change. The look-ups of one activity must then still go
// through its (namespace, id) key: another index there (one led by the
// namespace alone) would read the whole namespace on every ending.
func TestOneActivityLookUpsUseItsKeyOnANewTable(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 2)
	insertScheduled(ctx, t, s, 0, 20)
	conn, done := genericPlanConn(ctx, t, s)
	defer done()
	for _, tc := range []struct {
		name string
		sql  string
		args int
	}{
		{"end an attempt", endAttemptSQL, 18},
		{"close with an attempt", closeAttemptSQL, 18},
		{"end an activity", endActivitySQL, 11},
		{"read an activity", `SELECT ` + store.ActivityColumns + ` FROM activities WHERE namespace = $1 AND id = $2`, 2},
	} {
		name := "plan_" + strings.ReplaceAll(tc.name, " ", "_")
		if _, err := conn.Exec(ctx, `PREPARE `+name+` AS `+tc.sql); err != nil {
			t.Fatalf("%s: prepare: %v", tc.name, err)
		}
		if p := explainExecute(ctx, t, conn, name, tc.args); !strings.Contains(p, "activities_namespace_id_key") {
			t.Errorf("%s: generic plan on a new table does not use the (namespace, id) key:\n%s", tc.name, p)
		}
	}
}

// A new store gives the activities table planner statistics once it has
// inserted analyzeFirst activities, so the generic plans its connections
// made on the near-empty table are replaced: the claim's update of the
// rows it took then reads them by key, not the whole table.
func TestANewTableIsAnalyzedOnceItHasGrown(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 3)
	insert := func(from, to int) { insertScheduled(ctx, t, s, from, to) }
	// A connection keeps the claim's generic plan made on a few rows.
	insert(0, 20)
	conn, done := genericPlanConn(ctx, t, s)
	defer done()
	if _, err := conn.Exec(ctx, `PREPARE claim_plan AS `+claimSQL); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE claim_plan`) }()
	if _, err := conn.Exec(ctx, `PREPARE close_plan AS `+closeActivitiesSQL); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE close_plan`) }()
	plan := func() string { return explainExecute(ctx, t, conn, "claim_plan", 10) }
	t.Logf("on 20 rows:\n%s", plan())

	insert(20, analyzeFirst-1)
	if n := reltuples(ctx, t, s); n >= 0 {
		t.Fatalf("analyzed after %d activities (reltuples %v), want not before %d", analyzeFirst-1, n, analyzeFirst)
	}
	insert(analyzeFirst-1, analyzeFirst)
	select {
	case <-s.stats.done:
	case <-time.After(time.Minute):
		t.Fatal("no analyze within a minute")
	}
	if n := reltuples(ctx, t, s); n < analyzeFirst {
		t.Fatalf("after %d activities the statistics count %v rows", analyzeFirst, n)
	}
	if p := plan(); strings.Contains(p, "Seq Scan on activities") {
		t.Errorf("the claim's generic plan on the analyzed table reads the whole table:\n%s", p)
	}
	if p := explainExecute(ctx, t, conn, "close_plan", 17); strings.Contains(p, "Seq Scan on activities") ||
		!strings.Contains(p, "activities_namespace_id_key") {
		t.Errorf("the generic plan of closes together on the analyzed table does not find each row by its key:\n%s", p)
	}
}

// The store analyzes the table again each time its inserts grow tenfold,
// so plans made from the statistics of a table a tenth the size are
// replaced too.
func TestTheTableIsAnalyzedAgainAtEachTenfold(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 2)
	analyzed := make(chan int64, 4)
	s.stats.analyzed = func(at int64) { analyzed <- at }
	for i := 0; i < 10*analyzeFirst; i += 500 {
		insertScheduled(ctx, t, s, i, i+500)
	}
	seen := map[int64]bool{}
	for range 2 {
		select {
		case at := <-analyzed:
			seen[at] = true
		case <-time.After(time.Minute):
			t.Fatalf("analyzes within a minute: at %v, want at %d and %d", seen, analyzeFirst, 10*analyzeFirst)
		}
	}
	if !seen[analyzeFirst] || !seen[10*analyzeFirst] {
		t.Fatalf("analyzed at %v inserted activities, want at %d and %d", seen, analyzeFirst, 10*analyzeFirst)
	}
	if n := reltuples(ctx, t, s); n < 10*analyzeFirst {
		t.Fatalf("after %d activities the statistics count %v rows", 10*analyzeFirst, n)
	}
}

// setup opens a store on a fresh database, its pool capped at conns
// connections (0: the default), and closes it when the test ends.
func setup(t *testing.T, conns int) (context.Context, *Store) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Fresh(t, conns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, s
}

// insertScheduled inserts scheduled activities a-from … a-(to-1) into
// namespace ns of s in one Apply.
func insertScheduled(ctx context.Context, t *testing.T, s *Store, from, to int) {
	t.Helper()
	now := time.Now()
	var writes []store.Write
	for i := from; i < to; i++ {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: fmt.Sprintf("a-%d", i),
			TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled,
			ScheduledAt: now, ReadyAt: now}})
	}
	if _, err := s.Apply(ctx, writes); err != nil {
		t.Fatal(err)
	}
}

// reltuples is the planner's count of the activities table's rows; -1
// before the table was ever analyzed.
func reltuples(ctx context.Context, t *testing.T, s *Store) float64 {
	t.Helper()
	var n float64
	if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'activities'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// genericPlanConn is a connection of s's pool that plans every prepared
// statement generically, as PostgreSQL does from a statement's sixth run;
// done resets it and gives it back, before the store is closed.
func genericPlanConn(ctx context.Context, t *testing.T, s *Store) (conn *pgxpool.Conn, done func()) {
	t.Helper()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		conn.Release()
		t.Fatal(err)
	}
	return conn, func() {
		_, _ = conn.Exec(ctx, `RESET plan_cache_mode`)
		conn.Release()
	}
}

// explainExecute is the plan conn would run the prepared statement name by,
// given args NULL parameters.
func explainExecute(ctx context.Context, t *testing.T, conn *pgxpool.Conn, name string, args int) string {
	t.Helper()
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", args), ", ")
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+name+`(`+nulls+`)`)
	if err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	return plan.String()
}

// Every column of activities has its own statistics target (see
// statisticsMigration), so analyzing the table samples only what plans
// need: a column added without one would bring back the default target,
// and with it the sample of 30,000 rows of every column.
func TestEveryActivityColumnHasAStatisticsTarget(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 0)
	rows, err := s.pool.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = 'activities'::regclass AND attnum > 0 AND NOT attisdropped AND attstattarget < 0 ORDER BY attnum`)
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(defaults) > 0 {
		t.Fatalf("activities columns with the default statistics target: %v; give each its own in a migration", defaults)
	}
	var widest int
	if err := s.pool.QueryRow(ctx, `SELECT max(attstattarget) FROM pg_attribute
		WHERE attrelid = 'activities'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&widest); err != nil {
		t.Fatal(err)
	}
	if widest > 10 {
		t.Fatalf("a statistics target of %d on activities, want at most 10: an analyze samples 300 rows per unit of the largest", widest)
	}
}

// Waiting work without a deadline has no entry in the index of waiting
// deadlines, and running work without a concurrency key none in the index
// of running work by key. Thousands of running activities without a key
// leave that index at a page or two; the waiting ones without a deadline
// would not show in size (they share one key, which a btree stores once),
// so the index's predicate is read instead.
func TestDeadlineAndKeyIndexesHoldOnlyWorkThatHasThem(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 2)
	self, err := s.JoinCluster(ctx, store.JoinRequest{Name: "a", Addr: "127.0.0.1:1", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var writes []store.Write
	for i := range 4000 {
		a := store.Activity{Namespace: "ns", ID: fmt.Sprintf("a-%d", i), TaskQueue: "q", ActivityType: "t",
			Fingerprint: "f", State: store.StateScheduled, ScheduledAt: now, ReadyAt: now}
		w := store.InsertActivity{Activity: a}
		switch {
		case i < 2:
			w.Activity.Timeouts.ScheduleToStart = time.Minute
		case i < 2000:
		case i < 2003:
			w.Activity.Flow.ConcurrencyKey = "k"
			fallthrough
		default:
			w.Start = &store.InsertStart{Owner: self.ID, Worker: uint64(i), At: now}
		}
		writes = append(writes, w)
	}
	if _, err := s.Apply(ctx, writes); err != nil {
		t.Fatal(err)
	}
	const page = 8192
	for _, tc := range []struct {
		index    string
		min, max int64
	}{
		{"activities_running_key", 0, 2 * page},
		{"activities_claim", 4 * page, 1 << 30}, // every waiting activity, for contrast
	} {
		var n int64
		if err := s.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, tc.index).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n < tc.min || n > tc.max {
			t.Errorf("%s takes %d bytes, want between %d and %d", tc.index, n, tc.min, tc.max)
		}
	}
	var pred string
	if err := s.pool.QueryRow(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
		WHERE indexrelid = 'activities_wait_deadline'::regclass`).Scan(&pred); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pred, "wait_deadline < '"+noDeadline+"'") {
		t.Errorf("activities_wait_deadline holds rows where %s, want only those with a deadline", pred)
	}
	// The sweep still finds the due deadlines of waiting work, and the
	// count of a key's running work still counts it.
	due, err := s.ExpireWaitingActivities(ctx, store.ExpireRequest{Now: now.Add(2 * time.Minute), Limit: 10,
		Failure: func(store.Activity) *store.Failure {
			return &store.Failure{Message: "waited too long", Type: "timeout"}
		}})
	if err != nil || len(due) != 2 {
		t.Fatalf("expired %d waiting activities (%v), want the 2 with a deadline", len(due), err)
	}
	u, err := s.ReadFlowUsage(ctx, store.FlowUsageRequest{Namespace: "ns", ActivityType: "t", ConcurrencyKey: "k"})
	if err != nil || u.Running != 3 {
		t.Fatalf("running of key k: %d (%v), want 3", u.Running, err)
	}
}

// A claim reads no more of a fairness key's waiting work than it can take,
// also while the table's statistics were taken when its backlog was a
// fraction of what it is: the store analyzes the table at tenfold growth
// and autovacuum may be off. With such statistics the planner once read a
// key's work through the index of the whole pool in age order (all of the
// priority's waiting work) and sorted it: every claim cost a read of the
// backlog, and a growing backlog slowed claims, which grew the backlog.
func TestAClaimReadsAKeysOldestWorkOnlyOnStaleStatistics(t *testing.T) {
	t.Parallel()
	const (
		activities = `INSERT INTO activities (namespace, id, task_queue, activity_type, node, fingerprint, timeouts,
				retry, state, attempt, scheduled_at, started_at, ready_at, closed_at, owner)
			SELECT 'ns', $1 || g, 'q', 't', '', 'f', '{}', '{}', $2, 0, 1, 0, 1, 0, $3 FROM generate_series(1, $4::integer) g`
		runs = `INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status,
				fingerprint, parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at,
				closed_at, task_failure, owner)
			SELECT 'ns', $1 || g, $1 || g, 't', 'q', '', $2, 'f', '', '', 0, '', 0, 1, 0, '', $3
			FROM generate_series(1, $4::integer) g`
	)
	for _, tc := range []struct {
		name, table, fill, claim, closed, wide string
		args                                   int
	}{
		{"activities", "activities", activities, claimSQL, "completed", "activities_claim", 10},
		{"runs", "runs", runs, claimRunsSQL, "completed", "runs_unowned", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, s := setup(t, 2)
			fill := func(prefix, state string, owner, n int) {
				t.Helper()
				if _, err := s.pool.Exec(ctx, tc.fill, prefix, state, owner, n); err != nil {
					t.Fatal(err)
				}
			}
			waiting := "scheduled"
			if tc.table == "runs" {
				waiting = "running" // a run waits for a holder while it has no owner
			}
			fill("waiting-", waiting, 0, 11000)
			fill("held-", "running", 1, 500)
			fill("done-", tc.closed, 0, 22000)
			if _, err := s.pool.Exec(ctx, `ANALYZE `+tc.table); err != nil {
				t.Fatal(err)
			}
			fill("later-", waiting, 0, 50000)
			conn, done := genericPlanConn(ctx, t, s)
			defer done()
			if _, err := conn.Exec(ctx, `PREPARE stale_claim AS `+tc.claim); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE stale_claim`) }()
			if p := explainExecute(ctx, t, conn, "stale_claim", tc.args); strings.Contains(p, "Index Scan using "+tc.wide+" on") {
				t.Errorf("the claim reads a key's work through %s, every waiting row of the priority:\n%s", tc.wide, p)
			}
		})
	}
}

// The store analyzes the runs table too once it has grown, so the plans
// its connections made on the new table, which read one run through an
// index of the whole namespace's runs (every workflow task's write read
// all the runs of its type), are replaced by plans that find the run by
// its key or its workflow id.
func TestRunLookUpsUseTheirKeysOnceTheTableHasGrown(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 2)
	insert := func(from, to int) {
		t.Helper()
		var writes []store.Write
		for i := from; i < to; i++ {
			writes = append(writes, store.InsertRun{Run: store.Run{Namespace: "ns", RunID: fmt.Sprintf("run-%d", i),
				WorkflowID: fmt.Sprintf("wf-%d", i), WorkflowType: "order", TaskQueue: "q", Fingerprint: "f",
				Status: store.RunRunning, StartedAt: time.Now()}})
		}
		if _, err := s.Apply(ctx, writes); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, 20)
	conn, done := genericPlanConn(ctx, t, s)
	defer done()
	statements := []struct {
		name, sql, key string
		args           int
	}{
		{"append_events", appendEventsSQL, "runs_namespace_run_id_key", 20},
		{"get_run", getRunSQL, "runs_namespace_run_id_key", 2},
		{"latest_run", latestRunSQL, "runs_by_workflow", 2},
	}
	for _, st := range statements {
		if _, err := conn.Exec(ctx, `PREPARE `+st.name+` AS `+st.sql); err != nil {
			t.Fatalf("prepare %s: %v", st.name, err)
		}
		defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE `+st.name) }()
		t.Logf("%s on 20 runs:\n%s", st.name, explainExecute(ctx, t, conn, st.name, st.args))
	}
	insert(20, analyzeFirst)
	select {
	case <-s.runStats.done:
	case <-time.After(time.Minute):
		t.Fatal("no analyze of runs within a minute")
	}
	for _, st := range statements {
		p := explainExecute(ctx, t, conn, st.name, st.args)
		if !strings.Contains(p, st.key) {
			t.Errorf("%s: the generic plan on the analyzed table does not use %s:\n%s", st.name, st.key, p)
		}
		for _, wide := range []string{"runs_by_type", "runs_by_namespace", "runs_by_status"} {
			if strings.Contains(p, wide) {
				t.Errorf("%s: the generic plan on the analyzed table reads through %s:\n%s", st.name, wide, p)
			}
		}
	}
}
