package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tokenbucket"
	"github.com/jackc/pgx/v5"
)

// flowLockClass is the first key of the advisory locks that serialize the
// claims of one limited type ("flow" in ASCII), apart from the single-key
// locks JoinCluster takes.
const flowLockClass = 0x666c6f77

// limitedScanBatch is how many candidate rows one step of a limited claim
// reads beyond what it still wants.
const limitedScanBatch = 32

// claimLimited claims for one claim whose activity type has a flow limit,
// in one transaction:
//
//  1. a key-share lock on the claimer's live membership row, as claimSQL takes;
//  2. an advisory lock on the (namespace, type), so claims of the type from
//     every server run one at a time: two servers cannot both take the last
//     slot of a key or the last token of a bucket;
//  3. the running activities of the type per concurrency key, counted from
//     the rows (an owner that died counts until its reap hands the work
//     back, so no slot leaks and none is given twice);
//  4. candidates in claim order (priority, then age), a batch at a time,
//     skipping keys found full and locked rows; each is taken if its key
//     has a free slot and its bucket a token;
//  5. the taken rows are started and the buckets written back.
//
// A rate for the whole type stops the claim at its first empty bucket;
// full keys and empty per-key buckets are excluded from the next batch, so
// a key over its limit does not hide the work behind it.
func (s *Store) claimLimited(ctx context.Context, owner store.ServerID, now time.Time, c store.Claim) (store.ClaimResult, error) {
	l := c.Limit.Normalize()
	bl := l.Bucket()
	want := len(c.Workers)
	var res store.ClaimResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = store.ClaimResult{}
		var member int64
		err := tx.QueryRow(ctx, `SELECT id FROM servers WHERE id = $1 AND lease_until >= `+dbNow+` FOR KEY SHARE`, int64(owner)).Scan(&member)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // reaped: claims nothing
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2 || E'\n' || $3))`,
			flowLockClass, c.Namespace, c.ActivityType); err != nil {
			return err
		}
		running := map[string]int{}
		if l.Concurrency > 0 {
			rows, err := tx.Query(ctx, `SELECT concurrency_key, count(*) FROM activities
				WHERE namespace = $1 AND activity_type = $2 AND state = 'running' AND concurrency_key <> ''
				GROUP BY concurrency_key`, c.Namespace, c.ActivityType)
			if err != nil {
				return err
			}
			var (
				key string
				n   int
			)
			if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { running[key] = n; return nil }); err != nil {
				return err
			}
		}
		buckets := map[string]*tokenbucket.Bucket{} // by key; '' for the whole type
		touched := map[string]bool{}
		load := func(keys []string) error {
			var missing []string
			for _, k := range keys {
				if _, ok := buckets[k]; !ok && !slices.Contains(missing, k) {
					missing = append(missing, k)
				}
			}
			if len(missing) == 0 {
				return nil
			}
			rows, err := tx.Query(ctx, `SELECT key, tokens, at FROM flow_buckets
				WHERE namespace = $1 AND kind = 'activity' AND type = $2 AND key = ANY($3)`, c.Namespace, c.ActivityType, missing)
			if err != nil {
				return err
			}
			var (
				key    string
				tokens float64
				at     int64
			)
			if _, err := pgx.ForEachRow(rows, []any{&key, &tokens, &at}, func() error {
				buckets[key] = &tokenbucket.Bucket{Tokens: tokens, At: store.FromUnixNanos(at)}
				return nil
			}); err != nil {
				return err
			}
			for _, k := range missing {
				if _, ok := buckets[k]; !ok {
					b := tokenbucket.Full(bl, now)
					buckets[k] = &b
				}
			}
			return nil
		}
		// bucketKey is the bucket counting an activity of key; ok is false
		// when the rate does not hold it.
		bucketKey := func(key string) (string, bool) {
			switch {
			case l.Rate <= 0:
				return "", false
			case !l.PerKey:
				return "", true
			}
			return key, key != ""
		}
		var (
			taken    []int64
			took     = map[string]int{}
			excluded = []string{} // sent as an array: never nil, which SQL would read as NULL
			isOut    = map[string]bool{}
			prio     = 0
			seq      = int64(0)
		)
		noteNext := func(b *tokenbucket.Bucket) {
			res.Limited = true
			if next := b.Next(bl, now); res.NextToken.IsZero() || next.Before(res.NextToken) {
				res.NextToken = next
			}
		}
		// A rate of the whole type caps the claim at its tokens, so the scan
		// reads no more rows than it may take.
		wantAll := want
		if l.Rate > 0 && !l.PerKey {
			if err := load([]string{""}); err != nil {
				return err
			}
			want = min(want, buckets[""].Available(bl, now))
		}
	scan:
		for len(taken) < want {
			type cand struct {
				seq      int64
				priority int
				key      string
			}
			batch := want - len(taken) + limitedScanBatch
			rows, err := tx.Query(ctx, `SELECT seq, priority, concurrency_key FROM activities
				WHERE state = 'scheduled' AND namespace = $1 AND task_queue = $2 AND activity_type = $3
					AND ready_at <= $4 AND (node = '' OR node = $5) AND cancel_reason IS NULL
					AND (priority, seq) > ($6, $7) AND NOT (concurrency_key = ANY($8))
				ORDER BY priority, seq LIMIT $9 FOR UPDATE SKIP LOCKED`,
				c.Namespace, c.TaskQueue, c.ActivityType, store.UnixNanos(readyBefore(c, now)), c.Node,
				prio, seq, excluded, batch)
			if err != nil {
				return err
			}
			cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
				var x cand
				err := row.Scan(&x.seq, &x.priority, &x.key)
				return x, err
			})
			if err != nil {
				return err
			}
			if len(cands) == 0 {
				break
			}
			var keys []string
			for _, x := range cands {
				if k, ok := bucketKey(x.key); ok {
					keys = append(keys, k)
				}
			}
			if err := load(keys); err != nil {
				return err
			}
			for _, x := range cands {
				if len(taken) == want {
					break scan
				}
				prio, seq = x.priority, x.seq
				if isOut[x.key] {
					continue // found full earlier in this batch
				}
				if l.Concurrency > 0 && x.key != "" && running[x.key]+took[x.key] >= l.Concurrency {
					res.Limited = true
					excluded, isOut[x.key] = append(excluded, x.key), true
					continue
				}
				if k, ok := bucketKey(x.key); ok {
					b := buckets[k]
					if b.Take(bl, now, 1) == 0 {
						noteNext(b)
						if !l.PerKey {
							break scan // the whole type is out of tokens
						}
						excluded, isOut[x.key] = append(excluded, x.key), true
						continue
					}
					touched[k] = true
				}
				took[x.key]++
				taken = append(taken, x.seq)
			}
			if len(cands) < batch {
				break // that was the end of the waiting work
			}
		}
		if want < wantAll && len(taken) == want {
			noteNext(buckets[""]) // the tokens ran out before the workers did
		}
		if len(touched) > 0 {
			var (
				keys   []string
				tokens []float64
				at     []int64
				full   []int64
			)
			for k := range touched {
				b := buckets[k]
				keys, tokens = append(keys, k), append(tokens, b.Tokens)
				at, full = append(at, store.UnixNanos(b.At)), append(full, store.UnixNanos(b.FullAt(bl)))
			}
			if _, err := tx.Exec(ctx, `INSERT INTO flow_buckets (namespace, kind, type, key, tokens, at, full_at)
				SELECT $1, 'activity', $2, k, t, a, f FROM unnest($3::text[], $4::float8[], $5::bigint[], $6::bigint[]) AS u(k, t, a, f)
				ON CONFLICT (namespace, kind, type, key) DO UPDATE SET tokens = excluded.tokens, at = excluded.at, full_at = excluded.full_at`,
				c.Namespace, c.ActivityType, keys, tokens, at, full); err != nil {
				return err
			}
		}
		if len(taken) == 0 {
			return nil
		}
		workers := make([]int64, len(c.Workers))
		for i, w := range c.Workers {
			workers[i] = int64(w)
		}
		rows, err := tx.Query(ctx, `UPDATE activities a SET state = 'running', attempt = a.attempt + 1, owner = $1,
				attempt_started_at = $2, attempt_worker = coalesce(($3::bigint[])[c.claim_rank], 0), attempt_node = $4
			FROM (SELECT s AS claim_seq, row_number() OVER (ORDER BY s) AS claim_rank FROM unnest($5::bigint[]) s) c
			WHERE a.seq = c.claim_seq
			RETURNING `+store.ActivityColumns, int64(owner), store.UnixNanos(now), workers, c.Node, taken)
		if err != nil {
			return err
		}
		if res.Activities, err = pgx.CollectRows(rows, activityRow); err != nil {
			return err
		}
		slices.SortFunc(res.Activities, func(x, y store.Activity) int { return cmp.Compare(x.Seq, y.Seq) })
		return nil
	})
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim activities of %q in namespace %q under their flow limit: %w", c.ActivityType, c.Namespace, err)
	}
	return res, nil
}

// ReadFlowUsage implements store.Cluster.
func (s *Store) ReadFlowUsage(ctx context.Context, r store.FlowUsageRequest) (store.FlowUsage, error) {
	var (
		u      store.FlowUsage
		tokens *float64
		at     *int64
	)
	err := s.pool.QueryRow(ctx, `SELECT
			CASE WHEN $3 = '' THEN 0 ELSE (SELECT count(*) FROM activities
				WHERE namespace = $1 AND activity_type = $2 AND state = 'running' AND concurrency_key = $3
					AND concurrency_key <> '') END,
			b.tokens, b.at
		FROM (SELECT 1) one LEFT JOIN flow_buckets b
			ON b.namespace = $1 AND b.kind = 'activity' AND b.type = $2 AND b.key = $4`,
		r.Namespace, r.ActivityType, r.ConcurrencyKey, r.BucketKey).Scan(&u.Running, &tokens, &at)
	if err != nil {
		return store.FlowUsage{}, fmt.Errorf("read the flow usage of %q in namespace %q: %w", r.ActivityType, r.Namespace, dbErr(err))
	}
	if tokens != nil && at != nil {
		u.Bucket = &tokenbucket.Bucket{Tokens: *tokens, At: store.FromUnixNanos(*at)}
	}
	return u, nil
}

// SweepFlowBuckets implements store.Cluster.
func (s *Store) SweepFlowBuckets(ctx context.Context, now time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM flow_buckets WHERE full_at <= $1`, store.UnixNanos(now)); err != nil {
		return fmt.Errorf("sweep flow buckets: %w", dbErr(err))
	}
	return nil
}
