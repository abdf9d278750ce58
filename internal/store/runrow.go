package store

import (
	"errors"
	"fmt"
)

// The column layout every SQL backend uses for runs, so the scanning and
// decoding below serve them all. Times are Unix nanoseconds (0 for the zero
// time), the failure is JSON, and TaskFailure is "" when there is none.

// RunColumns lists the run columns in the order RunRow scans them, the
// bulky ones last.
const RunColumns = `seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
	parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
	task_failure, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate, failure, result, input`

// RunColumnsWithoutPayloads is RunColumns with the input and result read
// as NULL, for listings.
const RunColumnsWithoutPayloads = `seq, namespace, run_id, workflow_id, workflow_type, task_queue, build_id, status, fingerprint,
	parent_workflow_id, parent_run_id, parent_step, next_run_id, history_length, started_at, closed_at,
	task_failure, priority, fairness_key, fairness_weight, concurrency_key, schedule_id, schedule_time, traceparent, tracestate, failure, NULL, NULL`

// RunRow receives one scanned run row; Decode turns it into a Run.
type RunRow struct {
	r               Run
	status          string
	failure         []byte
	started, closed int64
	scheduleTime    int64
}

// Dest returns the scan destinations in RunColumns order.
func (row *RunRow) Dest() []any {
	r := &row.r
	return []any{&r.Seq, &r.Namespace, &r.RunID, &r.WorkflowID, &r.WorkflowType, &r.TaskQueue, &r.BuildID, &row.status,
		&r.Fingerprint, &r.ParentWorkflowID, &r.ParentRunID, &r.ParentStep, &r.NextRunID, &r.HistoryLength,
		&row.started, &row.closed, &r.TaskFailure, &r.Priority, &r.Flow.FairnessKey, &r.Flow.FairnessWeight,
		&r.Flow.ConcurrencyKey, &r.Origin.ScheduleID, &row.scheduleTime, &r.Trace.Parent, &r.Trace.State, &row.failure, &r.Result, &r.Input}
}

// Decode returns the run the row holds.
func (row *RunRow) Decode() (Run, error) {
	r := row.r
	r.Status = RunStatus(row.status)
	var err error
	if r.Failure, err = DecodeFailure(row.failure); err != nil {
		return Run{}, fmt.Errorf("decode failure of run %q: %w", r.RunID, err)
	}
	r.StartedAt, r.ClosedAt = FromUnixNanos(row.started), FromUnixNanos(row.closed)
	r.Origin.Time = FromUnixNanos(row.scheduleTime)
	return r, nil
}

// ValidateWrite reports a write no backend may apply because its caller
// broke the contract (a programming error, not a refusal): an InsertRun
// without a run id or workflow id, with a status other than running, or
// whose events are not numbered 1, 2, …; an AppendEvents without a run id,
// with a negative After, an unknown status, or events not numbered After+1,
// After+2, …. A backend checks every write of an Apply before it changes
// anything, so such an Apply changes nothing.
func ValidateWrite(w Write) error {
	switch w := w.(type) {
	case InsertActivity:
		if st := w.Start; st != nil {
			a := w.Activity
			if st.Owner == 0 || st.Worker == 0 {
				return fmt.Errorf("insert activity %q in namespace %q started: owner %d and worker %d must be set", a.ID, a.Namespace, st.Owner, st.Worker)
			}
			if a.State != StateScheduled || a.Attempt != 0 {
				return fmt.Errorf("insert activity %q in namespace %q started: state %q attempt %d, want a new activity (scheduled, attempt 0)",
					a.ID, a.Namespace, a.State, a.Attempt)
			}
		}
	case InsertRun:
		r := w.Run
		if r.RunID == "" {
			return fmt.Errorf("insert run of workflow %q in namespace %q: run id is empty", r.WorkflowID, r.Namespace)
		}
		if r.WorkflowID == "" {
			return fmt.Errorf("insert run %q in namespace %q: workflow id is empty", r.RunID, r.Namespace)
		}
		if r.Status != "" && r.Status != RunRunning {
			return fmt.Errorf("insert run %q in namespace %q: status %q, want %q: a new run is open", r.RunID, r.Namespace, r.Status, RunRunning)
		}
		if r.HistoryLength != 0 && r.HistoryLength != int64(len(w.Events)) {
			return fmt.Errorf("insert run %q in namespace %q: history length %d, but %d events", r.RunID, r.Namespace, r.HistoryLength, len(w.Events))
		}
		if err := checkSeqs(w.Events, 0); err != nil {
			return fmt.Errorf("insert run %q in namespace %q: %w", r.RunID, r.Namespace, err)
		}
	case AppendEvents:
		if w.RunID == "" {
			return fmt.Errorf("append events in namespace %q: run id is empty", w.Namespace)
		}
		if w.After < 0 {
			return fmt.Errorf("append events to run %q in namespace %q: after %d is negative", w.RunID, w.Namespace, w.After)
		}
		if s := w.Update.Status; s != "" && !s.Valid() {
			return fmt.Errorf("append events to run %q in namespace %q: unknown status %q", w.RunID, w.Namespace, s)
		}
		if err := checkSeqs(w.Events, w.After); err != nil {
			return fmt.Errorf("append events to run %q in namespace %q: %w", w.RunID, w.Namespace, err)
		}
	case PostRunEvent:
		if w.Event.RunID == "" || w.Event.Namespace == "" {
			return fmt.Errorf("post a run event: namespace %q and run id %q must not be empty", w.Event.Namespace, w.Event.RunID)
		}
	}
	return nil
}

// ErrClusterOnly reports a write that only a cluster store takes.
var ErrClusterOnly = errors.New("only a cluster store takes this write")

// CheckAlone refuses, for a backend without a cluster, the writes and
// fields that only a cluster store carries out: a run inbox exists only
// where several servers share the store.
func CheckAlone(w Write) error {
	switch w := w.(type) {
	case InsertActivity:
		if w.Start != nil {
			return fmt.Errorf("insert activity %q started on a cluster member: %w", w.Activity.ID, ErrClusterOnly)
		}
	case PostRunEvent:
		return fmt.Errorf("post an event to run %q: %w", w.Event.RunID, ErrClusterOnly)
	case AppendEvents:
		if len(w.Consume) > 0 || len(w.Post) > 0 {
			return fmt.Errorf("append events to run %q with inbox changes: %w", w.RunID, ErrClusterOnly)
		}
	case EndAttempt:
		if w.Post != nil {
			return fmt.Errorf("end activity %q with a run event: %w", w.ID, ErrClusterOnly)
		}
	}
	return nil
}

// checkSeqs reports events not numbered after+1, after+2, ….
func checkSeqs(evs []Event, after int64) error {
	for i, e := range evs {
		if want := after + 1 + int64(i); e.Seq != want {
			return fmt.Errorf("event %d has seq %d, want %d (events follow seq %d without gaps)", i, e.Seq, want, after)
		}
	}
	return nil
}

// EventColumns splits events into their sequence numbers and data, the
// form a backend binds as two arrays; nil data becomes empty.
func EventColumns(evs []Event) ([]int64, [][]byte) {
	seqs := make([]int64, len(evs))
	data := make([][]byte, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
		data[i] = e.Data
		if data[i] == nil {
			data[i] = []byte{}
		}
	}
	return seqs, data
}
