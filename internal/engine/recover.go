package engine

import (
	"context"
	"fmt"

	"github.com/aion-run/aion/internal/store"
)

// Recover loads every open activity from the store and starts the engine.
// Attempts that were running when the server stopped are failed as
// worker_lost and retried under their policy; scheduled work is queued again.
// It returns once every recovery write is durable.
func (e *Engine) Recover(ctx context.Context) (int, error) {
	namespaces, err := e.st.ListNamespaces(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	for _, ns := range namespaces {
		e.NoteNamespace(ns)
	}
	open, err := e.st.OpenActivities(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	now := e.now()
	var ends []store.Write
	e.mu.Lock()
	for _, rec := range open {
		a := &activity{rec: rec}
		k := a.key()
		e.open[k] = a
		if t := rec.Timeouts.ScheduleToClose; t > 0 {
			e.armLocked(rec.ScheduledAt.Add(t), k, 0, timerScheduleToClose)
		}
		if rec.State == store.StateRunning {
			f := &store.Failure{Type: FailureWorkerLost, Retryable: true,
				Message: fmt.Sprintf("the server restarted while attempt %d was running", rec.Attempt)}
			end := store.EndAttempt{Namespace: k.ns, ID: k.id, Number: rec.Attempt, EndedAt: now,
				Outcome: store.OutcomeFailed, Failure: f, HeartbeatDetails: rec.HeartbeatDetails}
			e.decideLocked(a, f, &end, now)
			ends = append(ends, end)
			a.rec.State, a.rec.ReadyAt = end.State, end.ReadyAt
			if end.State.Terminal() {
				a.rec.Failure, a.rec.ClosedAt = end.ActivityFailure, end.ClosedAt
				delete(e.open, k)
				continue
			}
		}
	}
	e.mu.Unlock()

	if len(ends) > 0 {
		_, errs, err := e.commit.CommitAll(ctx, ends)
		if err != nil {
			return 0, fmt.Errorf("recover: %w", err)
		}
		for _, err := range errs {
			if err != nil {
				return 0, fmt.Errorf("recover: %w", err)
			}
		}
	}

	e.mu.Lock()
	for _, a := range e.open {
		if a.rec.ReadyAt.After(now) {
			e.armLocked(a.rec.ReadyAt, a.key(), a.rec.Attempt, timerReady)
		} else {
			e.readyLocked(a, now)
		}
	}
	n := len(e.open)
	e.mu.Unlock()

	e.done.Add(1)
	go e.runTimers()
	return n, nil
}
