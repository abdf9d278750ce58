package store

import (
	"context"
	"time"

	"github.com/aion-run/aion/internal/tracectx"
)

// RunStatus is where a workflow run is in its life. Every status but
// RunRunning is closed.
type RunStatus string

// The run statuses.
const (
	RunRunning        RunStatus = "running"
	RunCompleted      RunStatus = "completed"
	RunFailed         RunStatus = "failed"
	RunCanceled       RunStatus = "canceled"
	RunTerminated     RunStatus = "terminated"
	RunContinuedAsNew RunStatus = "continued_as_new"
)

// RunStatuses lists every status, open first.
var RunStatuses = []RunStatus{RunRunning, RunCompleted, RunFailed, RunCanceled, RunTerminated, RunContinuedAsNew}

// Closed reports whether the run has ended.
func (s RunStatus) Closed() bool { return s != RunRunning && s.Valid() }

// Valid reports whether s is a known status.
func (s RunStatus) Valid() bool {
	switch s {
	case RunRunning, RunCompleted, RunFailed, RunCanceled, RunTerminated, RunContinuedAsNew:
		return true
	}
	return false
}

// Run is the durable record of one execution of a workflow id.
type Run struct {
	Namespace    string
	WorkflowID   string
	RunID        string
	WorkflowType string
	TaskQueue    string
	// BuildID is the build of the code the run started on; empty until
	// its first workflow task's commands were recorded.
	BuildID string
	Status  RunStatus
	Input   []byte
	Result  []byte
	Failure *Failure
	// Fingerprint identifies the Start request, so a repeated start can be
	// told apart from a different request reusing the workflow id.
	Fingerprint string
	// ParentWorkflowID, ParentRunID and ParentStep name the step of the
	// parent run that started this one as a child; empty for a top run.
	ParentWorkflowID string
	ParentRunID      string
	ParentStep       int64
	// NextRunID is the run this one continued as.
	NextRunID string
	// TaskFailure is the last workflow task failure while the run is open
	// (a non-deterministic error, a panic); empty once a task succeeds.
	TaskFailure string
	// HistoryLength is the sequence number of the run's last event.
	HistoryLength int64
	// Priority orders the run's workflow tasks within its pool, as an
	// activity's priority does; the store keeps 0 as DefaultPriority.
	Priority int
	// Flow holds the run's fairness and concurrency keys.
	Flow Flow
	// Origin names the schedule tick that started the run, if any.
	Origin ScheduleOrigin
	// Trace is the trace context the run's spans and its steps' activities
	// join; zero for none. It is not part of the fingerprint.
	Trace     tracectx.Context
	StartedAt time.Time
	ClosedAt  time.Time
	// Seq orders runs by start within one store; set by the store.
	Seq int64
}

// Event is one entry of a run's history: its sequence number (from 1,
// without gaps) and the event as the engine encoded it. The store never
// reads Data.
type Event struct {
	Seq  int64
	Data []byte
}

// InsertRun records a new open run with its first events. If an open run
// of the same namespace and workflow id exists, or a run with the same run
// id, nothing changes and Apply reports false for this write.
type InsertRun struct {
	Run    Run
	Events []Event
	// Owner, in cluster mode, is the server that holds the new run; 0
	// leaves it for a server with workers for it to claim. Backends without
	// a cluster ignore it.
	Owner ServerID
}

// AppendEvents adds events to an open run's history and applies Update to
// its record, only while the run is open and its history is exactly After
// events long (a fence: two writers of one run cannot both append after
// the same event). Events must be numbered After+1, After+2, …. Otherwise
// nothing changes and Apply reports false for this write.
type AppendEvents struct {
	Namespace, RunID string
	After            int64
	Events           []Event
	Update           RunUpdate
	// Owner, when set, applies the write only while that server owns the
	// run (cluster mode). Backends without a cluster ignore it.
	Owner ServerID
	// Consume deletes these run events from the run's inbox (cluster mode)
	// in the same transaction: the events the owner appended from it.
	Consume []int64
	// Post puts events in other runs' inboxes (cluster mode), only if this
	// write applies: a child's close for its parent.
	Post []RunEvent
	// Wake are work notices published once the write commits (cluster
	// mode): the close of an admitted run names its concurrency key
	// (AdmitWork). Backends without a cluster ignore it.
	Wake [][3]string
}

// RunEvent is an event for a run's history sent by a server that does not
// hold the run (cluster mode): a signal, a cancel or terminate request, a
// step activity's or a child's close. It waits in the run's inbox until the
// run's owner appends it to the history (AppendEvents.Consume).
type RunEvent struct {
	// ID is set by the store, in the order events were posted.
	ID               int64
	Namespace, RunID string
	// Data is the event as the engine encodes it.
	Data []byte
}

// PostRunEvent puts an event in an open run's inbox (cluster mode only);
// Apply reports false when the run is not open.
type PostRunEvent struct{ Event RunEvent }

func (PostRunEvent) write() {}

// RunUpdate changes a run's record alongside an AppendEvents. Zero fields
// change nothing.
type RunUpdate struct {
	// BuildID records the build the run is bound to.
	BuildID string
	// TaskFailure, when set, replaces the run's task failure ("" clears it).
	TaskFailure *string
	// Status, when set to a closed status, closes the run with Result,
	// Failure, NextRunID and ClosedAt.
	Status    RunStatus
	Result    []byte
	Failure   *Failure
	NextRunID string
	ClosedAt  time.Time
}

func (InsertRun) write()    {}
func (AppendEvents) write() {}

// RunFilter selects runs for ListRuns. Empty fields match all.
type RunFilter struct {
	Namespace    string
	Status       RunStatus
	WorkflowType string
	WorkflowID   string
	// Limit caps the page; 0 means 100.
	Limit int
	// Before continues a listing: only runs started before the one with
	// this Seq (newest first). 0 starts at the newest.
	Before int64
}

// WorkflowStore keeps runs and their histories.
type WorkflowStore interface {
	// GetRun returns one run, or an error wrapping ErrNotFound.
	GetRun(ctx context.Context, namespace, runID string) (Run, error)
	// LatestRun returns the open run of a workflow id or, when none is
	// open, its most recently started run; an error wrapping ErrNotFound
	// when it never ran.
	LatestRun(ctx context.Context, namespace, workflowID string) (Run, error)
	// ListRuns returns matching runs, newest first, without their input
	// and result.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// ReadHistory returns up to limit events of a run with a sequence
	// number above after, in order; limit 0 means all of them.
	ReadHistory(ctx context.Context, namespace, runID string, after int64, limit int) ([]Event, error)
	// OpenRuns returns every open run, oldest first, for recovery.
	OpenRuns(ctx context.Context) ([]Run, error)
	// AdmitRun admits an open run against its workflow type's concurrency
	// limit, atomically across every server of the store: the run is
	// marked admitted when it was already (idempotent), when it has no
	// concurrency key, when limit is 0 (no limit: it counts against a
	// limit set later), or when fewer than limit open runs of its
	// namespace, workflow type and concurrency key are admitted. A run
	// stays admitted until it closes; closed runs do not count. It reports
	// whether the run is admitted and how many open runs of its key are
	// admitted now (this one included when it is). A run that is missing
	// or closed is an error wrapping ErrNotFound.
	AdmitRun(ctx context.Context, namespace, runID string, limit int) (admitted bool, count int, err error)
}
