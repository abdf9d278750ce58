package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// admitLockClass is the first key of the advisory locks that serialize the
// admissions of one workflow type ("wfad" in ASCII), apart from the locks
// of activity claims (flowLockClass).
const admitLockClass = 0x77666164

// AdmitRun implements store.WorkflowStore, in one transaction: it reads
// the run's workflow type and key (they never change), takes an advisory
// lock on the (namespace, workflow type), so admissions of the type from
// every server run one at a time and none sees a slot another is taking,
// then counts the key's admitted open runs and marks the run admitted if
// the limit allows. A close takes no lock: it only frees a slot.
func (s *Store) AdmitRun(ctx context.Context, namespace, runID string, limit int) (bool, int, error) {
	var (
		admitted bool
		count    int
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		admitted, count = false, 0
		var typ, key string
		err := tx.QueryRow(ctx, `SELECT workflow_type, concurrency_key FROM runs WHERE namespace = $1 AND run_id = $2`,
			namespace, runID).Scan(&typ, &key)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if key != "" {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2 || E'\n' || $3))`,
				admitLockClass, namespace, typ); err != nil {
				return err
			}
		}
		// Read after the lock: the statement's snapshot holds every
		// admission committed before it.
		var open, already bool
		err = tx.QueryRow(ctx, `SELECT status = 'running', admitted,
			(SELECT count(*) FROM runs WHERE namespace = $1 AND workflow_type = $3 AND concurrency_key = $4
				AND status = 'running' AND admitted AND $4 <> '')
			FROM runs WHERE namespace = $1 AND run_id = $2`, namespace, runID, typ, key).Scan(&open, &already, &count)
		if err != nil {
			return err
		}
		switch {
		case !open:
			return fmt.Errorf("the run is closed: %w", store.ErrNotFound)
		case already:
			admitted = true
			return nil
		case key != "" && limit > 0 && count >= limit:
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET admitted = true WHERE namespace = $1 AND run_id = $2`, namespace, runID); err != nil {
			return err
		}
		admitted = true
		if key != "" {
			count++
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("admit run %q in namespace %q: %w", runID, namespace, dbErr(err))
	}
	return admitted, count, nil
}
