// Package scheduler runs schedules: a loop that wakes when the next
// schedule is due, decides what its due ticks do (internal/schedule), and
// starts the workflows and activities they fire through the engine. Every
// server runs one, over the shared store in a cluster.
//
// Each tick fires exactly once, across restarts and across the servers of a
// cluster, by two means:
//
//   - A fire is decided before it is carried out, and the decision is made
//     durable by a compare-and-set on the schedule's version: of two
//     schedulers deciding over one version, one wins and the other reads the
//     winner's decision. A decided fire waits in the schedule's state until
//     it has been carried out, so one decided before a crash is carried out
//     after it (by the decider, after a restart, or by another server once
//     the decider has had a grace period).
//   - What a fire starts has an id derived from the schedule and the tick
//     (schedule.ActionID), so carrying a fire out twice starts one action:
//     the engine returns the existing activity or open run for a repeated
//     id, and refuses the id of a closed run (the scheduler starts runs
//     with the reject-duplicate id reuse policy), which counts as started.
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/store"
)

// Engine is what the scheduler needs of the engine: start a workflow or
// schedule an activity, read whether an earlier one is still open, and
// cancel it. *engine.Engine implements it.
type Engine interface {
	StartWorkflow(ctx context.Context, caller namespace.Identity, r engine.WorkflowRequest) (store.Run, bool, error)
	Schedule(ctx context.Context, caller namespace.Identity, r engine.Request) (store.Activity, bool, error)
	GetWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID string) (engine.RunView, error)
	Get(ctx context.Context, caller namespace.Identity, ns, id string) (engine.View, error)
	CancelWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID, reason string) (store.Run, error)
	Cancel(ctx context.Context, caller namespace.Identity, ns, id, reason string) (engine.View, error)
}

// Namespaces mints or checks the namespace of a new schedule, as the engine
// does for an activity; *namespace.Minter implements it.
type Namespaces interface {
	Ensure(ctx context.Context, names []string, origin store.Origin) ([]store.Namespace, error)
}

// Observer is told what schedules do, for metrics. Its methods must be
// quick.
type Observer interface {
	// Fired: a tick's action started (origin tick, catch_up, trigger,
	// backfill or buffered), lag after the instant the tick was due.
	Fired(namespace, origin string, lag time.Duration)
	// Skipped: ticks the overlap policy skipped.
	Skipped(namespace string, n int)
	// Missed: ticks the catch-up policy dropped.
	Missed(namespace string, n int)
	// Failed: a fire that could not start its action, for good.
	Failed(namespace string)
}

type noObserver struct{}

func (noObserver) Fired(string, string, time.Duration) {}
func (noObserver) Skipped(string, int)                 {}
func (noObserver) Missed(string, int)                  {}
func (noObserver) Failed(string)                       {}

// Config wires a scheduler.
type Config struct {
	Store  store.ScheduleStore
	Engine Engine
	// Namespaces, when set, checks (and in auto-create open mode mints) a
	// new schedule's namespace.
	Namespaces Namespaces
	// Clock times the loop and stamps what it records; nil means
	// clock.Real().
	Clock clock.Clock
	Log   *slog.Logger
	// Observer is told what schedules do; nil for none.
	Observer Observer
	// MaxPayload caps an action's input, in bytes; 0 means 2 MiB.
	MaxPayload int
	// Poll is how often the store is looked at besides the next due time
	// this scheduler knows of: for schedules another server created or
	// changed, and for a buffered tick's open action closing. 0 means 1s.
	Poll time.Duration
	// Grace is how long a fire decided by another scheduler is left to it
	// before this one carries it out; 0 means 10s.
	Grace time.Duration
	// Events, when set, is told of each fire this scheduler recorded as
	// started or failed and of the ticks a pass skipped or missed, once
	// durable. It must not block.
	Events func(Event)
}

// Event is news of what a schedule's ticks came to.
type Event struct {
	Namespace, ScheduleID string
	// Outcome is started or failed for one fire; skipped or missed for
	// Count ticks, the last of them at Nominal.
	Outcome string
	Origin  string
	Nominal time.Time
	Count   int
	// ActionID names the activity or workflow a fire started; RunID the
	// run, for a workflow.
	ActionID, RunID string
	// Detail says why a fire failed.
	Detail string
}

// Bounds of the loop.
const (
	// dueBatch is how many due schedules one read of the store returns.
	dueBatch = 100
	// maxTries is how many times a fire whose action could not be started
	// for a passing reason (the store unreachable, a namespace at its
	// cap) is tried before it is recorded as failed.
	maxTries = 20
	// maxBackoff caps the wait between those tries.
	maxBackoff = time.Minute
	// casTries bounds the retries of a compare-and-set lost to another
	// writer of the same schedule.
	casTries = 16
)

// system is the identity the scheduler acts as: the schedule's creator was
// authorized for its namespace.
var system = namespace.Anyone("scheduler")

// Scheduler runs the schedules of one store. Create one with New; Start
// starts its loop and Stop ends it.
type Scheduler struct {
	st     store.ScheduleStore
	eng    Engine
	ns     Namespaces
	clk    clock.Clock
	log    *slog.Logger
	obs    Observer
	timing schedule.Timing
	maxIn  int

	// self names this process in the fires it decides; started is when it
	// started, so a fire decided earlier is known to be an orphan.
	self    string
	started time.Time

	wake chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	events func(Event)
	// carrying holds the action ids of the fires this process is carrying
	// out, so the loop and a Trigger's own call never start one twice; each
	// channel closes once its fire's outcome is recorded.
	carrying map[string]chan struct{}
	// onPass, for tests, is called as each pass of the loop begins
	// (begin true) and ends.
	onPass func(begin bool)
}

// New returns a scheduler; nothing runs until Start.
func New(cfg Config) *Scheduler {
	s := &Scheduler{st: cfg.Store, eng: cfg.Engine, ns: cfg.Namespaces, clk: cfg.Clock, log: cfg.Log, obs: cfg.Observer,
		maxIn: cfg.MaxPayload, wake: make(chan struct{}, 1), carrying: make(map[string]chan struct{}),
		events: cfg.Events}
	if s.clk == nil {
		s.clk = clock.Real()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.obs == nil {
		s.obs = noObserver{}
	}
	if s.maxIn <= 0 {
		s.maxIn = limit.Payload
	}
	s.timing = schedule.Timing{Poll: cfg.Poll, Grace: cfg.Grace}
	if s.timing.Poll <= 0 {
		s.timing.Poll = time.Second
	}
	if s.timing.Grace <= 0 {
		s.timing.Grace = 10 * time.Second
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.self = hex.EncodeToString(b[:])
	return s
}

// Start starts the loop; it returns at once.
func (s *Scheduler) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return errors.New("scheduler: started twice")
	}
	s.started = s.clk.Now()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.run(ctx)
	return nil
}

// Stop ends the loop and returns once it has ended, or when ctx ends. A
// fire being carried out is abandoned where it is: it stays pending and is
// carried out after a restart or by another server.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop scheduler: %w", ctx.Err())
	}
}

// poke wakes the loop to look at the store now.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) run(ctx context.Context) {
	defer close(s.done)
	timer := s.clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-s.wake:
		}
		if s.onPass != nil {
			s.onPass(true)
		}
		next := s.pass(ctx, s.clk.Now())
		if s.onPass != nil {
			s.onPass(false)
		}
		timer.ResetAt(next)
	}
}

// pass handles every due schedule and returns when to look again.
func (s *Scheduler) pass(ctx context.Context, began time.Time) time.Time {
	soon := began.Add(s.timing.Poll)
	for range 100 {
		due, err := s.st.DueSchedules(ctx, s.clk.Now(), dueBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("read due schedules", "err", err)
			}
			return soon
		}
		again := len(due) == dueBatch
		for _, sc := range due {
			if ctx.Err() != nil {
				return soon
			}
			if s.process(ctx, sc) {
				again = true
			}
		}
		if !again {
			break
		}
	}
	next, err := s.st.NextScheduleDue(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Error("read next schedule due", "err", err)
		}
		return soon
	case next.IsZero() || next.After(soon):
		return soon
	case !next.After(began):
		// Still due after a pass over it: something failed (and was
		// logged); look again after a poll rather than spin.
		return soon
	}
	return next
}

// process decides what the schedule's due ticks do and carries out the
// fires that are this scheduler's to carry out. It reports whether the
// schedule is due again at once (a pass stopped at its cap of fires).
func (s *Scheduler) process(ctx context.Context, sc store.Schedule) bool {
	trig, err := schedule.Compile(sc.Spec)
	if err != nil {
		// Only a spec this binary cannot read any more (a zone gone from
		// the zone database) gets here; park the schedule.
		s.log.Error("schedule spec no longer compiles; parking it", "namespace", sc.Namespace, "schedule", sc.ID, "err", err)
		sc.NextDue = time.Time{}
		if _, _, err := s.st.UpdateSchedule(ctx, sc); err != nil && ctx.Err() == nil {
			s.log.Error("park schedule", "namespace", sc.Namespace, "schedule", sc.ID, "err", err)
		}
		return false
	}
	for range casTries {
		now := s.clk.Now()
		next := sc
		next.State = schedule.CloneState(sc.State)
		next.State.Running = s.stillOpen(ctx, sc, next.State)
		plan := schedule.Decide(trig, next, schedule.Pass{Now: now, Decider: s.self})
		next.State = plan.State
		next.NextDue = schedule.NextDue(trig, next, now, s.timing)
		if plan.Changed || !next.NextDue.Equal(sc.NextDue) || len(next.State.Running) != len(sc.State.Running) {
			next.UpdatedAt = now
			rec, ok, err := s.st.UpdateSchedule(ctx, next)
			if err != nil {
				s.logErr(ctx, "record a schedule's decision", sc, err)
				return false
			}
			if !ok {
				if sc, ok = s.reload(ctx, sc); !ok {
					return false
				}
				continue
			}
			sc = rec
			if plan.Skipped > 0 {
				s.obs.Skipped(sc.Namespace, plan.Skipped)
				s.emit(Event{Namespace: sc.Namespace, ScheduleID: sc.ID, Outcome: store.RecordSkipped, Count: plan.Skipped,
					Nominal: lastRecord(sc.State, store.RecordSkipped)})
			}
			if plan.Missed > 0 {
				s.obs.Missed(sc.Namespace, plan.Missed)
				s.emit(Event{Namespace: sc.Namespace, ScheduleID: sc.ID, Outcome: store.RecordMissed, Count: plan.Missed,
					Nominal: lastRecord(sc.State, store.RecordMissed)})
			}
		}
		s.carryOutPending(ctx, trig, sc)
		// Still due after a pass that made progress: it stopped at its cap.
		return plan.Changed && !sc.NextDue.IsZero() && !sc.NextDue.After(now)
	}
	s.log.Warn("schedule changed under every try of a pass; left for the next", "namespace", sc.Namespace, "schedule", sc.ID)
	return false
}

// emit passes e on to the configured Events, if any.
func (s *Scheduler) emit(e Event) {
	if s.events != nil {
		s.events(e)
	}
}

// emitRecord is emit for one settled fire.
func (s *Scheduler) emitRecord(sc store.Schedule, r store.ScheduleRecord) {
	s.emit(Event{Namespace: sc.Namespace, ScheduleID: sc.ID, Outcome: r.Outcome, Origin: r.Origin, Nominal: r.Nominal, Count: 1,
		ActionID: r.ActionID, RunID: r.RunID, Detail: r.Detail})
}

// lastRecord is the nominal time of the newest recent record with outcome,
// zero when none is held.
func lastRecord(st store.ScheduleState, outcome string) time.Time {
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if st.Recent[i].Outcome == outcome {
			return st.Recent[i].Nominal
		}
	}
	return time.Time{}
}

// reload reads the schedule again after a lost compare-and-set; ok is false
// when it is gone or unreadable.
func (s *Scheduler) reload(ctx context.Context, sc store.Schedule) (store.Schedule, bool) {
	fresh, err := s.st.GetSchedule(ctx, sc.Namespace, sc.ID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.logErr(ctx, "read a schedule back", sc, err)
		}
		return store.Schedule{}, false
	}
	return fresh, true
}

func (s *Scheduler) logErr(ctx context.Context, what string, sc store.Schedule, err error) {
	if ctx.Err() != nil {
		return
	}
	s.log.Error(what, "namespace", sc.Namespace, "schedule", sc.ID, "err", err)
}

// needsOpen reports whether a decision over sc depends on which of its
// actions are still open.
func needsOpen(sc store.Schedule) bool {
	if len(sc.State.Running) == 0 || sc.Paused {
		return false
	}
	if sc.Policy.Overlap != store.OverlapAllowAll || !sc.State.Buffered.IsZero() {
		return true
	}
	for _, b := range sc.State.Backfills {
		if b.Overlap != store.OverlapAllowAll {
			return true
		}
	}
	return false
}

// stillOpen returns the schedule's running actions that are still open, in
// order, when a decision depends on it; otherwise the list as it is. An
// action whose fire is still pending counts as open, and so does one
// whose state could not be read.
func (s *Scheduler) stillOpen(ctx context.Context, sc store.Schedule, st store.ScheduleState) []string {
	if !needsOpen(sc) {
		return st.Running
	}
	return slices.DeleteFunc(slices.Clone(st.Running), func(id string) bool {
		if slices.ContainsFunc(st.Pending, func(f store.PendingFire) bool { return f.ActionID == id }) {
			return false
		}
		open, err := s.open(ctx, sc, id)
		if err != nil {
			s.logErr(ctx, "read the state of a schedule's action", sc, err)
			return false
		}
		return !open
	})
}

// open reports whether the action id of the schedule is open.
func (s *Scheduler) open(ctx context.Context, sc store.Schedule, id string) (bool, error) {
	if sc.Action.Kind == store.ActionWorkflow {
		v, err := s.eng.GetWorkflow(ctx, system, sc.Namespace, id, "")
		if errors.Is(err, engine.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return v.Run.Status == store.RunRunning, nil
	}
	v, err := s.eng.Get(ctx, system, sc.Namespace, id)
	if errors.Is(err, engine.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !v.Activity.State.Terminal(), nil
}

// mine reports whether this scheduler should carry out f now: it decided
// it, or its decider has had its grace period or ran before this process
// started; and no retry waits.
func (s *Scheduler) mine(f store.PendingFire, now time.Time) bool {
	if !f.RetryAt.IsZero() {
		return !f.RetryAt.After(now)
	}
	return f.Decider == s.self || !f.DecidedAt.After(s.started) || !now.Before(f.DecidedAt.Add(s.timing.Grace))
}

// outcome is what carrying out one fire came to.
type outcome struct {
	fire store.PendingFire
	// settled: the fire is done (started or failed for good), with rec.
	settled bool
	rec     store.ScheduleRecord
	// retryAt: try again then.
	retryAt time.Time
	// failed for good (counted once recorded).
	failed bool
	// again: the action existed already (started before a crash, or by an
	// earlier fire of the tick).
	again bool
}

// carryOutPending carries out the schedule's pending fires that are this
// scheduler's, then records their outcomes. It returns, for the fires of
// this scheduler that another call of this process is carrying out, a
// channel each that closes once that call has recorded its outcome.
func (s *Scheduler) carryOutPending(ctx context.Context, trig *schedule.Trigger, sc store.Schedule) (others []<-chan struct{}) {
	now := s.clk.Now()
	var mine []store.PendingFire
	var done []chan struct{}
	s.mu.Lock()
	for _, f := range sc.State.Pending {
		if !s.mine(f, now) {
			continue
		}
		if ch, ok := s.carrying[f.ActionID]; ok {
			others = append(others, ch)
			continue
		}
		ch := make(chan struct{})
		s.carrying[f.ActionID] = ch
		mine = append(mine, f)
		done = append(done, ch)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for i, f := range mine {
			delete(s.carrying, f.ActionID)
			close(done[i])
		}
		s.mu.Unlock()
	}()
	var outs []outcome
	for _, f := range mine {
		o, stop := s.carryOut(ctx, sc, f)
		if stop {
			break
		}
		outs = append(outs, o)
	}
	if len(outs) > 0 {
		s.settle(ctx, trig, sc, outs)
	}
	return others
}

// carryOut starts the action of one fire, canceling the actions it
// replaces first. stop is set when the server is stopping: the fire stays
// pending.
func (s *Scheduler) carryOut(ctx context.Context, sc store.Schedule, f store.PendingFire) (outcome, bool) {
	o := outcome{fire: f}
	for _, id := range f.Cancel {
		err := s.cancelAction(ctx, sc, id)
		if err == nil {
			continue
		}
		if stopping(ctx, err) {
			return o, true
		}
		return s.retryLater(o, fmt.Errorf("cancel the previous action %q: %w", id, err)), false
	}
	runID, existing, err := s.start(ctx, sc, f)
	now := s.clk.Now()
	switch {
	case err == nil, errors.Is(err, engine.ErrAlreadyExists):
		o.settled = true
		o.rec = store.ScheduleRecord{Nominal: f.Nominal, At: now, Outcome: store.RecordStarted, Origin: f.Origin,
			ActionID: f.ActionID, RunID: runID}
		if existing || err != nil {
			// The id is taken: this tick's action started earlier (before
			// a crash, by another server, or by an earlier fire of the
			// tick).
			o.again = true
			o.rec.Detail = "started before"
		}
		return o, false
	case stopping(ctx, err):
		return o, true
	case permanent(err):
		o.settled, o.failed = true, true
		o.rec = store.ScheduleRecord{Nominal: f.Nominal, At: now, Outcome: store.RecordFailed, Origin: f.Origin,
			ActionID: f.ActionID, Detail: err.Error()}
		return o, false
	}
	return s.retryLater(o, err), false
}

// retryLater sets when to try a fire again after a passing failure, or
// gives up on it after maxTries.
func (s *Scheduler) retryLater(o outcome, err error) outcome {
	now := s.clk.Now()
	if o.fire.Attempts+1 >= maxTries {
		o.settled, o.failed = true, true
		o.rec = store.ScheduleRecord{Nominal: o.fire.Nominal, At: now, Outcome: store.RecordFailed, Origin: o.fire.Origin,
			ActionID: o.fire.ActionID, Detail: fmt.Sprintf("gave up after %d tries: %v", maxTries, err)}
		return o
	}
	s.log.Warn("a schedule's fire failed; trying again", "action", o.fire.ActionID, "try", o.fire.Attempts+1, "err", err)
	o.retryAt = now.Add(min(time.Second<<o.fire.Attempts, maxBackoff))
	return o
}

// stopping reports an error that means this server is stopping.
func stopping(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, engine.ErrClosed)
}

// permanent reports an error that trying again cannot cure.
func permanent(err error) bool {
	return errors.Is(err, engine.ErrInvalid) || errors.Is(err, namespace.ErrPermissionDenied) ||
		errors.Is(err, namespace.ErrInvalid) || errors.Is(err, namespace.ErrUnknown) ||
		errors.Is(err, engine.ErrFailedPrecondition) || errors.Is(err, engine.ErrNotFound)
}

// start starts the fire's action; for a workflow it returns the run id.
// existing reports an action the id named already.
func (s *Scheduler) start(ctx context.Context, sc store.Schedule, f store.PendingFire) (runID string, existing bool, err error) {
	a := sc.Action
	origin := store.ScheduleOrigin{ScheduleID: sc.ID, Time: f.Nominal}
	if a.Kind == store.ActionWorkflow {
		run, existing, err := s.eng.StartWorkflow(ctx, system, engine.WorkflowRequest{Namespace: sc.Namespace, WorkflowID: f.ActionID,
			WorkflowType: a.Type, TaskQueue: a.TaskQueue, Input: a.Input, IDReuse: engine.ReuseRejectDuplicate,
			Priority: a.Priority, Flow: a.Flow, Origin: origin})
		return run.RunID, existing, err
	}
	_, existing, err = s.eng.Schedule(ctx, system, engine.Request{Namespace: sc.Namespace, ID: f.ActionID, TaskQueue: a.TaskQueue,
		ActivityType: a.Type, Node: a.Node, Payload: a.Input, Timeouts: a.Timeouts, Retry: a.Retry, Priority: a.Priority,
		Flow: a.Flow, Origin: origin})
	return "", existing, err
}

// cancelAction cancels an earlier action of the schedule; one already
// closed (or never started) is fine.
func (s *Scheduler) cancelAction(ctx context.Context, sc store.Schedule, id string) error {
	reason := fmt.Sprintf("schedule %q: a later tick replaces it (overlap cancel_previous)", sc.ID)
	var err error
	if sc.Action.Kind == store.ActionWorkflow {
		_, err = s.eng.CancelWorkflow(ctx, system, sc.Namespace, id, "", reason)
	} else {
		_, err = s.eng.Cancel(ctx, system, sc.Namespace, id, reason)
	}
	if errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrFailedPrecondition) {
		return nil
	}
	return err
}

// fired reports whether an outcome counts as a fire: an action started, or
// one found started already by a fire decided once per tick (a regular,
// caught-up or buffered tick, whose earlier try was cut short by a crash).
// A trigger or a backfill that finds its action started already found a
// tick fired before, and does not count again.
func fired(o outcome) bool {
	if o.failed {
		return false
	}
	if !o.again {
		return true
	}
	return o.fire.Origin != schedule.OriginBackfill && o.fire.Origin != schedule.OriginTrigger
}

// settle records the outcomes of carried-out fires with a compare-and-set,
// reading the schedule again when another writer got there first; a fire
// another scheduler settled meanwhile is left as it recorded it.
func (s *Scheduler) settle(ctx context.Context, trig *schedule.Trigger, sc store.Schedule, outs []outcome) {
	for range casTries {
		now := s.clk.Now()
		next := sc
		next.State = schedule.CloneState(sc.State)
		var counted []outcome
		for _, o := range outs {
			if o.settled {
				if schedule.Settle(&next.State, o.fire.ActionID, o.rec) {
					if fired(o) {
						next.State.Fired++
					}
					counted = append(counted, o)
				}
			} else {
				schedule.Postpone(&next.State, o.fire.ActionID, o.retryAt)
			}
		}
		next.NextDue = schedule.NextDue(trig, next, now, s.timing)
		next.UpdatedAt = now
		_, ok, err := s.st.UpdateSchedule(ctx, next)
		if err != nil {
			s.logErr(ctx, "record a schedule's fires", sc, err)
			return
		}
		if ok {
			for _, o := range counted {
				if o.failed {
					s.log.Error("a schedule's fire failed", "namespace", sc.Namespace, "schedule", sc.ID,
						"action", o.fire.ActionID, "err", o.rec.Detail)
					s.obs.Failed(sc.Namespace)
					s.emitRecord(sc, o.rec)
					continue
				}
				if fired(o) {
					s.obs.Fired(sc.Namespace, o.fire.Origin, max(o.rec.At.Sub(o.fire.FireAt), 0))
					s.emitRecord(sc, o.rec)
				}
			}
			return
		}
		if sc, ok = s.reload(ctx, sc); !ok {
			return
		}
	}
	s.log.Warn("schedule changed under every try to record its fires", "namespace", sc.Namespace, "schedule", sc.ID)
}
