package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
)

var _ store.WaitingStore = (*Store)(nil)

// waitingDeadlineSQL is store.WaitingDeadline in SQL, with no deadline read
// as the largest integer; activities_waiting_deadline indexes this very
// expression, so queries must spell it the same way to use the index.
const waitingDeadlineSQL = `min(
	CASE WHEN json_extract(timeouts, '$.schedule_to_close') > 0
		THEN scheduled_at + json_extract(timeouts, '$.schedule_to_close') ELSE 9223372036854775807 END,
	CASE WHEN json_extract(timeouts, '$.schedule_to_start') > 0
		THEN ready_at + json_extract(timeouts, '$.schedule_to_start') ELSE 9223372036854775807 END)`

// waitingMigration adds the indexes a server running alone pages its
// waiting work and finds its deadlines by, and drops activities_open,
// which only the load of every open activity at a start used.
const waitingMigration = `DROP INDEX activities_open;
	CREATE INDEX activities_waiting ON activities
		(namespace, task_queue, activity_type, node, priority, fairness_key, ready_at, seq) WHERE state = 'scheduled';
	CREATE INDEX activities_waiting_deadline ON activities (` + waitingDeadlineSQL + `, seq) WHERE state = 'scheduled'`

// CountWaiting implements store.WaitingStore. The lanes are found by one
// index seek each, then each lane is counted on its own: a bare count(*)
// over an index range decodes no columns, where one GROUP BY over all rows
// would decode six per row, several times the cost at a million rows.
func (s *Store) CountWaiting(ctx context.Context, withBytes bool) ([]store.LaneCount, error) {
	const cols = `namespace, task_queue, activity_type, node, priority, fairness_key`
	var out []store.LaneCount
	for {
		q := `SELECT ` + cols + ` FROM activities INDEXED BY activities_waiting WHERE state = 'scheduled'`
		var args []any
		if n := len(out); n > 0 {
			// Past every ready time of the last lane, so the seek lands on
			// the next lane instead of stepping through this one's rows.
			q += ` AND (` + cols + `, ready_at) > (?, ?, ?, ?, ?, ?, 9223372036854775807)`
			args = laneArgs(out[n-1].Lane)
		}
		var c store.LaneCount
		err := s.reader.QueryRowContext(ctx, q+` ORDER BY `+cols+` LIMIT 1`, args...).
			Scan(&c.Namespace, &c.TaskQueue, &c.ActivityType, &c.Node, &c.Priority, &c.FairnessKey)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("count waiting activities: find lanes: %w", err)
		}
		out = append(out, c)
	}
	for i := range out {
		c := &out[i]
		args := laneArgs(c.Lane)
		var ready int64
		if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM activities INDEXED BY activities_waiting WHERE `+laneWhere,
			args...).Scan(&c.Count); err != nil {
			return nil, fmt.Errorf("count waiting activities: %w", err)
		}
		if err := s.reader.QueryRowContext(ctx, `SELECT min(ready_at) FROM activities INDEXED BY activities_waiting WHERE `+laneWhere,
			args...).Scan(&ready); err != nil {
			return nil, fmt.Errorf("count waiting activities: %w", err)
		}
		c.OldestReady = store.FromUnixNanos(ready)
		if withBytes {
			if err := s.reader.QueryRowContext(ctx, `SELECT sum(coalesce(length(payload), 0)) FROM activities WHERE `+laneWhere,
				args...).Scan(&c.Bytes); err != nil {
				return nil, fmt.Errorf("count waiting activities: payload bytes: %w", err)
			}
		}
	}
	return out, nil
}

// WaitingBytes implements store.WaitingStore.
func (s *Store) WaitingBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT namespace, sum(coalesce(length(payload), 0)) FROM activities
		WHERE state = 'scheduled' GROUP BY namespace`)
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
const laneWhere = `state = 'scheduled' AND namespace = ? AND task_queue = ? AND activity_type = ? AND node = ?
	AND priority = ? AND fairness_key = ?`

func laneArgs(l store.Lane) []any {
	return []any{l.Namespace, l.TaskQueue, l.ActivityType, l.Node, store.EffectivePriority(l.Priority), l.FairnessKey}
}

// PageWaiting implements store.WaitingStore.
func (s *Store) PageWaiting(ctx context.Context, p store.WaitingPage) ([]store.Activity, time.Time, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 256
	}
	what := fmt.Sprintf("page waiting activities of %s/%s in namespace %q", p.TaskQueue, p.ActivityType, p.Namespace)
	args := append(laneArgs(p.Lane), store.UnixNanos(p.Now), store.UnixNanos(p.After.At), p.After.Seq, limit)
	page, err := s.queryActivities(ctx, what, 0, `SELECT `+store.ActivityColumnsInline(p.Inline)+`
		FROM activities INDEXED BY activities_waiting WHERE `+laneWhere+` AND ready_at <= ? AND (ready_at, seq) > (?, ?)
		ORDER BY ready_at, seq LIMIT ?`, args...)
	if err != nil || len(page) == limit {
		return page, time.Time{}, err
	}
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, `SELECT min(ready_at) FROM activities INDEXED BY activities_waiting
		WHERE `+laneWhere+` AND ready_at > ?`, append(laneArgs(p.Lane), store.UnixNanos(p.Now))...).Scan(&next); err != nil {
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
		WHERE state = 'scheduled' AND `+waitingDeadlineSQL+` <= ? AND (`+waitingDeadlineSQL+`, seq) > (?, ?)
		ORDER BY `+waitingDeadlineSQL+`, seq LIMIT ?`, store.UnixNanos(now), at, after.Seq, limit)
}

// NextWaitingDeadline implements store.WaitingStore.
func (s *Store) NextWaitingDeadline(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, `SELECT min(`+waitingDeadlineSQL+`)
		FROM activities INDEXED BY activities_waiting_deadline
		WHERE state = 'scheduled' AND `+waitingDeadlineSQL+` > ? AND `+waitingDeadlineSQL+` < 9223372036854775807`,
		store.UnixNanos(now)).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("find the next waiting deadline: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return store.FromUnixNanos(next.Int64), true, nil
}

// OpenStepActivities implements store.WaitingStore. A step's activity id is
// its run id, "-" and the step number, so each open run's steps are one
// range of the primary key: ids from run_id||'-' up to run_id||'.' ('.'
// follows '-').
func (s *Store) OpenStepActivities(ctx context.Context, inline int) ([]store.Activity, error) {
	return s.queryActivities(ctx, "load open step activities", 0, `SELECT `+store.ActivityColumnsInline(inline)+`
		FROM activities WHERE seq IN (SELECT a.seq FROM runs r JOIN activities a
			ON a.namespace = r.namespace AND a.id >= r.run_id || '-' AND a.id < r.run_id || '.'
			WHERE r.status = 'running' AND a.state IN ('scheduled', 'running'))
		ORDER BY seq`)
}
