package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// SetRetention implements store.NamespaceStore.
func (s *Store) SetRetention(ctx context.Context, name string, r store.Retention) (store.Namespace, error) {
	if err := r.Validate(); err != nil {
		return store.Namespace{}, fmt.Errorf("set retention of namespace %q: %w", name, err)
	}
	ns, err := scanNamespace(s.pool.QueryRow(ctx, `UPDATE namespaces SET retention = $1
		WHERE name = $2 RETURNING `+namespaceColumns, int64(r), name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Namespace{}, fmt.Errorf("set retention of namespace %q: namespace %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set retention of namespace %q: %w", name, dbErr(err))
	}
	return ns, nil
}

// The reaping statements pick their batch with SKIP LOCKED, so servers
// reaping one namespace at once take different rows instead of waiting on
// each other, and delete a row's dependants in the same statement.
const (
	reapActivitiesSQL = `WITH picked AS (
			SELECT seq FROM activities
			WHERE namespace = $1::text AND state IN ('completed', 'failed', 'canceled', 'timed_out') AND closed_at < $2::bigint
			ORDER BY closed_at LIMIT $3::integer FOR UPDATE SKIP LOCKED
		), gone AS (
			DELETE FROM activities a USING picked p WHERE a.seq = p.seq RETURNING a.id
		), attempts_gone AS (
			DELETE FROM attempts WHERE namespace = $1::text AND activity_id IN (SELECT id FROM gone)
		)
		SELECT count(*) FROM gone`
	reapRunsSQL = `WITH picked AS (
			SELECT seq FROM runs
			WHERE namespace = $1::text AND status <> 'running' AND closed_at < $2::bigint
			ORDER BY closed_at LIMIT $3::integer FOR UPDATE SKIP LOCKED
		), gone AS (
			DELETE FROM runs r USING picked p WHERE r.seq = p.seq RETURNING r.run_id
		), events_gone AS (
			DELETE FROM events WHERE namespace = $1::text AND run_id IN (SELECT run_id FROM gone)
		), inbox_gone AS (
			DELETE FROM run_inbox WHERE namespace = $1::text AND run_id IN (SELECT run_id FROM gone)
		)
		SELECT count(*) FROM gone`
)

// ReapActivities implements store.ReapStore.
func (s *Store) ReapActivities(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	n, err := s.reap(ctx, reapActivitiesSQL, namespace, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("reap activities of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	return n, nil
}

// ReapRuns implements store.ReapStore.
func (s *Store) ReapRuns(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	n, err := s.reap(ctx, reapRunsSQL, namespace, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("reap runs of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	return n, nil
}

func (s *Store) reap(ctx context.Context, q, namespace string, cutoff time.Time, limit int) (int, error) {
	if err := store.CheckReapLimit(limit); err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, q, namespace, store.UnixNanos(cutoff), limit).Scan(&n); err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
