package engine

import (
	"container/heap"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

type timerKind uint8

const (
	timerReady           timerKind = iota // a retry's backoff has passed
	timerScheduleToStart                  // no attempt started in time
	timerStartToClose                     // the attempt ran too long
	timerHeartbeat                        // the attempt stopped heartbeating
	timerScheduleToClose                  // the activity ran out of time
	timerAnnounce                         // a retry waiting in the store becomes ready (cluster mode)
	timerClaim                            // claim for a triple again (cluster mode)
	timerWorkflowStep                     // a workflow's timer step fires
	timerWorkflowTask                     // a workflow task was not answered in time
	timerWorkflowRetry                    // a failed workflow task may be tried again
	timerRate                             // a flow limit's bucket holds a token again
	timerPage                             // a spill flow may read from the store again (alone)
	timerSweep                            // deadlines of work waiting in the store may have passed (alone)
)

// timer is one deadline. Timers are never removed early: when one fires, it
// acts only if the activity is still in the state it was armed for (same
// attempt number), so a stale timer is a cheap no-op.
type timer struct {
	at      time.Time
	k       key
	attempt int
	kind    timerKind
	// triple is the work a timerAnnounce announces.
	triple registry.Triple
	// step is the timer step of a timerWorkflowStep; for the workflow kinds
	// k names the run and attempt holds the task token.
	step int64
	// rate is the bucket of a timerRate.
	rate *rateGroup
	// page is the spill flow of a timerPage.
	page *spillFlow
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// armLocked adds a deadline and wakes the timer loop if it is now the earliest.
func (e *Engine) armLocked(at time.Time, k key, attempt int, kind timerKind) {
	e.pushTimerLocked(timer{at: at, k: k, attempt: attempt, kind: kind})
}

// minCompact is the heap size below which stale timers are not worth
// sweeping out.
const minCompact = 4096

func (e *Engine) pushTimerLocked(tm timer) {
	if len(e.timers) >= max(e.compactAt, minCompact) {
		e.compactTimersLocked()
	}
	heap.Push(&e.timers, tm)
	if e.timers[0].at.Equal(tm.at) {
		e.wakeTimers()
	}
}

// compactTimersLocked drops the timers that can no longer act. Timers are
// not removed when their activity closes, so without this every closed
// activity would keep its schedule-to-close entry (a day, by default) in
// memory. Compacting when the heap has doubled since the last time keeps
// the cost constant per timer.
func (e *Engine) compactTimersLocked() {
	kept := e.timers[:0]
	for _, tm := range e.timers {
		if e.timerLiveLocked(tm) {
			kept = append(kept, tm)
		}
	}
	clear(e.timers[len(kept):])
	e.timers = kept
	heap.Init(&e.timers)
	e.compactAt = 2 * len(e.timers)
}

// timerLiveLocked reports whether a timer may still act when it fires (see
// fireLocked): its activity is open and, for the attempt-bound kinds, still
// at the attempt the timer was armed for.
func (e *Engine) timerLiveLocked(tm timer) bool {
	switch tm.kind {
	case timerAnnounce, timerClaim, timerRate, timerSweep:
		return true
	case timerPage:
		return tm.page.q.spill[tm.page.id] == tm.page
	case timerWorkflowStep, timerWorkflowTask, timerWorkflowRetry:
		return e.runTimerLiveLocked(tm)
	}
	a := e.open[tm.k]
	switch {
	case a == nil || a.closing:
		return false
	case tm.kind == timerScheduleToClose:
		return true
	}
	return a.rec.Attempt == tm.attempt
}

// runTimers fires deadlines until the engine stops. Its clock timer is made
// at the first deadline and stopped whenever none is left, so an idle
// engine waits on nothing but a wake-up.
func (e *Engine) runTimers() {
	defer e.done.Done()
	var (
		t     clock.Timer
		fired <-chan time.Time // t's channel; nil, which never receives, until t exists
	)
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		e.mu.Lock()
		e.fireDueLocked(e.now())
		var next time.Time
		if len(e.timers) > 0 {
			next = e.timers[0].at
		}
		e.mu.Unlock()
		// Armed by instant, not by the wait from now: a clock that moved
		// since now was read fires it at once instead of late. An earlier
		// deadline armed meanwhile wakes the loop through timerWake.
		switch {
		case !next.IsZero():
			if t == nil {
				t = e.clock.NewTimer(time.Hour) // set to next just below
				fired = t.C()
			}
			t.ResetAt(next)
		case t != nil:
			t.Stop()
		}
		select {
		case <-fired:
		case <-e.timerWake:
		case <-e.stop:
			return
		}
	}
}

// fireDueLocked fires every deadline at or before now, earliest first.
func (e *Engine) fireDueLocked(now time.Time) {
	for len(e.timers) > 0 && !e.timers[0].at.After(now) {
		e.fireLocked(heap.Pop(&e.timers).(timer), now)
	}
}

// armAnnounceLocked arranges to tell every server when a retry that waits in
// the store becomes ready.
func (e *Engine) armAnnounceLocked(at time.Time, t registry.Triple) {
	e.pushTimerLocked(timer{at: at, kind: timerAnnounce, triple: t})
}

// armWakeLocked arranges for this server to claim for t again at at.
func (e *Engine) armWakeLocked(at time.Time, t registry.Triple) {
	e.pushTimerLocked(timer{at: at, kind: timerClaim, triple: t})
}

func (e *Engine) fireLocked(tm timer, now time.Time) {
	switch tm.kind {
	case timerAnnounce:
		e.localWorkLocked(tm.triple)
		e.announce(tm.triple)
		return
	case timerClaim:
		delete(e.claims.empty, tm.triple)
		delete(e.claims.tallies, tm.triple)
		e.claims.dirty[tm.triple] = struct{}{}
		e.claims.wake()
		return
	case timerWorkflowStep, timerWorkflowTask, timerWorkflowRetry:
		e.fireRunLocked(tm, now)
		return
	case timerRate:
		e.refillLocked(tm.rate, now)
		return
	case timerPage:
		e.firePageLocked(tm.page, now)
		return
	case timerSweep:
		e.fireSweepLocked(now)
		return
	}
	a := e.open[tm.k]
	if a == nil || a.closing || a.creating != nil {
		return
	}
	switch tm.kind {
	case timerReady:
		if a.rec.State == store.StateScheduled && a.rec.Attempt == tm.attempt && a.queued == nil {
			e.readyLocked(a, now)
		}
	case timerScheduleToStart:
		if a.rec.State == store.StateScheduled && a.rec.Attempt == tm.attempt {
			e.unqueueLocked(a)
			e.closeLocked(a, store.StateTimedOut, &store.Failure{
				Type:    FailureScheduleToStart,
				Message: "no worker started the activity within its schedule-to-start timeout of " + a.rec.Timeouts.ScheduleToStart.String(),
			}, now)
		}
	case timerStartToClose:
		if a.rec.State == store.StateRunning && a.rec.Attempt == tm.attempt {
			e.failAttemptLocked(a, &store.Failure{
				Type:      FailureStartToClose,
				Message:   "attempt exceeded its start-to-close timeout of " + a.rec.Timeouts.StartToClose.String(),
				Retryable: true,
			}, store.OutcomeTimedOut, now, true)
		}
	case timerHeartbeat:
		if a.rec.State == store.StateRunning && a.rec.Attempt == tm.attempt {
			if due := a.lastHeartbeat.Add(a.rec.Timeouts.Heartbeat); due.After(now) {
				e.armLocked(due, tm.k, tm.attempt, timerHeartbeat)
				return
			}
			e.failAttemptLocked(a, &store.Failure{
				Type:      FailureHeartbeat,
				Message:   "no heartbeat within the heartbeat timeout of " + a.rec.Timeouts.Heartbeat.String(),
				Retryable: true,
			}, store.OutcomeTimedOut, now, true)
		}
	case timerScheduleToClose:
		e.unqueueLocked(a)
		e.closeLocked(a, store.StateTimedOut, &store.Failure{
			Type:    FailureScheduleToClose,
			Message: "activity exceeded its schedule-to-close timeout of " + a.rec.Timeouts.ScheduleToClose.String(),
		}, now)
	}
}

// readyLocked makes a scheduled activity eligible for dispatch now and arms
// its schedule-to-start deadline for this attempt.
func (e *Engine) readyLocked(a *activity, now time.Time) {
	if e.cl != nil {
		e.releaseLocked(a)
		return
	}
	if t := a.rec.Timeouts.ScheduleToStart; t > 0 {
		e.armLocked(now.Add(t), a.key(), a.rec.Attempt, timerScheduleToStart)
	}
	e.enqueueLocked(a)
}
