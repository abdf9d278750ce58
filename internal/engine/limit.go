package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tokenbucket"
)

// Flow limits on one server.
//
// A namespace may limit an activity type: at most N attempts running at
// once per concurrency key, and at most R starts a second (a token bucket
// with a burst) for the whole type or per key. Work over a limit waits; it
// is never failed.
//
// Dispatch looks at a limit only for queues of a limited type (queue.lim is
// set), so work of other types pays nothing. When the item at a queue's head
// may not start, it leaves the queue for a FIFO of its limit (held), so the
// work behind it is not blocked. It goes back into its queue when its limit
// lets it start: for a concurrency key, when a running attempt of the key
// ends (a slot is then reserved for it); for a rate, when the bucket holds a
// token again (an engine timer at that instant takes the token for it). The
// reservation or token travels with the activity until it starts, so what
// was released for it is not taken by work that came later.
//
// In cluster mode no work waits in memory: claims apply the limits in the
// store (see buildClaimsLocked and store.Claim.Limit), and this state holds
// only the specs.

// limitID names what one flow limit covers.
type limitID struct {
	ns   string
	kind store.FlowKind
	typ  string
}

// flowLimit is the live state of one flow limit. A limit that is replaced
// or cleared is marked dead: its groups stop releasing, and activities that
// still point at them are treated as if they never met it.
type flowLimit struct {
	spec store.FlowLimit
	bl   tokenbucket.Limit
	// keys holds the concurrency groups with work running, reserved or
	// held; a group is deleted once it has none, so no caller-chosen key
	// outlives its work.
	keys map[string]*concGroup
	// rate is the bucket of the whole type (a rate without PerKey);
	// perKey are the buckets of keys (PerKey), swept once full again.
	rate    *rateGroup
	perKey  map[string]*rateGroup
	sweepAt int
	dead    bool
}

// heldFIFO holds activities a limit keeps from starting, oldest first. An
// entry whose activity left (closed, or released and gone on) is skipped
// when it reaches the head; live counts the others.
type heldFIFO struct {
	fifo
	live int
}

func (f *heldFIFO) push(a *activity) {
	f.items = append(f.items, a)
	f.live++
}

// pop takes the oldest entry for which valid holds, nil when none is left.
func (f *heldFIFO) pop(valid func(*activity) bool) *activity {
	for f.len() > 0 {
		a := f.items[f.head]
		f.fifo.pop()
		if valid(a) {
			f.live--
			return a
		}
	}
	return nil
}

// concGroup is one concurrency key of a limit: its running attempts, the
// slots reserved for held work released back to its queue, and the work
// held until a slot frees.
type concGroup struct {
	lim               *flowLimit
	key               string
	running, reserved int
	held              heldFIFO
}

// rateGroup is one token bucket of a limit (of the type, or of a key) and
// the work held until it refills; armed says a timer is set for that.
type rateGroup struct {
	lim   *flowLimit
	key   string
	b     tokenbucket.Bucket
	held  heldFIFO
	armed bool
}

// limitState is what the limits know of one activity; nil until a limit
// first holds or admits it.
type limitState struct {
	// slot is the concurrency group whose slot the activity has: reserved
	// while it waits in its queue after a release, taken while it runs.
	slot    *concGroup
	running bool
	// token is the rate group that took a token for it when it released it.
	token *rateGroup
	// heldConc or heldRate is the group holding it now (at most one).
	heldConc *concGroup
	heldRate *rateGroup
}

// Throttle kinds, for the observer.
const (
	ThrottleConcurrency = "concurrency"
	ThrottleRate        = "rate"
)

// activityLimitLocked is the limit of a triple's activity type, nil for
// none: the common case costs one length check.
func (e *Engine) activityLimitLocked(t registry.Triple) *flowLimit {
	if len(e.limits) == 0 {
		return nil
	}
	return e.limits[limitID{t.Pool.Namespace, store.FlowActivity, t.ActivityType}]
}

// rateFor is the bucket that counts an activity of key, nil when the rate
// does not hold it (no rate, or a per-key rate and no key). It is created
// when create is set.
func (l *flowLimit) rateFor(key string, now time.Time, create bool) *rateGroup {
	switch {
	case l.spec.Rate <= 0:
		return nil
	case !l.spec.PerKey:
		return l.rate
	case key == "":
		return nil
	}
	g := l.perKey[key]
	if g == nil && create {
		l.sweepLocked(now)
		g = &rateGroup{lim: l, key: key, b: tokenbucket.Full(l.bl, now)}
		l.perKey[key] = g
	}
	return g
}

// sweepLocked drops the key buckets that are full again and hold nothing:
// they are the same as new ones. Sweeping when the map has doubled since the
// last sweep keeps the cost constant per bucket.
func (l *flowLimit) sweepLocked(now time.Time) {
	if len(l.perKey) < l.sweepAt {
		return
	}
	for k, g := range l.perKey {
		if g.held.live == 0 && !g.armed && !g.b.FullAt(l.bl).After(now) {
			delete(l.perKey, k)
		}
	}
	l.sweepAt = max(2*len(l.perKey), 64)
}

// group is the concurrency group of key, created when missing.
func (l *flowLimit) group(key string) *concGroup {
	g := l.keys[key]
	if g == nil {
		g = &concGroup{lim: l, key: key}
		l.keys[key] = g
	}
	return g
}

// dropIfIdle deletes a group that has nothing running, reserved or held.
func (g *concGroup) dropIfIdle() {
	if g.running == 0 && g.reserved == 0 && g.held.live == 0 && g.lim.keys[g.key] == g {
		delete(g.lim.keys, g.key)
	}
}

func (a *activity) limitState() *limitState {
	if a.lim == nil {
		a.lim = &limitState{}
	}
	return a.lim
}

// holdLocked reports whether l keeps a, at the head of queue q, from
// starting now; if so a has left q for the FIFO of the group that holds it.
// Nothing is taken from the limit: admitLocked does that once a worker is
// found.
func (e *Engine) holdLocked(q *queue, l *flowLimit, a *activity) bool {
	st := a.lim
	key := a.rec.Flow.ConcurrencyKey
	if l.spec.Concurrency > 0 && key != "" && (st == nil || st.slot == nil || st.slot.lim != l) {
		if g := l.keys[key]; g != nil && (g.held.live > 0 || g.running+g.reserved >= l.spec.Concurrency) {
			e.leaveQueueLocked(q, a)
			a.limitState().heldConc = g
			g.held.push(a)
			e.obs.Throttled(a.rec.Namespace, ThrottleConcurrency)
			return true
		}
	}
	now := e.now()
	if g := l.rateFor(key, now, false); g != nil && (st == nil || st.token == nil || st.token.lim != l) {
		if g.held.live > 0 || g.b.Available(l.bl, now) < 1 {
			e.leaveQueueLocked(q, a)
			a.limitState().heldRate = g
			g.held.push(a)
			e.armRateLocked(g, now)
			e.obs.Throttled(a.rec.Namespace, ThrottleRate)
			return true
		}
	}
	return false
}

// leaveQueueLocked takes a out of q's live count: it waits elsewhere now.
func (e *Engine) leaveQueueLocked(q *queue, a *activity) {
	q.live--
	q.liveByLane[laneOf(a.rec.Priority)]--
	a.queued = nil
}

// admitLocked takes from l what a, about to start on a worker, uses: a slot
// of its concurrency key (the one reserved for it, if any) and a token of
// its rate (the one taken for it, if any).
func (e *Engine) admitLocked(l *flowLimit, a *activity) {
	key := a.rec.Flow.ConcurrencyKey
	now := e.now()
	if l.spec.Concurrency > 0 && key != "" {
		st := a.limitState()
		g := st.slot
		if g != nil && g.lim == l && !st.running {
			g.reserved--
		} else {
			g = l.group(key)
		}
		g.running++
		st.slot, st.running = g, true
	}
	if g := l.rateFor(key, now, true); g != nil {
		if st := a.lim; st != nil && st.token != nil && st.token.lim == l {
			st.token = nil
		} else {
			g.b.Take(l.bl, now, 1)
		}
	}
}

// unholdLocked undoes what the limits keep for a waiting activity that
// leaves its queue without starting (or starts: admitLocked has already
// turned its reservation and token into use): out of the FIFO holding it,
// its reserved slot freed for the next held work, its token given back.
func (e *Engine) unholdLocked(a *activity) {
	st := a.lim
	if g := st.heldConc; g != nil {
		st.heldConc = nil
		g.held.live--
		g.dropIfIdle()
	}
	if g := st.heldRate; g != nil {
		st.heldRate = nil
		g.held.live--
	}
	if g := st.slot; g != nil && !st.running {
		st.slot = nil
		g.reserved--
		e.releaseConcLocked(g)
		g.dropIfIdle()
	}
	if g := st.token; g != nil {
		st.token = nil
		if !g.lim.dead {
			g.b.Give(g.lim.bl, 1)
		}
	}
}

// endSlotLocked frees the slot of an attempt that ended, releasing the next
// work its key holds.
func (e *Engine) endSlotLocked(a *activity) {
	st := a.lim
	g := st.slot
	st.slot, st.running = nil, false
	g.running--
	e.releaseConcLocked(g)
	g.dropIfIdle()
}

// releaseConcLocked sends held work of g back to its queue while g has free
// slots, reserving one for each.
func (e *Engine) releaseConcLocked(g *concGroup) {
	for !g.lim.dead && g.held.live > 0 && g.running+g.reserved < g.lim.spec.Concurrency {
		a := g.held.pop(func(a *activity) bool { return a.lim != nil && a.lim.heldConc == g })
		if a == nil {
			g.held.live = 0
			return
		}
		a.lim.heldConc = nil
		g.reserved++
		a.lim.slot, a.lim.running = g, false
		e.requeueLocked(a)
	}
}

// armRateLocked sets a timer for when g next holds a token, unless one is set.
func (e *Engine) armRateLocked(g *rateGroup, now time.Time) {
	if g.armed {
		return
	}
	g.armed = true
	e.pushTimerLocked(timer{at: g.b.Next(g.lim.bl, now), kind: timerRate, rate: g})
}

// refillLocked runs at the instant g's bucket holds a token again: it takes
// a token for each held activity it can and sends them back to their
// queues, and sets the timer again for the rest.
func (e *Engine) refillLocked(g *rateGroup, now time.Time) {
	g.armed = false
	if g.lim.dead {
		return
	}
	for g.held.live > 0 && g.b.Available(g.lim.bl, now) >= 1 {
		a := g.held.pop(func(a *activity) bool { return a.lim != nil && a.lim.heldRate == g })
		if a == nil {
			g.held.live = 0
			break
		}
		g.b.Take(g.lim.bl, now, 1)
		a.lim.heldRate = nil
		a.lim.token = g
		e.requeueLocked(a)
	}
	if g.held.live > 0 {
		e.armRateLocked(g, now)
	}
}

// newFlowLimit makes the live state of spec, its buckets full at now.
func newFlowLimit(spec store.FlowLimit, now time.Time) *flowLimit {
	l := &flowLimit{spec: spec, bl: spec.Bucket(), keys: make(map[string]*concGroup), perKey: make(map[string]*rateGroup), sweepAt: 64}
	if spec.Rate > 0 && !spec.PerKey {
		l.rate = &rateGroup{lim: l, b: tokenbucket.Full(l.bl, now)}
	}
	return l
}

// kill marks l dead and returns the activities it held, oldest first.
func (l *flowLimit) kill() []*activity {
	l.dead = true
	var out []*activity
	for _, g := range l.keys {
		out = g.held.drain(out, func(a *activity) bool { return a.lim != nil && a.lim.heldConc == g })
	}
	rates := make([]*rateGroup, 0, len(l.perKey)+1)
	if l.rate != nil {
		rates = append(rates, l.rate)
	}
	for _, g := range l.perKey {
		rates = append(rates, g)
	}
	for _, g := range rates {
		out = g.held.drain(out, func(a *activity) bool { return a.lim != nil && a.lim.heldRate == g })
	}
	for _, a := range out {
		a.lim.heldConc, a.lim.heldRate = nil, nil
	}
	slices.SortStableFunc(out, func(x, y *activity) int { return x.readyAt.Compare(y.readyAt) })
	return out
}

// drain appends the live entries of f to out, emptying f.
func (f *heldFIFO) drain(out []*activity, valid func(*activity) bool) []*activity {
	for a := f.pop(valid); a != nil; a = f.pop(valid) {
		out = append(out, a)
	}
	f.live = 0
	return out
}

// NoteFlowLimits makes limits the flow limits of namespace ns on this
// server (after a change here, or another server's change read from the
// store). A limit that changed starts over: its buckets full, its
// concurrency counted from the attempts running now; work it held goes
// back to its queue and meets the new limit there.
func (e *Engine) NoteFlowLimits(ns string, limits []store.FlowLimit) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.noteWorkflowLimitsLocked(ns, limits)
	want := make(map[limitID]store.FlowLimit, len(limits))
	for _, l := range limits {
		if l.Namespace == ns && l.Kind == store.FlowActivity {
			l.UpdatedAt = time.Time{}
			want[limitID{ns, l.Kind, l.Type}] = l
		}
	}
	changed := map[string]bool{} // activity types
	var released []*activity
	for id, l := range e.limits {
		if id.ns != ns {
			continue
		}
		if w, ok := want[id]; ok && w == l.spec {
			delete(want, id)
			continue
		}
		released = append(released, l.kill()...)
		delete(e.limits, id)
		changed[id.typ] = true
	}
	for id, spec := range want {
		e.limits[id] = newFlowLimit(spec, now)
		changed[id.typ] = true
	}
	if len(changed) == 0 {
		return
	}
	if e.cl != nil {
		// Claims apply the limits in the store, which counts what runs.
		for _, t := range e.reg.Triples() {
			if t.Pool.Namespace == ns && changed[t.ActivityType] {
				delete(e.claims.empty, t)
				delete(e.claims.tallies, t)
				e.claims.dirty[t] = struct{}{}
			}
		}
		e.claims.wake()
		return
	}
	// Attempts running now count against their keys' new limits.
	for _, a := range e.open {
		if a.rec.Namespace != ns || !changed[a.rec.ActivityType] || a.worker == nil || a.rec.Flow.ConcurrencyKey == "" {
			continue
		}
		st := a.limitState()
		st.slot, st.running = nil, false
		if l := e.limits[limitID{ns, store.FlowActivity, a.rec.ActivityType}]; l != nil && l.spec.Concurrency > 0 {
			g := l.group(a.rec.Flow.ConcurrencyKey)
			g.running++
			st.slot, st.running = g, true
		}
	}
	var queues []*queue
	for t, p := range e.queues {
		if t.Pool.Namespace != ns || !changed[t.ActivityType] {
			continue
		}
		for _, q := range p.byPin {
			q.lim = e.activityLimitLocked(t)
			queues = append(queues, q)
		}
	}
	for _, a := range released {
		e.requeueLocked(a)
	}
	for _, q := range queues {
		e.dispatchLocked(q)
	}
}

// AppliedFlowLimits returns the flow limits this server applies now in
// namespace ns, ordered by kind and type (a workflow type's with its
// concurrency alone): in a cluster, what it has read back from
// the store after the last change it heard of.
func (e *Engine) AppliedFlowLimits(ns string) []store.FlowLimit {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []store.FlowLimit
	for id, l := range e.limits {
		if id.ns == ns {
			out = append(out, l.spec)
		}
	}
	for id, n := range e.wfLimits {
		if id.ns == ns {
			out = append(out, store.FlowLimit{Namespace: ns, Kind: store.FlowWorkflow, Type: id.typ, Concurrency: n})
		}
	}
	slices.SortFunc(out, func(a, b store.FlowLimit) int {
		return cmp.Or(strings.Compare(string(a.Kind), string(b.Kind)), strings.Compare(a.Type, b.Type))
	})
	return out
}

// checkFlowLimitRef checks the namespace, kind and type a limit call names.
func checkFlowLimitRef(ns string, kind store.FlowKind, typ string) error {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !kind.Valid() {
		return fmt.Errorf("kind: %q is not one of %s, %s: %w", kind, store.FlowActivity, store.FlowWorkflow, ErrInvalid)
	}
	if err := name.Check(string(kind)+"_type", typ, name.MaxName); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// SetFlowLimit records a flow limit for a namespace's activity or workflow
// type, replacing the one it had, and applies it on this server. An invalid
// limit is ErrInvalid naming the field and its value, and a namespace that
// was never minted ErrNotFound; either changes nothing. Other servers of a
// cluster learn of it from the store (the caller announces it).
func (e *Engine) SetFlowLimit(ctx context.Context, caller namespace.Identity, l store.FlowLimit) (store.FlowLimit, error) {
	what := fmt.Sprintf("set the %s limit of %q in namespace %q", l.Kind, l.Type, l.Namespace)
	if err := checkFlowLimitRef(l.Namespace, l.Kind, l.Type); err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	l = l.Normalize()
	if err := l.Validate(); err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w: %w", what, ErrInvalid, err)
	}
	// Refused rather than recorded and silently not applied.
	if l.Kind == store.FlowWorkflow && l.Rate > 0 {
		return store.FlowLimit{}, fmt.Errorf("%s: rate: %g: rate limits of workflow types are not enforced, only concurrency limits: %w",
			what, l.Rate, ErrInvalid)
	}
	if err := namespace.Authorize(caller, l.Namespace); err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	got, err := e.st.PutFlowLimit(ctx, l)
	if errors.Is(err, store.ErrNotFound) {
		return store.FlowLimit{}, fmt.Errorf("%s: namespace %q: %w", what, l.Namespace, ErrNotFound)
	}
	if err != nil {
		return store.FlowLimit{}, fmt.Errorf("%s: %w", what, err)
	}
	return got, e.reloadFlowLimits(ctx, l.Namespace)
}

// ClearFlowLimit removes the flow limit of a namespace's activity or
// workflow type; the work it held starts as the other limits allow. It
// reports whether there was one.
func (e *Engine) ClearFlowLimit(ctx context.Context, caller namespace.Identity, ns string, kind store.FlowKind, typ string) (bool, error) {
	what := fmt.Sprintf("clear the %s limit of %q in namespace %q", kind, typ, ns)
	if err := checkFlowLimitRef(ns, kind, typ); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	had, err := e.st.DeleteFlowLimit(ctx, ns, kind, typ)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return had, e.reloadFlowLimits(ctx, ns)
}

// FlowLimits lists the flow limits of a namespace, ordered by kind and type.
func (e *Engine) FlowLimits(ctx context.Context, caller namespace.Identity, ns string) ([]store.FlowLimit, error) {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return nil, fmt.Errorf("list flow limits: %w: %w", ErrInvalid, err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return nil, fmt.Errorf("list flow limits of namespace %q: %w", ns, err)
	}
	ls, err := e.st.ListFlowLimits(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("list flow limits of namespace %q: %w", ns, err)
	}
	return ls, nil
}

// reloadFlowLimits reads the limits of ns back from the store and applies
// them, so memory holds what the store holds even when two changes race.
func (e *Engine) reloadFlowLimits(ctx context.Context, ns string) error {
	ls, err := e.st.ListFlowLimits(ctx, ns)
	if err != nil {
		return fmt.Errorf("read back the flow limits of namespace %q: %w", ns, err)
	}
	e.NoteFlowLimits(ns, ls)
	return nil
}

// loadFlowLimits applies every namespace's flow limits at start.
func (e *Engine) loadFlowLimits(ctx context.Context) error {
	ls, err := e.st.ListFlowLimits(ctx, "")
	if err != nil {
		return fmt.Errorf("load flow limits: %w", err)
	}
	byNS := map[string][]store.FlowLimit{}
	for _, l := range ls {
		byNS[l.Namespace] = append(byNS[l.Namespace], l)
	}
	for ns, ls := range byNS {
		e.NoteFlowLimits(ns, ls)
	}
	return nil
}

// explainHeldLocked explains an activity a flow limit holds.
func (e *Engine) explainHeldLocked(a *activity, now time.Time) Explanation {
	rec := a.rec
	ex := Explanation{State: rec.State, ConcurrencyKey: rec.Flow.ConcurrencyKey}
	if g := a.lim.heldConc; g != nil {
		l := g.lim.spec
		ex.Reason = WhyConcurrencyLimit
		ex.Running, ex.Limit = g.running, l.Concurrency
		ex.Ahead = aheadIn(&g.held, a, func(o *activity) bool { return o.lim != nil && o.lim.heldConc == g })
		ex.Message = fmt.Sprintf("concurrency key %q of activity type %q runs %d of its limit of %d (%d reserved for work released before it); %d wait before it for the key",
			g.key, rec.ActivityType, g.running, l.Concurrency, g.reserved, ex.Ahead)
		return ex
	}
	g := a.lim.heldRate
	l := g.lim.spec
	ex.Reason = WhyRateLimited
	ex.Until = g.b.Next(g.lim.bl, now)
	ex.Ahead = aheadIn(&g.held, a, func(o *activity) bool { return o.lim != nil && o.lim.heldRate == g })
	scope := fmt.Sprintf("activity type %q", rec.ActivityType)
	if l.PerKey {
		scope = fmt.Sprintf("concurrency key %q of activity type %q", g.key, rec.ActivityType)
	}
	ex.Message = fmt.Sprintf("the rate limit of %s (%g/s, burst %d) allows its next start at %s (in %v); %d wait before it",
		scope, l.Rate, l.Burst, ex.Until.Format(time.RFC3339Nano), ex.Until.Sub(now).Round(time.Millisecond), ex.Ahead)
	return ex
}

// explainLimitInStore explains, in cluster mode, waiting work its type's
// flow limit holds: from the store, the running activities of its key
// across the cluster and the state of its rate bucket. ok is false when no
// limit holds it now.
func (e *Engine) explainLimitInStore(ctx context.Context, rec store.Activity, now time.Time) (Explanation, bool, error) {
	if e.cl == nil {
		return Explanation{}, false, nil
	}
	e.mu.Lock()
	var spec store.FlowLimit
	l := e.activityLimitLocked(tripleOf(&rec))
	if l != nil {
		spec = l.spec
	}
	e.mu.Unlock()
	if l == nil {
		return Explanation{}, false, nil
	}
	key := rec.Flow.ConcurrencyKey
	req := store.FlowUsageRequest{Namespace: rec.Namespace, ActivityType: rec.ActivityType}
	if spec.Concurrency > 0 {
		req.ConcurrencyKey = key
	}
	rated := spec.Rate > 0 && (!spec.PerKey || key != "")
	if rated && spec.PerKey {
		req.BucketKey = key
	}
	u, err := e.cl.Store.ReadFlowUsage(ctx, req)
	if err != nil {
		return Explanation{}, false, err
	}
	ex := Explanation{State: rec.State, ConcurrencyKey: key}
	if req.ConcurrencyKey != "" && u.Running >= spec.Concurrency {
		ex.Reason, ex.Running, ex.Limit = WhyConcurrencyLimit, u.Running, spec.Concurrency
		ex.Message = fmt.Sprintf("concurrency key %q of activity type %q runs %d of its limit of %d across the cluster",
			key, rec.ActivityType, u.Running, spec.Concurrency)
		return ex, true, nil
	}
	if rated && u.Bucket != nil && u.Bucket.Available(spec.Bucket(), now) < 1 {
		scope := fmt.Sprintf("activity type %q", rec.ActivityType)
		if spec.PerKey {
			scope = fmt.Sprintf("concurrency key %q of activity type %q", key, rec.ActivityType)
		}
		ex.Reason, ex.Until = WhyRateLimited, u.Bucket.Next(spec.Bucket(), now)
		ex.Message = fmt.Sprintf("the rate limit of %s (%g/s, burst %d) allows its next start at %s (in %v)",
			scope, spec.Rate, spec.Burst, ex.Until.Format(time.RFC3339Nano), ex.Until.Sub(now).Round(time.Millisecond))
		return ex, true, nil
	}
	return Explanation{}, false, nil
}

// heldBacklogLocked adds the work flow limits hold, which waits outside its
// queue, to the backlog of its pool.
func (e *Engine) heldBacklogLocked(byPool map[registry.PoolAddress]*PoolBacklog, now time.Time) {
	add := func(a *activity) {
		b := backlogOf(byPool, tripleOf(&a.rec).Pool)
		b.Waiting++
		b.ByPriority[laneOf(a.rec.Priority)]++
		b.OldestAge = max(b.OldestAge, now.Sub(a.readyAt))
	}
	for _, l := range e.limits {
		for _, g := range l.keys {
			for _, a := range g.held.items[g.held.head:] {
				if a.lim != nil && a.lim.heldConc == g {
					add(a)
				}
			}
		}
		rates := l.perKey
		if l.rate != nil {
			rates = map[string]*rateGroup{"": l.rate}
		}
		for _, g := range rates {
			for _, a := range g.held.items[g.held.head:] {
				if a.lim != nil && a.lim.heldRate == g {
					add(a)
				}
			}
		}
	}
}

// aheadIn counts the live entries of f before a.
func aheadIn(f *heldFIFO, a *activity, live func(*activity) bool) int {
	n := 0
	for _, o := range f.items[f.head:] {
		if o == a {
			break
		}
		if live(o) {
			n++
		}
	}
	return n
}
