package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var insertActivitySQL = `INSERT INTO activities (namespace, id, task_queue, activity_type, node, payload,
	fingerprint, timeouts, retry, state, attempt, result, failure, heartbeat,
	scheduled_at, started_at, ready_at, closed_at, wait_deadline, priority,
	fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11, $12, $13::jsonb, $14, $15, $16, $17, $18,
		` + waitDeadline("$8::jsonb", "$15::bigint", "$17::bigint") + `, $19, $20, $21, $22, $23, $24, $25, $26)
	ON CONFLICT (namespace, id) DO NOTHING`

// insertStartedSQL inserts a new activity running its first attempt on
// worker $21 (node label $22) of server $20 from $23, as claimSQL would
// leave it, but only while that server is a live member: the key-share lock
// on its row makes a reap or a leave (which lock it for update) wait for
// the insert's commit and then hand the activity back, or the insert, once
// the server is gone, insert nothing. Its parameters $1..$19 are
// insertActivitySQL's less state, attempt, result, failure, heartbeat,
// started_at and closed_at (those of a new activity), renumbered.
var insertStartedSQL = `WITH member AS (
		SELECT id FROM servers WHERE id = $20::bigint AND lease_until >= ` + dbNow + ` FOR KEY SHARE
	)
	INSERT INTO activities (namespace, id, task_queue, activity_type, node, payload,
		fingerprint, timeouts, retry, state, attempt,
		scheduled_at, started_at, ready_at, closed_at, wait_deadline, priority,
		fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate,
		owner, attempt_started_at, attempt_worker, attempt_node)
	SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bytea, $7::text, $8::jsonb, $9::jsonb, 'running', 1,
		$10::bigint, 0, $11::bigint, 0, ` + waitDeadline("$8::jsonb", "$10::bigint", "$11::bigint") + `, $12::smallint,
		$13::text, $14::integer, $15::text, $16::text, $17::bigint, $18::text, $19::text,
		member.id, $23::bigint, $21::bigint, $22::text
	FROM member
	ON CONFLICT (namespace, id) DO NOTHING`

// endActivityUpdate moves an open activity, setting the columns set adds
// too; $1..$11 are shared by every EndAttempt statement. A closed or
// missing activity matches no row, and so does one owned by another server
// than $11 when $11 is set. The activity leaves its owner either way: it is
// closed, or waits for its retry; a retry of an activity another server
// asked to cancel is closed as canceled instead.
func endActivityUpdate(set string) string {
	return `UPDATE activities SET
		state = CASE WHEN $1 = 'scheduled' AND cancel_reason IS NOT NULL THEN 'canceled' ELSE $1 END,
		attempt = greatest(attempt, $2::integer),
		started_at = CASE WHEN started_at = 0 THEN $3::bigint ELSE started_at END,
		result = $4::bytea, heartbeat = coalesce($6::bytea, heartbeat), ready_at = $7::bigint,
		failure = CASE WHEN $1 = 'scheduled' AND cancel_reason IS NOT NULL
			THEN jsonb_build_object('message', cancel_reason, 'type', 'canceled', 'retryable', false) ELSE $5::jsonb END,
		closed_at = CASE WHEN $1 = 'scheduled' AND cancel_reason IS NOT NULL THEN ` + dbNow + ` ELSE $8::bigint END,
		wait_deadline = CASE WHEN $1 = 'scheduled' THEN ` + waitDeadline("timeouts", "scheduled_at", "$7::bigint") + ` ELSE wait_deadline END,
		owner = 0, cancel_reason = NULL` + set + `
	WHERE namespace = $9::text AND id = $10::text AND state NOT IN ('completed', 'failed', 'canceled', 'timed_out')
		AND ($11::bigint = 0 OR owner = $11::bigint)`
}

// endActivitySQL ends an activity without recording an attempt and returns
// how many activities it changed.
var endActivitySQL = `WITH up AS (` + endActivityUpdate("") + ` RETURNING 1)
	SELECT count(*) FROM up`

// endAttemptSQL ends an activity and, only if that changed it, records the
// attempt, in one statement so a whole Apply is one pipelined batch.
var endAttemptSQL = `WITH up AS (` + endActivityUpdate("") + ` RETURNING 1),
	att AS (
		INSERT INTO attempts (namespace, activity_id, number, worker_id, node, started_at, ended_at, outcome, failure)
		SELECT $9::text, $10::text, $12::integer, $13::bigint, $14::text, $15::bigint, $16::bigint, $17::text, $18::jsonb FROM up
		ON CONFLICT (namespace, activity_id, number) DO UPDATE SET
			worker_id = excluded.worker_id, node = excluded.node, started_at = excluded.started_at,
			ended_at = excluded.ended_at, outcome = excluded.outcome, failure = excluded.failure
	)
	SELECT count(*) FROM up`

// closeAttemptSQL closes an activity with the attempt that closed it, kept
// in the activity's row (see closingAttemptMigration): one row's update, no
// insert into attempts. Its parameters are endAttemptSQL's.
var closeAttemptSQL = `WITH up AS (` + endActivityUpdate(`,
		closing_number = $12::integer, closing_worker_id = $13::bigint, closing_node = $14::text,
		closing_started_at = $15::bigint, closing_ended_at = $16::bigint, closing_outcome = $17::text,
		closing_failure = $18::jsonb`) + ` RETURNING 1)
	SELECT count(*) FROM up`

// Apply implements store.ActivityStore. Every write is queued in one pgx
// batch that is one transaction: the writes run in order, each sees the ones
// before it, and the whole Apply, commit included, costs one round trip.
func (s *Store) Apply(ctx context.Context, writes []store.Write) ([]bool, error) {
	b := &pgx.Batch{}
	for i, w := range writes {
		if err := store.ValidateWrite(w); err != nil {
			return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, err)
		}
	}
	together := stretches(writes)
	for i := 0; i < len(writes); i++ {
		if st, ok := together[i]; ok {
			if err := queueStretch(b, writes[i:st.end], st.closes); err != nil {
				return nil, fmt.Errorf("apply %d writes: from write %d: %w", len(writes), i, dbErr(err))
			}
			i = st.end - 1
			continue
		}
		switch w := writes[i].(type) {
		case store.InsertActivity:
			a := w.Activity
			timeouts, err := json.Marshal(a.Timeouts)
			if err != nil {
				return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, dbErr(err))
			}
			retry, err := json.Marshal(a.Retry)
			if err != nil {
				return nil, fmt.Errorf("apply %d writes: write %d: %w", len(writes), i, dbErr(err))
			}
			if st := w.Start; st != nil {
				b.Queue(insertStartedSQL, a.Namespace, a.ID, a.TaskQueue, a.ActivityType, a.Node, a.Payload,
					a.Fingerprint, timeouts, retry, store.UnixNanos(a.ScheduledAt), store.UnixNanos(a.ReadyAt),
					store.EffectivePriority(a.Priority), a.Flow.FairnessKey, store.EffectiveWeight(a.Flow.FairnessWeight),
					a.Flow.ConcurrencyKey, a.Origin.ScheduleID, store.UnixNanos(a.Origin.Time), a.Trace.Parent, a.Trace.State,
					int64(st.Owner), int64(st.Worker), st.Node, store.UnixNanos(st.At))
				continue
			}
			b.Queue(insertActivitySQL, a.Namespace, a.ID, a.TaskQueue, a.ActivityType, a.Node, a.Payload,
				a.Fingerprint, timeouts, retry, string(a.State), a.Attempt, a.Result,
				store.EncodeFailure(a.Failure), a.HeartbeatDetails,
				store.UnixNanos(a.ScheduledAt), store.UnixNanos(a.StartedAt), store.UnixNanos(a.ReadyAt), store.UnixNanos(a.ClosedAt),
				store.EffectivePriority(a.Priority), a.Flow.FairnessKey, store.EffectiveWeight(a.Flow.FairnessWeight),
				a.Flow.ConcurrencyKey, a.Origin.ScheduleID, store.UnixNanos(a.Origin.Time), a.Trace.Parent, a.Trace.State)
		case store.EndAttempt:
			args := []any{string(w.State), 0, store.UnixNanos(w.StartedAt), w.Result,
				store.EncodeFailure(w.ActivityFailure), w.HeartbeatDetails, store.UnixNanos(w.ReadyAt), store.UnixNanos(w.ClosedAt),
				w.Namespace, w.ID, int64(w.Owner)}
			if at := w.Attempt; at != nil {
				args[1] = at.Number
				args = append(args, at.Number, int64(at.WorkerID), at.Node,
					store.UnixNanos(at.StartedAt), store.UnixNanos(at.EndedAt), string(at.Outcome), store.EncodeFailure(at.Failure))
				if w.State.Terminal() {
					b.Queue(closeAttemptSQL, args...)
				} else {
					b.Queue(endAttemptSQL, args...)
				}
			} else {
				b.Queue(endActivitySQL, args...)
			}
			if p := w.Post; p != nil {
				b.Queue(postStepCloseSQL, p.Namespace, p.RunID, p.Data, w.ID)
			}
		case store.InsertRun:
			queueInsertRun(b, w)
		case store.AppendEvents:
			queueAppendEvents(b, w)
		case store.PostRunEvent:
			b.Queue(postRunEventSQL, w.Event.Namespace, w.Event.RunID, w.Event.Data)
		default:
			return nil, fmt.Errorf("apply %d writes: write %d: unknown write %T", len(writes), i, w)
		}
	}
	// New work wakes every server once the transaction commits.
	work := workPayload(writes)
	if work != "" {
		b.Queue(`SELECT pg_notify('`+channelWork+`', $1)`, work)
	}
	changed := make([]bool, len(writes))
	inserted, newRuns := 0, 0 // activities and runs new to the store, counted as their results are read
	// A batch outside BEGIN runs as one implicit transaction ended by its
	// single Sync: all or nothing, like BEGIN … COMMIT, but one round trip
	// instead of three.
	err := func() error {
		br := s.pool.SendBatch(ctx, b)
		for i := 0; i < len(writes); i++ {
			if st, ok := together[i]; ok {
				n, err := readStretch(br, writes[i:st.end], changed[i:st.end])
				if err != nil {
					br.Close()
					return fmt.Errorf("writes %d to %d: %w", i, st.end-1, dbErr(err))
				}
				if !st.closes {
					inserted += n
				}
				i = st.end - 1
				continue
			}
			w := writes[i]
			var err error
			switch w.(type) {
			case store.InsertActivity:
				var tag pgconn.CommandTag
				tag, err = br.Exec()
				if changed[i] = tag.RowsAffected() > 0; changed[i] {
					inserted++
				}
			case store.EndAttempt, store.InsertRun, store.AppendEvents, store.PostRunEvent:
				var n int64
				err = br.QueryRow().Scan(&n)
				changed[i] = n > 0
				if _, ok := w.(store.InsertRun); ok && changed[i] {
					newRuns++
				}
				if e, ok := w.(store.EndAttempt); ok && err == nil && e.Post != nil {
					_, err = br.Exec()
				}
			}
			if err != nil {
				br.Close()
				return fmt.Errorf("write %d (%T): %w", i, w, dbErr(err))
			}
		}
		if work != "" {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return fmt.Errorf("announce new work: %w", dbErr(err))
			}
		}
		return br.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("apply %d writes: %w", len(writes), dbErr(err))
	}
	s.stats.inserted(inserted)
	s.runStats.inserted(newRuns)
	return changed, nil
}

// GetActivity implements store.ActivityStore.
func (s *Store) GetActivity(ctx context.Context, namespace, id string) (store.Activity, error) {
	a, err := scanActivity(s.pool.QueryRow(ctx,
		`SELECT `+store.ActivityColumns+` FROM activities WHERE namespace = $1 AND id = $2`, namespace, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Activity{}, fmt.Errorf("get activity %q in namespace %q: %w", id, namespace, store.ErrNotFound)
	}
	if err != nil {
		return store.Activity{}, fmt.Errorf("get activity %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	return a, nil
}

// ListAttempts implements store.ActivityStore: the attempts table's
// records, and the activity's closing attempt from its row.
func (s *Store) ListAttempts(ctx context.Context, namespace, id string) ([]store.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT number, worker_id, node, started_at, ended_at, outcome, failure, false
		FROM attempts WHERE namespace = $1 AND activity_id = $2
		UNION ALL
		SELECT closing_number, closing_worker_id, closing_node, closing_started_at, closing_ended_at, closing_outcome,
			closing_failure, true FROM activities WHERE namespace = $1 AND id = $2 AND closing_number > 0
		ORDER BY 1, 8`, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("list attempts of %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	// listed is an attempt and whether it came from the activity's row.
	type listed struct {
		at      store.Attempt
		fromRow bool
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (listed, error) {
		var (
			l              listed
			worker         int64
			started, ended int64
			outcome        string
			failure        []byte
		)
		if err := row.Scan(&l.at.Number, &worker, &l.at.Node, &started, &ended, &outcome, &failure, &l.fromRow); err != nil {
			return l, err
		}
		l.at.WorkerID = uint64(worker)
		l.at.StartedAt, l.at.EndedAt = store.FromUnixNanos(started), store.FromUnixNanos(ended)
		l.at.Outcome = store.AttemptOutcome(outcome)
		var err error
		l.at.Failure, err = store.DecodeFailure(failure)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	var out []store.Attempt
	for _, l := range all {
		out = store.AppendAttempt(out, l.at, l.fromRow)
	}
	return out, nil
}

// ListActivities implements store.ActivityStore.
func (s *Store) ListActivities(ctx context.Context, f store.ActivityFilter) ([]store.Activity, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	cols := store.ActivityColumns
	if f.OmitPayloads {
		cols = store.ActivityColumnsWithoutPayloads(`failure - 'details'`)
	}
	q := `SELECT ` + cols + ` FROM activities WHERE namespace = $1`
	args := []any{f.Namespace}
	if f.State != "" {
		args = append(args, string(f.State))
		q += fmt.Sprintf(` AND state = $%d`, len(args))
	}
	if f.ActivityType != "" {
		args = append(args, f.ActivityType)
		q += fmt.Sprintf(` AND activity_type = $%d`, len(args))
	}
	if f.Before > 0 {
		args = append(args, f.Before)
		q += fmt.Sprintf(` AND seq < $%d`, len(args))
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY seq DESC LIMIT $%d`, len(args))
	if f.MaxBytes > 0 {
		return s.queryActivitiesUpTo(ctx, "list activities", f.MaxBytes, q, args...)
	}
	return s.queryActivities(ctx, "list activities", q, args...)
}

// OpenActivities implements store.ActivityStore.
func (s *Store) OpenActivities(ctx context.Context, inline int) ([]store.Activity, error) {
	return s.queryActivities(ctx, "load open activities",
		`SELECT `+store.ActivityColumnsInline(inline)+` FROM activities WHERE state IN ('scheduled', 'running') ORDER BY seq`)
}

func (s *Store) queryActivities(ctx context.Context, what, q string, args ...any) ([]store.Activity, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, activityRow)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	return out, nil
}

// queryActivitiesUpTo is queryActivities that stops after the activity that
// takes the total Size past maxBytes.
func (s *Store) queryActivitiesUpTo(ctx context.Context, what string, maxBytes int, q string, args ...any) ([]store.Activity, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	defer rows.Close()
	var out []store.Activity
	size := 0
	for rows.Next() {
		a, err := activityRow(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, dbErr(err))
		}
		out = append(out, a)
		if size += a.Size(); size > maxBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	return out, nil
}

func scanActivity(row scanner) (store.Activity, error) {
	var r store.ActivityRow
	if err := row.Scan(r.Dest()...); err != nil {
		return store.Activity{}, err
	}
	return r.Decode()
}
