package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/store"
)

// Defaults a definition's zero policy fields take.
const (
	DefaultOverlap       = store.OverlapSkip
	DefaultCatchUp       = store.CatchUpOne
	DefaultCatchUpWindow = time.Minute
	// DefaultUpcoming is how many upcoming ticks Get returns when not told;
	// MaxUpcoming the most it returns.
	DefaultUpcoming = 5
	MaxUpcoming     = 100
)

// MaxIDLen is the longest schedule id: what it starts is named by the id
// and the tick's time, and that must fit an activity or workflow id.
const MaxIDLen = name.MaxID - schedule.ActionIDLen

// Definition is what a caller sets on a schedule.
type Definition struct {
	Namespace string
	ID        string
	Spec      store.ScheduleSpec
	Action    store.ScheduleAction
	// Policy's zero fields take DefaultOverlap, DefaultCatchUp and
	// DefaultCatchUpWindow.
	Policy store.SchedulePolicy
	// Paused creates the schedule paused, with Note saying why.
	Paused bool
	Note   string
}

// View is a schedule as a caller sees it: its record and its next ticks.
type View struct {
	Schedule store.Schedule
	Upcoming []schedule.Tick
}

// invalid wraps a refusal of the schedule, name or limit packages as the
// engine's ErrInvalid; nil and other errors pass unchanged.
func invalid(err error) error {
	if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, name.ErrInvalid) || errors.Is(err, limit.ErrInvalid) ||
		errors.Is(err, limit.ErrTooLarge) {
		return fmt.Errorf("%w: %w", err, engine.ErrInvalid)
	}
	return err
}

// check validates d and fills its defaults. Refusals wrap engine.ErrInvalid
// (engine.ErrResourceExhausted for an input over the cap) and name the
// field and value.
func (s *Scheduler) check(d *Definition) error {
	for _, err := range []error{
		name.Check("namespace", d.Namespace, name.MaxName),
		name.Check("schedule_id", d.ID, MaxIDLen),
		limit.Check("note", d.Note, limit.Reason),
	} {
		if err != nil {
			return invalid(err)
		}
	}
	sp := &d.Spec
	if !sp.StartAt.IsZero() {
		sp.StartAt = sp.StartAt.UTC()
	}
	if !sp.EndAt.IsZero() {
		sp.EndAt = sp.EndAt.UTC()
	}
	if _, err := schedule.Compile(*sp); err != nil {
		return invalid(err)
	}
	if err := s.checkAction(&d.Action); err != nil {
		return err
	}
	p := &d.Policy
	if p.Overlap == "" {
		p.Overlap = DefaultOverlap
	}
	if p.CatchUp == "" {
		p.CatchUp = DefaultCatchUp
	}
	if p.CatchUpWindow == 0 {
		p.CatchUpWindow = DefaultCatchUpWindow
	}
	return invalid(schedule.CheckPolicy(*p))
}

func (s *Scheduler) checkAction(a *store.ScheduleAction) error {
	typeField := "action.activity_type"
	switch a.Kind {
	case store.ActionActivity:
	case store.ActionWorkflow:
		typeField = "action.workflow_type"
	default:
		return fmt.Errorf("action: a workflow type or an activity type is required (kind %q): %w", a.Kind, engine.ErrInvalid)
	}
	for _, err := range []error{
		name.Check(typeField, a.Type, name.MaxName),
		name.CheckOptional("action.task_queue", a.TaskQueue, name.MaxName),
		name.CheckOptional("action.node", a.Node, name.MaxName),
	} {
		if err != nil {
			return invalid(err)
		}
	}
	if len(a.Input) > s.maxIn {
		return fmt.Errorf("action.input: %d bytes, at most %d allowed: %w", len(a.Input), s.maxIn, engine.ErrResourceExhausted)
	}
	if a.Kind == store.ActionWorkflow {
		switch {
		case a.Node != "":
			return fmt.Errorf("action.node: %q given for a workflow; a node pins an activity only: %w", a.Node, engine.ErrInvalid)
		case a.Timeouts != (store.Timeouts{}):
			return fmt.Errorf("action.timeouts: given for a workflow; they apply to an activity only: %w", engine.ErrInvalid)
		case a.Retry.InitialInterval != 0 || a.Retry.BackoffCoefficient != 0 || a.Retry.MaximumInterval != 0 ||
			a.Retry.MaximumAttempts != 0 || len(a.Retry.NonRetryableErrorTypes) > 0:
			return fmt.Errorf("action.retry_policy: given for a workflow; it applies to an activity only: %w", engine.ErrInvalid)
		}
		return checkPriorityAndFlow(a)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"action.schedule_to_start_timeout", a.Timeouts.ScheduleToStart},
		{"action.start_to_close_timeout", a.Timeouts.StartToClose},
		{"action.schedule_to_close_timeout", a.Timeouts.ScheduleToClose},
		{"action.heartbeat_timeout", a.Timeouts.Heartbeat},
		{"action.retry_policy.initial_interval", a.Retry.InitialInterval},
		{"action.retry_policy.maximum_interval", a.Retry.MaximumInterval},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: %v is negative: %w", d.field, d.v, engine.ErrInvalid)
		}
	}
	switch r := a.Retry; {
	case r.BackoffCoefficient != 0 && r.BackoffCoefficient < 1:
		return fmt.Errorf("action.retry_policy.backoff_coefficient: %v, want at least 1: %w", r.BackoffCoefficient, engine.ErrInvalid)
	case r.MaximumAttempts < 0:
		return fmt.Errorf("action.retry_policy.maximum_attempts: %d is negative: %w", r.MaximumAttempts, engine.ErrInvalid)
	case r.MaximumInterval > 0 && r.InitialInterval > r.MaximumInterval:
		return fmt.Errorf("action.retry_policy.maximum_interval: %v is below initial_interval %v: %w", r.MaximumInterval, r.InitialInterval, engine.ErrInvalid)
	case len(r.NonRetryableErrorTypes) > limit.NonRetryableTypes:
		return fmt.Errorf("action.retry_policy.non_retryable_error_types: %d given, at most %d allowed: %w",
			len(r.NonRetryableErrorTypes), limit.NonRetryableTypes, engine.ErrInvalid)
	}
	for i, t := range a.Retry.NonRetryableErrorTypes {
		if err := limit.Check(fmt.Sprintf("action.retry_policy.non_retryable_error_types[%d]", i), t, limit.FailureType); err != nil {
			return invalid(err)
		}
	}
	return checkPriorityAndFlow(a)
}

func checkPriorityAndFlow(a *store.ScheduleAction) error {
	if a.Priority != 0 && (a.Priority < store.HighestPriority || a.Priority > store.LowestPriority) {
		return fmt.Errorf("action.priority: %d, want 1 (first) to 5 (last), or 0 for the default 3: %w", a.Priority, engine.ErrInvalid)
	}
	for _, err := range []error{
		name.CheckOptional("action.fairness_key", a.Flow.FairnessKey, name.MaxName),
		name.CheckOptional("action.concurrency_key", a.Flow.ConcurrencyKey, name.MaxName),
	} {
		if err != nil {
			return invalid(err)
		}
	}
	if w := a.Flow.FairnessWeight; w < 0 || w > store.MaxFairnessWeight {
		return fmt.Errorf("action.fairness_weight: %d, want 1 to %d, or 0 for the default 1: %w", w, store.MaxFairnessWeight, engine.ErrInvalid)
	}
	return nil
}

// authorize checks the caller may use ns and that ns and id are names.
func authorize(caller namespace.Identity, ns, id string) error {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return invalid(err)
	}
	if err := name.Check("schedule_id", id, MaxIDLen); err != nil {
		return invalid(err)
	}
	return namespace.Authorize(caller, ns)
}

// Create records a new schedule, due from now (ticks at or before the
// call's time do not fire). Creating an id the namespace holds already
// returns that schedule when the definition is the same (existing true),
// and fails with engine.ErrAlreadyExists when it differs.
func (s *Scheduler) Create(ctx context.Context, caller namespace.Identity, d Definition) (View, bool, error) {
	if err := s.check(&d); err != nil {
		return View{}, false, fmt.Errorf("create schedule: %w", err)
	}
	if err := namespace.Authorize(caller, d.Namespace); err != nil {
		return View{}, false, fmt.Errorf("create schedule: %w", err)
	}
	if s.ns != nil {
		if _, err := s.ns.Ensure(ctx, []string{d.Namespace}, store.OriginSchedule); err != nil {
			return View{}, false, fmt.Errorf("create schedule: %w", err)
		}
	}
	trig, err := schedule.Compile(d.Spec)
	if err != nil {
		return View{}, false, fmt.Errorf("create schedule: %w", invalid(err))
	}
	now := s.clk.Now().UTC()
	sc := store.Schedule{Namespace: d.Namespace, ID: d.ID, Spec: d.Spec, Action: d.Action, Policy: d.Policy,
		Paused: d.Paused, Note: d.Note, State: store.ScheduleState{LastTick: now}, CreatedAt: now, UpdatedAt: now}
	sc.NextDue = schedule.NextDue(trig, sc, now, s.timing)
	rec, created, err := s.st.CreateSchedule(ctx, sc)
	if err != nil {
		return View{}, false, fmt.Errorf("create schedule %q in namespace %q: %w", d.ID, d.Namespace, err)
	}
	if !created {
		if !sameDefinition(rec, sc) {
			return View{}, false, fmt.Errorf("create schedule: schedule_id: %q already exists in namespace %q with a different definition: %w",
				d.ID, d.Namespace, engine.ErrAlreadyExists)
		}
		return s.view(rec, DefaultUpcoming), true, nil
	}
	s.poke()
	return s.view(rec, DefaultUpcoming), false, nil
}

// sameDefinition reports whether a and b were created by the same request.
func sameDefinition(a, b store.Schedule) bool {
	def := func(s store.Schedule) []byte {
		out, _ := json.Marshal(struct {
			Spec   store.ScheduleSpec
			Action store.ScheduleAction
			Policy store.SchedulePolicy
			Paused bool
			Note   string
		}{s.Spec, s.Action, s.Policy, s.Paused, s.Note})
		return out
	}
	return bytes.Equal(def(a), def(b)) && bytes.Equal(a.Action.Input, b.Action.Input)
}

func (s *Scheduler) view(sc store.Schedule, upcoming int) View {
	v := View{Schedule: sc}
	if trig, err := schedule.Compile(sc.Spec); err == nil && !sc.Paused {
		v.Upcoming = schedule.Upcoming(trig, sc, s.clk.Now(), upcoming)
	}
	return v
}

// Get returns a schedule with its next upcoming ticks (DefaultUpcoming when
// upcoming is 0, at most MaxUpcoming; none while paused).
func (s *Scheduler) Get(ctx context.Context, caller namespace.Identity, ns, id string, upcoming int) (View, error) {
	if err := authorize(caller, ns, id); err != nil {
		return View{}, fmt.Errorf("get schedule: %w", err)
	}
	if upcoming < 0 || upcoming > MaxUpcoming {
		return View{}, fmt.Errorf("get schedule: upcoming: %d, want 0 to %d: %w", upcoming, MaxUpcoming, engine.ErrInvalid)
	}
	if upcoming == 0 {
		upcoming = DefaultUpcoming
	}
	sc, err := s.read(ctx, ns, id)
	if err != nil {
		return View{}, fmt.Errorf("get schedule: %w", err)
	}
	return s.view(sc, upcoming), nil
}

func (s *Scheduler) read(ctx context.Context, ns, id string) (store.Schedule, error) {
	sc, err := s.st.GetSchedule(ctx, ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Schedule{}, fmt.Errorf("schedule_id: no schedule %q in namespace %q: %w", id, ns, engine.ErrNotFound)
	}
	return sc, err
}

// List returns a page of a namespace's schedules ordered by id, each with
// its next tick only (none while paused or past its end), and the token of
// the next page ("" on the last).
func (s *Scheduler) List(ctx context.Context, caller namespace.Identity, ns string, pageSize int, pageToken string) ([]View, string, error) {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return nil, "", fmt.Errorf("list schedules: %w", invalid(err))
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return nil, "", fmt.Errorf("list schedules: %w", err)
	}
	if pageToken != "" {
		if err := name.Check("page_token", pageToken, MaxIDLen); err != nil {
			return nil, "", fmt.Errorf("list schedules: page_token: %q is not a token this server issued: %w", pageToken, engine.ErrInvalid)
		}
	}
	switch {
	case pageSize <= 0:
		pageSize = 100
	case pageSize > 1000:
		pageSize = 1000
	}
	out, err := s.st.ListSchedules(ctx, store.ScheduleFilter{Namespace: ns, After: pageToken, Limit: pageSize + 1})
	if err != nil {
		return nil, "", fmt.Errorf("list schedules: %w", err)
	}
	next := ""
	if len(out) > pageSize {
		out = out[:pageSize]
		next = out[pageSize-1].ID
	}
	views := make([]View, len(out))
	for i, sc := range out {
		views[i] = s.view(sc, 1)
	}
	return views, next, nil
}

// mutate applies change to the schedule with a compare-and-set, reading it
// again when another writer got there first.
func (s *Scheduler) mutate(ctx context.Context, op, ns, id string, change func(sc *store.Schedule, now time.Time) error) (store.Schedule, *schedule.Trigger, error) {
	for range casTries {
		sc, err := s.read(ctx, ns, id)
		if err != nil {
			return store.Schedule{}, nil, fmt.Errorf("%s: %w", op, err)
		}
		now := s.clk.Now().UTC()
		next := sc
		next.State = schedule.CloneState(sc.State)
		if err := change(&next, now); err != nil {
			return store.Schedule{}, nil, fmt.Errorf("%s: %w", op, err)
		}
		trig, err := schedule.Compile(next.Spec)
		if err != nil {
			return store.Schedule{}, nil, fmt.Errorf("%s: %w", op, invalid(err))
		}
		next.NextDue = schedule.NextDue(trig, next, now, s.timing)
		next.UpdatedAt = now
		rec, ok, err := s.st.UpdateSchedule(ctx, next)
		if errors.Is(err, store.ErrNotFound) {
			return store.Schedule{}, nil, fmt.Errorf("%s: schedule_id: no schedule %q in namespace %q: %w", op, id, ns, engine.ErrNotFound)
		}
		if err != nil {
			return store.Schedule{}, nil, fmt.Errorf("%s %q in namespace %q: %w", op, id, ns, err)
		}
		if ok {
			s.poke()
			return rec, trig, nil
		}
	}
	return store.Schedule{}, nil, fmt.Errorf("%s %q in namespace %q: it kept changing under this call; try again: %w", op, id, ns, engine.ErrUnavailable)
}

// Update replaces a schedule's spec, action and policy (its pause and note
// stay; Pause and Resume change them). When the spec changes, the new one
// counts from now: its ticks at or before the call's time do not fire. A
// tick buffered, fires pending and backfills waiting are kept.
func (s *Scheduler) Update(ctx context.Context, caller namespace.Identity, d Definition) (View, error) {
	if err := s.check(&d); err != nil {
		return View{}, fmt.Errorf("update schedule: %w", err)
	}
	if err := namespace.Authorize(caller, d.Namespace); err != nil {
		return View{}, fmt.Errorf("update schedule: %w", err)
	}
	rec, _, err := s.mutate(ctx, "update schedule", d.Namespace, d.ID, func(sc *store.Schedule, now time.Time) error {
		if specJSON(sc.Spec) != specJSON(d.Spec) {
			sc.State = schedule.Resumed(sc.State, now)
		}
		sc.Spec, sc.Action, sc.Policy = d.Spec, d.Action, d.Policy
		return nil
	})
	if err != nil {
		return View{}, err
	}
	return s.view(rec, DefaultUpcoming), nil
}

func specJSON(sp store.ScheduleSpec) string {
	b, _ := json.Marshal(sp)
	return string(b)
}

// Pause stops a schedule's ticks from firing, with a note saying why.
// Fires already decided are still carried out.
func (s *Scheduler) Pause(ctx context.Context, caller namespace.Identity, ns, id, note string) (View, error) {
	if err := s.checkNote(caller, ns, id, note); err != nil {
		return View{}, fmt.Errorf("pause schedule: %w", err)
	}
	rec, _, err := s.mutate(ctx, "pause schedule", ns, id, func(sc *store.Schedule, _ time.Time) error {
		sc.Paused, sc.Note = true, note
		return nil
	})
	if err != nil {
		return View{}, err
	}
	return s.view(rec, DefaultUpcoming), nil
}

// Resume lets a paused schedule's ticks fire again from now: the ticks that
// fell while it was paused do not fire. The note replaces the pause's.
func (s *Scheduler) Resume(ctx context.Context, caller namespace.Identity, ns, id, note string) (View, error) {
	if err := s.checkNote(caller, ns, id, note); err != nil {
		return View{}, fmt.Errorf("resume schedule: %w", err)
	}
	rec, _, err := s.mutate(ctx, "resume schedule", ns, id, func(sc *store.Schedule, now time.Time) error {
		if sc.Paused {
			sc.State = schedule.Resumed(sc.State, now)
		}
		sc.Paused, sc.Note = false, note
		return nil
	})
	if err != nil {
		return View{}, err
	}
	return s.view(rec, DefaultUpcoming), nil
}

func (s *Scheduler) checkNote(caller namespace.Identity, ns, id, note string) error {
	if err := authorize(caller, ns, id); err != nil {
		return err
	}
	return invalid(limit.Check("note", note, limit.Reason))
}

func checkOverlap(field string, o store.Overlap) error {
	if !o.Valid() {
		return fmt.Errorf("%s: %q is not one of %v: %w", field, o, store.Overlaps, engine.ErrInvalid)
	}
	return nil
}

// Trigger fires the schedule now, whether or not it is paused, with the
// call's time (to the millisecond) as the tick's nominal time, under
// overlap (the schedule's own when empty). It returns once the fire has
// been carried out (or recorded as skipped or buffered by the overlap
// policy).
func (s *Scheduler) Trigger(ctx context.Context, caller namespace.Identity, ns, id string, overlap store.Overlap) (View, error) {
	if err := authorize(caller, ns, id); err != nil {
		return View{}, fmt.Errorf("trigger schedule: %w", err)
	}
	if overlap != "" {
		if err := checkOverlap("overlap", overlap); err != nil {
			return View{}, fmt.Errorf("trigger schedule: %w", err)
		}
	}
	rec, trig, err := s.mutate(ctx, "trigger schedule", ns, id, func(sc *store.Schedule, now time.Time) error {
		o := overlap
		if o == "" {
			o = sc.Policy.Overlap
		}
		sc.State.Running = s.stillOpen(ctx, store.Schedule{Namespace: sc.Namespace, ID: sc.ID, Action: sc.Action,
			Policy: store.SchedulePolicy{Overlap: o}, State: sc.State}, sc.State)
		trig, err := schedule.Compile(sc.Spec)
		if err != nil {
			return invalid(err)
		}
		plan := schedule.TriggerNow(trig, *sc, schedule.Pass{Now: now, Decider: s.self}, now.Truncate(time.Millisecond), o)
		sc.State = plan.State
		return nil
	})
	if err != nil {
		return View{}, err
	}
	// A fire the loop is carrying out meanwhile is waited for, so the
	// answer shows what the trigger did.
	for _, ch := range s.carryOutPending(ctx, trig, rec) {
		select {
		case <-ch:
		case <-ctx.Done():
			return View{}, fmt.Errorf("trigger schedule: %w", ctx.Err())
		}
	}
	sc, err := s.read(ctx, ns, id)
	if err != nil {
		return View{}, fmt.Errorf("trigger schedule: %w", err)
	}
	return s.view(sc, DefaultUpcoming), nil
}

// Backfill asks for the schedule's ticks in [start, end) to fire, oldest
// first, each with its own nominal time, under overlap (allow_all when
// empty). The range must be in the past. The ticks are worked through by
// the scheduler loop, at most schedule.MaxBackfills requests waiting at
// once. A tick that fired already (by the schedule, or an earlier
// backfill) does not fire again.
func (s *Scheduler) Backfill(ctx context.Context, caller namespace.Identity, ns, id string, start, end time.Time, overlap store.Overlap) (View, error) {
	if err := authorize(caller, ns, id); err != nil {
		return View{}, fmt.Errorf("backfill schedule: %w", err)
	}
	if overlap == "" {
		overlap = store.OverlapAllowAll
	}
	if err := checkOverlap("overlap", overlap); err != nil {
		return View{}, fmt.Errorf("backfill schedule: %w", err)
	}
	switch {
	case start.IsZero():
		return View{}, fmt.Errorf("backfill schedule: start_time: required: %w", engine.ErrInvalid)
	case end.IsZero():
		return View{}, fmt.Errorf("backfill schedule: end_time: required: %w", engine.ErrInvalid)
	case !end.After(start):
		return View{}, fmt.Errorf("backfill schedule: end_time: %s is not after start_time %s: %w",
			end.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano), engine.ErrInvalid)
	}
	rec, _, err := s.mutate(ctx, "backfill schedule", ns, id, func(sc *store.Schedule, now time.Time) error {
		if end.After(now) {
			return fmt.Errorf("end_time: %s is after now (%s); a backfill covers past ticks: %w",
				end.UTC().Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), engine.ErrInvalid)
		}
		if len(sc.State.Backfills) >= schedule.MaxBackfills {
			return fmt.Errorf("schedule %q has %d backfills waiting, at most %d allowed: %w", id, len(sc.State.Backfills),
				schedule.MaxBackfills, engine.ErrResourceExhausted)
		}
		sc.State.Backfills = append(sc.State.Backfills, store.Backfill{Start: start.UTC(), End: end.UTC(), Overlap: overlap})
		return nil
	})
	if err != nil {
		return View{}, err
	}
	return s.view(rec, DefaultUpcoming), nil
}

// Delete removes a schedule. Actions it started are left alone; a fire
// decided and not yet carried out is dropped.
func (s *Scheduler) Delete(ctx context.Context, caller namespace.Identity, ns, id string) error {
	if err := authorize(caller, ns, id); err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	err := s.st.DeleteSchedule(ctx, ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete schedule: schedule_id: no schedule %q in namespace %q: %w", id, ns, engine.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete schedule %q in namespace %q: %w", id, ns, err)
	}
	return nil
}
