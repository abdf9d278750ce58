package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aion-run/aion/internal/store"
)

// writeStmts are prepared once on the writer connection and bound into each
// transaction, so a batch of thousands of writes parses no SQL.
type writeStmts struct {
	insert, insertNew, attempt, endActivity, closeActivity, bump *sql.Stmt
	insertRun, insertEvent, appendRun                            *sql.Stmt
}

func (w *writeStmts) close() error {
	var errs []error
	for _, st := range []*sql.Stmt{w.insert, w.insertNew, w.attempt, w.endActivity, w.closeActivity, w.bump, w.insertRun, w.insertEvent, w.appendRun} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

func (s *Store) prepare(ctx context.Context) error {
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = s.writer.PrepareContext(ctx, q)
		return st
	}
	// Both inserts name the same columns, in this order.
	const insertInto = `INSERT INTO activities (namespace, id, task_queue, activity_type, node, payload,
		fingerprint, timeouts, retry, state, attempt, result, failure, heartbeat,
		scheduled_at, started_at, ready_at, closed_at, priority,
		fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate, wait_deadline, lane)`
	s.stmts.insert = prep(insertInto + `
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, id) DO NOTHING`)
	// A newly scheduled activity binds seven parameters fewer: its state,
	// attempt, result, failure, heartbeat and start and close times are
	// known.
	s.stmts.insertNew = prep(insertInto + `
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'scheduled', 0, NULL, NULL, NULL, ?, 0, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, id) DO NOTHING`)
	s.stmts.attempt = prep(`INSERT INTO attempts (namespace, activity_id, number, worker_id, node, started_at, ended_at, outcome, failure)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, activity_id, number) DO UPDATE SET
			worker_id = excluded.worker_id, node = excluded.node, started_at = excluded.started_at,
			ended_at = excluded.ended_at, outcome = excluded.outcome, failure = excluded.failure`)
	// Both statements that end an attempt set the same columns first, and
	// change only an open activity.
	const (
		endSet = `UPDATE activities SET state = ?, attempt = max(attempt, ?),
		started_at = CASE WHEN started_at = 0 THEN ? ELSE started_at END,
		result = ?, failure = ?, heartbeat = coalesce(?, heartbeat), ready_at = ?, closed_at = ?`
		endWhere = `
		WHERE namespace = ? AND id = ? AND state NOT IN ('completed', 'failed', 'canceled', 'timed_out')`
	)
	s.stmts.endActivity = prep(endSet + `,
		wait_deadline = CASE WHEN ? = 'scheduled' THEN ` + waitDeadlineSQL("?") + ` ELSE wait_deadline END` + endWhere)
	// An attempt that closes its activity is kept in the activity's row
	// (see closingAttemptMigration), and the deadline column is left as
	// it is: a closed activity never waits again.
	s.stmts.closeActivity = prep(endSet + `,
		closing_number = ?, closing_worker_id = ?, closing_node = ?, closing_started_at = ?, closing_ended_at = ?,
		closing_outcome = ?, closing_failure = ?` + endWhere)
	s.stmts.bump = prep(bumpSQL)
	s.stmts.insertRun = prep(insertRunSQL)
	s.stmts.insertEvent = prep(insertEventSQL)
	s.stmts.appendRun = prep(appendRunSQL)
	if err != nil {
		return fmt.Errorf("prepare statements: %w", err)
	}
	return nil
}

// Apply implements store.ActivityStore.
func (s *Store) Apply(ctx context.Context, writes []store.Write) ([]bool, error) {
	for i, w := range writes {
		if err := store.ValidateWrite(w); err != nil {
			return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, err)
		}
		if err := store.CheckAlone(w); err != nil {
			return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, err)
		}
	}
	changed := make([]bool, len(writes))
	var nChanged, nInserted int
	var newLanes map[store.Lane]int64 // lanes this transaction created, known once it commits
	var enc policyEncoder
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("apply %d writes: %w", len(writes), err)
	}
	defer tx.Rollback()
	insert := tx.StmtContext(ctx, s.stmts.insert)
	insertNew := tx.StmtContext(ctx, s.stmts.insertNew)
	attempt := tx.StmtContext(ctx, s.stmts.attempt)
	endActivity := tx.StmtContext(ctx, s.stmts.endActivity)
	closeActivity := tx.StmtContext(ctx, s.stmts.closeActivity)
	runs := runStmts{
		insert: tx.StmtContext(ctx, s.stmts.insertRun),
		event:  tx.StmtContext(ctx, s.stmts.insertEvent),
		append: tx.StmtContext(ctx, s.stmts.appendRun),
	}
	for i, w := range writes {
		var res sql.Result
		switch w := w.(type) {
		case store.InsertActivity:
			a := w.Activity
			var lane int64
			if w.Spilled {
				if lane, err = s.laneID(ctx, tx, store.LaneOf(&a), &newLanes); err != nil {
					break
				}
			}
			timeouts, retry := enc.timeouts(a.Timeouts), enc.retry(a.Retry)
			if isNew(&a) {
				res, err = insertNew.ExecContext(ctx, a.Namespace, a.ID, a.TaskQueue, a.ActivityType, a.Node, a.Payload,
					a.Fingerprint, timeouts, retry, store.UnixNanos(a.ScheduledAt), store.UnixNanos(a.ReadyAt),
					store.EffectivePriority(a.Priority), a.Flow.FairnessKey, store.EffectiveWeight(a.Flow.FairnessWeight),
					a.Flow.ConcurrencyKey, a.Origin.ScheduleID, store.UnixNanos(a.Origin.Time), a.Trace.Parent, a.Trace.State,
					waitDeadline(&a), lane)
				break
			}
			res, err = insert.ExecContext(ctx, a.Namespace, a.ID, a.TaskQueue, a.ActivityType, a.Node, a.Payload,
				a.Fingerprint, timeouts, retry, string(a.State), a.Attempt, a.Result,
				failureJSON(a.Failure), a.HeartbeatDetails,
				store.UnixNanos(a.ScheduledAt), store.UnixNanos(a.StartedAt), store.UnixNanos(a.ReadyAt), store.UnixNanos(a.ClosedAt),
				store.EffectivePriority(a.Priority), a.Flow.FairnessKey, store.EffectiveWeight(a.Flow.FairnessWeight),
				a.Flow.ConcurrencyKey, a.Origin.ScheduleID, store.UnixNanos(a.Origin.Time), a.Trace.Parent, a.Trace.State,
				waitDeadline(&a), lane)
		case store.EndAttempt:
			if at := w.Attempt; at != nil && w.State.Terminal() {
				res, err = closeActivity.ExecContext(ctx, string(w.State), at.Number, store.UnixNanos(w.StartedAt), w.Result,
					failureJSON(w.ActivityFailure), w.HeartbeatDetails, store.UnixNanos(w.ReadyAt), store.UnixNanos(w.ClosedAt),
					at.Number, int64(at.WorkerID), at.Node, store.UnixNanos(at.StartedAt), store.UnixNanos(at.EndedAt),
					string(at.Outcome), failureJSON(at.Failure), w.Namespace, w.ID)
				break
			}
			number := 0
			if w.Attempt != nil {
				number = w.Attempt.Number
			}
			res, err = endActivity.ExecContext(ctx, string(w.State), number, store.UnixNanos(w.StartedAt), w.Result,
				failureJSON(w.ActivityFailure), w.HeartbeatDetails, store.UnixNanos(w.ReadyAt), store.UnixNanos(w.ClosedAt),
				string(w.State), store.UnixNanos(w.ReadyAt), w.Namespace, w.ID)
			if err == nil && w.Attempt != nil {
				if n, _ := res.RowsAffected(); n == 1 {
					at := w.Attempt
					_, err = attempt.ExecContext(ctx, w.Namespace, w.ID, at.Number, int64(at.WorkerID), at.Node,
						store.UnixNanos(at.StartedAt), store.UnixNanos(at.EndedAt), string(at.Outcome), failureJSON(at.Failure))
				}
			}
		case store.InsertRun:
			res, err = runs.insertRun(ctx, w)
		case store.AppendEvents:
			res, err = runs.appendEvents(ctx, w)
		default:
			err = fmt.Errorf("unknown write %T", w)
		}
		if err != nil {
			return nil, fmt.Errorf("apply %d writes: write %d (%T): %w", len(writes), i, w, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, err)
		}
		changed[i] = n > 0
		if changed[i] {
			nChanged++
			if _, ok := w.(store.InsertActivity); ok {
				nInserted++
			}
		}
	}
	c, err := bump(ctx, tx.StmtContext(ctx, s.stmts.bump), nChanged, nInserted)
	if err != nil {
		return nil, fmt.Errorf("apply %d writes: %w", len(writes), err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("apply %d writes: commit: %w", len(writes), err)
	}
	// After the commit is durable and before any write is acknowledged.
	s.mark.advance(c)
	s.lanes.add(newLanes)
	return changed, nil
}

// policyEncoder gives the JSON column forms of timeouts and retry policies,
// encoding each only when it differs from the one before: the activities
// of one batch mostly share both.
type policyEncoder struct {
	t            store.Timeouts
	r            store.RetryPolicy
	tJSON, rJSON string
	tSeen, rSeen bool
}

func (e *policyEncoder) timeouts(t store.Timeouts) string {
	if !e.tSeen || t != e.t {
		b, _ := json.Marshal(t) // durations always encode
		e.t, e.tJSON, e.tSeen = t, string(b), true
	}
	return e.tJSON
}

func (e *policyEncoder) retry(r store.RetryPolicy) string {
	if !e.rSeen || r.InitialInterval != e.r.InitialInterval || r.BackoffCoefficient != e.r.BackoffCoefficient ||
		r.MaximumInterval != e.r.MaximumInterval || r.MaximumAttempts != e.r.MaximumAttempts ||
		!slices.Equal(r.NonRetryableErrorTypes, e.r.NonRetryableErrorTypes) {
		b, _ := json.Marshal(r) // a retry policy always encodes
		e.r, e.rJSON, e.rSeen = r, string(b), true
		e.r.NonRetryableErrorTypes = slices.Clone(r.NonRetryableErrorTypes)
	}
	return e.rJSON
}

// isNew reports whether a is as Schedule makes it: scheduled, never
// started, with nothing recorded of any attempt, so insertNew fits it.
func isNew(a *store.Activity) bool {
	return a.State == store.StateScheduled && a.Attempt == 0 && a.Result == nil && a.Failure == nil &&
		a.HeartbeatDetails == nil && a.StartedAt.IsZero() && a.ClosedAt.IsZero()
}

// GetActivity implements store.ActivityStore.
func (s *Store) GetActivity(ctx context.Context, namespace, id string) (store.Activity, error) {
	a, err := scanActivity(s.reader.QueryRowContext(ctx,
		`SELECT `+store.ActivityColumns+` FROM activities WHERE namespace = ? AND id = ?`, namespace, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Activity{}, fmt.Errorf("get activity %q in namespace %q: %w", id, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Activity{}, fmt.Errorf("get activity %q in namespace %q: %w", id, namespace, err)
	}
	return a, nil
}

// ListAttempts implements store.ActivityStore: the attempts table's
// records, and the activity's closing attempt from its row.
func (s *Store) ListAttempts(ctx context.Context, namespace, id string) ([]store.Attempt, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT number, worker_id, node, started_at, ended_at, outcome, failure, 0
		FROM attempts WHERE namespace = ? AND activity_id = ?
		UNION ALL
		SELECT closing_number, closing_worker_id, closing_node, closing_started_at, closing_ended_at, closing_outcome,
			closing_failure, 1 FROM activities WHERE namespace = ? AND id = ? AND closing_number > 0
		ORDER BY 1, 8`, namespace, id, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("list attempts of %q in namespace %q: %w", id, namespace, err)
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		var (
			at             store.Attempt
			worker         int64
			started, ended int64
			outcome        string
			failure        []byte
			fromRow        bool
		)
		if err := rows.Scan(&at.Number, &worker, &at.Node, &started, &ended, &outcome, &failure, &fromRow); err != nil {
			return nil, fmt.Errorf("list attempts of %q in namespace %q: %w", id, namespace, err)
		}
		at.WorkerID = uint64(worker)
		at.StartedAt, at.EndedAt = store.FromUnixNanos(started), store.FromUnixNanos(ended)
		at.Outcome = store.AttemptOutcome(outcome)
		if at.Failure, err = store.DecodeFailure(failure); err != nil {
			return nil, fmt.Errorf("list attempts of %q in namespace %q: %w", id, namespace, err)
		}
		out = store.AppendAttempt(out, at, fromRow)
	}
	return out, rows.Err()
}

// closingAttemptMigration gives activities the record of the attempt that
// closed them, kept in the row instead of the attempts table: a close is
// then one row's update, not also an insert into a second tree, which
// cost the throughput figures about a twentieth. The attempts table keeps
// the attempts that did not close their activity (those a retry followed).
// The columns land after the bulky ones without a rebuild: only a listing
// of attempts reads them.
const closingAttemptMigration = `ALTER TABLE activities ADD COLUMN closing_number INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE activities ADD COLUMN closing_worker_id INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE activities ADD COLUMN closing_node TEXT NOT NULL DEFAULT '';
	ALTER TABLE activities ADD COLUMN closing_started_at INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE activities ADD COLUMN closing_ended_at INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE activities ADD COLUMN closing_outcome TEXT NOT NULL DEFAULT '';
	ALTER TABLE activities ADD COLUMN closing_failure TEXT`

// ListActivities implements store.ActivityStore.
func (s *Store) ListActivities(ctx context.Context, f store.ActivityFilter) ([]store.Activity, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	cols := store.ActivityColumns
	if f.OmitPayloads {
		cols = store.ActivityColumnsWithoutPayloads(`json_remove(failure, '$.details')`)
	}
	// One arm per state, each read newest first from activities_by_state,
	// merged by seq: SQLite merges ordered arms of a UNION ALL, so a listing
	// without a state filter never sorts all of a namespace's rows.
	states := store.ActivityStates
	if f.State != "" {
		states = []store.ActivityState{f.State}
	}
	var q strings.Builder
	var args []any
	for i, st := range states {
		if i > 0 {
			q.WriteString(` UNION ALL `)
		}
		q.WriteString(`SELECT ` + cols + ` FROM activities WHERE namespace = ? AND state = ?`)
		args = append(args, f.Namespace, string(st))
		if f.ActivityType != "" {
			q.WriteString(` AND activity_type = ?`)
			args = append(args, f.ActivityType)
		}
		if f.Before > 0 {
			q.WriteString(` AND seq < ?`)
			args = append(args, f.Before)
		}
	}
	q.WriteString(` ORDER BY seq DESC LIMIT ?`)
	args = append(args, limit)
	return s.queryActivities(ctx, "list activities", f.MaxBytes, q.String(), args...)
}

// OpenActivities implements store.ActivityStore. The engine reads waiting
// work through store.WaitingStore instead, so no index serves this read:
// it scans the table.
func (s *Store) OpenActivities(ctx context.Context, inline int) ([]store.Activity, error) {
	return s.queryActivities(ctx, "load open activities", 0,
		`SELECT `+store.ActivityColumnsInline(inline)+` FROM activities WHERE state IN ('scheduled', 'running') ORDER BY seq`)
}

// queryActivities reads the activities q selects; with maxBytes above 0 it
// stops after the one that takes their total Size past it.
func (s *Store) queryActivities(ctx context.Context, what string, maxBytes int, q string, args ...any) ([]store.Activity, error) {
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var (
		out []store.Activity
		row store.ActivityRow // one for every row, so it decodes only what changes
	)
	size := 0
	for rows.Next() {
		a, err := scanActivityInto(&row, rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, a)
		if size += a.Size(); maxBytes > 0 && size > maxBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// failureJSON is the TEXT form of f for a STRICT column; nil is NULL.
func failureJSON(f *store.Failure) any {
	if b := store.EncodeFailure(f); b != nil {
		return string(b)
	}
	return nil
}

func scanActivity(row scanner) (store.Activity, error) {
	var r store.ActivityRow
	return scanActivityInto(&r, row)
}

// scanActivityInto is scanActivity through r, which may hold the previous row.
func scanActivityInto(r *store.ActivityRow, row scanner) (store.Activity, error) {
	if err := row.Scan(r.Dest()...); err != nil {
		return store.Activity{}, err
	}
	return r.Decode()
}
