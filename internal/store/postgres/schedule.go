package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
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
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Concurrent creates of one id queue on the primary key: the first
		// commits, the others then insert nothing and read its row.
		tag, err := tx.Exec(ctx, `INSERT INTO schedules (`+store.ScheduleColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9) ON CONFLICT (namespace, id) DO NOTHING`, vals...)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		rec, err = getSchedule(ctx, tx, sc.Namespace, sc.ID)
		return err
	})
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("create schedule %q in namespace %q: %w", sc.ID, sc.Namespace, dbErr(err))
	}
	return rec, created, nil
}

// GetSchedule implements store.ScheduleStore.
func (s *Store) GetSchedule(ctx context.Context, ns, id string) (store.Schedule, error) {
	sc, err := getSchedule(ctx, s.pool, ns, id)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("get schedule %q in namespace %q: %w", id, ns, dbErr(err))
	}
	return sc, nil
}

// ListSchedules implements store.ScheduleStore.
func (s *Store) ListSchedules(ctx context.Context, f store.ScheduleFilter) ([]store.Schedule, error) {
	var limit any // NULL: no limit
	if f.Limit > 0 {
		limit = f.Limit
	}
	// COLLATE "C" orders by bytes, as SQLite does.
	rows, err := s.pool.Query(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules
		WHERE namespace = $1 AND id COLLATE "C" > $2 ORDER BY id COLLATE "C" LIMIT $3`, f.Namespace, f.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list schedules of namespace %q: %w", f.Namespace, dbErr(err))
	}
	out, err := collectSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("list schedules of namespace %q: %w", f.Namespace, dbErr(err))
	}
	return out, nil
}

// UpdateSchedule implements store.ScheduleStore. The version in the WHERE
// clause is the compare-and-set: of two servers updating over the same
// version, the second waits for the first's commit, finds the version
// moved and changes nothing.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, bool, error) {
	expect := sc.Version
	sc.Version++
	vals, err := store.ScheduleValues(sc)
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("update schedule %q: %w", sc.ID, err)
	}
	var row store.ScheduleRow
	// vals: namespace, id, version, next_due, created_at, updated_at,
	// definition, state, input; created_at is kept.
	err = s.pool.QueryRow(ctx, `UPDATE schedules SET version = $1, next_due = $2, updated_at = $3,
		definition = $4::jsonb, state = $5::jsonb, input = $6
		WHERE namespace = $7 AND id = $8 AND version = $9
		RETURNING `+store.ScheduleColumns, vals[2], vals[3], vals[5], vals[6], vals[7], vals[8], sc.Namespace, sc.ID, expect).
		Scan(row.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := getSchedule(ctx, s.pool, sc.Namespace, sc.ID); err != nil {
			return store.Schedule{}, false, fmt.Errorf("update schedule %q in namespace %q: %w", sc.ID, sc.Namespace, dbErr(err))
		}
		return store.Schedule{}, false, nil
	}
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("update schedule %q in namespace %q: %w", sc.ID, sc.Namespace, dbErr(err))
	}
	rec, err := row.Decode()
	if err != nil {
		return store.Schedule{}, false, fmt.Errorf("update schedule %q in namespace %q: %w", sc.ID, sc.Namespace, err)
	}
	return rec, true, nil
}

// DeleteSchedule implements store.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, ns, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedules WHERE namespace = $1 AND id = $2`, ns, id)
	if err != nil {
		return fmt.Errorf("delete schedule %q in namespace %q: %w", id, ns, dbErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete schedule %q in namespace %q: schedule %w", id, ns, store.ErrNotFound)
	}
	return nil
}

// DueSchedules implements store.ScheduleStore.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules
		WHERE next_due <> 0 AND next_due <= $1 ORDER BY next_due LIMIT $2`, now.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", dbErr(err))
	}
	out, err := collectSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", dbErr(err))
	}
	return out, nil
}

// NextScheduleDue implements store.ScheduleStore.
func (s *Store) NextScheduleDue(ctx context.Context) (time.Time, error) {
	var next *int64
	if err := s.pool.QueryRow(ctx, `SELECT min(next_due) FROM schedules WHERE next_due <> 0`).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("next schedule due: %w", dbErr(err))
	}
	if next == nil {
		return time.Time{}, nil
	}
	return store.FromUnixNanos(*next), nil
}

func getSchedule(ctx context.Context, q queryer, ns, id string) (store.Schedule, error) {
	var row store.ScheduleRow
	err := q.QueryRow(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE namespace = $1 AND id = $2`, ns, id).
		Scan(row.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("schedule %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Schedule{}, err
	}
	return row.Decode()
}

func collectSchedules(rows pgx.Rows) ([]store.Schedule, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Schedule, error) {
		var row store.ScheduleRow
		if err := r.Scan(row.Dest()...); err != nil {
			return store.Schedule{}, err
		}
		return row.Decode()
	})
}
