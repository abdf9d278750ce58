package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// claimRunsSQL makes $1 the holder of up to $5 open runs no server holds of
// one workflow type in one pool, skipping rows another claim has locked.
//
// The most urgent priority goes first; within a priority the fairness keys
// share the claim by weight, as claimSQL shares an activity claim: the
// n-th waiting run of key k ranks at the strides of k's waiting runs
// before it plus a random fraction of its own stride (a stride is
// 2^32/weight, as in the engine), lowest first, so a claim of several runs
// interleaves the keys by weight and a key's older backlog does not take
// whole claims. Unlike claimSQL no running term weighs in: a held run
// holds no worker slot (its workflow tasks share the holder's slots by key
// in memory), so what a key holds says nothing of its share.
//
// The cost follows the keys waiting, not the backlog: keys finds the first
// waiting run of each (priority, key) by a skip scan of runs_claim_fair,
// one probe per key; heads keeps the $5 keys whose first run ranks best,
// and each reads at most about 2·$5·weight/weights of its oldest runs,
// named by equality as well as by the row-wise bound (see claimSQL).
// Candidates are read without locks; fair locks them in rank order,
// skipping those another claim holds, and fill takes other waiting runs
// should concurrent claims have locked every candidate.
//
// Like claimSQL it holds a key-share lock on the claimer's live membership
// row, so a server reaped meanwhile claims nothing.
const claimRunsSQL = `WITH RECURSIVE member AS (
		SELECT id AS member_id FROM servers WHERE id = $1 AND lease_until >= ` + dbNow + ` FOR KEY SHARE
	), keys AS (
		(SELECT priority, fairness_key, seq, fairness_weight FROM runs
			WHERE status = 'running' AND owner = 0 AND namespace = $2 AND task_queue = $3 AND workflow_type = $4
			ORDER BY priority, fairness_key, seq LIMIT 1)
		UNION ALL
		SELECT nx.priority, nx.fairness_key, nx.seq, nx.fairness_weight FROM keys k CROSS JOIN LATERAL (
			SELECT priority, fairness_key, seq, fairness_weight FROM runs
			WHERE status = 'running' AND owner = 0 AND namespace = $2 AND task_queue = $3 AND workflow_type = $4
				AND (priority, fairness_key) > (k.priority, k.fairness_key)
			ORDER BY priority, fairness_key, seq LIMIT 1) nx
	), heads AS MATERIALIZED (
		SELECT h.*, sum(greatest(h.fairness_weight, 1)) OVER () AS weights FROM (
			SELECT k.*, k.phase * (4294967296 / greatest(k.fairness_weight, 1)) AS pass
			FROM (SELECT keys.*, random() AS phase FROM keys) k
			ORDER BY k.priority, pass, k.seq
			LIMIT $5::bigint) h
	), ranked AS (
		SELECT w.seq, h.priority,
			h.pass + sum(w.stride) OVER (PARTITION BY h.priority, h.fairness_key ORDER BY w.seq) - first_value(w.stride) OVER (
				PARTITION BY h.priority, h.fairness_key ORDER BY w.seq) AS pass
		FROM heads h CROSS JOIN LATERAL (
			SELECT seq, ` + strideSQL + ` AS stride FROM runs
			WHERE status = 'running' AND owner = 0 AND namespace = $2 AND task_queue = $3 AND workflow_type = $4
				AND priority = h.priority AND fairness_key = h.fairness_key
				AND (priority, fairness_key, seq) >= (h.priority, h.fairness_key, h.seq)
			ORDER BY priority, fairness_key, seq
			LIMIT least($5::bigint, 1 + ceil(2.0 * $5::bigint * greatest(h.fairness_weight, 1) / h.weights)::bigint)) w
	), fair AS (
		SELECT r.seq AS claim_seq FROM ranked c JOIN runs r ON r.seq = c.seq
		WHERE r.status = 'running' AND r.owner = 0
		ORDER BY c.priority, c.pass, c.seq
		LIMIT $5::bigint FOR UPDATE OF r SKIP LOCKED
	), fill AS (
		SELECT seq AS claim_seq FROM runs
		WHERE status = 'running' AND owner = 0 AND namespace = $2 AND task_queue = $3 AND workflow_type = $4
			AND seq NOT IN (SELECT claim_seq FROM fair)
		ORDER BY priority, fairness_key, seq LIMIT $5::bigint FOR UPDATE SKIP LOCKED
	), picked AS (
		SELECT claim_seq FROM fair UNION ALL (SELECT claim_seq FROM fill) LIMIT $5::bigint
	)
	UPDATE runs r SET owner = $1
	FROM member, picked
	WHERE r.seq = picked.claim_seq
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
		// Oldest first, so the claimer queues each key's runs in order.
		slices.SortFunc(got, func(x, y store.Run) int { return cmp.Compare(x.Seq, y.Seq) })
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
