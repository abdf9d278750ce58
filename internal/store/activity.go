package store

import (
	"context"
	"time"

	"github.com/aion-run/aion/internal/tracectx"
)

// ActivityState is where an activity is in its life.
type ActivityState string

// The activity states. The last four are terminal.
const (
	StateScheduled ActivityState = "scheduled"
	StateRunning   ActivityState = "running"
	StateCompleted ActivityState = "completed"
	StateFailed    ActivityState = "failed"
	StateCanceled  ActivityState = "canceled"
	StateTimedOut  ActivityState = "timed_out"
)

// Terminal reports whether no further attempt can follow.
func (s ActivityState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCanceled, StateTimedOut:
		return true
	}
	return false
}

// ActivityStates lists every state, in the order of an activity's life.
var ActivityStates = []ActivityState{StateScheduled, StateRunning, StateCompleted, StateFailed, StateCanceled, StateTimedOut}

// Valid reports whether s is a known state.
func (s ActivityState) Valid() bool {
	return s == StateScheduled || s == StateRunning || s.Terminal()
}

// AttemptOutcome is how one attempt ended, or running while it has not.
type AttemptOutcome string

// The attempt outcomes.
const (
	OutcomeRunning   AttemptOutcome = "running"
	OutcomeCompleted AttemptOutcome = "completed"
	OutcomeFailed    AttemptOutcome = "failed"
	OutcomeCanceled  AttemptOutcome = "canceled"
	OutcomeTimedOut  AttemptOutcome = "timed_out"
)

// Failure describes why an attempt or an activity failed.
type Failure struct {
	Message   string `json:"message"`
	Type      string `json:"type"`
	Retryable bool   `json:"retryable"`
	Details   []byte `json:"details,omitempty"`
}

// Timeouts bound an activity's life. Zero means none.
type Timeouts struct {
	ScheduleToStart time.Duration `json:"schedule_to_start"`
	StartToClose    time.Duration `json:"start_to_close"`
	ScheduleToClose time.Duration `json:"schedule_to_close"`
	Heartbeat       time.Duration `json:"heartbeat"`
}

// RetryPolicy decides whether and when a failed attempt is tried again.
type RetryPolicy struct {
	InitialInterval    time.Duration `json:"initial_interval"`
	BackoffCoefficient float64       `json:"backoff_coefficient"`
	MaximumInterval    time.Duration `json:"maximum_interval"`
	// MaximumAttempts caps attempts in all; 0 means no cap.
	MaximumAttempts        int      `json:"maximum_attempts"`
	NonRetryableErrorTypes []string `json:"non_retryable_error_types,omitempty"`
}

// Activity is the durable record of one scheduled unit of work.
type Activity struct {
	Namespace    string
	ID           string
	TaskQueue    string
	ActivityType string
	// Node pins the activity to workers on that node; empty means no pin.
	Node    string
	Payload []byte
	// PayloadSize is the payload's length in bytes. Reads set it also when
	// they leave the payload itself out.
	PayloadSize int
	// Fingerprint identifies the request that scheduled the activity, so
	// a repeated schedule with the same id can be told apart from a
	// different request reusing it.
	Fingerprint string
	Timeouts    Timeouts
	Retry       RetryPolicy
	// Priority orders ready work within a pool: 1 is dispatched first, 5
	// last; the store keeps 0 as DefaultPriority.
	Priority int
	// Flow holds the fairness and concurrency keys that share out a pool.
	Flow Flow
	// Origin names the schedule tick that started the activity, if any.
	Origin ScheduleOrigin
	// Trace is the trace context the activity's spans join; zero for none.
	// It is not part of the fingerprint: a repeated schedule with another
	// trace context is the same request.
	Trace tracectx.Context

	State ActivityState
	// Attempt is the number of the latest attempt, 0 before the first.
	Attempt int
	Result  []byte
	Failure *Failure
	// HeartbeatDetails are the last progress details an attempt reported.
	HeartbeatDetails []byte

	ScheduledAt time.Time
	// StartedAt is when the first attempt started; zero before.
	StartedAt time.Time
	// ReadyAt is when the next attempt may start (after a retry backoff).
	ReadyAt  time.Time
	ClosedAt time.Time
	// Seq orders activities by scheduling within one store; set by the store.
	Seq int64
}

// The priorities: 1 is dispatched first, 5 last.
const (
	HighestPriority = 1
	DefaultPriority = 3
	LowestPriority  = 5
)

// EffectivePriority is p, or DefaultPriority for 0.
func EffectivePriority(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}

// Flow is what flow control knows of a piece of work beyond its priority.
type Flow struct {
	// FairnessKey groups work (a tenant, say) that shares a pool's free
	// slots with other keys in proportion to Weight; "" is the default key.
	FairnessKey string
	// FairnessWeight is the key's share weight, 1 to MaxFairnessWeight;
	// the store keeps 0 as 1.
	FairnessWeight int
	// ConcurrencyKey names the group a namespace's concurrency and per-key
	// rate limits count this work in; "" is in no group.
	ConcurrencyKey string
}

// MaxFairnessWeight bounds a fairness key's weight.
const MaxFairnessWeight = 1000

// EffectiveWeight is w, or 1 for 0.
func EffectiveWeight(w int) int {
	if w == 0 {
		return 1
	}
	return w
}

// ScheduleOrigin names the schedule and the nominal time of the tick that
// started a piece of work; zero for work started any other way.
type ScheduleOrigin struct {
	ScheduleID string
	// Time is the tick's nominal time, before any jitter.
	Time time.Time
}

// Attempt is the durable record of one delivery of an activity to a worker.
type Attempt struct {
	Number    int
	WorkerID  uint64
	Node      string
	StartedAt time.Time
	EndedAt   time.Time
	Outcome   AttemptOutcome
	Failure   *Failure
}

// AppendAttempt appends at to attempts listed in order of number, where
// closing says at is an activity's closing attempt, kept with the activity
// and listed after the attempts recorded apart. A closing attempt that was
// also recorded apart (ended there first, for a retry the close then
// overtook) is the same attempt: the closing record, written last,
// replaces the other.
func AppendAttempt(attempts []Attempt, at Attempt, closing bool) []Attempt {
	if n := len(attempts); closing && n > 0 && attempts[n-1].Number == at.Number {
		attempts[n-1] = at
		return attempts
	}
	return append(attempts, at)
}

// Write is one durable change, applied with others in one transaction.
type Write interface{ write() }

// InsertActivity records a new activity. If one with the same namespace and
// id exists, nothing changes and Apply reports false for this write.
type InsertActivity struct {
	Activity Activity
	// Spilled says the server holds the activity in the store only, not
	// in memory: a WaitingStore pages and sweeps only such activities, and
	// returns the others whole from HeldActivities at a start.
	Spilled bool
	// Start, when set, inserts the activity already running its first
	// attempt on a worker of the server Start.Owner: a claim made with the
	// insert, for a server that has a free slot for work nothing waits
	// before. It applies only while the owner is a live cluster member;
	// otherwise, as when the id exists, nothing is inserted and Apply
	// reports false. Only a cluster store takes it (see CheckAlone).
	Start *InsertStart
}

// InsertStart says where a claimed insert's first attempt runs.
type InsertStart struct {
	// Owner is the server that owns the running activity.
	Owner ServerID
	// Worker and Node are the worker the attempt runs on and its node
	// label, as a claim records them.
	Worker uint64
	Node   string
	// At is when the attempt starts.
	At time.Time
}

// EndAttempt records one finished attempt together with the activity's new
// state: terminal, or scheduled again for a retry at ReadyAt. A nil Attempt
// records no attempt and only moves the activity (a timeout before any
// start). Attempts are written when they end, not when they start: an
// attempt cut short by a crash leaves no row and is simply run again.
type EndAttempt struct {
	Namespace, ID string
	Attempt       *Attempt
	// StartedAt is when the activity's first attempt started.
	StartedAt        time.Time
	State            ActivityState
	Result           []byte
	ActivityFailure  *Failure
	HeartbeatDetails []byte
	ReadyAt          time.Time
	ClosedAt         time.Time
	// Owner, when set, applies the write only while that server owns the
	// activity (cluster mode): a server whose lease was reaped changes
	// nothing. Backends without a cluster ignore it.
	Owner ServerID
	// Post, in cluster mode, puts a workflow step's close in its run's
	// inbox in the same transaction, when the activity is closed by then.
	Post *RunEvent
}

func (InsertActivity) write() {}
func (EndAttempt) write()     {}

// writeKey names the namespace a write belongs to: the committer keeps the
// order of writes within a namespace and may reorder writes across them.
func writeKey(w Write) string {
	switch w := w.(type) {
	case InsertActivity:
		return w.Activity.Namespace
	case EndAttempt:
		return w.Namespace
	case InsertRun:
		return w.Run.Namespace
	case AppendEvents:
		return w.Namespace
	case PostRunEvent:
		return w.Event.Namespace
	}
	return ""
}

// writeBytes estimates the bytes a write puts in the store.
func writeBytes(w Write) int {
	switch w := w.(type) {
	case InsertActivity:
		return w.Activity.Size()
	case EndAttempt:
		n := 128 + len(w.Result) + len(w.HeartbeatDetails) + w.ActivityFailure.size()
		if w.Attempt != nil {
			n += w.Attempt.Failure.size()
		}
		return n
	case InsertRun:
		return 256 + len(w.Run.Input) + eventsBytes(w.Events)
	case AppendEvents:
		n := 128 + len(w.Update.Result) + w.Update.Failure.size() + eventsBytes(w.Events)
		for _, p := range w.Post {
			n += 64 + len(p.Data)
		}
		return n
	case PostRunEvent:
		return 64 + len(w.Event.Data)
	}
	return 0
}

func eventsBytes(evs []Event) int {
	n := 0
	for _, e := range evs {
		n += 16 + len(e.Data)
	}
	return n
}

// ActivityFilter selects activities for List. Empty fields match all.
type ActivityFilter struct {
	Namespace    string
	State        ActivityState
	ActivityType string
	// Limit caps the page; 0 means 100.
	Limit int
	// Before continues a listing: only activities scheduled before the one
	// with this Seq (newest first). 0 starts at the newest.
	Before int64
	// OmitPayloads leaves the payload, result and heartbeat details and the
	// failure's details out of the activities returned (PayloadSize is set).
	OmitPayloads bool
	// MaxBytes, when more than 0, stops the listing after the activity that
	// takes the Size of those returned past it, so a listing of large
	// activities holds about MaxBytes in memory rather than Limit of them.
	MaxBytes int
}

// Size is roughly the bytes an activity takes in memory and in a response:
// its caller-supplied fields, payload, result, heartbeat details and
// failure, plus a fixed allowance for the rest.
func (a *Activity) Size() int {
	n := 128 + len(a.Namespace) + len(a.ID) + len(a.TaskQueue) + len(a.ActivityType) + len(a.Node) +
		len(a.Payload) + len(a.Result) + len(a.HeartbeatDetails)
	for _, t := range a.Retry.NonRetryableErrorTypes {
		n += len(t)
	}
	return n + a.Failure.size()
}

// size is the bytes f's text and details take; a nil failure takes none.
func (f *Failure) size() int {
	if f == nil {
		return 0
	}
	return len(f.Message) + len(f.Type) + len(f.Details)
}

// ActivityStore keeps activities and their attempts.
type ActivityStore interface {
	// Apply commits writes in one transaction, in order, and reports per
	// write whether it changed anything (false for an InsertActivity whose
	// id exists, or a write about an activity that does not exist). A batch
	// holding a write ValidateWrite refuses fails whole and changes nothing.
	Apply(ctx context.Context, writes []Write) ([]bool, error)
	// GetActivity returns one activity, or an error wrapping ErrNotFound.
	GetActivity(ctx context.Context, namespace, id string) (Activity, error)
	// ListAttempts returns an activity's attempts in order.
	ListAttempts(ctx context.Context, namespace, id string) ([]Attempt, error)
	// ListActivities returns matching activities, newest first.
	ListActivities(ctx context.Context, f ActivityFilter) ([]Activity, error)
	// OpenActivities returns every activity not in a terminal state, oldest
	// first, for recovery after a restart. Payloads longer than inline bytes
	// are left out (PayloadSize is set); a negative inline keeps them all.
	OpenActivities(ctx context.Context, inline int) ([]Activity, error)
}
