package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"sync"
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
//
// Closed activities have no index by close time: one would cost every
// close an index entry, the throughput figures about a tenth. They are
// found through activities_by_state instead, which carries closed_at for
// the purpose: for each closed state in turn, in scheduling order, up to
// the last activity scheduled before the cutoff (none scheduled after it
// can have closed before it). Those scheduled before the cutoff but closed
// after it are passed over once a pass, not once a batch: the batches of
// one pass (one cutoff) go on from where the last one stopped.
func (s *Store) ReapActivities(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	var next reapCursor
	pick := func(ctx context.Context, tx *sql.Tx, ns string, cutoff int64, limit int) ([]int64, []string, error) {
		var (
			seqs []int64
			ids  []string
			err  error
		)
		seqs, ids, next, err = pickActivities(ctx, tx, ns, cutoff, limit, s.reapFrom(ns))
		return seqs, ids, err
	}
	n, err := s.reap(ctx, limit, true, pick, namespace, cutoff,
		`DELETE FROM attempts WHERE namespace = ? AND activity_id IN (SELECT value FROM json_each(?))`,
		`DELETE FROM activities WHERE seq IN (SELECT value FROM json_each(?))
			AND state IN ('completed', 'failed', 'canceled', 'timed_out')`)
	if err != nil {
		return 0, fmt.Errorf("reap activities of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	s.reapedTo(namespace, next)
	return n, nil
}

// closedStates are the states of closed activities, in the order a
// reaping pass takes them.
var closedStates = []store.ActivityState{store.StateCompleted, store.StateFailed, store.StateCanceled, store.StateTimedOut}

// reapCursor is where the next batch of a reaping pass over one
// namespace's activities starts. Every activity before it was looked at
// against the same cutoff and was either reaped or closed after the
// cutoff, which it stays: a close happens now, after any cutoff. (One
// that closed before the cutoff all the same, by a clock set back, is
// found by the next pass, whose cutoff differs.)
type reapCursor struct {
	cutoff int64
	state  int   // index into closedStates
	seq    int64 // the last seq looked at in that state
}

// reapCursors holds each namespace's reapCursor. A cursor is stored only
// once its batch committed; one stored late by a slower batch of the same
// pass only makes the next batch look at rows again, never skip any.
type reapCursors struct {
	mu sync.Mutex
	at map[string]reapCursor
}

// reapFrom returns where the next batch over ns starts.
func (s *Store) reapFrom(ns string) reapCursor {
	s.reapAt.mu.Lock()
	defer s.reapAt.mu.Unlock()
	return s.reapAt.at[ns]
}

// reapedTo records where the next batch over ns starts.
func (s *Store) reapedTo(ns string, c reapCursor) {
	s.reapAt.mu.Lock()
	defer s.reapAt.mu.Unlock()
	if s.reapAt.at == nil {
		s.reapAt.at = make(map[string]reapCursor)
	}
	s.reapAt.at[ns] = c
}

// pickActivities selects up to limit expired closed activities of ns from
// where from says (from the start when from is of another cutoff) and
// returns where the next batch starts.
func pickActivities(ctx context.Context, tx *sql.Tx, ns string, cutoff int64, limit int,
	from reapCursor) ([]int64, []string, reapCursor, error) {
	next := reapCursor{cutoff: cutoff}
	if from.cutoff == cutoff {
		next = from
	}
	bound, err := scheduledBefore(ctx, tx, cutoff)
	if err != nil || bound == 0 {
		return nil, nil, next, err
	}
	var (
		seqs []int64
		ids  []string
	)
	for next.state < len(closedStates) {
		want := limit - len(seqs)
		rows, err := tx.QueryContext(ctx, `SELECT seq, id FROM activities INDEXED BY activities_by_state
			WHERE namespace = ? AND state = ? AND seq > ? AND seq <= ? AND closed_at < ? ORDER BY seq LIMIT ?`,
			ns, string(closedStates[next.state]), next.seq, bound, cutoff, want)
		if err != nil {
			return nil, nil, next, fmt.Errorf("pick %s activities: %w", closedStates[next.state], err)
		}
		before := len(seqs)
		if seqs, ids, err = scanPicked(rows, seqs, ids); err != nil {
			return nil, nil, next, fmt.Errorf("pick %s activities: %w", closedStates[next.state], err)
		}
		if len(seqs)-before == want {
			next.seq = seqs[len(seqs)-1] // the batch is full; the state may hold more
			break
		}
		next.state, next.seq = next.state+1, 0
	}
	return seqs, ids, next, nil
}

// seqRangeSQL reads the lowest and highest seq of activities, each from
// the table's rowid order (one min() or max() alone in a query is read
// from the b-tree's end; both in one would scan the table).
const seqRangeSQL = `SELECT (SELECT min(seq) FROM activities), (SELECT max(seq) FROM activities)`

// scheduledBefore returns the seq of the last activity scheduled before
// cutoff, 0 for none, by a binary search over seq: scheduling order and
// scheduled_at agree (both follow the one server's clock as it inserts),
// so it costs some forty lookups by rowid. Where they disagree (a clock
// set back) the bound is only less exact: every row it admits is still
// checked against the cutoff, and an expired activity past it is reaped
// once the cutoff has passed the scheduled_at of the rows before it.
func scheduledBefore(ctx context.Context, tx *sql.Tx, cutoff int64) (int64, error) {
	var lo, hi sql.NullInt64
	if err := tx.QueryRowContext(ctx, seqRangeSQL).Scan(&lo, &hi); err != nil {
		return 0, fmt.Errorf("find the last activity scheduled before the cutoff: %w", err)
	}
	if !lo.Valid {
		return 0, nil
	}
	at := func(from int64) (seq, scheduled int64, err error) {
		err = tx.QueryRowContext(ctx, `SELECT seq, scheduled_at FROM activities WHERE seq >= ? ORDER BY seq LIMIT 1`,
			from).Scan(&seq, &scheduled)
		if err != nil {
			err = fmt.Errorf("find the last activity scheduled before the cutoff: %w", err)
		}
		return seq, scheduled, err
	}
	first, scheduled, err := at(lo.Int64)
	if err != nil {
		return 0, err
	}
	if scheduled >= cutoff {
		return 0, nil
	}
	// Invariant: the row at first was scheduled before cutoff; none past
	// high is known to be.
	high := hi.Int64
	for first < high {
		mid := first + (high-first+1)/2
		seq, scheduled, err := at(mid)
		if err != nil {
			return 0, err
		}
		if scheduled < cutoff {
			first = seq
		} else {
			high = mid - 1
		}
	}
	return first, nil
}

// ReapRuns implements store.ReapStore.
func (s *Store) ReapRuns(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error) {
	n, err := s.reap(ctx, limit, false, pickRuns, namespace, cutoff,
		`DELETE FROM events WHERE namespace = ? AND run_id IN (SELECT value FROM json_each(?))`,
		`DELETE FROM runs WHERE seq IN (SELECT value FROM json_each(?)) AND status <> 'running'`)
	if err != nil {
		return 0, fmt.Errorf("reap runs of namespace %q closed before %v: %w", namespace, cutoff, err)
	}
	return n, nil
}

// pickRuns selects up to limit expired closed runs of ns, oldest close
// first.
func pickRuns(ctx context.Context, tx *sql.Tx, ns string, cutoff int64, limit int) ([]int64, []string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT seq, run_id FROM runs WHERE namespace = ? AND status <> 'running'
		AND closed_at < ? ORDER BY closed_at LIMIT ?`, ns, cutoff, limit)
	if err != nil {
		return nil, nil, err
	}
	return scanPicked(rows, nil, nil)
}

// scanPicked appends the seq and id of each of rows, and closes them.
func scanPicked(rows *sql.Rows, seqs []int64, ids []string) ([]int64, []string, error) {
	defer rows.Close()
	for rows.Next() {
		var (
			seq int64
			id  string
		)
		if err := rows.Scan(&seq, &id); err != nil {
			return nil, nil, err
		}
		seqs, ids = append(seqs, seq), append(ids, id)
	}
	return seqs, ids, rows.Err()
}

// picker selects, inside a reaping transaction, up to limit rows of a
// namespace closed before cutoff (in Unix nanoseconds): their seqs and ids.
type picker func(ctx context.Context, tx *sql.Tx, ns string, cutoff int64, limit int) ([]int64, []string, error)

// reap deletes, in one transaction, the rows pick selects: first what
// hangs off them (children, given the namespace and the ids as a JSON
// array), then the rows themselves by seq (parents, given the seqs as a
// JSON array: by rowid, so no index is searched for them). The last
// statement's count is what was reaped; activities tells whether the meta
// table's count of held activities goes down by it.
func (s *Store) reap(ctx context.Context, limit int, activities bool, pick picker, ns string, cutoff time.Time,
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
	seqs, ids, err := pick(ctx, tx, ns, store.UnixNanos(cutoff), limit)
	if err != nil {
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
