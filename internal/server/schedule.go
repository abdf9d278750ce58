package server

import (
	"context"
	"fmt"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/scheduler"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// scheduleService is the gRPC face of the scheduler.
type scheduleService struct {
	aionv1.UnimplementedScheduleServiceServer
	s *Server
}

func (ss *scheduleService) Create(ctx context.Context, r *aionv1.CreateScheduleRequest) (*aionv1.CreateScheduleResponse, error) {
	d, err := definitionFromProto(r.GetNamespace(), r.GetScheduleId(), r.GetSpec(), r.GetAction(), r.GetPolicy())
	if err != nil {
		return nil, toStatus(fmt.Errorf("create schedule: %w", err))
	}
	d.Paused, d.Note = r.GetPaused(), r.GetNote()
	v, existing, err := ss.s.sched.Create(ctx, ss.s.caller(ctx), d)
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.CreateScheduleResponse{Schedule: scheduleToProto(v), Existing: existing}, nil
}

func (ss *scheduleService) Get(ctx context.Context, r *aionv1.GetScheduleRequest) (*aionv1.GetScheduleResponse, error) {
	v, err := ss.s.sched.Get(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId(), int(r.GetUpcoming()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.GetScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) List(ctx context.Context, r *aionv1.ListSchedulesRequest) (*aionv1.ListSchedulesResponse, error) {
	list, next, err := ss.s.sched.List(ctx, ss.s.caller(ctx), r.GetNamespace(), int(r.GetPageSize()), r.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.ListSchedulesResponse{NextPageToken: next, Schedules: make([]*aionv1.Schedule, len(list))}
	for i, v := range list {
		out.Schedules[i] = scheduleToProto(v)
	}
	return out, nil
}

func (ss *scheduleService) Update(ctx context.Context, r *aionv1.UpdateScheduleRequest) (*aionv1.UpdateScheduleResponse, error) {
	d, err := definitionFromProto(r.GetNamespace(), r.GetScheduleId(), r.GetSpec(), r.GetAction(), r.GetPolicy())
	if err != nil {
		return nil, toStatus(fmt.Errorf("update schedule: %w", err))
	}
	v, err := ss.s.sched.Update(ctx, ss.s.caller(ctx), d)
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.UpdateScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) Pause(ctx context.Context, r *aionv1.PauseScheduleRequest) (*aionv1.PauseScheduleResponse, error) {
	v, err := ss.s.sched.Pause(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId(), r.GetNote())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.PauseScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) Resume(ctx context.Context, r *aionv1.ResumeScheduleRequest) (*aionv1.ResumeScheduleResponse, error) {
	v, err := ss.s.sched.Resume(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId(), r.GetNote())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.ResumeScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) Trigger(ctx context.Context, r *aionv1.TriggerScheduleRequest) (*aionv1.TriggerScheduleResponse, error) {
	overlap, err := overlapFromProto("overlap", r.GetOverlap())
	if err != nil {
		return nil, toStatus(fmt.Errorf("trigger schedule: %w", err))
	}
	v, err := ss.s.sched.Trigger(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId(), overlap)
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.TriggerScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) Backfill(ctx context.Context, r *aionv1.BackfillScheduleRequest) (*aionv1.BackfillScheduleResponse, error) {
	overlap, err := overlapFromProto("overlap", r.GetOverlap())
	if err != nil {
		return nil, toStatus(fmt.Errorf("backfill schedule: %w", err))
	}
	start, err := fromTimestamp("start_time", r.GetStartTime())
	if err != nil {
		return nil, toStatus(fmt.Errorf("backfill schedule: %w", err))
	}
	end, err := fromTimestamp("end_time", r.GetEndTime())
	if err != nil {
		return nil, toStatus(fmt.Errorf("backfill schedule: %w", err))
	}
	v, err := ss.s.sched.Backfill(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId(), start, end, overlap)
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.BackfillScheduleResponse{Schedule: scheduleToProto(v)}, nil
}

func (ss *scheduleService) Delete(ctx context.Context, r *aionv1.DeleteScheduleRequest) (*aionv1.DeleteScheduleResponse, error) {
	if err := ss.s.sched.Delete(ctx, ss.s.caller(ctx), r.GetNamespace(), r.GetScheduleId()); err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.DeleteScheduleResponse{}, nil
}

var (
	overlapsToProto = map[store.Overlap]aionv1.ScheduleOverlap{
		store.OverlapSkip:           aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP,
		store.OverlapBufferOne:      aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_BUFFER_ONE,
		store.OverlapCancelPrevious: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_CANCEL_PREVIOUS,
		store.OverlapAllowAll:       aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL,
	}
	catchUpsToProto = map[store.CatchUp]aionv1.ScheduleCatchUp{
		store.CatchUpAll:  aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL,
		store.CatchUpOne:  aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE,
		store.CatchUpSkip: aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP,
	}
	outcomesToProto = map[string]aionv1.ScheduleActionOutcome{
		store.RecordStarted:  aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_STARTED,
		store.RecordSkipped:  aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_SKIPPED,
		store.RecordBuffered: aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_BUFFERED,
		store.RecordMissed:   aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_MISSED,
		store.RecordFailed:   aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_FAILED,
	}
)

// overlapFromProto reads an overlap field; unspecified is "" (the
// default of where it is used), an unknown number is refused by name.
func overlapFromProto(field string, p aionv1.ScheduleOverlap) (store.Overlap, error) {
	if p == aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_UNSPECIFIED {
		return "", nil
	}
	for o, v := range overlapsToProto {
		if v == p {
			return o, nil
		}
	}
	return "", fmt.Errorf("%s: %d is not a known overlap policy: %w", field, p, errInvalid)
}

func catchUpFromProto(p aionv1.ScheduleCatchUp) (store.CatchUp, error) {
	if p == aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_UNSPECIFIED {
		return "", nil
	}
	for c, v := range catchUpsToProto {
		if v == p {
			return c, nil
		}
	}
	return "", fmt.Errorf("policy.catch_up: %d is not a known catch-up policy: %w", p, errInvalid)
}

// definitionFromProto reads a schedule's definition; what the scheduler
// checks (names, the cron expression, ranges) it checks.
func definitionFromProto(ns, id string, sp *aionv1.ScheduleSpec, a *aionv1.ScheduleAction, p *aionv1.SchedulePolicy) (scheduler.Definition, error) {
	d := scheduler.Definition{Namespace: ns, ID: id}
	var err error
	durs := []struct {
		field string
		in    *durationpb.Duration
		out   *time.Duration
	}{
		{"spec.every", sp.GetEvery(), &d.Spec.Every},
		{"spec.offset", sp.GetOffset(), &d.Spec.Offset},
		{"spec.jitter", sp.GetJitter(), &d.Spec.Jitter},
		{"action.schedule_to_start_timeout", a.GetScheduleToStartTimeout(), &d.Action.Timeouts.ScheduleToStart},
		{"action.start_to_close_timeout", a.GetStartToCloseTimeout(), &d.Action.Timeouts.StartToClose},
		{"action.schedule_to_close_timeout", a.GetScheduleToCloseTimeout(), &d.Action.Timeouts.ScheduleToClose},
		{"action.heartbeat_timeout", a.GetHeartbeatTimeout(), &d.Action.Timeouts.Heartbeat},
		{"action.retry_policy.initial_interval", a.GetRetryPolicy().GetInitialInterval(), &d.Action.Retry.InitialInterval},
		{"action.retry_policy.maximum_interval", a.GetRetryPolicy().GetMaximumInterval(), &d.Action.Retry.MaximumInterval},
		{"policy.catch_up_window", p.GetCatchUpWindow(), &d.Policy.CatchUpWindow},
	}
	for _, f := range durs {
		if *f.out, err = fromDur(f.field, f.in); err != nil {
			return scheduler.Definition{}, err
		}
	}
	d.Spec.Cron, d.Spec.TimeZone = sp.GetCron(), sp.GetTimeZone()
	if d.Spec.StartAt, err = fromTimestamp("spec.start_time", sp.GetStartTime()); err != nil {
		return scheduler.Definition{}, err
	}
	if d.Spec.EndAt, err = fromTimestamp("spec.end_time", sp.GetEndTime()); err != nil {
		return scheduler.Definition{}, err
	}
	switch wf, act := a.GetWorkflowType(), a.GetActivityType(); {
	case wf != "" && act != "":
		return scheduler.Definition{}, fmt.Errorf("action: workflow_type %q and activity_type %q given; a schedule starts one kind: %w", wf, act, errInvalid)
	case wf != "":
		d.Action.Kind, d.Action.Type = store.ActionWorkflow, wf
	case act != "":
		d.Action.Kind, d.Action.Type = store.ActionActivity, act
	default:
		return scheduler.Definition{}, fmt.Errorf("action: a workflow_type or an activity_type is required: %w", errInvalid)
	}
	d.Action.TaskQueue, d.Action.Node, d.Action.Input = a.GetTaskQueue(), a.GetNode(), a.GetInput()
	d.Action.Priority = int(a.GetPriority())
	d.Action.Flow = flowFromProto(a)
	if rp := a.GetRetryPolicy(); rp != nil {
		d.Action.Retry.BackoffCoefficient = rp.GetBackoffCoefficient()
		d.Action.Retry.MaximumAttempts = int(rp.GetMaximumAttempts())
		d.Action.Retry.NonRetryableErrorTypes = rp.GetNonRetryableErrorTypes()
	}
	if d.Policy.Overlap, err = overlapFromProto("policy.overlap", p.GetOverlap()); err != nil {
		return scheduler.Definition{}, err
	}
	if d.Policy.CatchUp, err = catchUpFromProto(p.GetCatchUp()); err != nil {
		return scheduler.Definition{}, err
	}
	return d, nil
}

func scheduleToProto(v scheduler.View) *aionv1.Schedule {
	sc := v.Schedule
	a := sc.Action
	action := &aionv1.ScheduleAction{TaskQueue: a.TaskQueue, Node: a.Node, Input: a.Input, Priority: int32(a.Priority),
		FairnessKey: a.Flow.FairnessKey, FairnessWeight: int32(a.Flow.FairnessWeight), ConcurrencyKey: a.Flow.ConcurrencyKey}
	if a.Kind == store.ActionWorkflow {
		action.WorkflowType = a.Type
	} else {
		action.ActivityType = a.Type
		action.ScheduleToStartTimeout = dur(a.Timeouts.ScheduleToStart)
		action.StartToCloseTimeout = dur(a.Timeouts.StartToClose)
		action.ScheduleToCloseTimeout = dur(a.Timeouts.ScheduleToClose)
		action.HeartbeatTimeout = dur(a.Timeouts.Heartbeat)
		if a.Retry.InitialInterval != 0 || a.Retry.BackoffCoefficient != 0 || a.Retry.MaximumInterval != 0 ||
			a.Retry.MaximumAttempts != 0 || len(a.Retry.NonRetryableErrorTypes) > 0 {
			action.RetryPolicy = retryToProto(a.Retry)
		}
	}
	st := sc.State
	out := &aionv1.Schedule{
		Namespace: sc.Namespace, ScheduleId: sc.ID,
		Spec: &aionv1.ScheduleSpec{Cron: sc.Spec.Cron, TimeZone: sc.Spec.TimeZone, Every: dur(sc.Spec.Every), Offset: dur(sc.Spec.Offset),
			Jitter: dur(sc.Spec.Jitter), StartTime: ts(sc.Spec.StartAt), EndTime: ts(sc.Spec.EndAt)},
		Action: action,
		Policy: &aionv1.SchedulePolicy{Overlap: overlapsToProto[sc.Policy.Overlap], CatchUp: catchUpsToProto[sc.Policy.CatchUp],
			CatchUpWindow: dur(sc.Policy.CatchUpWindow)},
		Paused: sc.Paused, Note: sc.Note,
		LastTickTime: ts(st.LastTick), BufferedTickTime: ts(st.Buffered), RunningActionIds: st.Running,
		PendingFires: int32(len(st.Pending)), BackfillsWaiting: int32(len(st.Backfills)),
		Fired: st.Fired, Skipped: st.Skipped, Missed: st.Missed,
		CreateTime: ts(sc.CreatedAt), UpdateTime: ts(sc.UpdatedAt),
	}
	for _, t := range v.Upcoming {
		out.Upcoming = append(out.Upcoming, tickToProto(t))
	}
	for _, r := range st.Recent {
		out.RecentActions = append(out.RecentActions, &aionv1.ScheduleActionRecord{NominalTime: ts(r.Nominal),
			FirstNominalTime: ts(r.First), Count: r.Count, Time: ts(r.At), Outcome: outcomesToProto[r.Outcome], Origin: r.Origin,
			ActionId: r.ActionID, RunId: r.RunID, Detail: r.Detail})
	}
	return out
}

func tickToProto(t schedule.Tick) *aionv1.ScheduleTick {
	return &aionv1.ScheduleTick{NominalTime: ts(t.Nominal), FireTime: ts(t.FireAt)}
}
