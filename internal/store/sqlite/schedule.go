package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// CreateSchedule implements store.ScheduleStore.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, bool, error) {
	sc.Version = 1
	vals, err := store.ScheduleValues(sc)
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("create schedule %q: %w", sc.ID, err)
	}
	var (
		rec     store.Schedule
		created bool
	)
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO schedules (`+store.ScheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (namespace, id) DO NOTHING`, vals...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		rec, err = getSchedule(ctx, tx, sc.Namespace, sc.ID)
		return err
	})
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("create schedule %q in namespace %q: %w", sc.ID, sc.Namespace, err)
	}
	return rec, created, nil
}

// GetSchedule implements store.ScheduleStore.
func (s *Store) GetSchedule(ctx context.Context, ns, id string) (store.Schedule, error) {
	sc, err := getSchedule(ctx, s.reader, ns, id)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("get schedule %q in namespace %q: %w", id, ns, err)
	}
	return sc, nil
}

// ListSchedules implements store.ScheduleStore.
func (s *Store) ListSchedules(ctx context.Context, f store.ScheduleFilter) ([]store.Schedule, error) {
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules
		WHERE namespace = ? AND id > ? ORDER BY id LIMIT ?`, f.Namespace, f.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list schedules of namespace %q: %w", f.Namespace, err)
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("list schedules of namespace %q: %w", f.Namespace, err)
	}
	return out, nil
}

// UpdateSchedule implements store.ScheduleStore.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, bool, error) {
	expect := sc.Version
	sc.Version++
	vals, err := store.ScheduleValues(sc)
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("update schedule %q: %w", sc.ID, err)
	}
	var (
		rec store.Schedule
		ok  bool
	)
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		// vals: namespace, id, version, next_due, created_at, updated_at,
		// definition, state, input; created_at is kept.
		res, err := tx.ExecContext(ctx, `UPDATE schedules SET version = ?, next_due = ?, updated_at = ?,
			definition = ?, state = ?, input = ? WHERE namespace = ? AND id = ? AND version = ?`,
			vals[2], vals[3], vals[5], vals[6], vals[7], vals[8], sc.Namespace, sc.ID, expect)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		ok = n == 1
		rec, err = getSchedule(ctx, tx, sc.Namespace, sc.ID)
		return err
	})
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("update schedule %q in namespace %q: %w", sc.ID, sc.Namespace, err)
	}
	if !ok {
		return store.Schedule{}, false, nil
	}
	return rec, true, nil
}

// DeleteSchedule implements store.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, ns, id string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM schedules WHERE namespace = ? AND id = ?`, ns, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("schedule %w", store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete schedule %q in namespace %q: %w", id, ns, err)
	}
	return nil
}

// DueSchedules implements store.ScheduleStore.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules
		WHERE next_due <> 0 AND next_due <= ? ORDER BY next_due LIMIT ?`, now.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
}

// NextScheduleDue implements store.ScheduleStore.
func (s *Store) NextScheduleDue(ctx context.Context) (time.Time, error) {
	var next sql.NullInt64
	if err := s.reader.QueryRowContext(ctx, `SELECT min(next_due) FROM schedules WHERE next_due <> 0`).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("next schedule due: %w", err)
	}
	return store.FromUnixNanos(next.Int64), nil
}

// writeTx runs fn in a transaction on the writer that also counts the
// commit in the meta table, and advances the mark once it committed.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	c, err := bump(ctx, tx.StmtContext(ctx, s.stmts.bump), 1, 0)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.mark.advance(c)
	return nil
}

func getSchedule(ctx context.Context, q queryer, ns, id string) (store.Schedule, error) {
	var row store.ScheduleRow
	err := q.QueryRowContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE namespace = ? AND id = ?`, ns, id).
		Scan(row.Dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("schedule %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Schedule{}, err
	}
	return row.Decode()
}

func scanSchedules(rows *sql.Rows) ([]store.Schedule, error) {
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		var row store.ScheduleRow
		if err := rows.Scan(row.Dest()...); err != nil {
			return nil, err
		}
		sc, err := row.Decode()
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, rows.Err()
}
