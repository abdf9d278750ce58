package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// PutFlowLimit implements store.FlowStore.
func (s *Store) PutFlowLimit(ctx context.Context, l store.FlowLimit) (store.FlowLimit, error) {
	l = l.Normalize()
	what := fmt.Sprintf("set the %s limit of %q in namespace %q", l.Kind, l.Type, l.Namespace)
	if err := l.Validate(); err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	l.UpdatedAt = time.Now().UTC()
	// The insert reads the namespace row, so a namespace that does not
	// exist inserts nothing. The type's buckets go with the old limit: a
	// changed limit starts full, as on a single server.
	var n int
	err := s.pool.QueryRow(ctx, `WITH put AS (
			INSERT INTO flow_limits (namespace, kind, type, concurrency, rate, burst, per_key, updated_at)
			SELECT name, $2, $3, $4, $5, $6, $7, $8 FROM namespaces WHERE name = $1
			ON CONFLICT (namespace, kind, type) DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate,
				burst = excluded.burst, per_key = excluded.per_key, updated_at = excluded.updated_at
			RETURNING 1
		), reset AS (
			DELETE FROM flow_buckets WHERE namespace = $1 AND kind = $2 AND type = $3 AND EXISTS (SELECT 1 FROM put)
		) SELECT count(*) FROM put`,
		l.Namespace, string(l.Kind), l.Type, l.Concurrency, l.Rate, l.Burst, l.PerKey, store.UnixNanos(l.UpdatedAt)).Scan(&n)
	if err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, dbErr(err))
	}
	if n == 0 {
		return store.FlowLimit{}, fmt.Errorf("%s: namespace %w", what, store.ErrNotFound)
	}
	return l, nil
}

// DeleteFlowLimit implements store.FlowStore.
func (s *Store) DeleteFlowLimit(ctx context.Context, namespace string, kind store.FlowKind, typ string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `WITH reset AS (
			DELETE FROM flow_buckets WHERE namespace = $1 AND kind = $2 AND type = $3
		) DELETE FROM flow_limits WHERE namespace = $1 AND kind = $2 AND type = $3`,
		namespace, string(kind), typ)
	if err != nil {
		return false, fmt.Errorf("clear the %s limit of %q in namespace %q: %w", kind, typ, namespace, dbErr(err))
	}
	return tag.RowsAffected() > 0, nil
}

// ListFlowLimits implements store.FlowStore.
func (s *Store) ListFlowLimits(ctx context.Context, namespace string) ([]store.FlowLimit, error) {
	rows, err := s.pool.Query(ctx, `SELECT namespace, kind, type, concurrency, rate, burst, per_key, updated_at
		FROM flow_limits WHERE $1 = '' OR namespace = $1
		ORDER BY namespace COLLATE "C", kind COLLATE "C", type COLLATE "C"`, namespace)
	if err != nil {
		return nil, fmt.Errorf("list flow limits: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.FlowLimit, error) {
		var (
			l       store.FlowLimit
			kind    string
			updated int64
		)
		err := row.Scan(&l.Namespace, &kind, &l.Type, &l.Concurrency, &l.Rate, &l.Burst, &l.PerKey, &updated)
		l.Kind, l.UpdatedAt = store.FlowKind(kind), store.FromUnixNanos(updated)
		return l, err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("list flow limits: %w", dbErr(err))
	}
	return out, nil
}
