package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ store.Cluster = (*Store)(nil)

// The notification channels. Payloads stay far below PostgreSQL's 8000-byte
// limit: work carries triples (or "*" for any), the others a name or an ID.
const (
	channelWork      = "aion_work"
	channelNamespace = "aion_namespace"
	channelTopology  = "aion_topology"
	channelMessage   = "aion_message"
	// anyWork is the work payload that wakes claims for every triple.
	anyWork = "*"
	// maxPayload keeps a work payload under the notification limit.
	maxPayload = 7000
)

// dbNow is the database clock in Unix nanoseconds. Leases are measured on
// it alone, so servers with skewed clocks still agree on who is alive.
const dbNow = `(extract(epoch from clock_timestamp()) * 1000000000)::bigint`

// workPayload lists the triples of the new activities among writes, one
// "namespace\ttask queue\ttype" per line (names hold neither tab nor newline).
func workPayload(writes []store.Write) string {
	var triples [][3]string
	for _, w := range writes {
		switch w := w.(type) {
		case store.InsertActivity:
			if w.Start != nil {
				continue // running already: nothing waits for a claim
			}
			a := w.Activity
			triples = append(triples, [3]string{a.Namespace, a.TaskQueue, a.ActivityType})
		case store.InsertRun:
			if w.Owner == 0 {
				triples = append(triples, store.RunWork(w.Run.Namespace, w.Run.TaskQueue, w.Run.WorkflowType))
			}
		case store.PostRunEvent:
			triples = append(triples, store.InboxWork(w.Event.Namespace, w.Event.RunID))
		case store.EndAttempt:
			if w.Post != nil {
				triples = append(triples, store.InboxWork(w.Post.Namespace, w.Post.RunID))
			}
		case store.AppendEvents:
			for _, p := range w.Post {
				triples = append(triples, store.InboxWork(p.Namespace, p.RunID))
			}
			triples = append(triples, w.Wake...)
		}
	}
	if len(triples) == 0 {
		return ""
	}
	return encodeWork(triples)
}

// encodeWork renders triples as a work payload, or anyWork when there are
// none or too many to fit.
func encodeWork(triples [][3]string) string {
	if len(triples) == 0 {
		return anyWork
	}
	lines := make([]string, len(triples))
	for i, t := range triples {
		lines[i] = t[0] + "\t" + t[1] + "\t" + t[2]
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	if p := strings.Join(lines, "\n"); len(p) <= maxPayload {
		return p
	}
	return anyWork
}

func parseWork(p string) [][3]string {
	if p == anyWork || p == "" {
		return nil
	}
	var out [][3]string
	for line := range strings.SplitSeq(p, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil // unreadable: treat as any work
		}
		out = append(out, [3]string{f[0], f[1], f[2]})
	}
	return out
}

// JoinCluster implements store.Cluster. Joins of one name are serialized by
// an advisory lock on the name, so two servers starting at once cannot both
// take it.
func (s *Store) JoinCluster(ctx context.Context, r store.JoinRequest) (store.ServerRecord, error) {
	name, addr, lease := r.Name, r.Addr, r.Lease
	var (
		m    store.ServerRecord
		held bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('aion-server:' || $1))`, name); err != nil {
			return err
		}
		if err := s.takeOverGone(ctx, tx, name); err != nil {
			return err
		}
		var (
			other      int64
			leaseUntil int64
		)
		err := tx.QueryRow(ctx, `SELECT id, lease_until FROM servers WHERE name = $1 AND lease_until >= `+dbNow+`
			ORDER BY lease_until DESC LIMIT 1`, name).Scan(&other, &leaseUntil)
		switch {
		case err == nil:
			return fmt.Errorf("server %d holds a lease until %s: %w", other,
				time.Unix(0, leaseUntil).UTC().Format(time.RFC3339Nano), store.ErrNameTaken)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var started, until int64
		err = tx.QueryRow(ctx, `INSERT INTO servers (name, addr, started_at, lease_until, presence)
			VALUES ($1, $2, `+dbNow+`, `+dbNow+` + $3, true) RETURNING id, started_at, lease_until`,
			name, addr, int64(lease)).Scan(&m.ID, &started, &until)
		if err != nil {
			return err
		}
		// The lock is taken before the row commits: while the row is
		// visible as present, its lock is held.
		if err := s.pres.hold(ctx, m.ID); err != nil {
			return err
		}
		held = true
		m.Name, m.Addr = name, addr
		m.StartedAt, m.LeaseUntil = store.FromUnixNanos(started), store.FromUnixNanos(until)
		return nil
	})
	if err != nil {
		if held {
			s.pres.let(context.WithoutCancel(ctx), m.ID)
		}
		return store.ServerRecord{}, fmt.Errorf("join cluster as %q: %w", name, dbErr(err))
	}
	return m, s.announce(ctx, channelTopology, strconv.FormatInt(int64(m.ID), 10))
}

// takeOverGone reaps, in tx (which holds the name's lock), every member
// named name whose lease has not run out but whose process is provably gone:
// it joined holding a presence lock, and that lock is free now. Its ID is
// fenced like that of any reaped server: its membership row is gone, so it
// claims nothing, and its writes about the work it owned match no row.
func (s *Store) takeOverGone(ctx context.Context, tx pgx.Tx, name string) error {
	rows, err := tx.Query(ctx, `SELECT id, name, addr, started_at, lease_until FROM servers
		WHERE name = $1 AND presence AND lease_until >= `+dbNow+` FOR UPDATE`, name)
	if err != nil {
		return err
	}
	live, err := pgx.CollectRows(rows, scanServerRecord)
	if err != nil {
		return err
	}
	for _, m := range live {
		// Transaction-scoped: if the holder is gone, the lock is ours
		// until the reap commits, and a late reconnection of the holder
		// finds it taken and then its membership gone.
		var gone bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::integer, $2::integer)`,
			presenceClass, presenceKey(m.ID)).Scan(&gone); err != nil {
			return err
		}
		if !gone {
			continue
		}
		if _, err := s.release(ctx, tx, m, "was replaced by a restart under its name"); err != nil {
			return err
		}
	}
	return nil
}

func scanServerRecord(row pgx.CollectableRow) (store.ServerRecord, error) {
	var (
		m              store.ServerRecord
		started, until int64
	)
	err := row.Scan(&m.ID, &m.Name, &m.Addr, &started, &until)
	m.StartedAt, m.LeaseUntil = store.FromUnixNanos(started), store.FromUnixNanos(until)
	return m, err
}

// RenewLease implements store.Cluster.
func (s *Store) RenewLease(ctx context.Context, id store.ServerID, lease time.Duration) error {
	tag, err := s.pool.Exec(ctx, `UPDATE servers SET lease_until = `+dbNow+` + $2 WHERE id = $1`, int64(id), int64(lease))
	if err != nil {
		return fmt.Errorf("renew lease of server %d: %w", id, dbErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease of server %d: %w", id, store.ErrLeaseLost)
	}
	// A presence lock lost with its connection is taken again; until then
	// a restart under this name could take over, which fencing makes safe.
	// The lease itself is renewed either way.
	_ = s.pres.check(ctx, id)
	return nil
}

// LeaveCluster implements store.Cluster.
func (s *Store) LeaveCluster(ctx context.Context, id store.ServerID) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var m store.ServerRecord
		err := tx.QueryRow(ctx, `SELECT id, name FROM servers WHERE id = $1 FOR UPDATE`, int64(id)).Scan(&m.ID, &m.Name)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		_, err = s.release(ctx, tx, m, "")
		return err
	})
	if err != nil {
		return fmt.Errorf("leave cluster as server %d: %w", id, dbErr(err))
	}
	s.pres.let(ctx, id)
	return nil
}

// ReapServers implements store.Cluster. SKIP LOCKED lets every server reap
// at once without two of them handling the same dead server.
func (s *Store) ReapServers(ctx context.Context) ([]store.ReapedServer, error) {
	var out []store.ReapedServer
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, name, addr, started_at, lease_until FROM servers
			WHERE lease_until < `+dbNow+` ORDER BY id FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return err
		}
		dead, err := pgx.CollectRows(rows, scanServerRecord)
		if err != nil {
			return err
		}
		for _, m := range dead {
			r, err := s.release(ctx, tx, m, "stopped renewing its lease")
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		// A backstop: work owned by a server that is no member any more
		// (reaped or left while a claim of its was committing) goes back too.
		rows, err = tx.Query(ctx, `SELECT DISTINCT owner FROM activities
			WHERE owner <> 0 AND state = 'running' AND owner NOT IN (SELECT id FROM servers)`)
		if err != nil {
			return err
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range gone {
			r, err := s.release(ctx, tx, store.ServerRecord{ID: store.ServerID(id), Name: "(gone)"}, "stopped renewing its lease")
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		_, err = tx.Exec(ctx, `DELETE FROM server_messages WHERE to_server NOT IN (SELECT id FROM servers)`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reap expired servers: %w", dbErr(err))
	}
	return out, nil
}

// release hands back everything server m owned, inside tx: each running
// attempt is recorded as failed with server_lost and its activity waits for
// a retry (or is canceled, when a cancel was requested); its workers and
// messages go, and so does m. lost, when set, says why m was reaped rather
// than left (it ends the lost attempts' failure message).
func (s *Store) release(ctx context.Context, tx pgx.Tx, m store.ServerRecord, lost string) (store.ReapedServer, error) {
	r := store.ReapedServer{Server: m}
	why, topology := "left the cluster", strconv.FormatInt(int64(m.ID), 10)
	if lost != "" {
		why, topology = lost, fmt.Sprintf("%d lost %s", m.ID, m.Name)
	}
	failure := store.EncodeFailure(&store.Failure{Type: "server_lost", Retryable: true,
		Message: fmt.Sprintf("server %s (%d) %s while running the attempt", m.Name, m.ID, why)})
	canceled := store.EncodeFailure(&store.Failure{Type: "canceled", Message: "canceled while its server was lost"})
	err := tx.QueryRow(ctx, `WITH lost AS (
			SELECT namespace, id, attempt, attempt_started_at, attempt_worker, attempt_node, cancel_reason FROM activities
			WHERE owner = $1 AND state = 'running' FOR UPDATE
		), att AS (
			INSERT INTO attempts (namespace, activity_id, number, worker_id, node, started_at, ended_at, outcome, failure)
			SELECT namespace, id, attempt, attempt_worker, attempt_node, attempt_started_at, `+dbNow+`, 'failed', $2::jsonb FROM lost
			ON CONFLICT (namespace, activity_id, number) DO NOTHING
		), up AS (
			UPDATE activities a SET owner = 0,
				state = CASE WHEN l.cancel_reason IS NULL THEN 'scheduled' ELSE 'canceled' END,
				ready_at = `+dbNow+`, wait_deadline = `+waitDeadline("a.timeouts", "a.scheduled_at", dbNow)+`,
				closed_at = CASE WHEN l.cancel_reason IS NULL THEN 0 ELSE `+dbNow+` END,
				failure = CASE WHEN l.cancel_reason IS NULL THEN a.failure
					ELSE jsonb_set($3::jsonb, '{message}', to_jsonb(l.cancel_reason)) END,
				cancel_reason = NULL
			FROM lost l WHERE a.namespace = l.namespace AND a.id = l.id
			RETURNING l.cancel_reason IS NOT NULL AS was_canceled
		)
		SELECT count(*) FILTER (WHERE NOT was_canceled), count(*) FILTER (WHERE was_canceled) FROM up`,
		int64(m.ID), failure, canceled).Scan(&r.Requeued, &r.Canceled)
	if err != nil {
		return r, fmt.Errorf("release the attempts of server %d: %w", m.ID, err)
	}
	// Its runs wait for another server to hold them.
	rows, err := tx.Query(ctx, `UPDATE runs SET owner = 0 WHERE owner = $1 AND status = 'running'
		RETURNING namespace, task_queue, workflow_type`, int64(m.ID))
	if err != nil {
		return r, fmt.Errorf("release the runs of server %d: %w", m.ID, err)
	}
	var runWork [][3]string
	for rows.Next() {
		var ns, tq, typ string
		if err := rows.Scan(&ns, &tq, &typ); err != nil {
			rows.Close()
			return r, fmt.Errorf("release the runs of server %d: %w", m.ID, err)
		}
		runWork = append(runWork, store.RunWork(ns, tq, typ))
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("release the runs of server %d: %w", m.ID, err)
	}
	if len(runWork) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channelWork, encodeWork(runWork)); err != nil {
			return r, err
		}
	}
	rows, err = tx.Query(ctx, `DELETE FROM workers WHERE server = $1 RETURNING id`, int64(m.ID))
	if err != nil {
		return r, fmt.Errorf("remove the workers of server %d: %w", m.ID, err)
	}
	if r.Workers, err = pgx.CollectRows(rows, pgx.RowTo[uint64]); err != nil {
		return r, fmt.Errorf("remove the workers of server %d: %w", m.ID, err)
	}
	slices.Sort(r.Workers)
	for _, q := range []string{
		`DELETE FROM server_messages WHERE to_server = $1`,
		`DELETE FROM servers WHERE id = $1`,
	} {
		if _, err := tx.Exec(ctx, q, int64(m.ID)); err != nil {
			return r, fmt.Errorf("remove server %d: %w", m.ID, err)
		}
	}
	if r.Requeued > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channelWork, anyWork); err != nil {
			return r, err
		}
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channelTopology, topology); err != nil {
		return r, err
	}
	return r, nil
}

// claimSQL takes up to $8 ready activities of one triple, skipping rows
// another claim holds, and hands them to owner $1; the n-th oldest of them
// runs on worker $9[n] (its node label is $7).
//
// The most urgent priority goes first; within a priority the fairness keys
// share the claim by weight. Servers share no dispatch state, so a key's
// turn comes from the store: the n-th ready activity of key k ranks at the
// strides of k's running activities of the triple (less those in $10,
// whose end the claimer is still writing) plus those of its ready ones
// before it, plus a random fraction of its own stride (a stride is
// 2^32/weight, as in the engine); lowest first. A claim of several slots
// thus interleaves the keys by weight; a key holding fewer slots than its
// share goes first; and keys level on slots held draw the next turn by
// their random fractions rather than by age, so a key's older backlog
// does not win every single-slot claim.
//
// The cost follows the keys waiting, not the backlog. keys finds the first
// ready activity of each (priority, key) by a skip scan of
// activities_claim_fair, one probe per key; running reads the triple's running
// activities (activities_running_fair) only when more than one key waits;
// heads keeps the $8 keys whose first activity ranks best (no other key
// can place an activity in the claim), and each of those reads at most
// about 2·$8·weight/weights of its oldest ready rows from
// activities_claim_fair. The key's read names the key by equality as well
// as by the row-wise bound on the index's columns: the planner then counts
// only the key's rows as the index range it reads, and so stays on that
// index. Without the equalities it counted the whole triple, and on
// statistics from a smaller backlog it read all the priority's waiting work
// through activities_claim and sorted it.
//
// Candidates are read without locks; fair locks them in rank order,
// skipping those another claim holds. Should concurrent claims have locked
// every candidate, fill takes other ready work of the triple in index
// order, so contention never leaves slots idle that work could fill. fill
// locks no more rows than fair left slots for: every row a claim locks, it
// takes, so a row another claim skipped is one that claim owns, and a
// claim that found less than it asked for has seen the end of the ready
// work (no second look needed for rows that were only locked).
//
// The claim holds a key-share lock on the claimer's live membership row,
// so it either commits before a reap of that server (which then hands the
// work back) or, once the server was reaped, claims nothing. A key-share
// lock does not conflict with the lease renewal's update, so claims and
// renewals never wait for each other.
const claimSQL = `WITH RECURSIVE member AS (
		SELECT id AS member_id FROM servers WHERE id = $1 AND lease_until >= ` + dbNow + ` FOR KEY SHARE
	), keys AS (
		(SELECT priority, fairness_key, seq, fairness_weight FROM activities
			WHERE state = 'scheduled' AND namespace = $3 AND task_queue = $4 AND activity_type = $5
				AND ready_at <= $6 AND (node = '' OR node = $7) AND cancel_reason IS NULL
			ORDER BY priority, fairness_key, seq LIMIT 1)
		UNION ALL
		SELECT nx.priority, nx.fairness_key, nx.seq, nx.fairness_weight FROM keys k CROSS JOIN LATERAL (
			SELECT priority, fairness_key, seq, fairness_weight FROM activities
			WHERE state = 'scheduled' AND namespace = $3 AND task_queue = $4 AND activity_type = $5
				AND (priority, fairness_key) > (k.priority, k.fairness_key)
				AND ready_at <= $6 AND (node = '' OR node = $7) AND cancel_reason IS NULL
			ORDER BY priority, fairness_key, seq LIMIT 1) nx
	), running AS MATERIALIZED (
		SELECT fairness_key, sum(` + strideSQL + `) AS spent FROM activities
		WHERE state = 'running' AND namespace = $3 AND task_queue = $4 AND activity_type = $5
			AND id <> ALL($10::text[]) AND (SELECT count(DISTINCT fairness_key) FROM keys) > 1
		GROUP BY fairness_key
	), heads AS MATERIALIZED (
		SELECT h.*, sum(greatest(h.fairness_weight, 1)) OVER () AS weights FROM (
			SELECT k.*, coalesce(r.spent, 0) + k.phase * (4294967296 / greatest(k.fairness_weight, 1)) AS pass
			FROM (SELECT keys.*, random() AS phase FROM keys) k LEFT JOIN running r ON r.fairness_key = k.fairness_key
			ORDER BY k.priority, pass, k.seq
			LIMIT $8::bigint) h
	), ranked AS (
		SELECT w.seq, h.priority,
			h.pass + sum(w.stride) OVER (PARTITION BY h.priority, h.fairness_key ORDER BY w.seq) - first_value(w.stride) OVER (
				PARTITION BY h.priority, h.fairness_key ORDER BY w.seq) AS pass
		FROM heads h CROSS JOIN LATERAL (
			SELECT seq, ` + strideSQL + ` AS stride FROM activities
			WHERE state = 'scheduled' AND namespace = $3 AND task_queue = $4 AND activity_type = $5
				AND priority = h.priority AND fairness_key = h.fairness_key
				AND (priority, fairness_key, seq) >= (h.priority, h.fairness_key, h.seq)
				AND ready_at <= $6 AND (node = '' OR node = $7) AND cancel_reason IS NULL
			ORDER BY priority, fairness_key, seq
			LIMIT least($8::bigint, 1 + ceil(2.0 * $8::bigint * greatest(h.fairness_weight, 1) / h.weights)::bigint)) w
	), fair AS (
		SELECT a.seq AS claim_seq FROM ranked c JOIN activities a ON a.seq = c.seq
		WHERE a.state = 'scheduled' AND a.cancel_reason IS NULL
		ORDER BY c.priority, c.pass, c.seq
		LIMIT $8::bigint FOR UPDATE OF a SKIP LOCKED
	), fill AS (
		SELECT seq AS claim_seq FROM activities
		WHERE state = 'scheduled' AND namespace = $3 AND task_queue = $4 AND activity_type = $5
			AND ready_at <= $6 AND (node = '' OR node = $7) AND cancel_reason IS NULL
			AND seq NOT IN (SELECT claim_seq FROM fair)
		ORDER BY priority, fairness_key, seq LIMIT $8::bigint - (SELECT count(*) FROM fair) FOR UPDATE SKIP LOCKED
	), picked AS (
		SELECT coalesce(array_agg(claim_seq ORDER BY claim_seq), '{}') AS seqs FROM (
			SELECT claim_seq FROM fair UNION ALL (SELECT claim_seq FROM fill) LIMIT $8::bigint) p
	)
	UPDATE activities a SET state = 'running', attempt = a.attempt + 1, owner = $1, attempt_started_at = $2,
		attempt_worker = coalesce(($9::bigint[])[array_position(picked.seqs, a.seq)], 0), attempt_node = $7
	FROM member, picked
	WHERE a.seq = ANY(picked.seqs)
	RETURNING ` + store.ActivityColumns

// asyncCommitSQL, first in a batch, lets the batch's transaction commit
// without waiting for its WAL to be flushed.
const asyncCommitSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// strideSQL is an activity's stride: what running it costs its fairness
// key's share.
const strideSQL = `(4294967296 / greatest(fairness_weight, 1))`

// ClaimActivities implements store.Cluster: every claim without a flow
// limit is one statement, and all of them travel in one round trip; a claim
// with a limit runs in a transaction of its own (see claimLimited).
func (s *Store) ClaimActivities(ctx context.Context, r store.ClaimRequest) ([]store.ClaimResult, error) {
	owner, now, claims := r.Owner, r.Now, r.Claims
	out := make([]store.ClaimResult, len(claims))
	b := &pgx.Batch{}
	// A claim need not wait for its commit to reach disk: if the database
	// loses it in a crash, the activity is waiting again and is claimed
	// anew, as after this server's own crash (attempts are recorded when
	// they end, and that write is durable and flushes the claim with it).
	b.Queue(asyncCommitSQL)
	var plain []int
	for i, c := range claims {
		if c.Limit != nil {
			continue
		}
		plain = append(plain, i)
		workers := make([]int64, len(c.Workers))
		for i, w := range c.Workers {
			workers[i] = int64(w)
		}
		ended := c.Ended
		if ended == nil {
			ended = []string{}
		}
		b.Queue(claimSQL, int64(owner), store.UnixNanos(now), c.Namespace, c.TaskQueue, c.ActivityType,
			store.UnixNanos(readyBefore(c, now)), c.Node, len(c.Workers), workers, ended)
	}
	if len(plain) > 0 {
		br := s.pool.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, fmt.Errorf("claim activities: %w", dbErr(err))
		}
		for _, i := range plain {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return nil, fmt.Errorf("claim activities: %w", dbErr(err))
			}
			if out[i].Activities, err = pgx.CollectRows(rows, activityRow); err != nil {
				br.Close()
				return nil, fmt.Errorf("claim activities: %w", dbErr(err))
			}
			slices.SortFunc(out[i].Activities, func(x, y store.Activity) int { return cmp.Compare(x.Seq, y.Seq) })
		}
		if err := br.Close(); err != nil {
			return nil, fmt.Errorf("claim activities: %w", dbErr(err))
		}
	}
	for i, c := range claims {
		if c.Limit == nil {
			continue
		}
		res, err := s.claimLimited(ctx, owner, now, c)
		if err != nil {
			return nil, fmt.Errorf("claim activities: %w", dbErr(err))
		}
		out[i] = res
	}
	return out, nil
}

// readyBefore is the latest ready time a claim takes.
func readyBefore(c store.Claim, now time.Time) time.Time {
	if !c.ReadyBefore.IsZero() {
		return c.ReadyBefore
	}
	return now
}

// UnclaimActivity implements store.Cluster.
func (s *Store) UnclaimActivity(ctx context.Context, owner store.ServerID, namespace, id string) error {
	var tq, typ string
	err := s.pool.QueryRow(ctx, `UPDATE activities SET attempt = attempt - 1, owner = 0,
			state = CASE WHEN cancel_reason IS NULL THEN 'scheduled' ELSE 'canceled' END,
			failure = CASE WHEN cancel_reason IS NULL THEN failure
				ELSE jsonb_build_object('message', cancel_reason, 'type', 'canceled', 'retryable', false) END,
			closed_at = CASE WHEN cancel_reason IS NULL THEN 0 ELSE `+dbNow+` END,
			cancel_reason = NULL
		WHERE namespace = $1 AND id = $2 AND owner = $3 AND state = 'running' RETURNING task_queue, activity_type`,
		namespace, id, int64(owner)).Scan(&tq, &typ)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hand back activity %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	return s.announce(ctx, channelWork, namespace+"\t"+tq+"\t"+typ)
}

// ExpireWaitingActivities implements store.Cluster.
func (s *Store) ExpireWaitingActivities(ctx context.Context, r store.ExpireRequest) ([]store.Activity, error) {
	now, limit, failure := r.Now, r.Limit, r.Failure
	var out []store.Activity
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `SELECT `+store.ActivityColumns+` FROM activities
			WHERE state = 'scheduled' AND wait_deadline <= $1 AND wait_deadline < `+noDeadline+`
			ORDER BY wait_deadline LIMIT $2 FOR UPDATE SKIP LOCKED`, store.UnixNanos(now), limit)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, activityRow)
		if err != nil {
			return err
		}
		for _, a := range due {
			f := failure(a)
			if f == nil {
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE activities SET state = 'timed_out', failure = $1, closed_at = $2 WHERE seq = $3`,
				store.EncodeFailure(f), store.UnixNanos(now), a.Seq); err != nil {
				return err
			}
			a.State, a.Failure, a.ClosedAt = store.StateTimedOut, f, now
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire waiting activities: %w", dbErr(err))
	}
	return out, nil
}

// RequestCancel implements store.Cluster.
func (s *Store) RequestCancel(ctx context.Context, r store.CancelRequest) (store.CancelResult, error) {
	namespace, id, reason, now := r.Namespace, r.ID, r.Reason, r.Now
	var (
		outcome store.CancelOutcome
		owner   int64
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state, owner FROM activities WHERE namespace = $1 AND id = $2 FOR UPDATE`,
			namespace, id).Scan(&state, &owner)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		switch store.ActivityState(state) {
		case store.StateScheduled:
			outcome = store.CancelDone
			_, err = tx.Exec(ctx, `UPDATE activities SET state = 'canceled', failure = $1, closed_at = $2
				WHERE namespace = $3 AND id = $4`,
				store.EncodeFailure(&store.Failure{Type: "canceled", Message: reason}), store.UnixNanos(now), namespace, id)
		case store.StateRunning:
			outcome = store.CancelForwarded
			_, err = tx.Exec(ctx, `UPDATE activities SET cancel_reason = $1 WHERE namespace = $2 AND id = $3`, reason, namespace, id)
		default:
			outcome = store.CancelClosed
		}
		return err
	})
	if err != nil {
		return store.CancelResult{}, fmt.Errorf("cancel activity %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	return store.CancelResult{Outcome: outcome, Owner: store.ServerID(owner)}, nil
}

// ListCancelRequests implements store.Cluster.
func (s *Store) ListCancelRequests(ctx context.Context, owner store.ServerID) ([]store.PendingCancel, error) {
	rows, err := s.pool.Query(ctx, `SELECT namespace, id, cancel_reason FROM activities
		WHERE owner = $1 AND state = 'running' AND cancel_reason IS NOT NULL ORDER BY seq`, int64(owner))
	if err != nil {
		return nil, fmt.Errorf("list cancel requests: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingCancel, error) {
		var p store.PendingCancel
		err := row.Scan(&p.Activity.Namespace, &p.Activity.ID, &p.Reason)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list cancel requests: %w", dbErr(err))
	}
	return out, nil
}

// ListOwnedActivities implements store.Cluster.
func (s *Store) ListOwnedActivities(ctx context.Context, owner store.ServerID) ([]store.ActivityRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT namespace, id FROM activities WHERE owner = $1 AND state = 'running' ORDER BY seq`, int64(owner))
	if err != nil {
		return nil, fmt.Errorf("list owned activities: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.ActivityRef])
	if err != nil {
		return nil, fmt.Errorf("list owned activities: %w", dbErr(err))
	}
	return out, nil
}

// activityRow decodes one activity row for pgx.CollectRows.
func activityRow(row pgx.CollectableRow) (store.Activity, error) { return scanActivity(row) }

// GetActivityOwner implements store.Cluster.
func (s *Store) GetActivityOwner(ctx context.Context, namespace, id string) (store.ServerID, error) {
	var owner int64
	err := s.pool.QueryRow(ctx, `SELECT owner FROM activities WHERE namespace = $1 AND id = $2 AND state = 'running'`,
		namespace, id).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find the server running activity %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	return store.ServerID(owner), nil
}

// GetRunningAttempt implements store.Cluster.
func (s *Store) GetRunningAttempt(ctx context.Context, namespace, id string) (*store.Attempt, error) {
	var (
		at      store.Attempt
		worker  int64
		started int64
	)
	err := s.pool.QueryRow(ctx, `SELECT attempt, attempt_worker, attempt_node, attempt_started_at FROM activities
		WHERE namespace = $1 AND id = $2 AND state = 'running'`, namespace, id).Scan(&at.Number, &worker, &at.Node, &started)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the running attempt of %q in namespace %q: %w", id, namespace, dbErr(err))
	}
	at.WorkerID, at.StartedAt, at.Outcome = uint64(worker), store.FromUnixNanos(started), store.OutcomeRunning
	return &at, nil
}

// ListWaitingBacklog implements store.Cluster.
func (s *Store) ListWaitingBacklog(ctx context.Context, now time.Time) ([]store.WaitingBacklog, error) {
	rows, err := s.pool.Query(ctx, `SELECT namespace, task_queue, priority, count(*), min(ready_at) FROM activities
		WHERE state = 'scheduled' AND ready_at <= $1 GROUP BY namespace, task_queue, priority
		ORDER BY namespace COLLATE "C", task_queue COLLATE "C", priority`, store.UnixNanos(now))
	if err != nil {
		return nil, fmt.Errorf("measure the backlog: %w", dbErr(err))
	}
	var out []store.WaitingBacklog
	var (
		ns, tq      string
		priority, n int
		ready       int64
	)
	_, err = pgx.ForEachRow(rows, []any{&ns, &tq, &priority, &n, &ready}, func() error {
		if len(out) == 0 || out[len(out)-1].Namespace != ns || out[len(out)-1].TaskQueue != tq {
			out = append(out, store.WaitingBacklog{Namespace: ns, TaskQueue: tq})
		}
		b := &out[len(out)-1]
		b.Waiting += n
		if i := min(max(priority, store.HighestPriority), store.LowestPriority) - store.HighestPriority; i >= 0 {
			b.ByPriority[i] += n
		}
		if at := store.FromUnixNanos(ready); b.OldestReadyAt.IsZero() || at.Before(b.OldestReadyAt) {
			b.OldestReadyAt = at
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("measure the backlog: %w", dbErr(err))
	}
	return out, nil
}

// ListWaitingGroups implements store.Cluster.
func (s *Store) ListWaitingGroups(ctx context.Context, namespace string, now time.Time) ([]store.WaitingGroup, error) {
	rows, err := s.pool.Query(ctx, `SELECT task_queue, activity_type, priority, fairness_key, count(*) AS n, min(ready_at)
		FROM activities WHERE namespace = $1 AND state = 'scheduled' AND ready_at <= $2
		GROUP BY task_queue, activity_type, priority, fairness_key
		ORDER BY n DESC, task_queue COLLATE "C", activity_type COLLATE "C", priority, fairness_key COLLATE "C" LIMIT $3`,
		namespace, store.UnixNanos(now), store.MaxWaitingGroups)
	if err != nil {
		return nil, fmt.Errorf("count waiting work of namespace %q: %w", namespace, dbErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WaitingGroup, error) {
		var (
			g     store.WaitingGroup
			ready int64
		)
		err := row.Scan(&g.TaskQueue, &g.ActivityType, &g.Priority, &g.FairnessKey, &g.Count, &ready)
		g.OldestReadyAt = store.FromUnixNanos(ready)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("count waiting work of namespace %q: %w", namespace, dbErr(err))
	}
	return out, nil
}

// CountOpenActivities implements store.Cluster.
func (s *Store) CountOpenActivities(ctx context.Context) (map[string]store.OpenCount, error) {
	// octet_length of a bytea reads its stored length, not the value.
	rows, err := s.pool.Query(ctx, `SELECT namespace, count(*), coalesce(sum(octet_length(payload)), 0)::bigint FROM activities
		WHERE state IN ('scheduled', 'running') GROUP BY namespace`)
	if err != nil {
		return nil, fmt.Errorf("count open activities: %w", dbErr(err))
	}
	out := make(map[string]store.OpenCount)
	var (
		ns    string
		n     int
		bytes int64
	)
	_, err = pgx.ForEachRow(rows, []any{&ns, &n, &bytes}, func() error {
		out[ns] = store.OpenCount{Activities: n, PayloadBytes: bytes}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count open activities: %w", dbErr(err))
	}
	return out, nil
}

// PutWorker implements store.Cluster.
func (s *Store) PutWorker(ctx context.Context, w store.WorkerRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO workers (id, server, info) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET server = excluded.server, info = excluded.info`,
		int64(w.ID), int64(w.Server), w.Info)
	if err != nil {
		return fmt.Errorf("record worker %d: %w", w.ID, dbErr(err))
	}
	return nil
}

// DeleteWorker implements store.Cluster.
func (s *Store) DeleteWorker(ctx context.Context, id uint64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM workers WHERE id = $1`, int64(id)); err != nil {
		return fmt.Errorf("remove worker %d: %w", id, dbErr(err))
	}
	return nil
}

// ListWorkers implements store.Cluster.
func (s *Store) ListWorkers(ctx context.Context) ([]store.WorkerRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, server, info FROM workers ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.WorkerRecord])
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", dbErr(err))
	}
	return out, nil
}

// SendMessage implements store.Cluster.
func (s *Store) SendMessage(ctx context.Context, m store.Message) (int64, error) {
	to := m.To
	var id int64
	err := s.pool.QueryRow(ctx, `WITH m AS (
			INSERT INTO server_messages (to_server, from_server, kind, body, call_id) VALUES ($1, $2, $3, $4, $5) RETURNING id
		) SELECT id FROM m, pg_notify('`+channelMessage+`', $1::text)`,
		int64(to), int64(m.From), m.Kind, m.Body, m.Call).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("send %s to server %d: %w", m.Kind, to, dbErr(err))
	}
	return id, nil
}

// ReceiveMessages implements store.Cluster.
func (s *Store) ReceiveMessages(ctx context.Context, to store.ServerID) ([]store.Message, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM server_messages WHERE to_server = $1
		RETURNING id, from_server, to_server, kind, body, call_id`, int64(to))
	if err != nil {
		return nil, fmt.Errorf("receive messages: %w", dbErr(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.Message])
	if err != nil {
		return nil, fmt.Errorf("receive messages: %w", dbErr(err))
	}
	slices.SortFunc(out, func(a, b store.Message) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// PublishNotice implements store.Cluster.
func (s *Store) PublishNotice(ctx context.Context, n store.Notice) error {
	switch n.Kind {
	case store.NoticeWork:
		return s.announce(ctx, channelWork, encodeWork(n.Triples))
	case store.NoticeNamespace:
		return s.announce(ctx, channelNamespace, n.Name)
	case store.NoticeTopology:
		return s.announce(ctx, channelTopology, n.Name)
	}
	return fmt.Errorf("publish notice: notice kind %d cannot be published", n.Kind)
}

func (s *Store) announce(ctx context.Context, channel, payload string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("announce on %s: %w", channel, dbErr(err))
	}
	return nil
}

// ListenNotices implements store.Cluster on a connection of its own (LISTEN
// holds a session), reconnecting with a growing pause when it breaks.
func (s *Store) ListenNotices(ctx context.Context, self store.ServerID, fn func(store.Notice)) error {
	pause := 50 * time.Millisecond
	for first := true; ; first = false {
		began := time.Now()
		err := s.listenOnce(ctx, self, fn, !first)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(began) > time.Minute {
			pause = 50 * time.Millisecond // it worked for a while: reconnect quickly
		}
		// The connection broke (err says why); notices sent meanwhile are
		// lost, which the NoticeReconnected after reconnecting tells fn.
		_ = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, self store.ServerID, fn func(store.Notice), reconnected bool) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{channelWork, channelNamespace, channelTopology, channelMessage} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	if reconnected {
		fn(store.Notice{Kind: store.NoticeReconnected})
	}
	me := strconv.FormatInt(int64(self), 10)
	for {
		// A connection silent for a minute is replaced: a half-open TCP
		// connection would otherwise swallow notices for a long time.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			return err
		}
		if nt := noticeOf(n, me); nt.Kind != 0 {
			// A work notice from one of this pool's sessions was sent by
			// self when no other server shares the store.
			nt.Own = nt.Kind == store.NoticeWork && s.conns.has(n.PID) && s.pres.only(self)
			fn(nt)
		}
	}
}

func noticeOf(n *pgconn.Notification, me string) store.Notice {
	switch n.Channel {
	case channelWork:
		return store.Notice{Kind: store.NoticeWork, Triples: parseWork(n.Payload)}
	case channelNamespace:
		return store.Notice{Kind: store.NoticeNamespace, Name: n.Payload}
	case channelTopology:
		return store.Notice{Kind: store.NoticeTopology, Name: n.Payload}
	case channelMessage:
		if n.Payload == me {
			return store.Notice{Kind: store.NoticeMessage}
		}
	}
	return store.Notice{}
}
