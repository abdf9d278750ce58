package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/aion-run/aion/internal/store"
)

// insertRunSQL records a new open run. A run id taken in the namespace, or
// an open run of the workflow id (runs_open_workflow), conflicts: nothing
// is inserted.
const insertRunSQL = `INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status,
	fingerprint, parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
	task_failure, failure, result, input, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time,
	traceparent, tracestate)
	VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT DO NOTHING`

const insertEventSQL = `INSERT INTO events (namespace, run_id, seq, data) VALUES (?, ?, ?, ?)`

// appendRunSQL moves an open run whose history is ?3 events long to ?4
// events and applies the update: ?5 the build id (empty keeps it), ?6 whether
// to set the task failure to ?7, ?8 whether to close the run with status
// ?9, result ?10, failure ?11, next run id ?12 and closed time ?13.
const appendRunSQL = `UPDATE runs SET history_length = ?4,
	build_id = CASE WHEN ?5 = '' THEN build_id ELSE ?5 END,
	task_failure = CASE WHEN ?6 THEN ?7 ELSE task_failure END,
	status = CASE WHEN ?8 THEN ?9 ELSE status END,
	result = CASE WHEN ?8 THEN ?10 ELSE result END,
	failure = CASE WHEN ?8 THEN ?11 ELSE failure END,
	next_run_id = CASE WHEN ?8 THEN ?12 ELSE next_run_id END,
	closed_at = CASE WHEN ?8 THEN ?13 ELSE closed_at END
	WHERE namespace = ?1 AND run_id = ?2 AND status = 'running' AND history_length = ?3`

// runStmts are the workflow write statements bound to one transaction.
type runStmts struct {
	insert, event, append *sql.Stmt
}

// insertRun inserts the run and, only if that inserted it, its events.
// The result reports whether the run was inserted.
func (st runStmts) insertRun(ctx context.Context, w store.InsertRun) (sql.Result, error) {
	r := w.Run
	res, err := st.insert.ExecContext(ctx, r.Namespace, r.RunID, r.WorkflowID, r.WorkflowType, r.TaskQueue, r.BuildID,
		r.Fingerprint, r.ParentWorkflowID, r.ParentRunID, r.ParentStep, r.NextRunID, int64(len(w.Events)),
		store.UnixNanos(r.StartedAt), store.UnixNanos(r.ClosedAt), r.TaskFailure, failureJSON(r.Failure), r.Result, r.Input,
		store.EffectivePriority(r.Priority), r.Flow.FairnessKey, store.EffectiveWeight(r.Flow.FairnessWeight), r.Flow.ConcurrencyKey,
		r.Origin.ScheduleID, store.UnixNanos(r.Origin.Time), r.Trace.Parent, r.Trace.State)
	if err != nil {
		return nil, err
	}
	if err := st.events(ctx, res, r.Namespace, r.RunID, w.Events); err != nil {
		return nil, err
	}
	return res, nil
}

// appendEvents applies the fenced update and, only if it matched the run,
// inserts the events. The result reports whether the run matched.
func (st runStmts) appendEvents(ctx context.Context, w store.AppendEvents) (sql.Result, error) {
	u := w.Update
	setFailure, taskFailure := u.TaskFailure != nil, ""
	if setFailure {
		taskFailure = *u.TaskFailure
	}
	res, err := st.append.ExecContext(ctx, w.Namespace, w.RunID, w.After, w.After+int64(len(w.Events)),
		u.BuildID, setFailure, taskFailure, u.Status.Closed(), string(u.Status), u.Result, failureJSON(u.Failure),
		u.NextRunID, store.UnixNanos(u.ClosedAt))
	if err != nil {
		return nil, err
	}
	if err := st.events(ctx, res, w.Namespace, w.RunID, w.Events); err != nil {
		return nil, err
	}
	return res, nil
}

// events inserts evs if res changed a row.
func (st runStmts) events(ctx context.Context, res sql.Result, namespace, runID string, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	seqs, data := store.EventColumns(evs)
	for i := range seqs {
		if _, err := st.event.ExecContext(ctx, namespace, runID, seqs[i], data[i]); err != nil {
			return fmt.Errorf("event %d: %w", seqs[i], err)
		}
	}
	return nil
}

// GetRun implements store.WorkflowStore.
func (s *Store) GetRun(ctx context.Context, namespace, runID string) (store.Run, error) {
	r, err := scanRun(s.reader.QueryRowContext(ctx,
		`SELECT `+store.RunColumns+` FROM runs WHERE namespace = ? AND run_id = ?`, namespace, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, fmt.Errorf("get run %q in namespace %q: %w", runID, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("get run %q in namespace %q: %w", runID, namespace, err)
	}
	return r, nil
}

// LatestRun implements store.WorkflowStore. Both lookups are one index
// probe: the open run through runs_open_workflow, else the highest seq
// through runs_by_workflow.
func (s *Store) LatestRun(ctx context.Context, namespace, workflowID string) (store.Run, error) {
	r, err := scanRun(s.reader.QueryRowContext(ctx, `SELECT `+store.RunColumns+` FROM runs WHERE seq = coalesce(
		(SELECT seq FROM runs WHERE namespace = ?1 AND workflow_id = ?2 AND status = 'running'),
		(SELECT max(seq) FROM runs WHERE namespace = ?1 AND workflow_id = ?2))`, namespace, workflowID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, fmt.Errorf("latest run of workflow %q in namespace %q: %w", workflowID, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("latest run of workflow %q in namespace %q: %w", workflowID, namespace, err)
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
	add := func(cond string, arg any) {
		where = append(where, cond)
		args = append(args, arg)
	}
	if f.Namespace != "" {
		add(`namespace = ?`, f.Namespace)
	}
	if f.Status != "" {
		add(`status = ?`, string(f.Status))
	}
	if f.WorkflowType != "" {
		add(`workflow_type = ?`, f.WorkflowType)
	}
	if f.WorkflowID != "" {
		add(`workflow_id = ?`, f.WorkflowID)
	}
	if f.Before > 0 {
		add(`seq < ?`, f.Before)
	}
	q := `SELECT ` + store.RunColumnsWithoutPayloads + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit)
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
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT seq, data FROM events
		WHERE namespace = ? AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, namespace, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		if err := rows.Scan(&e.Seq, &e.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(out) == 0 {
		var one int
		err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE namespace = ? AND run_id = ?`, namespace, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", what, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return out, nil
}

func (s *Store) queryRuns(ctx context.Context, what, q string, args ...any) ([]store.Run, error) {
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
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
