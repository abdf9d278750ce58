package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/store"
)

var _ store.WaitingStore = (*Store)(nil)

// noWaitDeadline is the wait_deadline of work that may wait for ever.
const noWaitDeadline = math.MaxInt64

// waitDeadlineSQL is store.WaitingDeadline in SQL over a row's timeouts and
// scheduled_at, with its ready time given by readyAt (a column or a
// parameter), and no deadline read as noWaitDeadline. Only a migration and
// a retry's update evaluate it: the deadline is kept in its own column,
// wait_deadline, so a commit's index upkeep parses no JSON.
func waitDeadlineSQL(readyAt string) string {
	return `min(
	CASE WHEN json_extract(timeouts, '$.schedule_to_close') > 0
		THEN scheduled_at + json_extract(timeouts, '$.schedule_to_close') ELSE 9223372036854775807 END,
	CASE WHEN json_extract(timeouts, '$.schedule_to_start') > 0
		THEN ` + readyAt + ` + json_extract(timeouts, '$.schedule_to_start') ELSE 9223372036854775807 END)`
}

// waitDeadline is a's wait_deadline.
func waitDeadline(a *store.Activity) int64 {
	if d := store.WaitingDeadline(a); !d.IsZero() {
		return d.UnixNano()
	}
	return noWaitDeadline
}

// waitingMigration gives activities the indexes a server running alone
// pages its spilled work and finds its deadlines by: only spilled
// activities (inserted with InsertActivity.Spilled) enter them, so work the
// server holds in memory costs its commits one small index, activities_held,
// as activities_open (dropped) did. Activities already open stay held: the
// first start after the upgrade loads them whole, as before. The table is
// rebuilt so that the new columns sit before the bulky ones (a column added
// by ALTER TABLE would land after the payload).
var waitingMigration = `CREATE TABLE activities_next (
		seq             INTEGER PRIMARY KEY,
		namespace       TEXT NOT NULL,
		id              TEXT NOT NULL,
		task_queue      TEXT NOT NULL,
		activity_type   TEXT NOT NULL,
		node            TEXT NOT NULL,
		fingerprint     TEXT NOT NULL,
		timeouts        TEXT NOT NULL,
		retry           TEXT NOT NULL,
		state           TEXT NOT NULL,
		attempt         INTEGER NOT NULL,
		scheduled_at    INTEGER NOT NULL,
		started_at      INTEGER NOT NULL,
		ready_at        INTEGER NOT NULL,
		closed_at       INTEGER NOT NULL,
		priority        INTEGER NOT NULL DEFAULT 3,
		fairness_key    TEXT NOT NULL DEFAULT '',
		fairness_weight INTEGER NOT NULL DEFAULT 1,
		concurrency_key TEXT NOT NULL DEFAULT '',
		schedule_id     TEXT NOT NULL DEFAULT '',
		schedule_time   INTEGER NOT NULL DEFAULT 0,
		traceparent     TEXT NOT NULL DEFAULT '',
		tracestate      TEXT NOT NULL DEFAULT '',
		wait_deadline   INTEGER NOT NULL DEFAULT 9223372036854775807,
		spilled         INTEGER NOT NULL DEFAULT 0,
		failure         TEXT,
		heartbeat       BLOB,
		result          BLOB,
		payload         BLOB,
		UNIQUE (namespace, id)
	) STRICT;
	INSERT INTO activities_next (seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, fairness_key, fairness_weight,
		concurrency_key, schedule_id, schedule_time, traceparent, tracestate, wait_deadline, failure, heartbeat, result, payload)
		SELECT seq, namespace, id, task_queue, activity_type, node, fingerprint, timeouts, retry,
		state, attempt, scheduled_at, started_at, ready_at, closed_at, priority, fairness_key, fairness_weight,
		concurrency_key, schedule_id, schedule_time, traceparent, tracestate,
		CASE WHEN state = 'scheduled' THEN ` + waitDeadlineSQL("ready_at") + ` ELSE 9223372036854775807 END,
		failure, heartbeat, result, payload
		FROM activities ORDER BY seq;
	DROP TABLE activities;
	ALTER TABLE activities_next RENAME TO activities;
	CREATE INDEX activities_by_state ON activities (namespace, state, seq);
	CREATE INDEX activities_closed ON activities (namespace, closed_at)
		WHERE state IN ('completed', 'failed', 'canceled', 'timed_out');
	CREATE INDEX activities_waiting ON activities
		(namespace, task_queue, activity_type, node, priority, fairness_key, ready_at, seq) WHERE state = 'scheduled' AND spilled = 1;
	CREATE INDEX activities_waiting_deadline ON activities (wait_deadline, seq) WHERE state = 'scheduled' AND spilled = 1;
	CREATE INDEX activities_held ON activities (seq) WHERE state IN ('scheduled', 'running') AND spilled = 0`

// CountWaiting implements store.WaitingStore. The lanes are found by one
// index seek each, then each lane is counted on its own: a bare count(*)
// over an index range decodes no columns, where one GROUP BY over all rows
// would decode six per row, several times the cost at a million rows.
func (s *Store) CountWaiting(ctx context.Context, withBytes bool) ([]store.LaneCount, error) {
	var out []store.LaneCount
	for last := int64(0); ; {
		// Past every row of the last lane, so the seek lands on the next
		// lane instead of stepping through this one's rows.
		var id int64
		err := s.reader.QueryRowContext(ctx, `SELECT lane FROM activities INDEXED BY activities_waiting
			WHERE state = 'scheduled' AND lane > 0 AND lane > ? ORDER BY lane LIMIT 1`, last).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("count waiting activities: find lanes: %w", err)
		}
		last = id
		lane, ok := s.lanes.lane(id)
		if !ok {
			return nil, fmt.Errorf("count waiting activities: lane %d is not in table lanes", id)
		}
		c := store.LaneCount{Lane: lane}
		var ready int64
		if err := s.reader.QueryRowContext(ctx, `SELECT count(*), min(ready_at) FROM activities INDEXED BY activities_waiting
			WHERE `+laneWhere, id).Scan(&c.Count, &ready); err != nil {
			return nil, fmt.Errorf("count waiting activities: %w", err)
		}
		c.OldestReady = store.FromUnixNanos(ready)
		if withBytes {
			if err := s.reader.QueryRowContext(ctx, `SELECT sum(coalesce(length(payload), 0)) FROM activities
				INDEXED BY activities_waiting WHERE `+laneWhere, id).Scan(&c.Bytes); err != nil {
				return nil, fmt.Errorf("count waiting activities: payload bytes: %w", err)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.LaneCount) int { return compareLanes(a.Lane, b.Lane) })
	return out, nil
}

// compareLanes orders lanes by their fields, in the order they are declared.
func compareLanes(a, b store.Lane) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.TaskQueue, b.TaskQueue),
		cmp.Compare(a.ActivityType, b.ActivityType), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(a.FairnessKey, b.FairnessKey))
}

// WaitingBytes implements store.WaitingStore.
func (s *Store) WaitingBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT namespace, sum(coalesce(length(payload), 0)) FROM activities
		WHERE state = 'scheduled' AND lane > 0 GROUP BY namespace`)
	if err != nil {
		return nil, fmt.Errorf("sum waiting payload bytes: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int64)
	for rows.Next() {
		var (
			ns string
			n  int64
		)
		if err := rows.Scan(&ns, &n); err != nil {
			return nil, fmt.Errorf("sum waiting payload bytes: %w", err)
		}
		if n > 0 {
			out[ns] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sum waiting payload bytes: %w", err)
	}
	return out, nil
}

// laneWhere selects one lane's scheduled rows through activities_waiting.
// Its one argument is the lane's id.
const laneWhere = `state = 'scheduled' AND lane > 0 AND lane = ?`

// laneOf is l with its priority as stored.
func laneOf(l store.Lane) store.Lane {
	l.Priority = store.EffectivePriority(l.Priority)
	return l
}

// PageWaiting implements store.WaitingStore.
func (s *Store) PageWaiting(ctx context.Context, p store.WaitingPage) ([]store.Activity, time.Time, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 256
	}
	what := fmt.Sprintf("page waiting activities of %s/%s in namespace %q", p.TaskQueue, p.ActivityType, p.Namespace)
	id, ok := s.lanes.id(laneOf(p.Lane))
	if !ok {
		return nil, time.Time{}, nil // nothing was ever spilled into it
	}
	args := []any{id, store.UnixNanos(p.Now), store.UnixNanos(p.After.At), p.After.Seq, limit}
	page, err := s.queryActivities(ctx, what, 0, `SELECT `+store.ActivityColumnsInline(p.Inline)+`
		FROM activities INDEXED BY activities_waiting WHERE `+laneWhere+` AND ready_at <= ? AND (ready_at, seq) > (?, ?)
		ORDER BY ready_at, seq LIMIT ?`, args...)
	if err != nil || len(page) == limit {
		return page, time.Time{}, err
	}
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, `SELECT min(ready_at) FROM activities INDEXED BY activities_waiting
		WHERE `+laneWhere+` AND ready_at > ?`, id, store.UnixNanos(p.Now)).Scan(&next); err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: next ready time: %w", what, err)
	}
	if !next.Valid {
		return page, time.Time{}, nil
	}
	return page, store.FromUnixNanos(next.Int64), nil
}

// ExpiredWaiting implements store.WaitingStore.
func (s *Store) ExpiredWaiting(ctx context.Context, now time.Time, after store.WaitingCursor, limit int) ([]store.Activity, error) {
	if limit <= 0 {
		limit = 256
	}
	at := store.UnixNanos(after.At)
	return s.queryActivities(ctx, "find expired waiting activities", 0, `SELECT `+
		store.ActivityColumnsWithoutPayloads(`json_remove(failure, '$.details')`)+`
		FROM activities INDEXED BY activities_waiting_deadline
		WHERE state = 'scheduled' AND lane > 0 AND wait_deadline <= ? AND (wait_deadline, seq) > (?, ?)
		ORDER BY wait_deadline, seq LIMIT ?`, store.UnixNanos(now), at, after.Seq, limit)
}

// NextWaitingDeadline implements store.WaitingStore.
func (s *Store) NextWaitingDeadline(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, `SELECT min(wait_deadline)
		FROM activities INDEXED BY activities_waiting_deadline
		WHERE state = 'scheduled' AND lane > 0 AND wait_deadline > ? AND wait_deadline < 9223372036854775807`,
		store.UnixNanos(now)).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("find the next waiting deadline: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return store.FromUnixNanos(next.Int64), true, nil
}

// HeldActivities implements store.WaitingStore.
func (s *Store) HeldActivities(ctx context.Context, inline int) ([]store.Activity, error) {
	return s.queryActivities(ctx, "load held activities", 0, `SELECT `+store.ActivityColumnsInline(inline)+`
		FROM activities INDEXED BY activities_held WHERE state IN ('scheduled', 'running') AND lane = 0 ORDER BY seq`)
}
