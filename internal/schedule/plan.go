package schedule

import (
	"fmt"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// Bounds on what one schedule keeps and decides.
const (
	// MaxRecent is how many outcomes a schedule keeps in its recent list.
	MaxRecent = 20
	// MaxRunning is how many open actions a schedule remembers; an older
	// one is forgotten (and so no longer counts for overlap) past it.
	MaxRunning = 100
	// MaxBackfills is how many backfill requests may wait at once.
	MaxBackfills = 10
	// maxScan bounds the ticks one pass steps over, so a long outage of a
	// frequent schedule is worked through over several passes.
	maxScan = 100_000
)

// The origins of a fire or a record.
const (
	OriginTick     = "tick"
	OriginCatchUp  = "catch_up"
	OriginTrigger  = "trigger"
	OriginBackfill = "backfill"
	OriginBuffered = "buffered"
)

// CheckPolicy refuses an unknown overlap or catch-up policy and a negative
// catch-up window, naming the field and value; errors wrap ErrInvalid.
func CheckPolicy(p store.SchedulePolicy) error {
	if !p.Overlap.Valid() {
		return fmt.Errorf("overlap: %q is not one of %v: %w", p.Overlap, store.Overlaps, ErrInvalid)
	}
	if !p.CatchUp.Valid() {
		return fmt.Errorf("catch_up: %q is not one of %v: %w", p.CatchUp, store.CatchUps, ErrInvalid)
	}
	if p.CatchUpWindow < 0 {
		return fmt.Errorf("catch_up_window: %v is negative: %w", p.CatchUpWindow, ErrInvalid)
	}
	return nil
}

// Pass is what a scheduler knows when it looks at a schedule.
type Pass struct {
	// Now is the scheduler's time.
	Now time.Time
	// Decider names the scheduler process deciding; it is recorded on the
	// fires so a process tells its own from an orphan's.
	Decider string
	// MaxFires caps the fires one pass decides; 0 means 100.
	MaxFires int
}

// Plan is what a pass decided: the schedule's next state and counts of
// what happened to its ticks.
type Plan struct {
	State store.ScheduleState
	// Fired are the fires decided (in State.Pending, to be carried out).
	Fired []store.PendingFire
	// Skipped counts ticks skipped by the overlap policy, Buffered those
	// put aside by buffer_one, Missed those dropped by the catch-up policy.
	Skipped, Buffered, Missed int
	// Changed is false when the pass decided nothing.
	Changed bool
}

// planner carries one pass's decisions.
type planner struct {
	trig *Trigger
	sc   *store.Schedule
	p    Pass
	plan Plan
	st   *store.ScheduleState
}

func newPlanner(t *Trigger, sc store.Schedule, p Pass) *planner {
	if p.MaxFires <= 0 {
		p.MaxFires = 100
	}
	pl := &planner{trig: t, sc: &sc, p: p}
	pl.plan.State = CloneState(sc.State)
	pl.st = &pl.plan.State
	return pl
}

// Decide works out what the schedule's due ticks do at p.Now: sc.State's
// Running must list only the actions still open (the caller asks the
// engine). In order: a buffered tick fires once nothing is open; then each
// tick after LastTick whose fire instant has come is handled (a tick later
// than the catch-up window is missed, and the catch-up policy decides
// whether it fires; one that fires meets the overlap policy); then the
// backfill requests' ticks, under their own overlap policy. A paused
// schedule decides nothing. At most p.MaxFires fires are decided; what is
// left stays due.
func Decide(t *Trigger, sc store.Schedule, p Pass) Plan {
	pl := newPlanner(t, sc, p)
	if sc.Paused {
		return pl.plan
	}
	if !pl.st.Buffered.IsZero() && len(pl.st.Running) == 0 {
		at := pl.st.Buffered
		pl.st.Buffered = time.Time{}
		pl.fire(at, OriginBuffered, nil)
	}
	pl.ticks()
	pl.backfills()
	return pl.plan
}

// TriggerNow decides a fire of the schedule at nominal, now, under overlap:
// for a trigger-now call. Pause does not stop it.
func TriggerNow(t *Trigger, sc store.Schedule, p Pass, nominal time.Time, overlap store.Overlap) Plan {
	pl := newPlanner(t, sc, p)
	pl.decide(nominal, overlap, OriginTrigger)
	return pl.plan
}

func (pl *planner) full() bool { return len(pl.plan.Fired) >= pl.p.MaxFires }

// ticks handles the ticks after LastTick whose fire instant has come.
func (pl *planner) ticks() {
	var (
		key        = Key(pl.sc.Namespace, pl.sc.ID)
		window     = pl.sc.Policy.CatchUpWindow
		lastMissed time.Time // policy one: the latest missed tick so far
		missed     []time.Time
	)
	dropMissed := func(n time.Time) { missed = append(missed, n) }
	fireLastMissed := func() {
		if !lastMissed.IsZero() {
			pl.decide(lastMissed, pl.sc.Policy.Overlap, OriginCatchUp)
			lastMissed = time.Time{}
		}
	}
	last := pl.st.LastTick
	for range maxScan {
		if pl.full() {
			break
		}
		n, ok := pl.trig.Next(last)
		if !ok {
			break
		}
		at := pl.trig.FireAt(key, n)
		if at.After(pl.p.Now) {
			break
		}
		if pl.p.Now.Sub(at) > window {
			switch pl.sc.Policy.CatchUp {
			case store.CatchUpAll:
				pl.decide(n, pl.sc.Policy.Overlap, OriginCatchUp)
			case store.CatchUpOne:
				if !lastMissed.IsZero() {
					dropMissed(lastMissed)
				}
				lastMissed = n
			default:
				dropMissed(n)
			}
		} else {
			fireLastMissed() // missed ticks come before on-time ones
			pl.decide(n, pl.sc.Policy.Overlap, OriginTick)
		}
		last = n
		pl.st.LastTick = n
		pl.plan.Changed = true
	}
	if !lastMissed.IsZero() {
		if n, ok := pl.trig.Next(last); ok && !pl.trig.FireAt(key, n).After(pl.p.Now) && pl.p.Now.Sub(pl.trig.FireAt(key, n)) > window {
			// The scan stopped inside the missed ticks: a later one is
			// the latest; this one is dropped.
			dropMissed(lastMissed)
		} else {
			fireLastMissed()
		}
	}
	if len(missed) > 0 {
		pl.plan.Missed += len(missed)
		pl.st.Missed += int64(len(missed))
		pl.record(store.ScheduleRecord{Nominal: missed[len(missed)-1], First: missed[0], Count: int64(len(missed)),
			At: pl.p.Now, Outcome: store.RecordMissed, Origin: OriginTick,
			Detail: fmt.Sprintf("later than the catch-up window %v; catch-up policy %s", window, pl.sc.Policy.CatchUp)})
	}
}

// backfills works through the backfill requests in order.
func (pl *planner) backfills() {
	for len(pl.st.Backfills) > 0 && !pl.full() {
		b := &pl.st.Backfills[0]
		after := b.Done
		if after.IsZero() {
			after = b.Start.Add(-time.Nanosecond)
		}
		done := false
		for {
			n, ok := pl.trig.Next(after)
			if !ok || !n.Before(b.End) {
				done = true
				break
			}
			if pl.full() {
				break
			}
			pl.decide(n, b.Overlap, OriginBackfill)
			after, b.Done = n, n
		}
		pl.plan.Changed = true
		if !done {
			return
		}
		pl.st.Backfills = slices.Delete(pl.st.Backfills, 0, 1)
	}
}

// decide applies the overlap policy to one tick.
func (pl *planner) decide(nominal time.Time, overlap store.Overlap, origin string) {
	pl.plan.Changed = true
	open := len(pl.st.Running) > 0
	switch {
	case !open || overlap == store.OverlapAllowAll:
		pl.fire(nominal, origin, nil)
	case overlap == store.OverlapCancelPrevious:
		cancel := pl.st.Running
		pl.st.Running = nil
		pl.fire(nominal, origin, cancel)
	case overlap == store.OverlapBufferOne && pl.st.Buffered.IsZero():
		pl.st.Buffered = nominal
		pl.plan.Buffered++
		pl.record(store.ScheduleRecord{Nominal: nominal, At: pl.p.Now, Outcome: store.RecordBuffered, Origin: origin,
			Detail: "an earlier action is open; fires once it closes"})
	default:
		detail := "an earlier action is open (overlap skip)"
		if overlap == store.OverlapBufferOne {
			detail = "an earlier action is open and a tick is buffered already (overlap buffer_one)"
		}
		pl.plan.Skipped++
		pl.st.Skipped++
		pl.record(store.ScheduleRecord{Nominal: nominal, At: pl.p.Now, Outcome: store.RecordSkipped, Origin: origin, Detail: detail})
	}
}

// fire decides that the tick at nominal starts its action.
func (pl *planner) fire(nominal time.Time, origin string, cancel []string) {
	pl.plan.Changed = true
	id := ActionID(pl.sc.ID, nominal)
	f := store.PendingFire{Nominal: nominal, ActionID: id, FireAt: pl.trig.FireAt(Key(pl.sc.Namespace, pl.sc.ID), nominal),
		Origin: origin, Cancel: cancel, Decider: pl.p.Decider, DecidedAt: pl.p.Now}
	if origin != OriginTick && origin != OriginCatchUp {
		f.FireAt = pl.p.Now // a trigger, backfill or buffered tick is due when decided
	}
	pl.st.Pending = append(pl.st.Pending, f)
	pl.plan.Fired = append(pl.plan.Fired, f)
	pl.st.Running = append(pl.st.Running, id)
	if n := len(pl.st.Running) - MaxRunning; n > 0 {
		pl.st.Running = slices.Delete(pl.st.Running, 0, n)
	}
}

func (pl *planner) record(r store.ScheduleRecord) { Record(pl.st, r) }

// Record appends r to st's recent outcomes, keeping the latest MaxRecent.
func Record(st *store.ScheduleState, r store.ScheduleRecord) {
	st.Recent = append(st.Recent, r)
	if n := len(st.Recent) - MaxRecent; n > 0 {
		st.Recent = slices.Delete(st.Recent, 0, n)
	}
}

// CloneState returns a deep copy of st, so a plan never shares slices with
// the record it started from.
func CloneState(st store.ScheduleState) store.ScheduleState {
	st.Running = slices.Clone(st.Running)
	st.Pending = slices.Clone(st.Pending)
	for i := range st.Pending {
		st.Pending[i].Cancel = slices.Clone(st.Pending[i].Cancel)
	}
	st.Backfills = slices.Clone(st.Backfills)
	st.Recent = slices.Clone(st.Recent)
	return st
}

// Timing is how long a scheduler waits in the cases NextDue plans for.
type Timing struct {
	// Poll is how often a schedule with a buffered tick is looked at for
	// its open actions closing.
	Poll time.Duration
	// Grace is how long a fire decided by one scheduler is left to it
	// before another carries it out.
	Grace time.Duration
}

// NextDue is when a scheduler must next look at the schedule, given its
// state after a pass at now; zero means never (nothing pending, and paused
// or without a tick left).
func NextDue(t *Trigger, sc store.Schedule, now time.Time, tm Timing) time.Time {
	var due time.Time
	consider := func(at time.Time) {
		if due.IsZero() || at.Before(due) {
			due = at
		}
	}
	for _, f := range sc.State.Pending {
		// A fire is due when decided (its decider carries it out at once;
		// another scheduler, once the grace period has passed) or when
		// its retry is.
		if !f.RetryAt.IsZero() {
			consider(f.RetryAt)
		} else {
			consider(f.DecidedAt)
		}
	}
	if sc.Paused {
		return due
	}
	if len(sc.State.Backfills) > 0 {
		consider(now)
	}
	if !sc.State.Buffered.IsZero() {
		consider(now.Add(tm.Poll))
	}
	if n, ok := t.Next(sc.State.LastTick); ok {
		consider(t.FireAt(Key(sc.Namespace, sc.ID), n))
	}
	return due
}

// Tick is one upcoming tick: its nominal time and the instant it fires.
type Tick struct {
	Nominal, FireAt time.Time
}

// Upcoming returns the next n ticks of the schedule after now (and after
// its last handled tick).
func Upcoming(t *Trigger, sc store.Schedule, now time.Time, n int) []Tick {
	after := sc.State.LastTick
	if now.After(after) {
		after = now
	}
	key := Key(sc.Namespace, sc.ID)
	var out []Tick
	for len(out) < n {
		next, ok := t.Next(after)
		if !ok {
			break
		}
		out = append(out, Tick{Nominal: next, FireAt: t.FireAt(key, next)})
		after = next
	}
	return out
}

// Settle takes the fire of actionID out of st's pending fires and records
// r; it reports false, changing nothing, when no such fire is pending
// (another scheduler settled it).
func Settle(st *store.ScheduleState, actionID string, r store.ScheduleRecord) bool {
	i := slices.IndexFunc(st.Pending, func(f store.PendingFire) bool { return f.ActionID == actionID })
	if i < 0 {
		return false
	}
	st.Pending = slices.Delete(st.Pending, i, i+1)
	Record(st, r)
	return true
}

// Postpone counts a failed try of the pending fire of actionID and sets
// when to try again; it reports false when no such fire is pending.
func Postpone(st *store.ScheduleState, actionID string, retryAt time.Time) bool {
	i := slices.IndexFunc(st.Pending, func(f store.PendingFire) bool { return f.ActionID == actionID })
	if i < 0 {
		return false
	}
	st.Pending[i].Attempts++
	st.Pending[i].RetryAt = retryAt
	return true
}

// Resumed is st after a resume at now: the ticks that fell while the
// schedule was paused are passed over, not caught up.
func Resumed(st store.ScheduleState, now time.Time) store.ScheduleState {
	if now.After(st.LastTick) {
		st.LastTick = now
	}
	return st
}
