package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// ClusterConfig makes the engine one server of several sharing one store.
//
// In cluster mode waiting work lives only in the store. A server claims
// activities for the workers connected to it, owns each claimed activity
// until its attempt ends (its writes then apply only while it still owns
// it), and hands a retried activity back to the store. Deadlines of waiting
// work are enforced by sweeps any server may run.
type ClusterConfig struct {
	Store store.Cluster
	// Self is this server's membership.
	Self store.ServerID
	// Poll is how often claims, waiting-work deadlines and cancel requests
	// are checked without a wake-up; 0 means one second.
	Poll time.Duration
	// PreferGrace is how long an activity of a prefer{nodes} namespace is
	// left to servers with workers on those nodes before any other server
	// claims it; 0 means 200ms.
	PreferGrace time.Duration
	// ForwardCancel asks the owner of a running activity to cancel it. The
	// request is also recorded in the store, so a lost message only delays it
	// to the owner's next look at its cancel requests, every fifth poll (or
	// its lease's end).
	ForwardCancel func(ctx context.Context, owner store.ServerID, namespace, id, reason string)
}

// recheckAfter is the least pause before a claim that a rate limit held
// back is tried again.
const recheckAfter = 20 * time.Millisecond

// maxClaim caps the activities one triple claims in one round trip.
const maxClaim = 512

// callTimeout bounds each background store call, so a connection that hangs
// delays one round rather than stopping the loop.
const callTimeout = 10 * time.Second

// call runs f with a context bounded by callTimeout that ends at Stop.
func (e *Engine) call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(e.bgCtx, callTimeout)
	defer cancel()
	return f(ctx)
}

// errNotOwner is a write refused because this server no longer owns the
// activity: its lease ran out and another server took the work over.
var errNotOwner = errors.New("this server no longer owns the activity")

// claims is the claim loop's state; it is guarded by the engine lock.
type claims struct {
	// dirty holds the triples to claim for on the next round.
	dirty map[registry.Triple]struct{}
	// empty remembers, per triple and node label, that the last claim found
	// less than it asked for, so a freed slot does not query again until a
	// notice says new work arrived.
	empty map[registry.Triple]map[string]bool
	kick  chan struct{}
	// backlog is the last sample of waiting work, refreshed each poll.
	backlog []store.WaitingBacklog
	// failures counts claim rounds that failed in a row, for the pause.
	failures int
	// open is the last sample of open activities per namespace, and
	// scheduled counts what this server admitted that the sample may not
	// hold: together they are the pending count and bytes the per-namespace
	// caps are checked against. committed counts, of those, the ones whose
	// insert is durable: a sample taken after they committed holds them, so
	// only those are taken off when a sample arrives.
	open                           map[string]store.OpenCount
	scheduled, committed           map[string]int
	scheduledBytes, committedBytes map[string]int64
	// graced marks prefer-namespace triples with a wake-up armed for when
	// new work has aged past the grace; a notice clears it.
	graced map[registry.Triple]bool
	// unknown holds owned activities this server did not hold on the last
	// poll (see handBackUnknown).
	unknown map[key]bool
	// failing names the background store calls failing now, so each
	// outage is logged once.
	failing map[string]bool
	// orphans are activities this server owns whose ending could not be
	// written (the database was unreachable); each poll hands them back
	// until that succeeds, so they run again rather than stay running.
	orphans map[key]struct{}
	// limitWake is, per triple, when a claim its rate limit held back is
	// due again (a wake-up is armed for then).
	limitWake map[registry.Triple]time.Time
	// ending holds, per triple, the ids of activities whose attempt ended
	// here but whose end is not durable yet: the store still shows them
	// running, and a claim must not count them as holding their fairness
	// key's slots (see store.Claim.Ended).
	ending map[registry.Triple]map[string]struct{}
	// tallies counts, for triples whose waiting work this server can
	// count (see tallyLocked), its own ready activities waiting in the
	// store unclaimed. A claim then asks for that many rather than for
	// every free slot, so the slots stay free for new work to start at
	// once; and a tally of zero says that nothing waits that new work
	// would pass. A notice, a poll or any other write of waiting work
	// drops the triple's tally: what waits is not known until the next
	// claim for every free slot finds the end of it.
	tallies map[registry.Triple]ownWaiting
	// probe marks triples the poll asks about whose tally says nothing of
	// this server's waits: their next claim asks for one activity, which
	// either finds nothing (the tally holds) or shows that unknown work
	// waits (the tally is dropped and a claim for every free slot follows).
	probe map[registry.Triple]bool
	// starting counts, per namespace, activities inserted already running
	// (see directWorkerLocked) whose insert is not durable yet: each holds
	// a worker slot but is not running yet.
	starting map[string]int
}

func newClaims() *claims {
	return &claims{
		dirty:          make(map[registry.Triple]struct{}),
		empty:          make(map[registry.Triple]map[string]bool),
		kick:           make(chan struct{}, 1),
		orphans:        make(map[key]struct{}),
		limitWake:      make(map[registry.Triple]time.Time),
		ending:         make(map[registry.Triple]map[string]struct{}),
		failing:        make(map[string]bool),
		graced:         make(map[registry.Triple]bool),
		open:           make(map[string]store.OpenCount),
		scheduled:      make(map[string]int),
		scheduledBytes: make(map[string]int64),
		committed:      make(map[string]int),
		committedBytes: make(map[string]int64),
		starting:       make(map[string]int),
		tallies:        make(map[registry.Triple]ownWaiting),
		probe:          make(map[registry.Triple]bool),
	}
}

// ownWaiting is what a server knows of its own waiting work of one triple.
type ownWaiting struct {
	// waiting counts this server's ready activities written to the store
	// and not claimed since.
	waiting int
	// probing says a claim for every free slot is out: until it returns
	// what else waits is not known.
	probing bool
}

func (c *claims) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// NewWork tells the engine that work may be waiting for these triples (all
// triples when nil): a notice from another server, or a reconnect after
// notices may have been missed.
func (e *Engine) NewWork(triples []registry.Triple) {
	if e.cl == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if triples == nil {
		clear(e.claims.empty)
		clear(e.claims.graced)
		clear(e.claims.tallies)
		for _, t := range e.reg.Triples() {
			e.claims.dirty[t] = struct{}{}
		}
		e.markAllRunClaimsLocked()
		e.checkAllHeldLocked()
	}
	for _, t := range triples {
		if e.runNoticeLocked([3]string{t.Pool.Namespace, t.Pool.TaskQueue, t.ActivityType}) {
			continue
		}
		e.forgetWorkLocked(t)
	}
	e.claims.wake()
}

// forgetWorkLocked drops what this server knew of t's waiting work (that a
// claim found its end, its tally) and marks t for a claim for every free
// slot, which finds out again.
func (e *Engine) forgetWorkLocked(t registry.Triple) {
	delete(e.claims.empty, t)
	delete(e.claims.graced, t)
	delete(e.claims.tallies, t)
	e.claims.dirty[t] = struct{}{}
}

// pollWork looks, once a poll, for work no notice announced (one lost with
// a connection, or made ready by a server that died before announcing it).
// A triple whose tally says nothing of this server's waits is probed with a
// claim of one activity, so new work keeps starting on the free slots
// meanwhile; every other triple is claimed for as after a notice.
func (e *Engine) pollWork() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.reg.Triples() {
		if tl, ok := e.claims.tallies[t]; ok && !tl.probing && tl.waiting == 0 {
			e.claims.probe[t] = true
			e.claims.dirty[t] = struct{}{}
		} else {
			e.forgetWorkLocked(t)
		}
	}
	e.markAllRunClaimsLocked()
	e.checkAllHeldLocked()
	e.claims.wake()
}

// wantLocked marks a triple for claiming after a worker slot freed or a
// worker joined, unless the last claim found nothing for any label.
func (e *Engine) wantLocked(t registry.Triple, node string) {
	if e.claims.empty[t][node] {
		return
	}
	e.claims.dirty[t] = struct{}{}
	e.claims.wake()
}

// releaseLocked lets go of an activity that is durable as scheduled: in
// cluster mode it waits in the store, where any server may claim it.
func (e *Engine) releaseLocked(a *activity) {
	e.dropOpenLocked(a)
	a.wakeWaiters()
	t := tripleOf(&a.rec)
	if ready := a.rec.ReadyAt; ready.After(e.now()) {
		e.armAnnounceLocked(ready, t)
		return
	}
	n, counted := e.claims.tallies[t]
	e.localWorkLocked(t)
	if counted && a.rec.Node == "" {
		n.waiting++
		e.claims.tallies[t] = n
	}
}

// tallyLocked reports whether this server can count the waiting work of t
// that may pass new work: when t's namespace places work on any node and
// no flow limit holds t (whose claims can take any of it, in order), and
// as long as what waits is unpinned (a pinned activity drops the tally).
func (e *Engine) tallyLocked(t registry.Triple) bool {
	p := e.placements[t.Pool.Namespace]
	return p.Mode != store.Prefer && p.Mode != store.Pinned && e.activityLimitLocked(t) == nil
}

// directWorkerLocked takes, for a new activity, a free slot of a local
// worker that may start it as soon as its insert is durable, without a
// claim: the insert itself claims it (store.InsertActivity.Start). That is
// one row version, index update and round trip fewer per activity, and no
// wait for a claim round. It takes one only when nothing could have gone
// before the activity: it is ready now and no flow limit holds its type,
// the namespace has room under its in-flight cap, the worker's node suits
// the pin and the placement (in a prefer{nodes} namespace only a preferred
// node, so others still wait out the grace), and the last claim for the
// triple on the worker's node label found the end of the ready work, or
// the triple's tally says none of this server's waits, with no notice or
// other write of waiting work since. Otherwise the activity waits in the
// store (nil).
func (e *Engine) directWorkerLocked(a *activity, now time.Time) *registry.Worker {
	if e.cl == nil || a.rec.ReadyAt.After(now) {
		return nil
	}
	t := tripleOf(&a.rec)
	drained := e.claims.empty[t]
	n, counted := e.claims.tallies[t]
	none := counted && n.waiting == 0 && !n.probing
	if (!none && len(drained) == 0) || e.activityLimitLocked(t) != nil {
		return nil
	}
	ns := a.rec.Namespace
	if e.maxRunning > 0 && e.running[ns]+e.claims.starting[ns] >= e.maxRunning {
		return nil
	}
	p := e.placements[ns]
	m := matchFor(a.rec.Node, p)
	if a.rec.Node == "" && p.Mode == store.Prefer {
		m = registry.OnNodes(p.Nodes...)
	}
	w, ok := e.reg.Select(t, m)
	if !ok {
		return nil
	}
	if (!none && !drained[w.Node()]) || (p.Mode == store.Pinned && !slices.Contains(p.Nodes, w.Node())) {
		e.reg.Release(w)
		return nil
	}
	return w
}

// insertStartLocked is the start of a new activity of namespace ns to be
// inserted running on w, whose slot directWorkerLocked took; the slot
// counts as starting until settleStartLocked.
func (e *Engine) insertStartLocked(ns string, w *registry.Worker) *store.InsertStart {
	e.claims.starting[ns]++
	return &store.InsertStart{Owner: e.cl.Self, Worker: uint64(w.ID()), Node: w.Node(), At: e.now()}
}

// settleStartLocked settles w's slot once a started insert in namespace ns
// returned: the slot is freed unless the activity was inserted running and
// w is still here to run it. It reports whether the activity must be
// inserted again without a start: the store inserted nothing, because the
// id is in use or this server's lease ran out, and the plain insert tells
// which.
func (e *Engine) settleStartLocked(ns string, w *registry.Worker, created bool, err error) (again bool) {
	e.claims.starting[ns]--
	if err != nil || !created || e.closed || !e.reg.IsRegistered(w.ID()) {
		e.reg.Release(w)
		e.dispatchWorkerLocked(w)
	}
	return err == nil && !created && !e.closed
}

// startInsertedLocked starts the first attempt of a, inserted running on
// w (its slot taken by directWorkerLocked), as adoptLocked starts claimed
// work. If w left while the insert committed (or the engine closed), a
// waits in the store again instead.
func (e *Engine) startInsertedLocked(a *activity, w *registry.Worker) {
	if e.closed || !e.reg.IsRegistered(w.ID()) {
		e.dropOpenLocked(a)
		a.wakeWaiters()
		e.handBack([]store.Activity{a.rec})
		return
	}
	if a.readyAt.IsZero() {
		a.readyAt = a.rec.ReadyAt
	}
	if t := a.rec.Timeouts.ScheduleToClose; t > 0 {
		e.armLocked(a.rec.ScheduledAt.Add(t), a.key(), 0, timerScheduleToClose)
	}
	e.startLocked(a, w)
}

// localWorkLocked marks t for a claim because this server wrote or handed
// back work of t, as a notice would: the membership drops this server's
// own notices of activity work, so every such write must mark it here.
func (e *Engine) localWorkLocked(t registry.Triple) {
	e.forgetWorkLocked(t)
	e.claims.wake()
}

// announce tells every server that work of t is ready now.
func (e *Engine) announce(t registry.Triple) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		err := e.cl.Store.PublishNotice(e.bgCtx, store.Notice{Kind: store.NoticeWork,
			Triples: [][3]string{{t.Pool.Namespace, t.Pool.TaskQueue, t.ActivityType}}})
		if err != nil && e.bgCtx.Err() == nil {
			e.log.Warn("announce ready work", "triple", t.String(), "err", err)
		}
	}()
}

// runClaims claims work for local workers whenever a triple is marked, and
// at least every poll.
func (e *Engine) runClaims() {
	defer e.done.Done()
	for {
		select {
		case <-e.stop:
			return
		case <-e.claims.kick:
		}
		for {
			more, pause := e.claimRound()
			if pause > 0 && !e.pause(pause) {
				return
			}
			if !more {
				break
			}
			select {
			case <-e.stop:
				return
			default:
			}
		}
	}
}

// pause waits d on the engine's clock; it reports false if the engine
// stopped first.
func (e *Engine) pause(d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.stop:
		return false
	case <-t.C():
		return true
	}
}

// claimGroup is the workers reserved for one claim: one triple, one label.
type claimGroup struct {
	t       registry.Triple
	node    string
	workers []*registry.Worker
	// claim is what is asked of the store for these workers.
	claim store.Claim
	// counted says the claim asks for what the triple's tally counted,
	// not for every free slot.
	counted bool
}

// claimRound reserves free slots of local workers for the marked triples,
// claims that much work from the store in one round trip, and starts what
// it got. It reports whether another round is due at once, and how long to
// pause before it after a failed claim; the caller pauses, without the lock.
func (e *Engine) claimRound() (more bool, pause time.Duration) {
	e.mu.Lock()
	if e.closed || len(e.claims.dirty) == 0 {
		e.mu.Unlock()
		return false, 0
	}
	now := e.now()
	groups := e.reserveSlotsLocked()
	groups = e.dropOffPlacementLocked(groups)
	e.buildClaimsLocked(groups, now)
	e.mu.Unlock()
	if len(groups) == 0 {
		return false, 0
	}

	got, err := e.claimFromStore(groups, now)

	e.mu.Lock()
	defer e.mu.Unlock()
	more, giveBack := e.adoptClaimedLocked(groups, got, err, now)
	e.handBack(giveBack)
	return e.noteClaimOutcomeLocked(err, more)
}

// reserveSlotsLocked empties the marked triples and takes, for each, a free
// slot of every local worker that can run its work, as far as the
// namespace's in-flight cap and maxClaim allow, grouped by node label.
func (e *Engine) reserveSlotsLocked() []*claimGroup {
	var groups []*claimGroup
	room := make(map[string]int)
	for t := range e.claims.dirty {
		delete(e.claims.dirty, t)
		ns := t.Pool.Namespace
		if _, ok := room[ns]; !ok {
			room[ns] = maxClaim
			if e.maxRunning > 0 {
				room[ns] = e.maxRunning - e.running[ns] - e.claims.starting[ns]
			}
		}
		want, counted := maxClaim, false
		tl, known := e.claims.tallies[t]
		probe := e.claims.probe[t]
		delete(e.claims.probe, t)
		switch {
		case known && !tl.probing && probe && tl.waiting == 0:
			groups = append(groups, e.probeSlotsLocked(t, room)...)
			continue
		case known && !tl.probing:
			want, counted = tl.waiting, true
		case e.tallyLocked(t):
			// Count from now on; the claim finds what waits already.
			tl = ownWaiting{probing: true}
		}
		byNode := map[string]*claimGroup{}
		n := 0
		for ; n < want && room[ns] > 0; n++ {
			w, ok := e.reg.Select(t, registry.AnyNode())
			if !ok {
				break
			}
			room[ns]--
			g := byNode[w.Node()]
			if g == nil {
				g = &claimGroup{t: t, node: w.Node(), counted: counted}
				byNode[w.Node()] = g
				groups = append(groups, g)
			}
			g.workers = append(g.workers, w)
		}
		if counted {
			tl.waiting -= n // what is left waits for slots to free
		}
		if counted || tl.probing {
			e.claims.tallies[t] = tl
		}
	}
	return groups
}

// probeSlotsLocked takes, for a probe of t (see claims.probe), one free
// slot on each node label of t's local workers, as far as the namespace's
// room allows: pinned work waits for its label alone.
func (e *Engine) probeSlotsLocked(t registry.Triple, room map[string]int) []*claimGroup {
	var groups []*claimGroup
	seen := map[string]bool{}
	ns := t.Pool.Namespace
	for _, c := range e.reg.Candidates(t, "") {
		if seen[c.Node] || room[ns] <= 0 {
			continue
		}
		seen[c.Node] = true
		if w, ok := e.reg.Select(t, registry.OnNodes(c.Node)); ok {
			room[ns]--
			groups = append(groups, &claimGroup{t: t, node: w.Node(), workers: []*registry.Worker{w}})
		}
	}
	return groups
}

// dropOffPlacementLocked gives back the slots of groups on nodes outside a
// pinned{nodes} namespace's placement: that work runs only on workers on
// those nodes, however long it waits, and a worker that registered before
// the pin keeps its slots for other work.
func (e *Engine) dropOffPlacementLocked(groups []*claimGroup) []*claimGroup {
	kept := groups[:0]
	for _, g := range groups {
		if p := e.placements[g.t.Pool.Namespace]; p.Mode == store.Pinned && !slices.Contains(p.Nodes, g.node) {
			e.markEmptyLocked(g.t, g.node) // until the placement or the worker set changes
			for _, w := range g.workers {
				e.reg.Release(w)
				e.dispatchWorkerLocked(w)
			}
			continue
		}
		kept = append(kept, g)
	}
	return kept
}

// buildClaimsLocked sets each group's claim: as many activities as it has
// workers, and in a prefer{nodes} namespace, from a node outside those,
// only work that has waited past the prefer grace.
func (e *Engine) buildClaimsLocked(groups []*claimGroup, now time.Time) {
	for _, g := range groups {
		c := store.Claim{Namespace: g.t.Pool.Namespace, TaskQueue: g.t.Pool.TaskQueue, ActivityType: g.t.ActivityType,
			Node: g.node, Workers: make([]uint64, len(g.workers))}
		for j, w := range g.workers {
			c.Workers[j] = uint64(w.ID())
		}
		if p := e.placements[c.Namespace]; p.Mode == store.Prefer && !slices.Contains(p.Nodes, g.node) {
			c.ReadyBefore = now.Add(-e.cl.PreferGrace)
		}
		if l := e.activityLimitLocked(g.t); l != nil {
			spec := l.spec
			c.Limit = &spec
		}
		for id := range e.claims.ending[g.t] {
			c.Ended = append(c.Ended, id)
		}
		g.claim = c
	}
}

// claimFromStore makes the groups' claims in one round trip; got holds one
// result per group, in order.
func (e *Engine) claimFromStore(groups []*claimGroup, now time.Time) (got []store.ClaimResult, err error) {
	claims := make([]store.Claim, len(groups))
	for i, g := range groups {
		claims[i] = g.claim
	}
	err = e.call(func(ctx context.Context) (err error) {
		got, err = e.cl.Store.ClaimActivities(ctx, store.ClaimRequest{Owner: e.cl.Self, Now: now, Claims: claims})
		return err
	})
	return got, err
}

// adoptClaimedLocked starts what each group claimed on its reserved
// workers, frees the slots it could not fill, and decides when each triple
// is looked at again. It reports whether a triple got all it asked for (so
// more may wait), and the activities to hand back: claimed for a worker
// that left meanwhile, or while the engine was closing. After a failed
// claim (err set) every triple is marked to be tried again.
func (e *Engine) adoptClaimedLocked(groups []*claimGroup, got []store.ClaimResult, err error, now time.Time) (more bool, giveBack []store.Activity) {
	for i, g := range groups {
		var res store.ClaimResult
		if err == nil {
			res = got[i]
		}
		rows := res.Activities
		switch {
		case err != nil:
			e.claims.dirty[g.t] = struct{}{} // try again after the pause
			delete(e.claims.tallies, g.t)    // what it asked for still waits
		case res.Limited && len(rows) < len(g.workers):
			e.heldByLimitLocked(g, res, now)
		case len(rows) < len(g.workers) && !g.claim.ReadyBefore.IsZero():
			// Work younger than the prefer grace may be waiting: look again
			// once, when it has aged past it (again after the next notice).
			e.markEmptyLocked(g.t, g.node)
			if !e.claims.graced[g.t] {
				e.claims.graced[g.t] = true
				e.armWakeLocked(now.Add(e.cl.PreferGrace), g.t)
			}
		case len(rows) < len(g.workers):
			// The claim saw the end of the ready work: a row another
			// server's claim held is that claim's (a claim locks only rows
			// it takes). New work comes with a notice, or with this
			// server's own write.
			e.markEmptyLocked(g.t, g.node)
			if tl, ok := e.claims.tallies[g.t]; ok && tl.probing {
				tl.probing = false
				e.claims.tallies[g.t] = tl
			}
		case g.counted:
			// It took what the tally counted; own writes since have
			// counted and marked the triple again.
			if e.claims.tallies[g.t].waiting > 0 {
				e.claims.dirty[g.t] = struct{}{}
				more = true
			}
		default:
			delete(e.claims.tallies, g.t) // more may wait than it asked for
			e.claims.dirty[g.t] = struct{}{}
			more = true
		}
		for j, rec := range rows {
			w := g.workers[j]
			if e.closed || !e.reg.IsRegistered(w.ID()) {
				giveBack = append(giveBack, rec)
				continue
			}
			e.adoptLocked(rec, w, now)
		}
		for _, w := range g.workers[len(rows):] {
			// The slot may serve another triple of w that got none.
			e.reg.Release(w)
			e.dispatchWorkerLocked(w)
		}
	}
	return more, giveBack
}

// heldByLimitLocked notes a claim its flow limit cut short: the triple is
// claimed again when the limit may allow more, not before. For a rate that
// is when the bucket holds a token again (a wake-up is armed); for a
// concurrency key it is when an attempt of the type ends on any server,
// which announces it (see limitEndedLocked).
func (e *Engine) heldByLimitLocked(g *claimGroup, res store.ClaimResult, now time.Time) {
	e.markEmptyLocked(g.t, g.node)
	if res.NextToken.IsZero() {
		e.obs.Throttled(g.t.Pool.Namespace, ThrottleConcurrency)
		return
	}
	e.obs.Throttled(g.t.Pool.Namespace, ThrottleRate)
	// Waking for every single token would make a claim per token; waiting
	// a little longer lets one claim take several, as long as the bucket
	// does not fill meanwhile (tokens past the burst would be lost).
	at := res.NextToken
	if l := g.claim.Limit; l != nil && l.Rate > 0 {
		half := time.Duration(float64(l.Burst) / (2 * l.Rate) * float64(time.Second))
		at = maxTime(at, now.Add(min(recheckAfter, half)))
	}
	if due, ok := e.claims.limitWake[g.t]; ok && due.After(now) && !due.After(at) {
		return // an earlier wake-up is armed
	}
	e.claims.limitWake[g.t] = at
	e.armWakeLocked(at, g.t)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// limitEndedLocked tells every server that an attempt of a type with a
// concurrency limit ended (its end is durable), so a claim its key's limit
// held back is tried again.
func (e *Engine) limitEndedLocked(rec *store.Activity) {
	if len(e.limits) == 0 || rec.Flow.ConcurrencyKey == "" {
		return
	}
	t := tripleOf(rec)
	if l := e.activityLimitLocked(t); l != nil && l.spec.Concurrency > 0 && !e.closed {
		e.localWorkLocked(t)
		e.announce(t)
	}
}

// handBack returns claimed activities to the store in the background, so
// any server may claim them again.
func (e *Engine) handBack(recs []store.Activity) {
	if len(recs) == 0 {
		return
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		for _, rec := range recs {
			if err := e.cl.Store.UnclaimActivity(e.bgCtx, e.cl.Self, rec.Namespace, rec.ID); err != nil {
				if e.bgCtx.Err() == nil {
					e.log.Warn("hand back claimed activity", "namespace", rec.Namespace, "activity", rec.ID, "err", err)
				}
				continue
			}
			e.mu.Lock()
			e.localWorkLocked(tripleOf(&rec))
			e.mu.Unlock()
		}
	}()
}

// noteClaimOutcomeLocked counts failed claims in a row and logs the start
// and the end of an outage once each. After a failure another round is due
// after a pause, longer each time: the database is unreachable or refused.
func (e *Engine) noteClaimOutcomeLocked(err error, more bool) (bool, time.Duration) {
	if err != nil {
		e.claims.failures++
		if e.claims.failures == 1 && e.bgCtx.Err() == nil {
			e.log.Warn("claim work failed; retrying", "err", err)
		}
		return true, claimPause(e.claims.failures)
	}
	if e.claims.failures > 0 {
		e.log.Info("claiming work again", "failed_rounds", e.claims.failures)
		e.claims.failures = 0
	}
	return more, 0
}

// claimPause is the pause after failures failed claims in a row: 100ms,
// doubling up to 2s.
func claimPause(failures int) time.Duration {
	return min(50*time.Millisecond<<min(failures, 6), 2*time.Second)
}

// endingLocked notes that a's attempt ended here and its end is being
// written; endedLocked, that the write is done (or failed).
func (e *Engine) endingLocked(a *activity) {
	t := tripleOf(&a.rec)
	m := e.claims.ending[t]
	if m == nil {
		m = make(map[string]struct{})
		e.claims.ending[t] = m
	}
	m[a.rec.ID] = struct{}{}
}

func (e *Engine) endedLocked(a *activity) {
	t := tripleOf(&a.rec)
	if m := e.claims.ending[t]; m != nil {
		delete(m, a.rec.ID)
		if len(m) == 0 {
			delete(e.claims.ending, t)
		}
	}
}

func (e *Engine) markEmptyLocked(t registry.Triple, node string) {
	if e.claims.empty[t] == nil {
		e.claims.empty[t] = make(map[string]bool)
	}
	e.claims.empty[t][node] = true
}

// adoptLocked starts the attempt a claim handed to this server on w, whose
// slot is already taken.
func (e *Engine) adoptLocked(rec store.Activity, w *registry.Worker, now time.Time) {
	a := &activity{rec: rec, readyAt: rec.ReadyAt, size: rec.PayloadSize}
	a.rec.Attempt-- // startLocked numbers the attempt
	a.rec.State = store.StateScheduled
	if a.readyAt.IsZero() || a.readyAt.After(now) {
		a.readyAt = now
	}
	e.addOpenLocked(a)
	if t := rec.Timeouts.ScheduleToClose; t > 0 {
		e.armLocked(rec.ScheduledAt.Add(t), a.key(), 0, timerScheduleToClose)
	}
	e.startLocked(a, w)
}

// choreFailed logs a background store call's failure once per outage;
// choreOK logs its recovery.
func (e *Engine) choreFailed(what string, err error) {
	if e.bgCtx.Err() != nil {
		return
	}
	e.mu.Lock()
	first := !e.claims.failing[what]
	e.claims.failing[what] = true
	e.mu.Unlock()
	if first {
		e.log.Warn(what+" failed; retrying every poll", "err", err)
	}
}

func (e *Engine) choreOK(what string) {
	e.mu.Lock()
	was := e.claims.failing[what]
	delete(e.claims.failing, what)
	e.mu.Unlock()
	if was {
		e.log.Info(what + " works again")
	}
}

// backlogEvery is how many polls pass between backlog samples, and between
// the backstops that read this server's owned rows (cancel requests whose
// message was lost, owned work it does not hold): counting a large backlog
// reads every waiting row, and reading the owned rows walks the entries of
// every activity the server ran since the last vacuum, so neither is done
// every second.
const backlogEvery = 5

// runChores runs, every poll, what no notice triggers: a claim for every
// local triple (in case a notice was lost), timeouts of waiting work,
// cancel requests addressed to this server, and the backlog sample.
func (e *Engine) runChores() {
	defer e.done.Done()
	t := e.clock.NewTicker(e.cl.Poll)
	defer t.Stop()
	for polls := 0; ; polls++ {
		select {
		case <-e.stop:
			return
		case <-t.C():
		}
		e.pollWork()
		e.handBackOrphans()
		e.expireWaiting()
		if polls%backlogEvery != 0 {
			continue
		}
		e.applyCancelRequests()
		e.handBackUnknown()
		if err := e.call(func(ctx context.Context) error { return e.cl.Store.SweepFlowBuckets(ctx, e.now()) }); err != nil {
			e.choreFailed("sweep flow buckets", err)
		} else {
			e.choreOK("sweep flow buckets")
		}
		var b []store.WaitingBacklog
		if err := e.call(func(ctx context.Context) (err error) {
			b, err = e.cl.Store.ListWaitingBacklog(ctx, e.now())
			return err
		}); err == nil {
			e.mu.Lock()
			e.claims.backlog = b
			e.mu.Unlock()
			e.choreOK("sample the backlog")
		} else {
			e.choreFailed("sample the backlog", err)
		}
		if e.maxPending > 0 || e.maxPendingBytes > 0 {
			// What had committed before the count began is in it; what
			// commits during it may be too, and is counted twice until the
			// next sample, which errs on the side of the caps.
			e.mu.Lock()
			counted, countedBytes := maps.Clone(e.claims.committed), maps.Clone(e.claims.committedBytes)
			e.mu.Unlock()
			var open map[string]store.OpenCount
			if err := e.call(func(ctx context.Context) (err error) {
				open, err = e.cl.Store.CountOpenActivities(ctx)
				return err
			}); err == nil {
				e.mu.Lock()
				e.claims.open = open
				takeOff(e.claims.scheduled, e.claims.committed, counted)
				takeOff(e.claims.scheduledBytes, e.claims.committedBytes, countedBytes)
				e.mu.Unlock()
				e.choreOK("count open activities")
			} else {
				e.choreFailed("count open activities", err)
			}
		}
	}
}

// handBackOrphans returns to the store the activities whose ending could not
// be written, so another attempt runs.
func (e *Engine) handBackOrphans() {
	e.mu.Lock()
	keys := make([]key, 0, len(e.claims.orphans))
	for k := range e.claims.orphans {
		keys = append(keys, k)
	}
	e.mu.Unlock()
	for _, k := range keys {
		if err := e.call(func(ctx context.Context) error { return e.cl.Store.UnclaimActivity(ctx, e.cl.Self, k.ns, k.id) }); err != nil {
			return // still unreachable; next poll
		}
		e.mu.Lock()
		delete(e.claims.orphans, k)
		e.mu.Unlock()
	}
}

// handBackUnknown returns activities the store says this server owns but
// that it does not hold: a claim (or an insert started on a worker) that
// committed but whose answer was lost. An activity must look unknown on two
// looks in a row, so a claim still being adopted is not mistaken for one.
// It looks every backlogEvery polls: the read walks the owned index, whose
// entries of ended activities stay until a vacuum, and it is a backstop for
// a rare loss, not a path work waits on.
func (e *Engine) handBackUnknown() {
	var owned []store.ActivityRef
	if err := e.call(func(ctx context.Context) (err error) {
		owned, err = e.cl.Store.ListOwnedActivities(ctx, e.cl.Self)
		return err
	}); err != nil {
		e.choreFailed("list owned activities", err)
		return
	}
	e.choreOK("list owned activities")
	e.mu.Lock()
	suspects := make(map[key]bool)
	var handBack []key
	for _, r := range owned {
		k := key{r.Namespace, r.ID}
		if e.open[k] != nil {
			continue
		}
		if e.claims.unknown[k] {
			handBack = append(handBack, k)
		} else {
			suspects[k] = true
		}
	}
	e.claims.unknown = suspects
	e.mu.Unlock()
	for _, k := range handBack {
		var rec store.Activity
		err := e.call(func(ctx context.Context) (err error) {
			if err := e.cl.Store.UnclaimActivity(ctx, e.cl.Self, k.ns, k.id); err != nil {
				return err
			}
			rec, err = e.st.GetActivity(ctx, k.ns, k.id)
			return err
		})
		if err != nil {
			continue // waiting or still owned: a poll or the next look finds it
		}
		// Its notice reached the other servers only: mark it here too.
		e.mu.Lock()
		e.localWorkLocked(tripleOf(&rec))
		e.mu.Unlock()
	}
}

// expireWaiting closes waiting work whose schedule-to-start or
// schedule-to-close deadline passed.
func (e *Engine) expireWaiting() {
	now := e.now()
	for {
		ctx, cancel := context.WithTimeout(e.bgCtx, callTimeout)
		closed, err := e.cl.Store.ExpireWaitingActivities(ctx, store.ExpireRequest{Now: now, Limit: 500, Failure: func(a store.Activity) *store.Failure {
			if t := a.Timeouts.ScheduleToClose; t > 0 && !now.Before(a.ScheduledAt.Add(t)) {
				return &store.Failure{Type: FailureScheduleToClose,
					Message: "activity exceeded its schedule-to-close timeout of " + t.String()}
			}
			if t := a.Timeouts.ScheduleToStart; t > 0 && !now.Before(a.ReadyAt.Add(t)) {
				return &store.Failure{Type: FailureScheduleToStart,
					Message: "no worker started the activity within its schedule-to-start timeout of " + t.String()}
			}
			return nil
		}})
		cancel()
		if err != nil {
			e.choreFailed("expire waiting activities", err)
			return
		}
		e.choreOK("expire waiting activities")
		e.mu.Lock()
		for _, a := range closed {
			e.obs.Closed(a.Namespace, a.State)
		}
		e.mu.Unlock()
		e.postStepClosed(closed)
		if len(closed) < 500 {
			return
		}
	}
}

// applyCancelRequests cancels the owned activities another server recorded
// a cancel request for (a backstop for a lost message).
func (e *Engine) applyCancelRequests() {
	var reqs []store.PendingCancel
	err := e.call(func(ctx context.Context) (err error) {
		reqs, err = e.cl.Store.ListCancelRequests(ctx, e.cl.Self)
		return err
	})
	if err != nil {
		e.choreFailed("read cancel requests", err)
		return
	}
	e.choreOK("read cancel requests")
	for _, r := range reqs {
		e.CancelOwned(r.Activity.Namespace, r.Activity.ID, r.Reason)
	}
}

// CancelOwned cancels an activity this server runs, for a cancel request
// another server forwarded (it authorized the caller). It does nothing when
// the activity is not running here.
func (e *Engine) CancelOwned(ns, id, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.open[key{ns, id}]
	if a == nil || a.closing || a.creating != nil || a.worker == nil {
		return
	}
	e.closeLocked(a, store.StateCanceled, &store.Failure{Type: "canceled", Message: reason}, e.now())
}

// cancelInStore cancels an activity this server does not hold: a waiting one
// directly in the store, a running one through its owner. It returns once
// the activity is closed, or ctx ends.
func (e *Engine) cancelInStore(ctx context.Context, ns, id, reason string) error {
	res, err := e.cl.Store.RequestCancel(ctx, store.CancelRequest{Namespace: ns, ID: id, Reason: reason, Now: e.now()})
	outcome, owner := res.Outcome, res.Owner
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("activity %q in namespace %q: %w", id, ns, ErrNotFound)
	}
	if err != nil {
		return err
	}
	switch outcome {
	case store.CancelDone:
		e.mu.Lock()
		e.obs.Closed(ns, store.StateCanceled)
		e.mu.Unlock()
		if a, err := e.st.GetActivity(ctx, ns, id); err == nil {
			e.postStepClosed([]store.Activity{a})
		}
	case store.CancelForwarded:
		if owner == e.cl.Self {
			e.CancelOwned(ns, id, reason)
		} else if e.cl.ForwardCancel != nil {
			e.cl.ForwardCancel(ctx, owner, ns, id, reason)
		}
		return e.awaitClosed(ctx, ns, id)
	}
	return nil
}

// awaitClosed polls the store until the activity is terminal or ctx ends:
// in cluster mode another server may be the one closing it.
func (e *Engine) awaitClosed(ctx context.Context, ns, id string) error {
	pause := 10 * time.Millisecond
	for {
		ch, err := e.waiterFor(key{ns, id})
		if err != nil {
			return err
		}
		if ch != nil {
			if err := e.await(ctx, key{ns, id}, ch); err != nil {
				return err
			}
		}
		rec, err := e.st.GetActivity(ctx, ns, id)
		if err != nil {
			return err
		}
		if rec.State.Terminal() {
			return nil
		}
		if ch != nil {
			continue // it left memory: it was released to the store or closed
		}
		t := e.clock.NewTimer(pause)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-e.stop:
			t.Stop()
			return fmt.Errorf("server stopping: %w", ErrClosed)
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// pendingLocked is how many activities of ns are not closed yet, as far as
// this server knows: the last sample plus what it scheduled since (other
// servers' schedules since the sample are not seen until the next one).
func (e *Engine) pendingLocked(ns string) int {
	if e.cl == nil {
		return e.pending[ns]
	}
	return e.claims.open[ns].Activities + e.claims.scheduled[ns]
}

// pendingBytesLocked is the payload bytes of ns's activities not closed
// yet, as far as this server knows (as pendingLocked).
func (e *Engine) pendingBytesLocked(ns string) int64 {
	if e.cl == nil {
		return e.pendingBytes[ns]
	}
	return e.claims.open[ns].PayloadBytes + e.claims.scheduledBytes[ns]
}

// clusterBacklog turns the last store sample into pool backlogs.
func (e *Engine) clusterBacklogLocked(now time.Time) []PoolBacklog {
	out := make([]PoolBacklog, 0, len(e.claims.backlog))
	for _, b := range e.claims.backlog {
		out = append(out, PoolBacklog{Namespace: b.Namespace, TaskQueue: b.TaskQueue, Waiting: b.Waiting,
			OldestAge: max(0, now.Sub(b.OldestReadyAt)), ByPriority: b.ByPriority})
	}
	return out
}

// takeOff removes counted, which a fresh sample now holds, from both the
// admitted and the committed counts, dropping namespaces that reach zero.
func takeOff[N int | int64](scheduled, committed, counted map[string]N) {
	for ns, n := range counted {
		if scheduled[ns] -= n; scheduled[ns] <= 0 {
			delete(scheduled, ns)
		}
		if committed[ns] -= n; committed[ns] == 0 {
			delete(committed, ns)
		}
	}
}
