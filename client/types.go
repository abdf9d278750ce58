package client

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/payload"
)

// State is where an activity is in its lifecycle.
type State string

// The activity states. The empty State means "unknown" (and, as a List
// filter, "any state").
const (
	StateScheduled State = "scheduled" // waiting for a worker
	StateRunning   State = "running"   // an attempt is in flight
	StateCompleted State = "completed" // terminal: an attempt succeeded
	StateFailed    State = "failed"    // terminal: failed with no retry left
	StateCanceled  State = "canceled"  // terminal: canceled
	StateTimedOut  State = "timed_out" // terminal: a timeout fired with no retry left
)

// States lists every valid state, in lifecycle order.
var States = []State{StateScheduled, StateRunning, StateCompleted, StateFailed, StateCanceled, StateTimedOut}

// Terminal reports whether the state is final.
func (s State) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCanceled, StateTimedOut:
		return true
	}
	return false
}

// ParseState reads a state name ("running", "timed_out", ...). It accepts
// the proto spelling too ("ACTIVITY_STATE_RUNNING") and ignores case. The
// empty string parses as the empty State.
func ParseState(s string) (State, error) {
	if s == "" {
		return "", nil
	}
	n := strings.ToLower(strings.TrimPrefix(strings.ToUpper(s), "ACTIVITY_STATE_"))
	n = strings.ReplaceAll(n, "-", "_")
	for _, st := range States {
		if string(st) == n {
			return st, nil
		}
	}
	return "", fmt.Errorf("state %q: want one of scheduled, running, completed, failed, canceled, timed_out", s)
}

func stateFromProto(s aionv1.ActivityState) State {
	switch s {
	case aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED:
		return StateScheduled
	case aionv1.ActivityState_ACTIVITY_STATE_RUNNING:
		return StateRunning
	case aionv1.ActivityState_ACTIVITY_STATE_COMPLETED:
		return StateCompleted
	case aionv1.ActivityState_ACTIVITY_STATE_FAILED:
		return StateFailed
	case aionv1.ActivityState_ACTIVITY_STATE_CANCELED:
		return StateCanceled
	case aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT:
		return StateTimedOut
	}
	return ""
}

func stateToProto(s State) (aionv1.ActivityState, error) {
	switch s {
	case "":
		return aionv1.ActivityState_ACTIVITY_STATE_UNSPECIFIED, nil
	case StateScheduled:
		return aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED, nil
	case StateRunning:
		return aionv1.ActivityState_ACTIVITY_STATE_RUNNING, nil
	case StateCompleted:
		return aionv1.ActivityState_ACTIVITY_STATE_COMPLETED, nil
	case StateFailed:
		return aionv1.ActivityState_ACTIVITY_STATE_FAILED, nil
	case StateCanceled:
		return aionv1.ActivityState_ACTIVITY_STATE_CANCELED, nil
	case StateTimedOut:
		return aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT, nil
	}
	return 0, fmt.Errorf("state %q is not a valid activity state", string(s))
}

// Outcome is how one attempt ended.
type Outcome string

// The attempt outcomes.
const (
	OutcomeRunning   Outcome = "running"
	OutcomeCompleted Outcome = "completed"
	OutcomeFailed    Outcome = "failed"
	OutcomeCanceled  Outcome = "canceled"
	OutcomeTimedOut  Outcome = "timed_out"
)

func outcomeFromProto(o aionv1.AttemptOutcome) Outcome {
	switch o {
	case aionv1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING:
		return OutcomeRunning
	case aionv1.AttemptOutcome_ATTEMPT_OUTCOME_COMPLETED:
		return OutcomeCompleted
	case aionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED:
		return OutcomeFailed
	case aionv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELED:
		return OutcomeCanceled
	case aionv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMED_OUT:
		return OutcomeTimedOut
	}
	return ""
}

// Payload is an opaque byte payload that is JSON by convention. It marshals
// to JSON as the HTTP API shows payloads: the document itself when it is
// valid JSON, null when empty, and otherwise (bytes another SDK wrote in
// some other encoding) as {"base64": "<standard base64>"}.
type Payload []byte

// MarshalJSON implements json.Marshaler.
func (p Payload) MarshalJSON() ([]byte, error) { return payload.JSON(p), nil }

// UnmarshalJSON implements json.Unmarshaler, reversing MarshalJSON: it
// keeps a JSON document as it is and decodes {"base64": …} to its bytes.
func (p *Payload) UnmarshalJSON(b []byte) error {
	v, err := payload.FromJSON(b)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// String returns the payload as text.
func (p Payload) String() string { return string(p) }

// Decode unmarshals the payload (as JSON) into v.
func (p Payload) Decode(v any) error {
	if len(p) == 0 {
		return nil
	}
	return json.Unmarshal(p, v)
}

// ActivityError is why an activity (or one attempt) did not complete: a
// failure reported by a worker, or one the server set itself (types
// "worker_lost", "start_to_close_timeout", "heartbeat_timeout",
// "schedule_to_start_timeout", "schedule_to_close_timeout", "canceled").
type ActivityError struct {
	// Type is the machine-readable error type, matched against the retry
	// policy's non-retryable types.
	Type string `json:"type"`
	// Message is the human-readable description.
	Message string `json:"message"`
	// Retryable is the worker's (or server's) verdict on the failure.
	Retryable bool `json:"retryable"`
	// Details are optional application details (JSON from the Go SDK).
	Details Payload `json:"details,omitempty"`
}

// Error implements error.
func (e *ActivityError) Error() string {
	switch {
	case e.Type != "" && e.Message != "":
		return e.Type + ": " + e.Message
	case e.Type != "":
		return e.Type
	case e.Message != "":
		return e.Message
	}
	return "activity failed"
}

func failureFromProto(f *aionv1.Failure) *ActivityError {
	if f == nil {
		return nil
	}
	return &ActivityError{Type: f.GetType(), Message: f.GetMessage(), Retryable: f.GetRetryable(), Details: Payload(f.GetDetails())}
}

// RetryPolicy decides whether and when a failed attempt is retried. Zero
// fields take the server's defaults.
type RetryPolicy struct {
	// InitialInterval is the delay before the second attempt.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the delay after each failed attempt (at
	// least 1 when set).
	BackoffCoefficient float64
	// MaximumInterval caps the delay between attempts.
	MaximumInterval time.Duration
	// MaximumAttempts counts attempts including the first; 0 means unlimited
	// (or the server default), 1 means no retry.
	MaximumAttempts int32
	// NonRetryableErrorTypes are failure types that are never retried.
	NonRetryableErrorTypes []string
}

func (p *RetryPolicy) toProto() *aionv1.RetryPolicy {
	if p == nil {
		return nil
	}
	return &aionv1.RetryPolicy{
		InitialInterval:        durationToProto(p.InitialInterval),
		BackoffCoefficient:     p.BackoffCoefficient,
		MaximumInterval:        durationToProto(p.MaximumInterval),
		MaximumAttempts:        p.MaximumAttempts,
		NonRetryableErrorTypes: p.NonRetryableErrorTypes,
	}
}

func retryPolicyFromProto(p *aionv1.RetryPolicy) RetryPolicy {
	if p == nil {
		return RetryPolicy{}
	}
	return RetryPolicy{
		InitialInterval:        p.GetInitialInterval().AsDuration(),
		BackoffCoefficient:     p.GetBackoffCoefficient(),
		MaximumInterval:        p.GetMaximumInterval().AsDuration(),
		MaximumAttempts:        p.GetMaximumAttempts(),
		NonRetryableErrorTypes: p.GetNonRetryableErrorTypes(),
	}
}

// Activity is one scheduled unit of work and its history, as the server
// reports it.
type Activity struct {
	ID           string
	Namespace    string
	TaskQueue    string
	ActivityType string
	// Node is the node pin; empty when not pinned.
	Node    string
	Payload Payload
	State   State
	// Attempt is the number of the current or last attempt; 0 before the
	// first one starts.
	Attempt uint32
	// Result is set when State is StateCompleted.
	Result Payload
	// Failure is set when State is failed, canceled or timed out.
	Failure *ActivityError

	// The effective limits, server defaults applied. HeartbeatTimeout is 0
	// when heartbeats are not required.
	ScheduleToStartTimeout time.Duration
	StartToCloseTimeout    time.Duration
	ScheduleToCloseTimeout time.Duration
	HeartbeatTimeout       time.Duration
	RetryPolicy            RetryPolicy

	// ScheduledTime is when Schedule recorded the activity; StartedTime when
	// its first attempt started; ClosedTime when it reached a terminal
	// state. Zero when not yet reached.
	ScheduledTime time.Time
	StartedTime   time.Time
	ClosedTime    time.Time
	// ReadyTime is when the activity becomes (or became) ready for its next
	// attempt: its delayed start, or the end of a retry's backoff.
	ReadyTime time.Time
	// Priority within its pool: 1 first … 5 last.
	Priority int
	// FairnessKey and FairnessWeight share its pool out between keys;
	// ConcurrencyKey is the group limits count it in.
	FairnessKey    string
	FairnessWeight int
	ConcurrencyKey string
	// ScheduleID and ScheduleTime name the schedule tick (its nominal
	// time) that scheduled the activity; empty and zero otherwise.
	ScheduleID   string
	ScheduleTime time.Time
	// TraceParent and TraceState are the W3C trace context the activity's
	// spans join (see WithTracerProvider); empty when it has none.
	TraceParent, TraceState string

	// Attempts holds every attempt so far, oldest first.
	Attempts []Attempt
	// LastHeartbeatDetails are the details of the last accepted heartbeat.
	LastHeartbeatDetails Payload
	// PayloadSize is the payload's size in bytes, set also when a listing
	// left Payload out.
	PayloadSize uint64
}

// Attempt is one delivery of an activity to one worker.
type Attempt struct {
	Number      uint32
	WorkerID    uint64
	Node        string
	StartedTime time.Time
	EndedTime   time.Time
	Outcome     Outcome
	Failure     *ActivityError
}

// activityJSON is the stable JSON shape of an Activity: snake_case names,
// durations as Go duration strings, times in RFC 3339, payloads inline.
type activityJSON struct {
	ID                     string          `json:"id"`
	Namespace              string          `json:"namespace"`
	TaskQueue              string          `json:"task_queue"`
	ActivityType           string          `json:"activity_type"`
	Node                   string          `json:"node,omitempty"`
	State                  State           `json:"state"`
	Attempt                uint32          `json:"attempt"`
	Payload                Payload         `json:"payload,omitempty"`
	PayloadSize            uint64          `json:"payload_size"`
	Result                 Payload         `json:"result,omitempty"`
	Failure                *ActivityError  `json:"failure,omitempty"`
	ScheduleToStartTimeout string          `json:"schedule_to_start_timeout,omitempty"`
	StartToCloseTimeout    string          `json:"start_to_close_timeout,omitempty"`
	ScheduleToCloseTimeout string          `json:"schedule_to_close_timeout,omitempty"`
	HeartbeatTimeout       string          `json:"heartbeat_timeout,omitempty"`
	RetryPolicy            retryPolicyJSON `json:"retry_policy"`
	ScheduledTime          *time.Time      `json:"scheduled_time,omitempty"`
	StartedTime            *time.Time      `json:"started_time,omitempty"`
	ClosedTime             *time.Time      `json:"closed_time,omitempty"`
	ReadyTime              *time.Time      `json:"ready_time,omitempty"`
	Priority               int             `json:"priority"`
	FairnessKey            string          `json:"fairness_key,omitempty"`
	FairnessWeight         int             `json:"fairness_weight,omitempty"`
	ConcurrencyKey         string          `json:"concurrency_key,omitempty"`
	ScheduleID             string          `json:"schedule_id,omitempty"`
	ScheduleTime           *time.Time      `json:"schedule_time,omitempty"`
	TraceParent            string          `json:"traceparent,omitempty"`
	TraceState             string          `json:"tracestate,omitempty"`
	Attempts               []attemptJSON   `json:"attempts,omitempty"`
	LastHeartbeatDetails   Payload         `json:"last_heartbeat_details,omitempty"`
}

type retryPolicyJSON struct {
	InitialInterval        string   `json:"initial_interval,omitempty"`
	BackoffCoefficient     float64  `json:"backoff_coefficient,omitempty"`
	MaximumInterval        string   `json:"maximum_interval,omitempty"`
	MaximumAttempts        int32    `json:"maximum_attempts"`
	NonRetryableErrorTypes []string `json:"non_retryable_error_types,omitempty"`
}

type attemptJSON struct {
	Number      uint32         `json:"number"`
	WorkerID    uint64         `json:"worker_id"`
	Node        string         `json:"node,omitempty"`
	StartedTime *time.Time     `json:"started_time,omitempty"`
	EndedTime   *time.Time     `json:"ended_time,omitempty"`
	Outcome     Outcome        `json:"outcome"`
	Failure     *ActivityError `json:"failure,omitempty"`
}

// MarshalJSON gives Activity a stable, readable JSON form (the one
// `aion activity get --output json` prints): snake_case keys, durations as
// strings such as "1m30s", times in RFC 3339, payloads inline. "attempts"
// is left out when Attempts is empty: List leaves them out, and an
// activity that never started has none ("attempt" is 0).
func (a *Activity) MarshalJSON() ([]byte, error) {
	j := activityJSON{
		ID: a.ID, Namespace: a.Namespace, TaskQueue: a.TaskQueue, ActivityType: a.ActivityType,
		Node: a.Node, State: a.State, Attempt: a.Attempt, Payload: a.Payload, PayloadSize: a.PayloadSize, Result: a.Result,
		Failure:                a.Failure,
		ScheduleToStartTimeout: durationString(a.ScheduleToStartTimeout),
		StartToCloseTimeout:    durationString(a.StartToCloseTimeout),
		ScheduleToCloseTimeout: durationString(a.ScheduleToCloseTimeout),
		HeartbeatTimeout:       durationString(a.HeartbeatTimeout),
		RetryPolicy: retryPolicyJSON{
			InitialInterval:        durationString(a.RetryPolicy.InitialInterval),
			BackoffCoefficient:     a.RetryPolicy.BackoffCoefficient,
			MaximumInterval:        durationString(a.RetryPolicy.MaximumInterval),
			MaximumAttempts:        a.RetryPolicy.MaximumAttempts,
			NonRetryableErrorTypes: a.RetryPolicy.NonRetryableErrorTypes,
		},
		ScheduledTime:        timePtr(a.ScheduledTime),
		StartedTime:          timePtr(a.StartedTime),
		ClosedTime:           timePtr(a.ClosedTime),
		ReadyTime:            timePtr(a.ReadyTime),
		Priority:             a.Priority,
		FairnessKey:          a.FairnessKey,
		FairnessWeight:       a.FairnessWeight,
		ConcurrencyKey:       a.ConcurrencyKey,
		ScheduleID:           a.ScheduleID,
		ScheduleTime:         timePtr(a.ScheduleTime),
		TraceParent:          a.TraceParent,
		TraceState:           a.TraceState,
		LastHeartbeatDetails: a.LastHeartbeatDetails,
	}
	for _, at := range a.Attempts {
		j.Attempts = append(j.Attempts, attemptJSON{
			Number: at.Number, WorkerID: at.WorkerID, Node: at.Node,
			StartedTime: timePtr(at.StartedTime), EndedTime: timePtr(at.EndedTime),
			Outcome: at.Outcome, Failure: at.Failure,
		})
	}
	return json.Marshal(j)
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func activityFromProto(p *aionv1.Activity) *Activity {
	if p == nil {
		return nil
	}
	a := &Activity{
		ID:                     p.GetId(),
		Namespace:              p.GetNamespace(),
		TaskQueue:              p.GetTaskQueue(),
		ActivityType:           p.GetActivityType(),
		Node:                   p.GetNode(),
		Payload:                Payload(p.GetPayload()),
		State:                  stateFromProto(p.GetState()),
		Attempt:                p.GetAttempt(),
		Result:                 Payload(p.GetResult()),
		Failure:                failureFromProto(p.GetFailure()),
		ScheduleToStartTimeout: durationFromProto(p.GetScheduleToStartTimeout()),
		StartToCloseTimeout:    durationFromProto(p.GetStartToCloseTimeout()),
		ScheduleToCloseTimeout: durationFromProto(p.GetScheduleToCloseTimeout()),
		HeartbeatTimeout:       durationFromProto(p.GetHeartbeatTimeout()),
		RetryPolicy:            retryPolicyFromProto(p.GetRetryPolicy()),
		ScheduledTime:          timeFromProto(p.GetScheduledTime()),
		StartedTime:            timeFromProto(p.GetStartedTime()),
		ClosedTime:             timeFromProto(p.GetClosedTime()),
		ReadyTime:              timeFromProto(p.GetReadyTime()),
		Priority:               int(p.GetPriority()),
		FairnessKey:            p.GetFairnessKey(),
		FairnessWeight:         int(p.GetFairnessWeight()),
		ConcurrencyKey:         p.GetConcurrencyKey(),
		ScheduleID:             p.GetScheduleId(),
		ScheduleTime:           timeFromProto(p.GetScheduleTime()),
		LastHeartbeatDetails:   Payload(p.GetLastHeartbeatDetails()),
		PayloadSize:            p.GetPayloadSize(),
		TraceParent:            p.GetTraceContext().GetTraceparent(),
		TraceState:             p.GetTraceContext().GetTracestate(),
	}
	for _, at := range p.GetAttempts() {
		a.Attempts = append(a.Attempts, Attempt{
			Number:      at.GetNumber(),
			WorkerID:    at.GetWorkerId(),
			Node:        at.GetNode(),
			StartedTime: timeFromProto(at.GetStartedTime()),
			EndedTime:   timeFromProto(at.GetEndedTime()),
			Outcome:     outcomeFromProto(at.GetOutcome()),
			Failure:     failureFromProto(at.GetFailure()),
		})
	}
	return a
}

func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func durationFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func timeFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// timeToProto is nil for the zero time.
func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
