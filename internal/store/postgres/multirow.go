package postgres

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5"
)

// A stretch is a run of at least two consecutive writes of one Apply that
// one statement writes together: new waiting activities, inserted by
// insertActivitiesSQL, or closes, by closeActivitiesSQL. A batch of
// schedules or of ends then costs one statement instead of one each; the
// writes around a stretch keep their order.
type stretch struct {
	end    int  // the index just past the stretch
	closes bool // closes, not inserts
}

// stretches gives, for each write that begins a stretch, that stretch;
// nil when there is none, as for a single write.
func stretches(writes []store.Write) map[int]stretch {
	var out map[int]stretch
	for i := 0; i < len(writes)-1; {
		j := i
		switch {
		case newWaiting(writes[i]):
			for j < len(writes) && newWaiting(writes[j]) {
				j++
			}
		case plainClose(writes[i]):
			// One statement updates a row once, so an activity closed
			// twice ends the stretch: its second close comes after.
			seen := map[activityKey]bool{}
			for ; j < len(writes) && plainClose(writes[j]); j++ {
				k := keyOf(writes[j])
				if seen[k] {
					break
				}
				seen[k] = true
			}
		}
		if j-i >= 2 {
			if out == nil {
				out = make(map[int]stretch)
			}
			out[i] = stretch{end: j, closes: plainClose(writes[i])}
		}
		i = max(j, i+1)
	}
	return out
}

// activityKey names an activity: its namespace and id.
type activityKey struct{ namespace, id string }

// keyOf is the activity an insert or an end writes.
func keyOf(w store.Write) activityKey {
	switch w := w.(type) {
	case store.InsertActivity:
		return activityKey{w.Activity.Namespace, w.Activity.ID}
	case store.EndAttempt:
		return activityKey{w.Namespace, w.ID}
	}
	return activityKey{}
}

// queueStretch queues the statement that writes the stretch writes.
func queueStretch(b *pgx.Batch, writes []store.Write, closes bool) error {
	if closes {
		queueCloseActivities(b, writes)
		return nil
	}
	return queueInsertActivities(b, writes)
}

// readStretch reads what the statement of a stretch wrote: it returns the
// namespace and id of each activity it changed. The first write of each of
// those is marked in changed (an insert of an id twice inserts the first).
// It returns how many writes changed something.
func readStretch(br pgx.BatchResults, writes []store.Write, changed []bool) (int, error) {
	rows, err := br.Query()
	if err != nil {
		return 0, err
	}
	made := map[activityKey]bool{}
	for rows.Next() {
		var k activityKey
		if err := rows.Scan(&k.namespace, &k.id); err != nil {
			rows.Close()
			return 0, err
		}
		made[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for i, w := range writes {
		if k := keyOf(w); made[k] {
			changed[i] = true
			delete(made, k)
			n++
		}
	}
	return n, nil
}

// insertActivitiesSQL inserts new waiting activities ($1..$19: one array
// per column of insertStartedSQL's first nineteen parameters; $20 their
// wait deadlines, see waitDeadlineOf) in one
// statement, in array order, and returns those it inserted: a batch of
// schedules costs one statement instead of one each. An id already in the
// store, or earlier in the arrays, inserts nothing, as insertActivitySQL.
var insertActivitiesSQL = `INSERT INTO activities (namespace, id, task_queue, activity_type, node, payload,
	fingerprint, timeouts, retry, state, attempt, result, failure, heartbeat,
	scheduled_at, started_at, ready_at, closed_at, wait_deadline, priority,
	fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate)
	SELECT r.namespace, r.id, r.task_queue, r.activity_type, r.node, r.payload, r.fingerprint, r.timeouts::jsonb,
		r.retry::jsonb, 'scheduled', 0, NULL, NULL, NULL, r.scheduled_at, 0, r.ready_at, 0,
		r.wait_deadline, r.priority,
		r.fairness_key, r.fairness_weight, r.concurrency_key, r.schedule_id, r.schedule_time, r.traceparent, r.tracestate
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::text[],
		$9::text[], $10::bigint[], $11::bigint[], $12::smallint[], $13::text[], $14::integer[], $15::text[],
		$16::text[], $17::bigint[], $18::text[], $19::text[], $20::bigint[]) WITH ORDINALITY
		AS r(namespace, id, task_queue, activity_type, node, payload, fingerprint, timeouts, retry, scheduled_at,
			ready_at, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time,
			traceparent, tracestate, wait_deadline, ord)
	ORDER BY r.ord
	ON CONFLICT (namespace, id) DO NOTHING
	RETURNING namespace, id`

// newWaiting reports whether w inserts a new waiting activity, which
// insertActivitiesSQL can insert with others: not started, scheduled, with
// no attempt, result, failure or heartbeat yet.
func newWaiting(w store.Write) bool {
	in, ok := w.(store.InsertActivity)
	a := in.Activity
	return ok && in.Start == nil && a.State == store.StateScheduled && a.Attempt == 0 && a.Result == nil &&
		a.Failure == nil && a.HeartbeatDetails == nil && a.StartedAt.IsZero() && a.ClosedAt.IsZero()
}

// queueInsertActivities queues the insert of the new waiting activities of
// writes (see newWaiting) as one statement.
func queueInsertActivities(b *pgx.Batch, writes []store.Write) error {
	n := len(writes)
	var (
		ns, id, tq, typ, node, fp, timeouts, retry = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		fkey, ckey, schedID, parent, traceState    = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payload                                    = make([][]byte, n)
		scheduled, ready, schedTime, deadline      = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		priority                                   = make([]int16, n)
		weight                                     = make([]int32, n)
	)
	for i, w := range writes {
		a := w.(store.InsertActivity).Activity
		t, err := json.Marshal(a.Timeouts)
		if err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		r, err := json.Marshal(a.Retry)
		if err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		ns[i], id[i], tq[i], typ[i], node[i], payload[i], fp[i], timeouts[i], retry[i] =
			a.Namespace, a.ID, a.TaskQueue, a.ActivityType, a.Node, a.Payload, a.Fingerprint, string(t), string(r)
		scheduled[i], ready[i] = store.UnixNanos(a.ScheduledAt), store.UnixNanos(a.ReadyAt)
		priority[i], fkey[i], weight[i] = int16(store.EffectivePriority(a.Priority)), a.Flow.FairnessKey, int32(store.EffectiveWeight(a.Flow.FairnessWeight))
		ckey[i], schedID[i], schedTime[i] = a.Flow.ConcurrencyKey, a.Origin.ScheduleID, store.UnixNanos(a.Origin.Time)
		parent[i], traceState[i] = a.Trace.Parent, a.Trace.State
		deadline[i] = waitDeadlineOf(a)
	}
	b.Queue(insertActivitiesSQL, ns, id, tq, typ, node, payload, fp, timeouts, retry, scheduled, ready,
		priority, fkey, weight, ckey, schedID, schedTime, parent, traceState, deadline)
	return nil
}

// closeActivitiesSQL closes open activities, each with the attempt that
// closed it, in one statement, and returns those it closed: closeAttemptSQL
// for many rows ($1..$17: one array per column of the unnest below). Each
// activity is closed only as closeAttemptSQL would close it: while open,
// and while its owner is the row's owner when that is set.
//
// Its plan finds each row by the (namespace, id) key, one probe per close
// (checked with EXPLAIN). On a new table with no statistics PostgreSQL may
// plan a hash join over a read of the whole table instead, which is cheap
// there; the store's analyze at analyzeFirst activities replaces that plan.
// Bounding the rows by the arrays as well (namespace = ANY, id = ANY) was
// tried: the planner then joined every row with every close, quadratic in
// the closes of a commit.
var closeActivitiesSQL = `UPDATE activities a SET state = c.state, attempt = greatest(a.attempt, c.number),
		started_at = CASE WHEN a.started_at = 0 THEN c.started_at ELSE a.started_at END,
		result = c.result, heartbeat = coalesce(c.heartbeat, a.heartbeat), ready_at = c.ready_at,
		failure = c.failure::jsonb, closed_at = c.closed_at, owner = 0, cancel_reason = NULL,
		closing_number = c.number, closing_worker_id = c.worker_id, closing_node = c.node,
		closing_started_at = c.attempt_started_at, closing_ended_at = c.attempt_ended_at,
		closing_outcome = c.outcome, closing_failure = c.attempt_failure::jsonb
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bytea[], $6::text[], $7::bytea[],
		$8::bigint[], $9::bigint[], $10::bigint[], $11::integer[], $12::bigint[], $13::text[], $14::bigint[],
		$15::bigint[], $16::text[], $17::text[])
		AS c(namespace, id, state, started_at, result, failure, heartbeat, ready_at, closed_at, owner, number,
			worker_id, node, attempt_started_at, attempt_ended_at, outcome, attempt_failure)
	WHERE a.namespace = c.namespace AND a.id = c.id
		AND a.state NOT IN ('completed', 'failed', 'canceled', 'timed_out') AND (c.owner = 0 OR a.owner = c.owner)
	RETURNING a.namespace, a.id`

// plainClose reports whether w closes an activity with the attempt that
// closed it and nothing else, which closeActivitiesSQL can write with
// others.
func plainClose(w store.Write) bool {
	e, ok := w.(store.EndAttempt)
	return ok && e.Attempt != nil && e.State.Terminal() && e.Post == nil
}

// queueCloseActivities queues the closes of writes (see plainClose) as one
// statement.
func queueCloseActivities(b *pgx.Batch, writes []store.Write) {
	n := len(writes)
	var (
		ns, id, state, node, outcome          = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		failure, atFailure                    = make([]*string, n), make([]*string, n)
		result, heartbeat                     = make([][]byte, n), make([][]byte, n)
		started, ready, closed, owner, worker = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		atStarted, atEnded                    = make([]int64, n), make([]int64, n)
		number                                = make([]int32, n)
	)
	for i, w := range writes {
		e := w.(store.EndAttempt)
		at := e.Attempt
		ns[i], id[i], state[i], started[i] = e.Namespace, e.ID, string(e.State), store.UnixNanos(e.StartedAt)
		result[i], failure[i], heartbeat[i] = e.Result, jsonText(store.EncodeFailure(e.ActivityFailure)), e.HeartbeatDetails
		ready[i], closed[i], owner[i] = store.UnixNanos(e.ReadyAt), store.UnixNanos(e.ClosedAt), int64(e.Owner)
		number[i], worker[i], node[i] = int32(at.Number), int64(at.WorkerID), at.Node
		atStarted[i], atEnded[i], outcome[i] = store.UnixNanos(at.StartedAt), store.UnixNanos(at.EndedAt), string(at.Outcome)
		atFailure[i] = jsonText(store.EncodeFailure(at.Failure))
	}
	b.Queue(closeActivitiesSQL, ns, id, state, started, result, failure, heartbeat, ready, closed, owner,
		number, worker, node, atStarted, atEnded, outcome, atFailure)
}

// waitDeadlineOf is the wait_deadline of the new waiting activity a, as
// waitDeadline computes it in SQL: the statement of many inserts then parses
// no JSON for it.
func waitDeadlineOf(a store.Activity) int64 {
	d := int64(math.MaxInt64)
	if t := a.Timeouts.ScheduleToClose; t > 0 {
		d = store.UnixNanos(a.ScheduledAt) + int64(t)
	}
	if t := a.Timeouts.ScheduleToStart; t > 0 {
		d = min(d, store.UnixNanos(a.ReadyAt)+int64(t))
	}
	return d
}

// jsonText is an encoded JSON value as an element of a text array; nil
// (NULL) for none.
func jsonText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
