package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// SetRetention implements store.NamespaceStore.
func (s *Store) SetRetention(ctx context.Context, name string, r store.Retention) (store.Namespace, error) {
	if err := r.Validate(); err != nil {
		return store.Namespace{}, fmt.Errorf("set retention of namespace %q: %w", name, err)
	}
	var ns store.Namespace
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE namespaces SET retention = ? WHERE name = ?`, int64(r), name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("namespace %w", store.ErrNotFound)
		}
		ns, err = getNamespace(ctx, tx, name)
		return err
	})
	if err != nil {
		return store.Namespace{}, fmt.Errorf("set retention of namespace %q: %w", name, err)
	}
	return ns, nil
}

// ReapActivities implements store.ReapStore. One batch is one short
// transaction on the writer, so commits of new work wait for at most one
// batch.
func (s *Store) ReapActivities(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	n, err := s.reap(ctx, limit, true,
		`SELECT seq, id FROM activities WHERE namespace = ? AND state IN ('completed', 'failed', 'canceled', 'timed_out')
			AND closed_at < ? ORDER BY closed_at LIMIT ?`,
		namespace, cutoff,
		`DELETE FROM attempts WHERE namespace = ? AND activity_id IN (SELECT value FROM json_each(?))`,
		`DELETE FROM activities WHERE seq IN (SELECT value FROM json_each(?))
			AND state IN ('completed', 'failed', 'canceled', 'timed_out')`)
	if err != nil {
		return 0, fmt.Errorf("reap activities of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	return n, nil
}

// ReapRuns implements store.ReapStore.
func (s *Store) ReapRuns(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	n, err := s.reap(ctx, limit, false,
		`SELECT seq, run_id FROM runs WHERE namespace = ? AND status <> 'running' AND closed_at < ?
			ORDER BY closed_at LIMIT ?`,
		namespace, cutoff,
		`DELETE FROM events WHERE namespace = ? AND run_id IN (SELECT value FROM json_each(?))`,
		`DELETE FROM runs WHERE seq IN (SELECT value FROM json_each(?)) AND status <> 'running'`)
	if err != nil {
		return 0, fmt.Errorf("reap runs of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	return n, nil
}

// reap deletes, in one transaction, the rows pick selects (their seq and
// id, by namespace, cutoff and limit): first what hangs off them
// (children, given the namespace and the ids as a JSON array), then the
// rows themselves by seq (parents, given the seqs as a JSON array: by
// rowid, so no index is searched for them). The last statement's count is what was reaped; activities
// tells whether the meta table's count of held activities goes down by it.
func (s *Store) reap(ctx context.Context, limit int, activities bool, pick, ns string, cutoff time.Time,
	children, parents string) (int, error) {
	if err := store.CheckReapLimit(limit); err != nil {
		return 0, err
	}
	// A reaping commit need not survive power loss (a lost one is reaped
	// again), so it does not wait for the write-ahead log to reach the
	// disk: the next commit of new work syncs its frames with its own.
	// The writer's only connection is held from the switch to the switch
	// back, so no other commit runs without its sync.
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if s.synchronous != "normal" {
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
			return 0, err
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = `+s.synchronous); err != nil {
				// Never hand the connection back unsynced: drop it.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, pick, ns, store.UnixNanos(cutoff), limit)
	if err != nil {
		return 0, err
	}
	var (
		ids  []string
		seqs []int64
	)
	for rows.Next() {
		var (
			seq int64
			id  string
		)
		if err := rows.Scan(&seq, &id); err != nil {
			rows.Close()
			return 0, err
		}
		ids, seqs = append(ids, id), append(seqs, seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil // nothing to commit: the rollback ends the read
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	seqList, err := json.Marshal(seqs)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, children, ns, string(list))
	if err != nil {
		return 0, err
	}
	kids, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	res, err = tx.ExecContext(ctx, parents, string(seqList))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	held := 0
	if activities {
		held = -int(n)
	}
	c, err := bump(ctx, tx.StmtContext(ctx, s.stmts.bump), int(n+kids), held)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	s.mark.advance(c)
	return int(n), nil
}
