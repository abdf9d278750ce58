package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Overlap decides what a schedule's tick does while an action the schedule
// started is still open.
type Overlap string

// The overlap policies; "" takes the default of where it is used.
const (
	// OverlapSkip: the tick does nothing (the default of a schedule).
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne: the tick waits for the open actions to close, then
	// fires; at most one waits, later ticks are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapCancelPrevious: the open actions are canceled and the tick
	// fires.
	OverlapCancelPrevious Overlap = "cancel_previous"
	// OverlapAllowAll: the tick fires whatever is open (the default of a
	// backfill).
	OverlapAllowAll Overlap = "allow_all"
)

// CatchUp decides what happens to ticks found later than a schedule's
// catch-up window, such as those that fell while no server ran.
type CatchUp string

// The catch-up policies; "" means CatchUpOne.
const (
	// CatchUpAll: every missed tick fires, oldest first.
	CatchUpAll CatchUp = "all"
	// CatchUpOne: only the latest missed tick fires.
	CatchUpOne CatchUp = "one"
	// CatchUpSkip: no missed tick fires.
	CatchUpSkip CatchUp = "skip"
)

var (
	overlaps = map[Overlap]aionv1.ScheduleOverlap{
		OverlapSkip: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP, OverlapBufferOne: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_BUFFER_ONE,
		OverlapCancelPrevious: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_CANCEL_PREVIOUS, OverlapAllowAll: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL,
	}
	catchUps = map[CatchUp]aionv1.ScheduleCatchUp{
		CatchUpAll: aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL, CatchUpOne: aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE,
		CatchUpSkip: aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP,
	}
)

// ParseOverlap reads an overlap policy by name; "" is the default.
func ParseOverlap(s string) (Overlap, error) {
	if _, ok := overlaps[Overlap(s)]; ok || s == "" {
		return Overlap(s), nil
	}
	return "", fmt.Errorf("overlap policy %q is not one of skip, buffer_one, cancel_previous, allow_all", s)
}

// ParseCatchUp reads a catch-up policy by name; "" is the default.
func ParseCatchUp(s string) (CatchUp, error) {
	if _, ok := catchUps[CatchUp(s)]; ok || s == "" {
		return CatchUp(s), nil
	}
	return "", fmt.Errorf("catch-up policy %q is not one of all, one, skip", s)
}

func overlapToProto(o Overlap) aionv1.ScheduleOverlap { return overlaps[o] }

func overlapFromProto(p aionv1.ScheduleOverlap) Overlap {
	for o, v := range overlaps {
		if v == p {
			return o
		}
	}
	return ""
}

// ScheduleSpec is when a schedule ticks: Cron (in TimeZone) or Every (with
// Offset), between StartAt and EndAt.
type ScheduleSpec struct {
	// Cron is a cron expression of 5 fields, or 6 with seconds first, or a
	// descriptor such as @daily; it may start with CRON_TZ=<zone>.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone Cron is read in; empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Every is the interval between ticks (at least 1s): ticks are at the
	// Unix epoch + Offset + k*Every.
	Every  time.Duration `json:"every,omitempty"`
	Offset time.Duration `json:"offset,omitempty"`
	// Jitter delays each tick's firing by up to this much, by an amount
	// every server computes alike.
	Jitter time.Duration `json:"jitter,omitempty"`
	// StartAt and EndAt bound the ticks; zero means unbounded.
	StartAt time.Time `json:"start_at,omitzero"`
	EndAt   time.Time `json:"end_at,omitzero"`
}

// ScheduleAction is what each tick starts: a run of WorkflowType, or an
// activity of ActivityType (exactly one of them).
type ScheduleAction struct {
	WorkflowType string `json:"workflow_type,omitempty"`
	ActivityType string `json:"activity_type,omitempty"`
	// TaskQueue selects the worker pool; empty means "default".
	TaskQueue string `json:"task_queue,omitempty"`
	// Node pins each activity to workers on that node.
	Node string `json:"node,omitempty"`
	// Input is each run's input or each activity's payload, already
	// encoded (EncodePayload encodes a value as JSON).
	Input Payload `json:"input,omitempty"`
	// The activity's timeouts and retry policy; zero takes the server's
	// defaults. Activity actions only.
	ScheduleToStartTimeout time.Duration `json:"schedule_to_start_timeout,omitempty"`
	StartToCloseTimeout    time.Duration `json:"start_to_close_timeout,omitempty"`
	ScheduleToCloseTimeout time.Duration `json:"schedule_to_close_timeout,omitempty"`
	HeartbeatTimeout       time.Duration `json:"heartbeat_timeout,omitempty"`
	RetryPolicy            *RetryPolicy  `json:"retry_policy,omitempty"`
	// Priority within the pool: 1 first, 5 last; 0 means 3.
	Priority int `json:"priority,omitempty"`
	// FairnessKey, FairnessWeight and ConcurrencyKey place what each tick
	// starts as ScheduleOptions place an activity.
	FairnessKey    string `json:"fairness_key,omitempty"`
	FairnessWeight int    `json:"fairness_weight,omitempty"`
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// SchedulePolicy is how a schedule treats overlapping and missed ticks.
type SchedulePolicy struct {
	// Overlap: what a tick does while an earlier action is open; "" means
	// OverlapSkip.
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchUp: what happens to ticks later than CatchUpWindow; "" means
	// CatchUpOne.
	CatchUp CatchUp `json:"catch_up,omitempty"`
	// CatchUpWindow is how late a tick may fire and still count as on
	// time; 0 means a minute.
	CatchUpWindow time.Duration `json:"catch_up_window,omitempty"`
}

// ScheduleDefinition is what CreateSchedule and UpdateSchedule set.
type ScheduleDefinition struct {
	// Namespace of the schedule; required.
	Namespace string
	// ID names the schedule within its namespace; required. What a tick
	// starts is named ID@<the tick's nominal time, RFC 3339, UTC>.
	ID     string
	Spec   ScheduleSpec
	Action ScheduleAction
	Policy SchedulePolicy
	// Paused creates the schedule paused, Note saying why (create only;
	// use PauseSchedule and ResumeSchedule afterwards).
	Paused bool
	Note   string
}

// ScheduleTick is one upcoming tick.
type ScheduleTick struct {
	Nominal time.Time `json:"nominal_time"`
	// FireAt is the nominal time plus the tick's jitter.
	FireAt time.Time `json:"fire_time"`
}

// ScheduleRecord is one recent outcome of a schedule.
type ScheduleRecord struct {
	// Nominal is the tick's time; for a missed record covering several
	// ticks, the last of them (First the first, Count how many).
	Nominal time.Time `json:"nominal_time"`
	First   time.Time `json:"first_nominal_time,omitzero"`
	Count   int64     `json:"count,omitempty"`
	// At is when the outcome happened.
	At time.Time `json:"time"`
	// Outcome is started, skipped, buffered, missed or failed.
	Outcome string `json:"outcome"`
	// Origin is tick, catch_up, trigger, backfill or buffered.
	Origin   string `json:"origin,omitempty"`
	ActionID string `json:"action_id,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// ScheduleView is a schedule as the server reports it: its definition and
// state.
type ScheduleView struct {
	Namespace string         `json:"namespace"`
	ID        string         `json:"schedule_id"`
	Spec      ScheduleSpec   `json:"spec"`
	Action    ScheduleAction `json:"action"`
	Policy    SchedulePolicy `json:"policy"`
	Paused    bool           `json:"paused"`
	Note      string         `json:"note,omitempty"`
	// Upcoming are its next ticks (none while paused; the next one only in a
	// listing).
	Upcoming []ScheduleTick `json:"upcoming,omitempty"`
	// Recent are its latest outcomes, oldest first.
	Recent []ScheduleRecord `json:"recent_actions,omitempty"`
	// LastTick is the nominal time of the last tick handled.
	LastTick time.Time `json:"last_tick_time,omitzero"`
	// BufferedTick is the tick waiting for open actions (buffer_one).
	BufferedTick time.Time `json:"buffered_tick_time,omitzero"`
	// RunningActions are the ids of actions started and not seen closed.
	RunningActions   []string `json:"running_action_ids,omitempty"`
	PendingFires     int      `json:"pending_fires,omitempty"`
	BackfillsWaiting int      `json:"backfills_waiting,omitempty"`
	// Fired, Skipped and Missed count its ticks: started, skipped by the
	// overlap policy, dropped by the catch-up policy.
	Fired      int64     `json:"fired"`
	Skipped    int64     `json:"skipped"`
	Missed     int64     `json:"missed"`
	CreateTime time.Time `json:"create_time"`
	UpdateTime time.Time `json:"update_time"`
}

var outcomeNames = map[aionv1.ScheduleActionOutcome]string{
	aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_STARTED:  "started",
	aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_SKIPPED:  "skipped",
	aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_BUFFERED: "buffered",
	aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_MISSED:   "missed",
	aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_FAILED:   "failed",
}

func scheduleFromProto(p *aionv1.Schedule) *ScheduleView {
	if p == nil {
		return nil
	}
	sp, a, pol := p.GetSpec(), p.GetAction(), p.GetPolicy()
	v := &ScheduleView{Namespace: p.GetNamespace(), ID: p.GetScheduleId(),
		Spec: ScheduleSpec{Cron: sp.GetCron(), TimeZone: sp.GetTimeZone(), Every: durationFromProto(sp.GetEvery()),
			Offset: durationFromProto(sp.GetOffset()), Jitter: durationFromProto(sp.GetJitter()),
			StartAt: timeFromProto(sp.GetStartTime()), EndAt: timeFromProto(sp.GetEndTime())},
		Action: ScheduleAction{WorkflowType: a.GetWorkflowType(), ActivityType: a.GetActivityType(), TaskQueue: a.GetTaskQueue(),
			Node: a.GetNode(), Input: a.GetInput(), ScheduleToStartTimeout: durationFromProto(a.GetScheduleToStartTimeout()),
			StartToCloseTimeout: durationFromProto(a.GetStartToCloseTimeout()), ScheduleToCloseTimeout: durationFromProto(a.GetScheduleToCloseTimeout()),
			HeartbeatTimeout: durationFromProto(a.GetHeartbeatTimeout()), Priority: int(a.GetPriority()), FairnessKey: a.GetFairnessKey(),
			FairnessWeight: int(a.GetFairnessWeight()), ConcurrencyKey: a.GetConcurrencyKey()},
		Policy: SchedulePolicy{Overlap: overlapFromProto(pol.GetOverlap()), CatchUpWindow: durationFromProto(pol.GetCatchUpWindow())},
		Paused: p.GetPaused(), Note: p.GetNote(), LastTick: timeFromProto(p.GetLastTickTime()),
		BufferedTick: timeFromProto(p.GetBufferedTickTime()), RunningActions: p.GetRunningActionIds(),
		PendingFires: int(p.GetPendingFires()), BackfillsWaiting: int(p.GetBackfillsWaiting()),
		Fired: p.GetFired(), Skipped: p.GetSkipped(), Missed: p.GetMissed(),
		CreateTime: timeFromProto(p.GetCreateTime()), UpdateTime: timeFromProto(p.GetUpdateTime()),
	}
	if rp := a.GetRetryPolicy(); rp != nil {
		r := retryPolicyFromProto(rp)
		v.Action.RetryPolicy = &r
	}
	for c, pc := range catchUps {
		if pc == pol.GetCatchUp() {
			v.Policy.CatchUp = c
		}
	}
	for _, t := range p.GetUpcoming() {
		v.Upcoming = append(v.Upcoming, ScheduleTick{Nominal: timeFromProto(t.GetNominalTime()), FireAt: timeFromProto(t.GetFireTime())})
	}
	for _, r := range p.GetRecentActions() {
		v.Recent = append(v.Recent, ScheduleRecord{Nominal: timeFromProto(r.GetNominalTime()), First: timeFromProto(r.GetFirstNominalTime()),
			Count: r.GetCount(), At: timeFromProto(r.GetTime()), Outcome: outcomeNames[r.GetOutcome()], Origin: r.GetOrigin(),
			ActionID: r.GetActionId(), RunID: r.GetRunId(), Detail: r.GetDetail()})
	}
	return v
}

func (d ScheduleDefinition) protoParts() (*aionv1.ScheduleSpec, *aionv1.ScheduleAction, *aionv1.SchedulePolicy) {
	sp, a, p := d.Spec, d.Action, d.Policy
	return &aionv1.ScheduleSpec{Cron: sp.Cron, TimeZone: sp.TimeZone, Every: durationToProto(sp.Every), Offset: durationToProto(sp.Offset),
			Jitter: durationToProto(sp.Jitter), StartTime: timeToProto(sp.StartAt), EndTime: timeToProto(sp.EndAt)},
		&aionv1.ScheduleAction{WorkflowType: a.WorkflowType, ActivityType: a.ActivityType, TaskQueue: a.TaskQueue, Node: a.Node,
			Input: a.Input, ScheduleToStartTimeout: durationToProto(a.ScheduleToStartTimeout),
			StartToCloseTimeout: durationToProto(a.StartToCloseTimeout), ScheduleToCloseTimeout: durationToProto(a.ScheduleToCloseTimeout),
			HeartbeatTimeout: durationToProto(a.HeartbeatTimeout), RetryPolicy: a.RetryPolicy.toProto(), Priority: int32(a.Priority),
			FairnessKey: a.FairnessKey, FairnessWeight: int32(a.FairnessWeight), ConcurrencyKey: a.ConcurrencyKey},
		&aionv1.SchedulePolicy{Overlap: overlapToProto(p.Overlap), CatchUp: catchUps[p.CatchUp], CatchUpWindow: durationToProto(p.CatchUpWindow)}
}

// CreateSchedule records a new schedule; its ticks after the call fire.
// existing is true when the id held a schedule with the same definition
// already; a different one fails with AlreadyExists.
func (c *Client) CreateSchedule(ctx context.Context, d ScheduleDefinition) (v *ScheduleView, existing bool, err error) {
	sp, a, p := d.protoParts()
	resp, err := c.schedules.Create(ctx, &aionv1.CreateScheduleRequest{Namespace: d.Namespace, ScheduleId: d.ID, Spec: sp, Action: a,
		Policy: p, Paused: d.Paused, Note: d.Note})
	if err != nil {
		return nil, false, rpcError(fmt.Sprintf("create schedule %q in %q", d.ID, d.Namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), resp.GetExisting(), nil
}

// GetSchedule returns a schedule with its next upcoming ticks (0 means 5,
// at most 100) and its recent actions.
func (c *Client) GetSchedule(ctx context.Context, namespace, id string, upcoming int) (*ScheduleView, error) {
	resp, err := c.schedules.Get(ctx, &aionv1.GetScheduleRequest{Namespace: namespace, ScheduleId: id, Upcoming: int32(upcoming)})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("get schedule %q in %q", id, namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// SchedulePage is one page of ListSchedules.
type SchedulePage struct {
	Schedules []*ScheduleView
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// ListSchedules returns a page of a namespace's schedules ordered by id:
// pageSize 0 means 100; pageToken "" starts at the first.
func (c *Client) ListSchedules(ctx context.Context, namespace string, pageSize int, pageToken string) (*SchedulePage, error) {
	resp, err := c.schedules.List(ctx, &aionv1.ListSchedulesRequest{Namespace: namespace, PageSize: int32(pageSize), PageToken: pageToken})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("list schedules in %q", namespace), err)
	}
	page := &SchedulePage{NextPageToken: resp.GetNextPageToken()}
	for _, s := range resp.GetSchedules() {
		page.Schedules = append(page.Schedules, scheduleFromProto(s))
	}
	return page, nil
}

// UpdateSchedule replaces a schedule's spec, action and policy; a new spec
// counts from the call. d.Paused and d.Note are not used.
func (c *Client) UpdateSchedule(ctx context.Context, d ScheduleDefinition) (*ScheduleView, error) {
	sp, a, p := d.protoParts()
	resp, err := c.schedules.Update(ctx, &aionv1.UpdateScheduleRequest{Namespace: d.Namespace, ScheduleId: d.ID, Spec: sp, Action: a, Policy: p})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("update schedule %q in %q", d.ID, d.Namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// PauseSchedule stops a schedule's ticks from firing, note saying why.
func (c *Client) PauseSchedule(ctx context.Context, namespace, id, note string) (*ScheduleView, error) {
	resp, err := c.schedules.Pause(ctx, &aionv1.PauseScheduleRequest{Namespace: namespace, ScheduleId: id, Note: note})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("pause schedule %q in %q", id, namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// ResumeSchedule lets a paused schedule fire again from now; the ticks that
// fell while it was paused do not fire. note replaces the pause's.
func (c *Client) ResumeSchedule(ctx context.Context, namespace, id, note string) (*ScheduleView, error) {
	resp, err := c.schedules.Resume(ctx, &aionv1.ResumeScheduleRequest{Namespace: namespace, ScheduleId: id, Note: note})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("resume schedule %q in %q", id, namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// TriggerSchedule fires a schedule once now (paused or not) under overlap
// ("" for the schedule's own) and returns once its action started; the
// schedule's last recent action is this fire's.
func (c *Client) TriggerSchedule(ctx context.Context, namespace, id string, overlap Overlap) (*ScheduleView, error) {
	resp, err := c.schedules.Trigger(ctx, &aionv1.TriggerScheduleRequest{Namespace: namespace, ScheduleId: id, Overlap: overlapToProto(overlap)})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("trigger schedule %q in %q", id, namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// BackfillSchedule asks for the schedule's ticks in [start, end), a past
// range, to fire, oldest first, each with its nominal time, under overlap
// ("" means OverlapAllowAll). Ticks that fired already do not fire again.
// The server works through them after the call returns.
func (c *Client) BackfillSchedule(ctx context.Context, namespace, id string, start, end time.Time, overlap Overlap) (*ScheduleView, error) {
	resp, err := c.schedules.Backfill(ctx, &aionv1.BackfillScheduleRequest{Namespace: namespace, ScheduleId: id,
		StartTime: timeToProto(start), EndTime: timeToProto(end), Overlap: overlapToProto(overlap)})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("backfill schedule %q in %q", id, namespace), err)
	}
	return scheduleFromProto(resp.GetSchedule()), nil
}

// DeleteSchedule removes a schedule; what it started is left alone.
func (c *Client) DeleteSchedule(ctx context.Context, namespace, id string) error {
	_, err := c.schedules.Delete(ctx, &aionv1.DeleteScheduleRequest{Namespace: namespace, ScheduleId: id})
	return rpcError(fmt.Sprintf("delete schedule %q in %q", id, namespace), err)
}

// ScheduleService returns the raw generated gRPC client.
func (c *Client) ScheduleService() aionv1.ScheduleServiceClient { return c.schedules }

// MarshalJSON writes the spec with its durations as text, such as "1m30s".
func (s ScheduleSpec) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Cron     string    `json:"cron,omitempty"`
		TimeZone string    `json:"time_zone,omitempty"`
		Every    string    `json:"every,omitempty"`
		Offset   string    `json:"offset,omitempty"`
		Jitter   string    `json:"jitter,omitempty"`
		StartAt  time.Time `json:"start_at,omitzero"`
		EndAt    time.Time `json:"end_at,omitzero"`
	}{s.Cron, s.TimeZone, durationString(s.Every), durationString(s.Offset), durationString(s.Jitter), s.StartAt, s.EndAt})
}

// MarshalJSON writes the policy with its window as text, such as "1m0s".
func (p SchedulePolicy) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Overlap       Overlap `json:"overlap,omitempty"`
		CatchUp       CatchUp `json:"catch_up,omitempty"`
		CatchUpWindow string  `json:"catch_up_window,omitempty"`
	}{p.Overlap, p.CatchUp, durationString(p.CatchUpWindow)})
}

// MarshalJSON writes the action with its timeouts and retry intervals as
// text, such as "1m0s".
func (a ScheduleAction) MarshalJSON() ([]byte, error) {
	var retry *retryPolicyJSON
	if p := a.RetryPolicy; p != nil {
		retry = &retryPolicyJSON{InitialInterval: durationString(p.InitialInterval), BackoffCoefficient: p.BackoffCoefficient,
			MaximumInterval: durationString(p.MaximumInterval), MaximumAttempts: p.MaximumAttempts,
			NonRetryableErrorTypes: p.NonRetryableErrorTypes}
	}
	return json.Marshal(struct {
		WorkflowType           string           `json:"workflow_type,omitempty"`
		ActivityType           string           `json:"activity_type,omitempty"`
		TaskQueue              string           `json:"task_queue,omitempty"`
		Node                   string           `json:"node,omitempty"`
		Input                  Payload          `json:"input,omitempty"`
		ScheduleToStartTimeout string           `json:"schedule_to_start_timeout,omitempty"`
		StartToCloseTimeout    string           `json:"start_to_close_timeout,omitempty"`
		ScheduleToCloseTimeout string           `json:"schedule_to_close_timeout,omitempty"`
		HeartbeatTimeout       string           `json:"heartbeat_timeout,omitempty"`
		RetryPolicy            *retryPolicyJSON `json:"retry_policy,omitempty"`
		Priority               int              `json:"priority,omitempty"`
		FairnessKey            string           `json:"fairness_key,omitempty"`
		FairnessWeight         int              `json:"fairness_weight,omitempty"`
		ConcurrencyKey         string           `json:"concurrency_key,omitempty"`
	}{a.WorkflowType, a.ActivityType, a.TaskQueue, a.Node, a.Input, durationString(a.ScheduleToStartTimeout),
		durationString(a.StartToCloseTimeout), durationString(a.ScheduleToCloseTimeout), durationString(a.HeartbeatTimeout), retry,
		a.Priority, a.FairnessKey, a.FairnessWeight, a.ConcurrencyKey})
}
