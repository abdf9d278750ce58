package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Overlap decides what a schedule's tick does while an action the schedule
// started earlier is still open.
type Overlap string

// The overlap policies.
const (
	// OverlapSkip: the tick does nothing while an earlier action is open.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne: the tick waits for the open actions to close, then
	// fires; at most one tick waits, later ones are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapCancelPrevious: the open actions are canceled and the tick fires.
	OverlapCancelPrevious Overlap = "cancel_previous"
	// OverlapAllowAll: the tick fires whatever is open.
	OverlapAllowAll Overlap = "allow_all"
)

// Overlaps lists every overlap policy.
var Overlaps = []Overlap{OverlapSkip, OverlapBufferOne, OverlapCancelPrevious, OverlapAllowAll}

// Valid reports whether o is a known policy.
func (o Overlap) Valid() bool {
	switch o {
	case OverlapSkip, OverlapBufferOne, OverlapCancelPrevious, OverlapAllowAll:
		return true
	}
	return false
}

// CatchUp decides what happens to ticks found later than a schedule's
// catch-up window, such as those that fell while no server ran.
type CatchUp string

// The catch-up policies.
const (
	// CatchUpAll: every missed tick fires, oldest first.
	CatchUpAll CatchUp = "all"
	// CatchUpOne: only the latest missed tick fires.
	CatchUpOne CatchUp = "one"
	// CatchUpSkip: no missed tick fires.
	CatchUpSkip CatchUp = "skip"
)

// CatchUps lists every catch-up policy.
var CatchUps = []CatchUp{CatchUpAll, CatchUpOne, CatchUpSkip}

// Valid reports whether c is a known policy.
func (c CatchUp) Valid() bool {
	switch c {
	case CatchUpAll, CatchUpOne, CatchUpSkip:
		return true
	}
	return false
}

// ActionKind is what a schedule's tick starts.
type ActionKind string

// The action kinds.
const (
	// ActionWorkflow starts a workflow run.
	ActionWorkflow ActionKind = "workflow"
	// ActionActivity schedules an activity.
	ActionActivity ActionKind = "activity"
)

// ScheduleSpec is when a schedule ticks: a cron expression in a time zone,
// or an interval with an offset, between optional start and end times.
type ScheduleSpec struct {
	// Cron is a cron expression of 5 fields, or 6 with seconds first; it
	// may start with CRON_TZ=<zone>. Empty when Every is set.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone Cron is read in; empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Every is the interval between ticks; Offset shifts them from the
	// Unix epoch: ticks are at epoch + Offset + k*Every.
	Every  time.Duration `json:"every,omitempty"`
	Offset time.Duration `json:"offset,omitempty"`
	// Jitter delays each tick's firing by up to this much.
	Jitter time.Duration `json:"jitter,omitempty"`
	// StartAt and EndAt bound the ticks: none before StartAt, none at or
	// after EndAt. Zero means unbounded.
	StartAt time.Time `json:"start_at,omitzero"`
	EndAt   time.Time `json:"end_at,omitzero"`
}

// ScheduleAction is what each tick starts: a workflow run or an activity,
// with its input and options.
type ScheduleAction struct {
	Kind ActionKind `json:"kind"`
	// Type is the workflow type or the activity type.
	Type      string `json:"type"`
	TaskQueue string `json:"task_queue,omitempty"`
	// Node pins an activity to workers on that node.
	Node string `json:"node,omitempty"`
	// Input is the workflow's input or the activity's payload; it is kept
	// in its own column.
	Input    []byte      `json:"-"`
	Timeouts Timeouts    `json:"timeouts,omitzero"`
	Retry    RetryPolicy `json:"retry,omitzero"`
	// Priority is the activity's or the run's priority, 1 (first) to 5;
	// 0 is the default.
	Priority int `json:"priority,omitempty"`
	// Flow carries the fairness and concurrency keys of what each tick
	// starts.
	Flow Flow `json:"flow,omitzero"`
}

// SchedulePolicy is how a schedule treats overlapping and missed ticks.
type SchedulePolicy struct {
	Overlap Overlap `json:"overlap"`
	CatchUp CatchUp `json:"catch_up"`
	// CatchUpWindow is how late a tick may fire and still count as on
	// time; a tick found later than this is missed and CatchUp decides.
	CatchUpWindow time.Duration `json:"catch_up_window"`
}

// Schedule is the durable record of one schedule: its definition (what the
// caller set) and its state (what the scheduler keeps between ticks).
type Schedule struct {
	Namespace string
	ID        string
	Spec      ScheduleSpec
	Action    ScheduleAction
	Policy    SchedulePolicy
	// Paused stops ticks from firing; Note says why.
	Paused bool
	Note   string
	State  ScheduleState
	// Version is 1 on create and one more on every update; UpdateSchedule
	// applies only over the version it was given (a compare-and-set).
	Version int64
	// NextDue is when a scheduler must next look at the schedule; zero
	// means never (paused, or no tick left).
	NextDue   time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleState is what the scheduler keeps between passes over a schedule.
type ScheduleState struct {
	// LastTick is the nominal time of the last tick handled (fired,
	// skipped, buffered or missed); only ticks after it are still ahead.
	LastTick time.Time `json:"last_tick,omitzero"`
	// Buffered is the nominal time of the tick waiting for the open
	// actions to close (buffer_one); zero when none waits.
	Buffered time.Time `json:"buffered,omitzero"`
	// Running are the ids of actions started and not yet seen closed,
	// oldest first.
	Running []string `json:"running,omitempty"`
	// Pending are fires decided and not yet carried out.
	Pending []PendingFire `json:"pending,omitempty"`
	// Backfills are backfill requests not yet worked through.
	Backfills []Backfill `json:"backfills,omitempty"`
	// Recent are the latest outcomes, oldest first.
	Recent []ScheduleRecord `json:"recent,omitempty"`
	// Fired, Skipped and Missed count ticks over the schedule's life:
	// ticks whose action started, ticks skipped by the overlap policy,
	// ticks dropped by the catch-up policy.
	Fired   int64 `json:"fired,omitempty"`
	Skipped int64 `json:"skipped,omitempty"`
	Missed  int64 `json:"missed,omitempty"`
}

// PendingFire is one fire a scheduler decided on: durable before it is
// carried out, so a fire decided before a crash is carried out after it.
type PendingFire struct {
	// Nominal is the tick's time; ActionID the deterministic id of what it
	// starts.
	Nominal  time.Time `json:"nominal"`
	ActionID string    `json:"action_id"`
	// FireAt is when the tick was due (nominal plus jitter).
	FireAt time.Time `json:"fire_at,omitzero"`
	// Origin is what produced the fire: tick, trigger, backfill, buffered.
	Origin string `json:"origin"`
	// Cancel are actions to cancel first (cancel_previous).
	Cancel []string `json:"cancel,omitempty"`
	// Decider is the scheduler process that decided, DecidedAt when.
	Decider   string    `json:"decider,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
	// Attempts counts failed tries; RetryAt is when to try again.
	Attempts int       `json:"attempts,omitempty"`
	RetryAt  time.Time `json:"retry_at,omitzero"`
}

// Backfill is a request to fire the ticks of a past time range.
type Backfill struct {
	// Start and End bound the range: ticks at or after Start, before End.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Overlap applies to the backfilled ticks instead of the schedule's.
	Overlap Overlap `json:"overlap"`
	// Done is the nominal time of the last backfilled tick handled; zero
	// before the first.
	Done time.Time `json:"done,omitzero"`
}

// ScheduleRecord is one outcome of a schedule, kept in its recent list.
type ScheduleRecord struct {
	// Nominal is the tick's time; for a missed record covering several
	// ticks, the last of them, First the first and Count how many.
	Nominal time.Time `json:"nominal"`
	First   time.Time `json:"first,omitzero"`
	Count   int64     `json:"count,omitempty"`
	// At is when the outcome happened.
	At time.Time `json:"at"`
	// Outcome is started, skipped, buffered, missed or failed.
	Outcome string `json:"outcome"`
	// Origin is tick, trigger, backfill or buffered.
	Origin   string `json:"origin,omitempty"`
	ActionID string `json:"action_id,omitempty"`
	// RunID is the run a workflow action started.
	RunID string `json:"run_id,omitempty"`
	// Detail says why: the overlap that skipped, the error that failed.
	Detail string `json:"detail,omitempty"`
}

// The outcomes a ScheduleRecord reports.
const (
	RecordStarted  = "started"
	RecordSkipped  = "skipped"
	RecordBuffered = "buffered"
	RecordMissed   = "missed"
	RecordFailed   = "failed"
)

// ScheduleFilter selects schedules for ListSchedules.
type ScheduleFilter struct {
	Namespace string
	// After, when set, lists only ids after it (byte order).
	After string
	// Limit caps the schedules returned; 0 means no cap.
	Limit int
}

// ScheduleStore keeps schedules. All methods are safe for concurrent use.
type ScheduleStore interface {
	// CreateSchedule records s with Version 1 and returns the record as
	// stored; created is false, and nothing changes, when the namespace
	// already holds a schedule with s's id (the existing record is returned).
	CreateSchedule(ctx context.Context, s Schedule) (rec Schedule, created bool, err error)
	// GetSchedule returns one schedule, or an error wrapping ErrNotFound.
	GetSchedule(ctx context.Context, namespace, id string) (Schedule, error)
	// ListSchedules returns a namespace's schedules ordered by id.
	ListSchedules(ctx context.Context, f ScheduleFilter) ([]Schedule, error)
	// UpdateSchedule replaces everything but the namespace, id and creation
	// time of the stored schedule, only while its version is still
	// s.Version, and returns the record with the version advanced by one.
	// ok is false, and nothing changes, when the version moved on; a
	// missing schedule is an error wrapping ErrNotFound.
	UpdateSchedule(ctx context.Context, s Schedule) (rec Schedule, ok bool, err error)
	// DeleteSchedule removes one schedule; a missing one is an error
	// wrapping ErrNotFound.
	DeleteSchedule(ctx context.Context, namespace, id string) error
	// DueSchedules returns up to limit schedules whose NextDue is set and
	// not after now, earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// NextScheduleDue returns the earliest NextDue set on any schedule, or
	// the zero time when none is.
	NextScheduleDue(ctx context.Context) (time.Time, error)
}

// The column layout every SQL backend uses for schedules, so the encoding
// below serves them all. definition and state are JSON; the action's input
// has its own column; next_due is Unix nanoseconds with 0 for never.

// ScheduleColumns lists the schedule columns in the order ScheduleRow scans
// them.
const ScheduleColumns = `namespace, id, version, next_due, created_at, updated_at, definition, state, input`

// scheduleDefinition is the JSON form of what the caller sets.
type scheduleDefinition struct {
	Spec   ScheduleSpec   `json:"spec"`
	Action ScheduleAction `json:"action"`
	Policy SchedulePolicy `json:"policy"`
	Paused bool           `json:"paused,omitempty"`
	Note   string         `json:"note,omitempty"`
}

// ScheduleValues are the column values of s, in ScheduleColumns order.
func ScheduleValues(s Schedule) ([]any, error) {
	def, err := json.Marshal(scheduleDefinition{Spec: s.Spec, Action: s.Action, Policy: s.Policy, Paused: s.Paused, Note: s.Note})
	if err != nil {
		return nil, fmt.Errorf("encode schedule %q: %w", s.ID, err)
	}
	st, err := json.Marshal(s.State)
	if err != nil {
		return nil, fmt.Errorf("encode state of schedule %q: %w", s.ID, err)
	}
	input := s.Action.Input
	if input == nil {
		input = []byte{} // NOT NULL: an empty input is still an input
	}
	return []any{s.Namespace, s.ID, s.Version, UnixNanos(s.NextDue), UnixNanos(s.CreatedAt), UnixNanos(s.UpdatedAt),
		string(def), string(st), input}, nil
}

// ScheduleRow receives one scanned schedule row; Decode turns it into a
// Schedule.
type ScheduleRow struct {
	s                        Schedule
	next, created, updated   int64
	definition, state, input []byte
}

// Dest returns the scan destinations in ScheduleColumns order.
func (r *ScheduleRow) Dest() []any {
	return []any{&r.s.Namespace, &r.s.ID, &r.s.Version, &r.next, &r.created, &r.updated, &r.definition, &r.state, &r.input}
}

// Decode returns the schedule the row holds.
func (r *ScheduleRow) Decode() (Schedule, error) {
	s := r.s
	var def scheduleDefinition
	if err := json.Unmarshal(r.definition, &def); err != nil {
		return Schedule{}, fmt.Errorf("decode schedule %q: %w", s.ID, err)
	}
	if err := json.Unmarshal(r.state, &s.State); err != nil {
		return Schedule{}, fmt.Errorf("decode state of schedule %q: %w", s.ID, err)
	}
	s.Spec, s.Action, s.Policy, s.Paused, s.Note = def.Spec, def.Action, def.Policy, def.Paused, def.Note
	s.Action.Input = r.input
	if len(s.Action.Input) == 0 {
		s.Action.Input = nil
	}
	s.NextDue, s.CreatedAt, s.UpdatedAt = FromUnixNanos(r.next), FromUnixNanos(r.created), FromUnixNanos(r.updated)
	return s, nil
}
