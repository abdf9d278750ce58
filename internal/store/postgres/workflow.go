package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// insertRunSQL records a new open run and, only if it was recorded, its
// events ($15, $16), in one statement; it returns how many runs it
// inserted. A run id taken in the namespace, or an open run of the
// workflow id (runs_open_workflow), conflicts and nothing is inserted.
// Concurrent inserts of one workflow id queue on that unique index: the
// first commits, the others then see the conflict, so exactly one wins.
const insertRunSQL = `WITH ins AS (
		INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status,
			fingerprint, parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length,
			started_at, closed_at, task_failure, failure, result, input, owner,
			priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate)
		VALUES ($1::text, $2::text, $3, $4, $5, $6, 'running', $7, $8, $9, $10, $11, cardinality($15::bigint[]),
			$12, $13, $14, $16::jsonb, $17, $18, $20::bigint, $21, $22, $23, $24, $25, $26, $27, $28)
		ON CONFLICT DO NOTHING
		RETURNING 1),
	ev AS (
		INSERT INTO events (namespace, run_id, seq, data)
		SELECT $1::text, $2::text, e.seq, e.data FROM unnest($15::bigint[], $19::bytea[]) AS e(seq, data)
		WHERE EXISTS (SELECT 1 FROM ins))
	SELECT count(*) FROM ins`

// appendEventsSQL moves an open run whose history is $3 events long to $4
// events and, only if it matched, records the events ($15, $16); it
// returns how many runs it changed. $5 is the build id (empty keeps it), $6
// whether to set the task failure to $7, $8 whether to close the run with
// status $9, result $10, failure $11, next run id $12 and closed time $13;
// a closed run has no owner and an empty inbox. $14, when not 0, matches
// only a run that server holds. Only if it matched, the inbox events $17
// are consumed and the events ($18 namespaces, $19 run ids, $20 data) are
// posted to those open runs' inboxes.
const appendEventsSQL = `WITH up AS (
		UPDATE runs SET history_length = $4::bigint,
			build_id = CASE WHEN $5::text = '' THEN build_id ELSE $5::text END,
			task_failure = CASE WHEN $6::boolean THEN $7::text ELSE task_failure END,
			status = CASE WHEN $8::boolean THEN $9::text ELSE status END,
			result = CASE WHEN $8::boolean THEN $10::bytea ELSE result END,
			failure = CASE WHEN $8::boolean THEN $11::jsonb ELSE failure END,
			next_run_id = CASE WHEN $8::boolean THEN $12::text ELSE next_run_id END,
			closed_at = CASE WHEN $8::boolean THEN $13::bigint ELSE closed_at END,
			owner = CASE WHEN $8::boolean THEN 0 ELSE owner END
		WHERE namespace = $1::text AND run_id = $2::text AND status = 'running' AND history_length = $3::bigint
			AND ($14::bigint = 0 OR owner = $14::bigint)
		RETURNING 1),
	ev AS (
		INSERT INTO events (namespace, run_id, seq, data)
		SELECT $1::text, $2::text, e.seq, e.data FROM unnest($15::bigint[], $16::bytea[]) AS e(seq, data)
		WHERE EXISTS (SELECT 1 FROM up)),
	consumed AS (
		DELETE FROM run_inbox WHERE namespace = $1::text AND run_id = $2::text AND EXISTS (SELECT 1 FROM up)
			AND (id = ANY($17::bigint[]) OR $8::boolean)),
	posted AS (
		INSERT INTO run_inbox (namespace, run_id, data)
		SELECT p.ns, p.rid, p.data FROM unnest($18::text[], $19::text[], $20::bytea[]) AS p(ns, rid, data)
		WHERE EXISTS (SELECT 1 FROM up)
			AND EXISTS (SELECT 1 FROM runs r WHERE r.namespace = p.ns AND r.run_id = p.rid AND r.status = 'running'))
	SELECT count(*) FROM up`

func queueInsertRun(b *pgx.Batch, w store.InsertRun) {
	r := w.Run
	seqs, data := store.EventColumns(w.Events)
	b.Queue(insertRunSQL, r.Namespace, r.RunID, r.WorkflowID, r.WorkflowType, r.TaskQueue, r.BuildID,
		r.Fingerprint, r.ParentWorkflowID, r.ParentRunID, r.ParentStep, r.NextRunID,
		store.UnixNanos(r.StartedAt), store.UnixNanos(r.ClosedAt), r.TaskFailure, seqs,
		store.EncodeFailure(r.Failure), r.Result, r.Input, data, int64(w.Owner),
		store.EffectivePriority(r.Priority), r.Flow.FairnessKey, store.EffectiveWeight(r.Flow.FairnessWeight), r.Flow.ConcurrencyKey,
		r.Origin.ScheduleID, store.UnixNanos(r.Origin.Time), r.Trace.Parent, r.Trace.State)
}

// queueAppendEvents queues w: an owned write applies only to a run its
// server holds.
func queueAppendEvents(b *pgx.Batch, w store.AppendEvents) {
	u := w.Update
	setFailure, taskFailure := u.TaskFailure != nil, ""
	if setFailure {
		taskFailure = *u.TaskFailure
	}
	seqs, data := store.EventColumns(w.Events)
	postNS, postRun, postData := postColumns(w.Post)
	b.Queue(appendEventsSQL, w.Namespace, w.RunID, w.After, w.After+int64(len(w.Events)),
		u.BuildID, setFailure, taskFailure, u.Status.Closed(), string(u.Status), u.Result, store.EncodeFailure(u.Failure),
		u.NextRunID, store.UnixNanos(u.ClosedAt), int64(w.Owner), seqs, data,
		nonNilIDs(w.Consume), postNS, postRun, postData)
}

// postRunEventSQL puts an event in an open run's inbox; it returns how many
// it put (0 when the run is not open).
const postRunEventSQL = `WITH ins AS (
		INSERT INTO run_inbox (namespace, run_id, data)
		SELECT $1::text, $2::text, $3::bytea
		WHERE EXISTS (SELECT 1 FROM runs WHERE namespace = $1::text AND run_id = $2::text AND status = 'running')
		RETURNING 1)
	SELECT count(*) FROM ins`

// postStepCloseSQL puts a step activity's close in its run's inbox when
// the activity is closed ($4 its id): queued after the activity's own
// write, so a write that did not close it posts nothing.
const postStepCloseSQL = `INSERT INTO run_inbox (namespace, run_id, data)
	SELECT $1::text, $2::text, $3::bytea
	WHERE EXISTS (SELECT 1 FROM runs WHERE namespace = $1::text AND run_id = $2::text AND status = 'running')
		AND EXISTS (SELECT 1 FROM activities WHERE namespace = $1::text AND id = $4::text
			AND state IN ('completed', 'failed', 'canceled', 'timed_out'))`

func nonNilIDs(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// postColumns splits run events into the arrays a statement binds.
func postColumns(evs []store.RunEvent) (ns, run []string, data [][]byte) {
	ns, run, data = make([]string, len(evs)), make([]string, len(evs)), make([][]byte, len(evs))
	for i, e := range evs {
		ns[i], run[i], data[i] = e.Namespace, e.RunID, e.Data
		if data[i] == nil {
			data[i] = []byte{}
		}
	}
	return ns, run, data
}

// getRunSQL reads run $2 of namespace $1.
const getRunSQL = `SELECT ` + store.RunColumns + ` FROM runs WHERE namespace = $1 AND run_id = $2`

// GetRun implements store.WorkflowStore.
func (s *Store) GetRun(ctx context.Context, namespace, runID string) (store.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, getRunSQL, namespace, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Run{}, fmt.Errorf("get run %q in namespace %q: %w", runID, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("get run %q in namespace %q: %w", runID, namespace, dbErr(err))
	}
	return r, nil
}

// latestRunSQL reads the open run of workflow $2 of namespace $1, else its
// newest. Both look-ups are one index probe: the open run through
// runs_open_workflow, else the highest seq through runs_by_workflow.
const latestRunSQL = `SELECT ` + store.RunColumns + ` FROM runs WHERE seq = coalesce(
		(SELECT seq FROM runs WHERE namespace = $1 AND workflow_id = $2 AND status = 'running'),
		(SELECT max(seq) FROM runs WHERE namespace = $1 AND workflow_id = $2))`

// LatestRun implements store.WorkflowStore.
func (s *Store) LatestRun(ctx context.Context, namespace, workflowID string) (store.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, latestRunSQL, namespace, workflowID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Run{}, fmt.Errorf("latest run of workflow %q in namespace %q: %w", workflowID, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("latest run of workflow %q in namespace %q: %w", workflowID, namespace, dbErr(err))
	}
	return r, nil
}

// ListRuns implements store.WorkflowStore.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var (
		where []string
		args  []any
	)
	add := func(col string, arg any) {
		args = append(args, arg)
		where = append(where, fmt.Sprintf(col, len(args)))
	}
	if f.Namespace != "" {
		add(`namespace = $%d`, f.Namespace)
	}
	if f.Status != "" {
		add(`status = $%d`, string(f.Status))
	}
	if f.WorkflowType != "" {
		add(`workflow_type = $%d`, f.WorkflowType)
	}
	if f.WorkflowID != "" {
		add(`workflow_id = $%d`, f.WorkflowID)
	}
	if f.Before > 0 {
		add(`seq < $%d`, f.Before)
	}
	q := `SELECT ` + store.RunColumnsWithoutPayloads + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY seq DESC LIMIT $%d`, len(args))
	return s.queryRuns(ctx, "list runs", q, args...)
}

// OpenRuns implements store.WorkflowStore.
func (s *Store) OpenRuns(ctx context.Context) ([]store.Run, error) {
	return s.queryRuns(ctx, "load open runs",
		`SELECT `+store.RunColumns+` FROM runs WHERE status = 'running' ORDER BY seq`)
}

// ReadHistory implements store.WorkflowStore. A run without events after
// after is told apart from a missing run, which is ErrNotFound.
func (s *Store) ReadHistory(ctx context.Context, namespace, runID string, after int64, limit int) ([]store.Event, error) {
	what := fmt.Sprintf("read history of run %q in namespace %q", runID, namespace)
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM events
		WHERE namespace = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, namespace, runID, after, lim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Event, error) {
		var e store.Event
		err := row.Scan(&e.Seq, &e.Data)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	if len(out) == 0 {
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM runs WHERE namespace = $1 AND run_id = $2`, namespace, runID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", what, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, dbErr(err))
		}
		return nil, nil
	}
	return out, nil
}

func (s *Store) queryRuns(ctx context.Context, what, q string, args ...any) ([]store.Run, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	return out, nil
}

func scanRun(row scanner) (store.Run, error) {
	var r store.RunRow
	if err := row.Scan(r.Dest()...); err != nil {
		return store.Run{}, err
	}
	return r.Decode()
}
