package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// PutFlowLimit implements store.FlowStore.
func (s *Store) PutFlowLimit(ctx context.Context, l store.FlowLimit) (store.FlowLimit, error) {
	l = l.Normalize()
	what := fmt.Sprintf("set the %s limit of %q in namespace %q", l.Kind, l.Type, l.Namespace)
	if err := l.Validate(); err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	l.UpdatedAt = time.Now().UTC()
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := getNamespace(ctx, tx, l.Namespace); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO flow_limits (namespace, kind, type, concurrency, rate, burst, per_key, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, kind, type) DO UPDATE SET concurrency = excluded.concurrency,
		rate = excluded.rate, burst = excluded.burst, per_key = excluded.per_key, updated_at = excluded.updated_at`,
			l.Namespace, string(l.Kind), l.Type, l.Concurrency, l.Rate, l.Burst, l.PerKey, store.UnixNanos(l.UpdatedAt))
		return err
	})
	if err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	return l, nil
}

// DeleteFlowLimit implements store.FlowStore.
func (s *Store) DeleteFlowLimit(ctx context.Context, namespace string, kind store.FlowKind, typ string) (bool, error) {
	what := fmt.Sprintf("clear the %s limit of %q in namespace %q", kind, typ, namespace)
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM flow_limits WHERE namespace = ? AND kind = ? AND type = ?`, namespace, string(kind), typ)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n > 0, nil
}

// ListFlowLimits implements store.FlowStore.
func (s *Store) ListFlowLimits(ctx context.Context, namespace string) ([]store.FlowLimit, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT namespace, kind, type, concurrency, rate, burst, per_key, updated_at
		FROM flow_limits WHERE ? = '' OR namespace = ? ORDER BY namespace, kind, type`, namespace, namespace)
	if err != nil {
		return nil, fmt.Errorf("list flow limits: %w", err)
	}
	defer rows.Close()
	var out []store.FlowLimit
	for rows.Next() {
		var (
			l       store.FlowLimit
			kind    string
			updated int64
		)
		if err := rows.Scan(&l.Namespace, &kind, &l.Type, &l.Concurrency, &l.Rate, &l.Burst, &l.PerKey, &updated); err != nil {
			return nil, fmt.Errorf("list flow limits: %w", err)
		}
		l.Kind, l.UpdatedAt = store.FlowKind(kind), store.FromUnixNanos(updated)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list flow limits: %w", err)
	}
	return out, nil
}
