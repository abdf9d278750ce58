package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// Waiting work in the store.
//
// Alone, over a store that implements store.WaitingStore, the engine keeps
// at most a window of ready activities in memory per fairness key of each
// priority of each queue (a spill flow). An activity scheduled while its
// flow's window is full, or while the flow already has work in the store,
// is durable and counted but not held: it is spilled. When the window falls
// below half, the next page is read from the store in dispatch order (ready
// time, then scheduling order) after the flow's cursor, off the engine
// lock, and queued. Spilled work's schedule-to-start and schedule-to-close
// deadlines are found by an indexed sweep of the store on the engine clock.
// Recovery counts the waiting work per flow and pages it the same way, so
// neither memory nor start time grows with the backlog.
//
// pageMu orders every page read against every close of spilled work (a
// cancel, a deadline): a page read either sees the close durable or the
// closing call sees the activity in memory, so paging never brings a closed
// activity back. Lock order: pageMu, then mu.

// DefaultWindow is the ready activities held in memory per spill flow.
const DefaultWindow = 1024

// spillID names a spill flow within a queue: a lane and a fairness key.
type spillID struct {
	lane int
	key  string
}

// spillFlow is the waiting work of one spill flow that is in the store only.
type spillFlow struct {
	q    *queue
	id   spillID
	lane store.Lane
	// n counts the flow's activities in the store only.
	n int
	// oldest is about when the longest-waiting of them became ready.
	oldest time.Time
	// cursor is where the next page starts; reset (zero) when an activity
	// was spilled that may come before it.
	cursor store.WaitingCursor
	// paging: a page read is in flight; reset: the cursor was reset
	// meanwhile, so the page must not move it on.
	paging, reset bool
	// spills counts spills, so a short page can tell that new work came.
	spills uint64
	// notBefore holds paging off until then: what is left is not ready.
	notBefore time.Time
}

// heldLocked counts the flow's activities queued in memory (for the
// default key, stale entries too).
func (sf *spillFlow) heldLocked() int {
	l := &sf.q.lanes[sf.id.lane]
	if sf.id.key == "" {
		return l.def.len()
	}
	if f := l.keyed[sf.id.key]; f != nil {
		return f.live
	}
	return 0
}

// queueForLocked returns the queue an activity waits in, made if need be.
func (e *Engine) queueForLocked(r *store.Activity) *queue {
	t := tripleOf(r)
	p := e.queues[t]
	if p == nil {
		p = &pool{byPin: make(map[string]*queue, 1)}
		e.queues[t] = p
	}
	q := p.byPin[r.Node]
	if q == nil {
		q = newQueue(t, r.Node, matchFor(r.Node, e.placementLocked(t.Pool.Namespace)))
		q.lim = e.activityLimitLocked(t)
		p.byPin[r.Node] = q
	}
	return q
}

// spillFlowLocked returns r's spill flow in q, made if need be.
func (e *Engine) spillFlowLocked(q *queue, r *store.Activity) *spillFlow {
	id := spillID{laneOf(r.Priority), r.Flow.FairnessKey}
	sf := q.spill[id]
	if sf == nil {
		if q.spill == nil {
			q.spill = make(map[spillID]*spillFlow)
		}
		lane := store.LaneOf(r)
		sf = &spillFlow{q: q, id: id, lane: lane}
		q.spill[id] = sf
	}
	return sf
}

// spillsLocked reports whether a new activity, ready now, should wait in
// the store rather than in memory. It is decided before the insert, which
// records it: only spilled activities enter the store's waiting indexes. A
// flow's window may so run over by the inserts in flight.
func (e *Engine) spillsLocked(a *activity, now time.Time) bool {
	if e.ws == nil || a.step != nil || a.rec.ReadyAt.After(now) {
		return false
	}
	q := e.queueForLocked(&a.rec)
	if sf := q.spill[spillID{laneOf(a.rec.Priority), a.rec.Flow.FairnessKey}]; sf != nil && sf.n > 0 {
		return true // behind work already in the store: FIFO within the flow
	}
	id := spillID{laneOf(a.rec.Priority), a.rec.Flow.FairnessKey}
	return (&spillFlow{q: q, id: id}).heldLocked()+q.inserting[id] >= e.window
}

// insertingLocked counts a ready activity to be held, whose insert is in
// flight, into its flow's window (by +1), or takes it out (by -1) once the
// insert is done.
func (e *Engine) insertingLocked(r *store.Activity, by int) {
	q := e.queueForLocked(r)
	id := spillID{laneOf(r.Priority), r.Flow.FairnessKey}
	if q.inserting == nil {
		if by < 0 {
			return // the queue was dropped and made again meanwhile
		}
		q.inserting = make(map[spillID]int)
	}
	if q.inserting[id] += by; q.inserting[id] <= 0 {
		delete(q.inserting, id)
	}
}

// spillLocked takes a newly durable, ready activity out of memory: it stays
// counted as open and waits in the store.
func (e *Engine) spillLocked(a *activity, now time.Time) {
	k := a.key()
	if e.open[k] != a {
		return
	}
	delete(e.open, k)
	e.heldPayload -= len(a.rec.Payload)
	q := e.queueForLocked(&a.rec)
	sf := e.spillFlowLocked(q, &a.rec)
	if sf.n == 0 || a.rec.ReadyAt.Before(sf.oldest) {
		sf.oldest = a.rec.ReadyAt
	}
	sf.n++
	sf.spills++
	q.spilled++
	e.spilled++
	if !sf.cursor.At.Before(a.rec.ReadyAt) {
		// Its seq is not known here: it may sort before the cursor.
		sf.cursor = store.WaitingCursor{}
		if sf.paging {
			sf.reset = true
		}
	}
	sf.notBefore = time.Time{}
	if len(a.waiters) > 0 {
		e.spillWaiters[k] = append(e.spillWaiters[k], a.waiters...)
		a.waiters = nil
	}
	if d := store.WaitingDeadline(&a.rec); !d.IsZero() {
		e.armSweepLocked(d)
	}
	e.topUpLocked(q)
}

// forgetSpilledLocked notes that a spilled activity left the store's
// waiting work (paged in, or closed): r is its record.
func (e *Engine) forgetSpilledLocked(r *store.Activity) {
	p := e.queues[tripleOf(r)]
	if p == nil {
		return
	}
	q := p.byPin[r.Node]
	if q == nil {
		return
	}
	id := spillID{laneOf(r.Priority), r.Flow.FairnessKey}
	sf := q.spill[id]
	if sf == nil || sf.n == 0 {
		return
	}
	sf.n--
	q.spilled--
	e.spilled--
	e.dropSpillFlowIfDoneLocked(sf)
}

// topUpLocked starts a page read for every spill flow of q whose window
// is below half.
func (e *Engine) topUpLocked(q *queue) {
	if q.spill == nil || e.closed {
		return
	}
	now := e.now()
	for _, sf := range q.spill {
		if sf.n == 0 || sf.paging || now.Before(sf.notBefore) || sf.heldLocked() >= e.window/2 {
			continue
		}
		sf.paging = true
		e.bg.Add(1)
		go e.page(sf)
	}
}

// page reads the next page of a spill flow from the store and queues it.
func (e *Engine) page(sf *spillFlow) {
	defer e.bg.Done()
	e.readPage(sf)
}

// readPage is page on the caller's goroutine; sf.paging is set.
func (e *Engine) readPage(sf *spillFlow) {
	e.pageMu.Lock()
	defer e.pageMu.Unlock()
	e.mu.Lock()
	sf.reset = false
	e.paging = true
	p := store.WaitingPage{Lane: sf.lane, Now: e.now(), After: sf.cursor, Limit: max(e.window-sf.heldLocked(), e.window/2),
		Inline: inlinePayload}
	spills := sf.spills
	e.mu.Unlock()

	var (
		rows []store.Activity
		next time.Time
	)
	err := e.call(func(ctx context.Context) (err error) {
		rows, next, err = e.ws.PageWaiting(ctx, p)
		return err
	})

	e.mu.Lock()
	defer e.mu.Unlock()
	e.paging = false
	left := e.leftWhilePaging
	if len(left) > 0 {
		e.leftWhilePaging = make(map[key]struct{})
	}
	if err != nil || e.closed {
		sf.paging = false
		e.dropSpillFlowIfDoneLocked(sf)
		if err != nil && !errors.Is(err, context.Canceled) {
			e.log.Error("read waiting activities from the store", "namespace", p.Namespace, "task_queue", p.TaskQueue,
				"activity_type", p.ActivityType, "err", err)
			e.holdPagingLocked(sf, p.Now.Add(time.Second))
		}
		return
	}
	for i := range rows {
		r := rows[i]
		sf.cursor = store.WaitingCursor{At: r.ReadyAt, Seq: r.Seq}
		k := key{r.Namespace, r.ID}
		if _, gone := left[k]; gone || e.open[k] != nil {
			continue // held already (running, retried, a step of a run), or closed since the read
		}
		e.pageInLocked(r, sf)
	}
	if sf.reset {
		sf.cursor = store.WaitingCursor{}
	}
	if len(rows) < p.Limit && sf.n > 0 && !sf.reset && sf.spills == spills {
		// What is left is not ready yet, or was not seen where the
		// cursor stood: look again when the next one is ready, and from
		// the start.
		at := next
		if at.IsZero() {
			at = p.Now.Add(time.Second)
			sf.cursor = store.WaitingCursor{}
		}
		e.holdPagingLocked(sf, at)
	}
	sf.paging = false
	e.dropSpillFlowIfDoneLocked(sf)
	e.dispatchLocked(sf.q)
}

// dropSpillFlowIfDoneLocked forgets a spill flow with nothing left in the
// store and no page read in flight.
func (e *Engine) dropSpillFlowIfDoneLocked(sf *spillFlow) {
	if sf.n == 0 && !sf.paging && sf.q.spill[sf.id] == sf {
		delete(sf.q.spill, sf.id)
		if len(sf.q.spill) == 0 {
			sf.q.spill = nil
		}
	}
}

// pageInLocked queues one spilled activity read back from the store.
func (e *Engine) pageInLocked(r store.Activity, sf *spillFlow) {
	r.State = store.StateScheduled
	a := &activity{rec: r, size: r.PayloadSize}
	k := a.key()
	e.open[k] = a // counted as open since it was scheduled
	e.heldPayload += len(r.Payload)
	e.forgetSpilledLocked(&r)
	if sf.n > 0 && r.ReadyAt.After(sf.oldest) {
		sf.oldest = r.ReadyAt
	}
	if ws := e.spillWaiters[k]; len(ws) > 0 {
		a.waiters = ws
		delete(e.spillWaiters, k)
	}
	if t := r.Timeouts.ScheduleToClose; t > 0 {
		e.armLocked(r.ScheduledAt.Add(t), k, 0, timerScheduleToClose)
	}
	if t := r.Timeouts.ScheduleToStart; t > 0 {
		e.armLocked(r.ReadyAt.Add(t), k, r.Attempt, timerScheduleToStart)
	}
	a.readyAt = r.ReadyAt
	e.requeueLocked(a)
	e.shedPayloadLocked(a)
}

// holdPagingLocked holds a spill flow's paging off until at, when a timer
// starts it again.
func (e *Engine) holdPagingLocked(sf *spillFlow, at time.Time) {
	sf.notBefore = at
	e.pushTimerLocked(timer{at: at, kind: timerPage, page: sf})
}

// firePageLocked runs when a spill flow's paging may start again.
func (e *Engine) firePageLocked(sf *spillFlow, now time.Time) {
	if sf.q.spill[sf.id] != sf || now.Before(sf.notBefore) {
		return
	}
	sf.notBefore = time.Time{}
	e.topUpLocked(sf.q)
}

// armSweepLocked arranges a sweep for passed deadlines of spilled work at at.
func (e *Engine) armSweepLocked(at time.Time) {
	if !e.sweepAt.IsZero() && !at.Before(e.sweepAt) {
		return
	}
	e.sweepAt = at
	e.pushTimerLocked(timer{at: at, kind: timerSweep})
}

// fireSweepLocked starts a sweep, or asks the one running for another.
func (e *Engine) fireSweepLocked(now time.Time) {
	if now.Before(e.sweepAt) {
		return // armed again, earlier, after this timer
	}
	e.sweepAt = time.Time{}
	if e.sweeping {
		e.sweepAgain = true
		return
	}
	if e.closed {
		return
	}
	e.sweeping = true
	e.bg.Add(1)
	go e.sweep()
}

// sweepPage is how many expired activities a sweep reads at once.
const sweepPage = 256

// sweep closes the spilled activities whose schedule-to-start or
// schedule-to-close deadline has passed, then arms the next sweep.
func (e *Engine) sweep() {
	defer e.bg.Done()
	for {
		next, ok, err := e.sweepOnce()
		e.mu.Lock()
		if err != nil && !errors.Is(err, context.Canceled) {
			e.log.Error("sweep waiting deadlines", "err", err)
			next, ok = e.now().Add(time.Second), true
		}
		if e.sweepAgain && !e.closed {
			e.sweepAgain = false
			e.mu.Unlock()
			continue
		}
		e.sweeping = false
		if ok && e.spilled > 0 && !e.closed {
			e.armSweepLocked(next)
		}
		e.mu.Unlock()
		return
	}
}

// sweepOnce closes what has expired by now and returns the next deadline.
func (e *Engine) sweepOnce() (time.Time, bool, error) {
	e.pageMu.Lock()
	defer e.pageMu.Unlock()
	now := e.now()
	var cur store.WaitingCursor
	for {
		var rows []store.Activity
		err := e.call(func(ctx context.Context) (err error) {
			rows, err = e.ws.ExpiredWaiting(ctx, now, cur, sweepPage)
			return err
		})
		if err != nil {
			return time.Time{}, false, err
		}
		var pending []chan struct{}
		for i := range rows {
			r := rows[i]
			cur = store.WaitingCursor{At: store.WaitingDeadline(&r), Seq: r.Seq}
			e.mu.Lock()
			held := e.open[key{r.Namespace, r.ID}] != nil
			e.mu.Unlock()
			if held {
				continue // its own timers run in memory
			}
			state, f := store.StateTimedOut, &store.Failure{Type: FailureScheduleToStart,
				Message: "no worker started the activity within its schedule-to-start timeout of " + r.Timeouts.ScheduleToStart.String()}
			if t := r.Timeouts.ScheduleToClose; t > 0 && !now.Before(r.ScheduledAt.Add(t)) {
				f = &store.Failure{Type: FailureScheduleToClose,
					Message: "activity exceeded its schedule-to-close timeout of " + t.String()}
			}
			pending = append(pending, e.closeSpilled(r, state, f, now))
		}
		for _, ch := range pending {
			<-ch
		}
		if len(rows) < sweepPage {
			break
		}
	}
	var (
		next time.Time
		ok   bool
	)
	err := e.call(func(ctx context.Context) (err error) {
		next, ok, err = e.ws.NextWaitingDeadline(ctx, now)
		return err
	})
	return next, ok, err
}

// closeSpilled closes a spilled activity durably; the caller holds pageMu
// and has seen it out of memory. The channel is closed once the write is
// settled.
func (e *Engine) closeSpilled(r store.Activity, state store.ActivityState, f *store.Failure, now time.Time) chan struct{} {
	done := make(chan struct{})
	end := store.EndAttempt{Namespace: r.Namespace, ID: r.ID, StartedAt: r.StartedAt, State: state,
		ActivityFailure: f, ClosedAt: now}
	e.commit.Submit(end, func(changed bool, err error) {
		defer close(done)
		if err != nil {
			e.log.Error("durable write failed", "namespace", r.Namespace, "activity", r.ID, "err", err)
			return
		}
		if !changed {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.forgetSpilledLocked(&r)
		if e.pending[r.Namespace]--; e.pending[r.Namespace] <= 0 {
			delete(e.pending, r.Namespace)
		}
		if e.pendingBytes[r.Namespace] -= int64(r.PayloadSize); e.pendingBytes[r.Namespace] <= 0 {
			delete(e.pendingBytes, r.Namespace)
		}
		e.obs.Closed(r.Namespace, state)
		k := key{r.Namespace, r.ID}
		for _, ch := range e.spillWaiters[k] {
			close(ch)
		}
		delete(e.spillWaiters, k)
	})
	return done
}

// cancelSpilled cancels an activity that is not in memory: spilled, or
// closed. handled is false when it turned out to be in memory after all;
// the caller then cancels it there.
func (e *Engine) cancelSpilled(ctx context.Context, k key, reason string) (handled bool, err error) {
	e.pageMu.Lock()
	defer e.pageMu.Unlock()
	e.mu.Lock()
	inMemory := e.open[k] != nil
	e.mu.Unlock()
	if inMemory {
		return false, nil
	}
	rec, err := e.st.GetActivity(ctx, k.ns, k.id)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // canceledView reports it
	}
	if err != nil {
		return true, fmt.Errorf("cancel activity %q in namespace %q: %w", k.id, k.ns, err)
	}
	if rec.State != store.StateScheduled {
		return true, nil
	}
	done := e.closeSpilled(rec, store.StateCanceled, &store.Failure{Type: "canceled", Message: reason}, e.now())
	select {
	case <-done:
		return true, nil
	case <-ctx.Done():
		return true, fmt.Errorf("cancel activity %q in namespace %q: %w", k.id, k.ns, ctx.Err())
	}
}

// recoverWaiting counts the spilled work per spill flow, loads what the
// server held in memory (a window per flow, delayed starts, workflow steps)
// and starts paging the rest; it returns how many activities are open.
func (e *Engine) recoverWaiting(ctx context.Context) (int, error) {
	counts, err := e.ws.CountWaiting(ctx, false)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	held, err := e.ws.HeldActivities(ctx, inlinePayload)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	now := e.now()
	e.mu.Lock()
	n := 0
	var flows []*spillFlow
	for _, c := range counts {
		r := store.Activity{Namespace: c.Namespace, TaskQueue: c.TaskQueue, ActivityType: c.ActivityType, Node: c.Node,
			Priority: c.Priority, Flow: store.Flow{FairnessKey: c.FairnessKey}}
		q := e.queueForLocked(&r)
		sf := e.spillFlowLocked(q, &r)
		if sf.n == 0 {
			flows = append(flows, sf)
		}
		sf.n += c.Count
		sf.oldest = c.OldestReady
		q.spilled += c.Count
		e.spilled += c.Count
		e.pending[c.Namespace] += c.Count
		n += c.Count
	}
	for _, rec := range held {
		// What the server held in memory is not counted above: it is
		// loaded whole, as without a waiting store.
		n++
		e.pending[rec.Namespace]++
		e.pendingBytes[rec.Namespace] += int64(rec.PayloadSize)
		// Starts are not written, so an attempt cut short by the stop
		// left the activity scheduled: it simply runs again.
		rec.State = store.StateScheduled
		a := &activity{rec: rec, size: rec.PayloadSize}
		e.open[a.key()] = a
		e.heldPayload += len(rec.Payload)
		e.shedPayloadLocked(a)
		if t := rec.Timeouts.ScheduleToClose; t > 0 {
			e.armLocked(rec.ScheduledAt.Add(t), a.key(), 0, timerScheduleToClose)
		}
		if rec.ReadyAt.After(now) {
			e.armLocked(rec.ReadyAt, a.key(), rec.Attempt, timerReady)
		} else {
			e.readyLocked(a, now)
		}
	}
	if e.spilled > 0 {
		e.armSweepLocked(now)
		if e.maxPendingBytes > 0 {
			// Summing payload lengths reads every waiting row, so it is
			// done after the engine is ready; until it is, the byte cap
			// counts only what was scheduled since.
			e.bg.Add(1)
			go e.countWaitingBytes()
		}
	}
	// The first page of each flow is read before the engine is ready, so
	// the first worker finds the head of every flow in memory; past
	// recoverPages flows, the rest are read as dispatch asks for them.
	var first []*spillFlow
	for _, sf := range flows {
		if len(first) < recoverPages && sf.n > 0 && !sf.paging {
			sf.paging = true
			first = append(first, sf)
		}
	}
	e.mu.Unlock()
	for _, sf := range first {
		e.readPage(sf)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.queues {
		for _, q := range p.byPin {
			e.dispatchLocked(q)
		}
	}
	return n, nil
}

// countWaitingBytes adds the payload bytes of the work waiting in the store
// at recovery to the per-namespace sums the byte cap checks. What closed
// or was scheduled while it read makes the sums off by that much; they
// never go below zero.
func (e *Engine) countWaitingBytes() {
	defer e.bg.Done()
	sums, err := e.ws.WaitingBytes(e.bgCtx) // no call timeout: it reads every waiting row
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			e.log.Error("sum the payload bytes of waiting work", "err", err)
		}
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for ns, n := range sums {
		e.pendingBytes[ns] += n
	}
}

// recoverPages bounds the flows whose first page recovery reads before the
// engine is ready.
const recoverPages = 4096

// awaitsPageLocked reports whether dispatch from lane l of q must wait for
// a page: a flow of that lane or a more urgent one has work in the store
// that is ready, and none in memory. Serving the others meanwhile would
// hand its turns, or its priority, to them.
func (e *Engine) awaitsPageLocked(q *queue, l *lane) bool {
	i := 0
	for i < len(q.lanes) && &q.lanes[i] != l {
		i++
	}
	now := e.now()
	for _, sf := range q.spill {
		if sf.id.lane <= i && sf.n > 0 && !now.Before(sf.notBefore) && sf.heldLocked() == 0 {
			return true
		}
	}
	return false
}

// spilledBacklogLocked adds the work waiting in the store to byPool.
func (e *Engine) spilledBacklogLocked(byPool map[registry.PoolAddress]*PoolBacklog, now time.Time) {
	for t, p := range e.queues {
		for _, q := range p.byPin {
			for _, sf := range q.spill {
				if sf.n == 0 {
					continue
				}
				b := backlogOf(byPool, t.Pool)
				b.Waiting += sf.n
				b.ByPriority[sf.id.lane] += sf.n
				b.OldestAge = max(b.OldestAge, now.Sub(sf.oldest))
			}
		}
	}
}

// wakeSpillWaitersLocked ends every Wait on spilled work.
func (e *Engine) wakeSpillWaitersLocked() {
	for k, ws := range e.spillWaiters {
		for _, ch := range ws {
			close(ch)
		}
		delete(e.spillWaiters, k)
	}
}
