package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

// Outcome is how a worker says an attempt ended: exactly one of Completed,
// Canceled or Failure.
type Outcome struct {
	Completed bool
	Result    []byte
	Canceled  bool
	Failure   *store.Failure
	// Trace is the trace context of the worker's own span for the
	// attempt, for tracing; zero when it sent none.
	Trace tracectx.Context
}

// Ack answers a worker about one result; refused is empty when the outcome
// is durable, and otherwise says why it was discarded. It must not block.
type Ack func(refused string)

// WorkerJoined re-runs dispatch for the work a newly registered worker can take.
func (e *Engine) WorkerJoined(w *registry.Worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dispatchWorkerLocked(w)
	e.dispatchWorkflowWorkerLocked(w)
	if e.cl != nil {
		w.WorkflowTriples(func(t registry.Triple) {
			e.rc.dirty[store.RunClaim{Namespace: t.Pool.Namespace, TaskQueue: t.Pool.TaskQueue, WorkflowType: t.ActivityType}] = struct{}{}
		})
		e.rc.wake()
	}
}

// WorkerLeft fails every attempt in flight on a departed worker as retryable
// worker_lost; each is retried under its activity's retry policy.
func (e *Engine) WorkerLeft(w *registry.Worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for _, a := range e.inflight[w.ID()] {
		e.failAttemptLocked(a, &store.Failure{
			Type:      FailureWorkerLost,
			Message:   fmt.Sprintf("worker %v left while running attempt %d", w.ID(), a.rec.Attempt),
			Retryable: true,
		}, store.OutcomeFailed, now, false)
	}
	delete(e.inflight, w.ID())
	delete(e.zombies, w.ID())
	e.workflowWorkerLeftLocked(w)
}

// Complete takes a worker's result for one attempt. The ack is sent only
// once the outcome is durable; a result for an attempt that is not the
// activity's current one on this worker is refused and changes nothing.
func (e *Engine) Complete(w *registry.Worker, ns, id string, attempt int, out Outcome, ack Ack) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := key{ns, id}
	a := e.open[k]
	if a == nil || a.closing || a.rec.State != store.StateRunning || a.rec.Attempt != attempt || a.worker != w {
		e.freeZombieLocked(w, attemptRef{k, attempt})
		ack(fmt.Sprintf("attempt %d of activity %q in namespace %q is not current on this worker", attempt, id, ns))
		return
	}
	now := e.now()
	var traced func(time.Time, store.ActivityState, error) // nil unless tracing
	if e.tracer != nil {
		traced = e.tracer.Completing(&a.rec, w.ID(), out, now)
	}
	end := store.EndAttempt{Namespace: ns, ID: id, StartedAt: a.rec.StartedAt, HeartbeatDetails: a.rec.HeartbeatDetails}
	switch {
	case out.Completed:
		end.Attempt = e.endedAttemptLocked(a, now, store.OutcomeCompleted, nil)
		end.State, end.Result, end.ClosedAt = store.StateCompleted, out.Result, now
	case out.Canceled:
		end.Attempt = e.endedAttemptLocked(a, now, store.OutcomeCanceled, nil)
		end.State, end.ClosedAt = store.StateCanceled, now
		end.ActivityFailure = &store.Failure{Type: "canceled", Message: "the worker reported the attempt canceled"}
	default:
		f := out.failure()
		// A handler stopped by its deadline races the server's own timer;
		// a failure at or past a deadline is that timeout, whoever saw it first.
		outcome := store.OutcomeFailed
		t := a.rec.Timeouts
		switch {
		case t.ScheduleToClose > 0 && !now.Before(a.rec.ScheduledAt.Add(t.ScheduleToClose)):
			f = &store.Failure{Type: FailureScheduleToClose, Details: f.Details,
				Message: "activity exceeded its schedule-to-close timeout of " + t.ScheduleToClose.String() + " (worker: " + f.Message + ")"}
			outcome = store.OutcomeTimedOut
		case t.StartToClose > 0 && !now.Before(a.attemptStartedAt.Add(t.StartToClose)):
			f = &store.Failure{Type: FailureStartToClose, Retryable: true, Details: f.Details,
				Message: "attempt exceeded its start-to-close timeout of " + t.StartToClose.String() + " (worker: " + f.Message + ")"}
			outcome = store.OutcomeTimedOut
		}
		end.Attempt = e.endedAttemptLocked(a, now, outcome, f)
		e.decideLocked(a, f, &end, now)
	}
	e.leaveWorkerLocked(a)
	// In cluster mode the next claim is a database round trip, so the slot
	// is freed as soon as the worker is done rather than once its result is
	// durable: claiming overlaps the commit.
	early := e.cl != nil
	if early {
		e.endingLocked(a)
		e.reg.Release(w)
		e.dispatchWorkerLocked(w)
	}
	onDurable := func(err error) {
		if early {
			e.endedLocked(a)
		} else {
			e.reg.Release(w)
			e.dispatchWorkerLocked(w)
		}
		if err != nil {
			// Not durable, so not acknowledged: the worker keeps the
			// result and sends it again after it reconnects.
			return
		}
		ack("")
	}
	if traced != nil {
		// Wrapped only when tracing, so the untraced callback captures
		// nothing more than it needs.
		untraced, state := onDurable, end.State
		onDurable = func(err error) {
			traced(e.now(), state, err)
			untraced(err)
		}
	}
	e.settleLocked(a, end, onDurable)
}

// Heartbeat records progress of a running attempt. refused is set when the
// attempt is not current on this worker (it should stop).
func (e *Engine) Heartbeat(w *registry.Worker, ns, id string, attempt int, details []byte) (refused string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.open[key{ns, id}]
	if a == nil || a.closing || a.rec.State != store.StateRunning || a.rec.Attempt != attempt || a.worker != w {
		return fmt.Sprintf("attempt %d of activity %q in namespace %q is not current on this worker", attempt, id, ns)
	}
	a.lastHeartbeat = e.now()
	if details != nil {
		a.rec.HeartbeatDetails = details
	}
	return ""
}

// endedAttemptLocked is the record of the running attempt, ending now.
func (e *Engine) endedAttemptLocked(a *activity, now time.Time, outcome store.AttemptOutcome, f *store.Failure) *store.Attempt {
	return &store.Attempt{Number: a.rec.Attempt, WorkerID: uint64(a.worker.ID()), Node: a.worker.Node(),
		StartedAt: a.attemptStartedAt, EndedAt: now, Outcome: outcome, Failure: f}
}

// leaveWorkerLocked detaches the running attempt from its worker. If its
// namespace was at its in-flight cap, the namespace's queues run again.
func (e *Engine) leaveWorkerLocked(a *activity) {
	w := a.worker
	if m := e.inflight[w.ID()]; m != nil {
		delete(m, a.key())
		if len(m) == 0 {
			delete(e.inflight, w.ID())
		}
	}
	a.worker = nil
	if a.lim != nil && a.lim.running {
		e.endSlotLocked(a)
	}
	ns := a.rec.Namespace
	atCap := e.maxRunning > 0 && e.running[ns] >= e.maxRunning
	if e.running[ns]--; e.running[ns] <= 0 {
		delete(e.running, ns)
	}
	if atCap {
		e.dispatchNamespaceLocked(ns)
	}
}

// abandonAttemptLocked gives up on the running attempt while its worker may
// still be running it: the worker is asked to stop and its slot stays taken
// until it reports the attempt or leaves, so its slot count stays true.
func (e *Engine) abandonAttemptLocked(a *activity, reason string) {
	w := a.worker
	ref := attemptRef{a.key(), a.rec.Attempt}
	e.leaveWorkerLocked(a)
	if !e.reg.IsRegistered(w.ID()) {
		e.reg.Release(w)
		return
	}
	if a.unsent {
		// Its task was never sent (it waited for its payload), so the
		// worker will never report it: the slot is free now.
		a.unsent = false
		e.reg.Release(w)
		e.dispatchWorkerLocked(w)
		return
	}
	z := e.zombies[w.ID()]
	if z == nil {
		z = make(map[attemptRef]struct{})
		e.zombies[w.ID()] = z
	}
	z[ref] = struct{}{}
	if conn, ok := w.Delivery().(Conn); ok {
		_ = conn.SendCancel(ref.ns, ref.id, ref.attempt, reason)
	}
}

// freeZombieLocked releases the slot of an abandoned attempt once its
// worker reports it.
func (e *Engine) freeZombieLocked(w *registry.Worker, ref attemptRef) {
	z := e.zombies[w.ID()]
	if _, ok := z[ref]; !ok {
		return
	}
	delete(z, ref)
	if len(z) == 0 {
		delete(e.zombies, w.ID())
	}
	e.reg.Release(w)
	e.dispatchWorkerLocked(w)
}

// failAttemptLocked ends the running attempt with a failure the engine
// decided (timeout, lost worker) and retries or closes the activity.
func (e *Engine) failAttemptLocked(a *activity, f *store.Failure, outcome store.AttemptOutcome, now time.Time, abandon bool) {
	w := a.worker
	end := store.EndAttempt{Namespace: a.rec.Namespace, ID: a.rec.ID, StartedAt: a.rec.StartedAt,
		Attempt: e.endedAttemptLocked(a, now, outcome, f), HeartbeatDetails: a.rec.HeartbeatDetails}
	if abandon {
		e.abandonAttemptLocked(a, f.Type)
	} else {
		e.leaveWorkerLocked(a)
		e.reg.Release(w)
	}
	e.decideLocked(a, f, &end, now)
	e.settleLocked(a, end, nil)
}

// closeLocked ends the activity without a worker's result (a timeout that
// is not retried, a cancellation), abandoning a running attempt first.
func (e *Engine) closeLocked(a *activity, state store.ActivityState, f *store.Failure, now time.Time) {
	end := store.EndAttempt{Namespace: a.rec.Namespace, ID: a.rec.ID, StartedAt: a.rec.StartedAt, State: state,
		ActivityFailure: f, ClosedAt: now, HeartbeatDetails: a.rec.HeartbeatDetails}
	if a.rec.State == store.StateRunning && a.worker != nil {
		outcome := store.OutcomeTimedOut
		if state == store.StateCanceled {
			outcome = store.OutcomeCanceled
		}
		end.Attempt = e.endedAttemptLocked(a, now, outcome, f)
		e.abandonAttemptLocked(a, f.Message)
	}
	e.settleLocked(a, end, nil)
}

// decideLocked fills end with the activity's next state after a failed
// attempt: scheduled again after a backoff, or closed for good.
func (e *Engine) decideLocked(a *activity, f *store.Failure, end *store.EndAttempt, now time.Time) {
	p := a.rec.Retry
	retry := f.Retryable && !slices.Contains(p.NonRetryableErrorTypes, f.Type) &&
		(p.MaximumAttempts == 0 || a.rec.Attempt < p.MaximumAttempts)
	var readyAt time.Time
	if retry {
		readyAt = now.Add(backoff(p, a.rec.Attempt))
		if t := a.rec.Timeouts.ScheduleToClose; t > 0 && !readyAt.Before(a.rec.ScheduledAt.Add(t)) {
			retry = false // the retry could not start before the activity times out
		}
	}
	if retry {
		end.State, end.ReadyAt = store.StateScheduled, readyAt
		return
	}
	end.State, end.ActivityFailure, end.ClosedAt = store.StateFailed, f, now
	switch f.Type {
	case FailureStartToClose, FailureHeartbeat, FailureScheduleToStart, FailureScheduleToClose:
		end.State = store.StateTimedOut
	}
}

// backoff is the wait before the attempt after attempt n (n from 1).
func backoff(p store.RetryPolicy, n int) time.Duration {
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(n-1))
	if p.MaximumInterval > 0 && d > float64(p.MaximumInterval) {
		return p.MaximumInterval
	}
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// settleLocked applies end to the activity in memory now and durably soon.
// Once durable, a closed activity leaves memory and wakes its waiters, and a
// retried one becomes ready at its ReadyAt; then onDurable runs, under the
// engine lock, with the write's error.
func (e *Engine) settleLocked(a *activity, end store.EndAttempt, onDurable func(error)) {
	k := a.key()
	terminal := end.State.Terminal()
	a.closing = terminal
	a.rec.State = end.State
	a.rec.ReadyAt = end.ReadyAt
	if terminal {
		a.rec.Result, a.rec.Failure, a.rec.ClosedAt = end.Result, end.ActivityFailure, end.ClosedAt
	}
	attempt := a.rec.Attempt
	ns := a.rec.Namespace
	if e.cl != nil {
		end.Owner = e.cl.Self
	}
	if at := end.Attempt; at != nil {
		e.obs.AttemptEnded(ns, at.Outcome, at.EndedAt.Sub(at.StartedAt))
		if !terminal {
			e.obs.Retried(ns)
		}
	}
	if terminal {
		e.obs.Closed(ns, end.State)
		switch {
		case e.cl != nil:
			// The run may be held by any server: its close goes to the
			// run's inbox in the same transaction.
			end.Post = stepClosePost(&a.rec, end)
		case a.step != nil:
			e.stepActivityClosedLocked(a, end)
		}
	}
	e.commit.Submit(end, func(changed bool, err error) {
		if err == nil && !changed && e.cl != nil {
			err = errNotOwner
		}
		if err != nil {
			e.log.Error("durable write failed", "namespace", k.ns, "activity", k.id, "err", err)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.cl != nil && err == nil && end.Attempt != nil {
			e.limitEndedLocked(&a.rec)
		}
		if terminal || (err != nil && e.cl != nil) {
			e.dropOpenLocked(a)
			a.wakeWaiters()
			if err != nil && e.cl != nil && !errors.Is(err, errNotOwner) {
				e.claims.orphans[k] = struct{}{}
			}
		} else if e.cl != nil {
			if e.open[k] == a && !a.closing && a.rec.State == store.StateScheduled && a.rec.Attempt == attempt {
				e.releaseLocked(a)
			}
		} else if e.open[k] == a && !a.closing && a.rec.State == store.StateScheduled && a.rec.Attempt == attempt && !e.closed {
			if now := e.now(); end.ReadyAt.After(now) {
				e.armLocked(end.ReadyAt, k, attempt, timerReady)
			} else {
				e.readyLocked(a, now)
			}
		}
		if onDurable != nil {
			onDurable(err)
		}
	})
}
