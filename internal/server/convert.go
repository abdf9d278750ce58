package server

import (
	"fmt"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// fromDur reads an optional duration field, refusing an invalid one by name.
func fromDur(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("%s: %v: %w", field, err, errInvalid)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, fmt.Errorf("%s: %v is negative: %w", field, v, errInvalid)
	}
	return v, nil
}

func failureToProto(f *store.Failure) *aionv1.Failure {
	if f == nil {
		return nil
	}
	return &aionv1.Failure{Message: f.Message, Type: f.Type, Retryable: f.Retryable, Details: f.Details}
}

func failureFromProto(f *aionv1.Failure) *store.Failure {
	if f == nil {
		return nil
	}
	return &store.Failure{Message: f.GetMessage(), Type: f.GetType(), Retryable: f.GetRetryable(), Details: f.GetDetails()}
}

var activityStates = map[store.ActivityState]aionv1.ActivityState{
	store.StateScheduled: aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED,
	store.StateRunning:   aionv1.ActivityState_ACTIVITY_STATE_RUNNING,
	store.StateCompleted: aionv1.ActivityState_ACTIVITY_STATE_COMPLETED,
	store.StateFailed:    aionv1.ActivityState_ACTIVITY_STATE_FAILED,
	store.StateCanceled:  aionv1.ActivityState_ACTIVITY_STATE_CANCELED,
	store.StateTimedOut:  aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT,
}

func stateFromProto(s aionv1.ActivityState) (store.ActivityState, error) {
	if s == aionv1.ActivityState_ACTIVITY_STATE_UNSPECIFIED {
		return "", nil
	}
	for k, v := range activityStates {
		if v == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("state: %d is not a known activity state: %w", s, errInvalid)
}

var attemptOutcomes = map[store.AttemptOutcome]aionv1.AttemptOutcome{
	store.OutcomeRunning:   aionv1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING,
	store.OutcomeCompleted: aionv1.AttemptOutcome_ATTEMPT_OUTCOME_COMPLETED,
	store.OutcomeFailed:    aionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED,
	store.OutcomeCanceled:  aionv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELED,
	store.OutcomeTimedOut:  aionv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMED_OUT,
}

func retryToProto(p store.RetryPolicy) *aionv1.RetryPolicy {
	return &aionv1.RetryPolicy{
		InitialInterval:        dur(p.InitialInterval),
		BackoffCoefficient:     p.BackoffCoefficient,
		MaximumInterval:        dur(p.MaximumInterval),
		MaximumAttempts:        int32(p.MaximumAttempts),
		NonRetryableErrorTypes: p.NonRetryableErrorTypes,
	}
}

func activityToProto(a store.Activity, attempts []store.Attempt) *aionv1.Activity {
	out := &aionv1.Activity{
		Id:                     a.ID,
		Namespace:              a.Namespace,
		TaskQueue:              a.TaskQueue,
		ActivityType:           a.ActivityType,
		Node:                   a.Node,
		Payload:                a.Payload,
		State:                  activityStates[a.State],
		Attempt:                uint32(a.Attempt),
		Result:                 a.Result,
		Failure:                failureToProto(a.Failure),
		ScheduleToStartTimeout: dur(a.Timeouts.ScheduleToStart),
		StartToCloseTimeout:    dur(a.Timeouts.StartToClose),
		ScheduleToCloseTimeout: dur(a.Timeouts.ScheduleToClose),
		HeartbeatTimeout:       dur(a.Timeouts.Heartbeat),
		RetryPolicy:            retryToProto(a.Retry),
		ScheduledTime:          ts(a.ScheduledAt),
		StartedTime:            ts(a.StartedAt),
		ClosedTime:             ts(a.ClosedAt),
		LastHeartbeatDetails:   a.HeartbeatDetails,
		PayloadSize:            uint64(max(a.PayloadSize, len(a.Payload))),
		ReadyTime:              ts(a.ReadyAt),
		Priority:               int32(a.Priority),
		FairnessKey:            a.Flow.FairnessKey,
		FairnessWeight:         int32(a.Flow.FairnessWeight),
		ConcurrencyKey:         a.Flow.ConcurrencyKey,
		ScheduleId:             a.Origin.ScheduleID,
		ScheduleTime:           ts(a.Origin.Time),
		TraceContext:           engine.TraceContextProto(a.Trace),
	}
	for _, at := range attempts {
		out.Attempts = append(out.Attempts, &aionv1.Attempt{
			Number:      uint32(at.Number),
			WorkerId:    at.WorkerID,
			Node:        at.Node,
			StartedTime: ts(at.StartedAt),
			EndedTime:   ts(at.EndedAt),
			Outcome:     attemptOutcomes[at.Outcome],
			Failure:     failureToProto(at.Failure),
		})
	}
	return out
}

func requestFromProto(r *aionv1.ScheduleRequest) (engine.Request, error) {
	if r == nil {
		return engine.Request{}, fmt.Errorf("request: missing: %w", errInvalid)
	}
	out := engine.Request{
		Namespace:    r.GetNamespace(),
		ID:           r.GetId(),
		TaskQueue:    r.GetTaskQueue(),
		ActivityType: r.GetActivityType(),
		Node:         r.GetNode(),
		Payload:      r.GetPayload(),
		Priority:     int(r.GetPriority()),
		Flow:         flowFromProto(r),
		Trace:        traceContextFromProto(r.GetTraceContext()),
	}
	var err error
	fields := []struct {
		name string
		in   *durationpb.Duration
		out  *time.Duration
	}{
		{"schedule_to_start_timeout", r.GetScheduleToStartTimeout(), &out.Timeouts.ScheduleToStart},
		{"start_to_close_timeout", r.GetStartToCloseTimeout(), &out.Timeouts.StartToClose},
		{"schedule_to_close_timeout", r.GetScheduleToCloseTimeout(), &out.Timeouts.ScheduleToClose},
		{"heartbeat_timeout", r.GetHeartbeatTimeout(), &out.Timeouts.Heartbeat},
		{"retry_policy.initial_interval", r.GetRetryPolicy().GetInitialInterval(), &out.Retry.InitialInterval},
		{"retry_policy.maximum_interval", r.GetRetryPolicy().GetMaximumInterval(), &out.Retry.MaximumInterval},
		{"start_delay", r.GetStartDelay(), &out.StartDelay},
	}
	for _, f := range fields {
		if *f.out, err = fromDur(f.name, f.in); err != nil {
			return engine.Request{}, err
		}
	}
	if p := r.GetRetryPolicy(); p != nil {
		out.Retry.BackoffCoefficient = p.GetBackoffCoefficient()
		out.Retry.MaximumAttempts = int(p.GetMaximumAttempts())
		out.Retry.NonRetryableErrorTypes = p.GetNonRetryableErrorTypes()
	}
	if out.StartAt, err = fromTimestamp("start_time", r.GetStartTime()); err != nil {
		return engine.Request{}, err
	}
	return out, nil
}

// fromTimestamp checks an optional timestamp field; unset is the zero time.
func fromTimestamp(field string, t *timestamppb.Timestamp) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if err := t.CheckValid(); err != nil {
		return time.Time{}, fmt.Errorf("%s: %v: %w", field, err, errInvalid)
	}
	return t.AsTime(), nil
}

var origins = map[store.Origin]aionv1.NamespaceOrigin{
	store.OriginWorker:   aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_WORKER,
	store.OriginSchedule: aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_SCHEDULE,
	store.OriginExplicit: aionv1.NamespaceOrigin_NAMESPACE_ORIGIN_EXPLICIT,
}

var placementModes = map[store.PlacementMode]aionv1.PlacementMode{
	store.Unplaced: aionv1.PlacementMode_PLACEMENT_MODE_UNPLACED,
	store.Prefer:   aionv1.PlacementMode_PLACEMENT_MODE_PREFER,
	store.Pinned:   aionv1.PlacementMode_PLACEMENT_MODE_PINNED,
}

func namespaceToProto(ns store.Namespace) *aionv1.Namespace {
	return &aionv1.Namespace{
		Name:         ns.Name,
		Origin:       origins[ns.Origin],
		Placement:    &aionv1.Placement{Mode: placementModes[ns.Placement.Mode], Nodes: ns.Placement.Nodes},
		CreatedTime:  ts(ns.CreatedAt),
		LastSeenTime: ts(ns.LastSeenAt),
		Retention:    dur(time.Duration(ns.Retention.Effective())),
	}
}

func placementFromProto(p *aionv1.Placement) (store.Placement, error) {
	if p == nil {
		return store.Placement{}, fmt.Errorf("placement: missing: %w", errInvalid)
	}
	for k, v := range placementModes {
		if v == p.GetMode() {
			out := store.Placement{Mode: k, Nodes: p.GetNodes()}.Normalize()
			if err := out.Validate(); err != nil {
				return store.Placement{}, fmt.Errorf("placement: %w: %w", err, errInvalid)
			}
			return out, nil
		}
	}
	return store.Placement{}, fmt.Errorf("placement.mode: %v is not unplaced, prefer or pinned: %w", p.GetMode(), errInvalid)
}

func taskToProto(t engine.Task) *aionv1.ServerMessage {
	return &aionv1.ServerMessage{Message: &aionv1.ServerMessage_ActivityTask{ActivityTask: &aionv1.ActivityTask{
		Namespace:            t.Namespace,
		ActivityId:           t.ActivityID,
		Attempt:              uint32(t.Attempt),
		TaskQueue:            t.TaskQueue,
		ActivityType:         t.ActivityType,
		Payload:              t.Payload,
		Node:                 t.Node,
		ScheduledTime:        ts(t.ScheduledAt),
		StartedTime:          ts(t.StartedAt),
		StartToCloseTimeout:  dur(t.StartToClose),
		HeartbeatTimeout:     dur(t.Heartbeat),
		Deadline:             ts(t.Deadline),
		LastHeartbeatDetails: t.HeartbeatDetails,
		WorkflowId:           t.WorkflowID,
		RunId:                t.RunID,
		Step:                 t.Step,
		TraceContext:         engine.TraceContextProto(t.Trace),
	}}}
}

// flowProto is a request that carries flow keys.
type flowProto interface {
	GetFairnessKey() string
	GetFairnessWeight() int32
	GetConcurrencyKey() string
}

// flowFromProto reads the fairness and concurrency keys of a request.
func flowFromProto(r flowProto) store.Flow {
	return store.Flow{FairnessKey: r.GetFairnessKey(), FairnessWeight: int(r.GetFairnessWeight()), ConcurrencyKey: r.GetConcurrencyKey()}
}
