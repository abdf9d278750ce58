package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// The column layout every SQL backend uses for activities, so the scanning
// and decoding below serve them all. Times are Unix nanoseconds (0 for the
// zero time) so they round-trip exactly; timeouts, retry policy and failure
// are JSON.

// ActivityColumns lists the activity columns in the order ActivityRow scans
// them; the last one is the payload's length.
const ActivityColumns = `seq, namespace, id, task_queue, activity_type, node, payload, fingerprint, timeouts, retry,
	state, attempt, result, failure, heartbeat, scheduled_at, started_at, ready_at, closed_at, coalesce(length(payload), 0), priority,
	fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate`

// activityColumns is ActivityColumns with the bulky columns read through
// the given expressions.
func activityColumns(payload, result, failure, heartbeat string) string {
	return `seq, namespace, id, task_queue, activity_type, node, ` + payload + `, fingerprint, timeouts, retry,
	state, attempt, ` + result + `, ` + failure + `, ` + heartbeat + `, scheduled_at, started_at, ready_at, closed_at, coalesce(length(payload), 0), priority,
	fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate`
}

// ActivityColumnsWithoutPayloads is ActivityColumns for a listing that
// leaves the bulky fields out: payload, result and heartbeat details read as
// NULL (the payload's length is still read), and failure is the backend's
// expression for the failure column without its details.
func ActivityColumnsWithoutPayloads(failure string) string {
	return activityColumns("NULL", "NULL", failure, "NULL")
}

// ActivityColumnsInline is ActivityColumns with payloads longer than inline
// bytes read as NULL; a negative inline reads every payload.
func ActivityColumnsInline(inline int) string {
	if inline < 0 {
		return ActivityColumns
	}
	return activityColumns(fmt.Sprintf("CASE WHEN length(payload) <= %d THEN payload END", inline), "result", "failure", "heartbeat")
}

// ActivityRow receives one scanned activity row; Decode turns it into an Activity.
type ActivityRow struct {
	a                                  Activity
	timeouts, retry, failure           []byte
	state                              string
	scheduled, started, ready, closedA int64
	scheduleTime                       int64

	// The previous row's timeouts and retry policy, as stored and decoded:
	// one row scanned again and again decodes only what changed, and the
	// work of one queue mostly shares both.
	prevTimeouts, prevRetry []byte
	timeoutsV               Timeouts
	retryV                  RetryPolicy
}

// Dest returns the scan destinations in ActivityColumns order.
func (r *ActivityRow) Dest() []any {
	a := &r.a
	*a = Activity{}
	return []any{&a.Seq, &a.Namespace, &a.ID, &a.TaskQueue, &a.ActivityType, &a.Node, &a.Payload, &a.Fingerprint,
		&r.timeouts, &r.retry, &r.state, &a.Attempt, &a.Result, &r.failure, &a.HeartbeatDetails,
		&r.scheduled, &r.started, &r.ready, &r.closedA, &a.PayloadSize, &a.Priority,
		&a.Flow.FairnessKey, &a.Flow.FairnessWeight, &a.Flow.ConcurrencyKey, &a.Origin.ScheduleID, &r.scheduleTime,
		&a.Trace.Parent, &a.Trace.State}
}

// Decode returns the activity the row holds.
func (r *ActivityRow) Decode() (Activity, error) {
	a := r.a
	if r.prevTimeouts == nil || !bytes.Equal(r.timeouts, r.prevTimeouts) {
		r.timeoutsV = Timeouts{}
		if err := json.Unmarshal(r.timeouts, &r.timeoutsV); err != nil {
			r.prevTimeouts = nil
			return Activity{}, fmt.Errorf("decode timeouts of %q: %w", a.ID, err)
		}
		r.prevTimeouts = r.timeouts // the scan gives each row its own copy
	}
	a.Timeouts = r.timeoutsV
	if r.prevRetry == nil || !bytes.Equal(r.retry, r.prevRetry) {
		r.retryV = RetryPolicy{}
		if err := json.Unmarshal(r.retry, &r.retryV); err != nil {
			r.prevRetry = nil
			return Activity{}, fmt.Errorf("decode retry policy of %q: %w", a.ID, err)
		}
		r.prevRetry = r.retry
	}
	a.Retry = r.retryV
	a.Retry.NonRetryableErrorTypes = slices.Clone(r.retryV.NonRetryableErrorTypes)
	a.State = ActivityState(r.state)
	var err error
	if a.Failure, err = DecodeFailure(r.failure); err != nil {
		return Activity{}, fmt.Errorf("decode failure of %q: %w", a.ID, err)
	}
	a.ScheduledAt, a.StartedAt = FromUnixNanos(r.scheduled), FromUnixNanos(r.started)
	a.ReadyAt, a.ClosedAt = FromUnixNanos(r.ready), FromUnixNanos(r.closedA)
	a.Origin.Time = FromUnixNanos(r.scheduleTime)
	return a, nil
}

// EncodeFailure is the JSON column form of f; nil stays nil (SQL NULL).
func EncodeFailure(f *Failure) []byte {
	if f == nil {
		return nil
	}
	b, _ := json.Marshal(f) // a Failure always encodes
	return b
}

// DecodeFailure reads a failure column; nil (NULL) is no failure.
func DecodeFailure(b []byte) (*Failure, error) {
	if b == nil {
		return nil, nil
	}
	var f Failure
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// UnixNanos is the column form of t: 0 for the zero time.
func UnixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNanos reads a time column; 0 is the zero time.
func FromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
