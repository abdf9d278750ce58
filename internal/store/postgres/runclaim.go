package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// claimRunsSQL makes $1 the holder of up to $5 open runs no server holds of
// one workflow type in one pool, oldest first, skipping rows another claim
// has locked. Like claimSQL it holds a share lock on the claimer's live
// membership row, so a server reaped meanwhile claims nothing.
const claimRunsSQL = `WITH member AS (
		SELECT id AS member_id FROM servers WHERE id = $1 AND lease_until >= ` + dbNow + ` FOR SHARE
	)
	UPDATE runs r SET owner = $1
	FROM member, (SELECT seq AS claim_seq FROM runs
		WHERE status = 'running' AND owner = 0 AND namespace = $2 AND task_queue = $3 AND workflow_type = $4
		ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED) c
	WHERE r.seq = c.claim_seq
	RETURNING ` + store.RunColumns

// ClaimRuns implements store.Cluster: every claim is one statement, and all
// of them travel in one round trip; limit bounds each claim.
func (s *Store) ClaimRuns(ctx context.Context, owner store.ServerID, claims []store.RunClaim, limit int) ([]store.Run, error) {
	if limit <= 0 || len(claims) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	for _, c := range claims {
		b.Queue(claimRunsSQL, int64(owner), c.Namespace, c.TaskQueue, c.WorkflowType, limit)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var out []store.Run
	for range claims {
		rows, err := br.Query()
		if err != nil {
			return nil, fmt.Errorf("claim runs: %w", dbErr(err))
		}
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Run, error) { return scanRun(row) })
		if err != nil {
			return nil, fmt.Errorf("claim runs: %w", dbErr(err))
		}
		out = append(out, got...)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("claim runs: %w", dbErr(err))
	}
	return out, nil
}

// ReleaseRun implements store.Cluster; it wakes the servers that may claim
// the run.
func (s *Store) ReleaseRun(ctx context.Context, owner store.ServerID, namespace, runID string) (bool, error) {
	var released bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tq, typ string
		err := tx.QueryRow(ctx, `UPDATE runs SET owner = 0
			WHERE namespace = $1 AND run_id = $2 AND owner = $3 AND status = 'running'
			RETURNING task_queue, workflow_type`, namespace, runID, int64(owner)).Scan(&tq, &typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		released = true
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channelWork, encodeWork([][3]string{store.RunWork(namespace, tq, typ)}))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("release run %q in namespace %q: %w", runID, namespace, dbErr(err))
	}
	return released, nil
}

// ReadRunInbox implements store.Cluster.
func (s *Store) ReadRunInbox(ctx context.Context, namespace, runID string) ([]store.RunEvent, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, namespace, run_id, data FROM run_inbox
		WHERE namespace = $1 AND run_id = $2 ORDER BY id`, namespace, runID)
	if err != nil {
		return nil, fmt.Errorf("read the inbox of run %q in namespace %q: %w", runID, namespace, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, runEventRow)
	if err != nil {
		return nil, fmt.Errorf("read the inbox of run %q in namespace %q: %w", runID, namespace, dbErr(err))
	}
	return out, nil
}

// ListOwnedInbox implements store.Cluster.
func (s *Store) ListOwnedInbox(ctx context.Context, owner store.ServerID) ([]store.RunEvent, error) {
	rows, err := s.pool.Query(ctx, `SELECT i.id, i.namespace, i.run_id, i.data FROM run_inbox i
		JOIN runs r ON r.namespace = i.namespace AND r.run_id = i.run_id
		WHERE r.owner = $1 AND r.status = 'running' ORDER BY i.id`, int64(owner))
	if err != nil {
		return nil, fmt.Errorf("list the inboxes of server %d: %w", owner, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, runEventRow)
	if err != nil {
		return nil, fmt.Errorf("list the inboxes of server %d: %w", owner, dbErr(err))
	}
	return out, nil
}

func runEventRow(row pgx.CollectableRow) (store.RunEvent, error) {
	var e store.RunEvent
	err := row.Scan(&e.ID, &e.Namespace, &e.RunID, &e.Data)
	return e, err
}
