package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aion-run/aion/internal/store"
)

// AdmitRun implements store.WorkflowStore in one write transaction: the
// single writer serializes admissions, so the count it reads holds every
// admission made before.
func (s *Store) AdmitRun(ctx context.Context, namespace, runID string, limit int) (bool, int, error) {
	var (
		admitted bool
		count    int
	)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		admitted, count = false, 0
		var (
			open, already bool
			key           string
		)
		err := tx.QueryRowContext(ctx, `SELECT r.status = 'running', r.admitted = 1, r.concurrency_key,
			(SELECT count(*) FROM runs o WHERE o.namespace = r.namespace AND o.workflow_type = r.workflow_type
				AND o.concurrency_key = r.concurrency_key AND o.status = 'running' AND o.admitted = 1 AND r.concurrency_key <> '')
			FROM runs r WHERE r.namespace = ? AND r.run_id = ?`, namespace, runID).Scan(&open, &already, &key, &count)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return err
		case !open:
			return fmt.Errorf("the run is closed: %w", store.ErrNotFound)
		case already:
			admitted = true
			return nil
		case key != "" && limit > 0 && count >= limit:
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET admitted = 1 WHERE namespace = ? AND run_id = ?`, namespace, runID); err != nil {
			return err
		}
		admitted = true
		if key != "" {
			count++
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("admit run %q in namespace %q: %w", runID, namespace, err)
	}
	return admitted, count, nil
}
