package engine

import (
	"context"
	"fmt"

	"github.com/aion-run/aion/internal/store"
)

// Start loads every open activity from the store and starts the engine's
// goroutines, which run until Stop. Work that was waiting or running when
// the server stopped is queued again (or waits out its retry backoff); how
// much is logged. In cluster mode open work stays in the store, where claims
// find it.
func (e *Engine) Start(ctx context.Context) error {
	n, err := e.recover(ctx)
	if err != nil {
		return err
	}
	if e.cl == nil {
		e.log.Info("open activities recovered", "open_activities", n)
	}
	return nil
}

// recover loads the open work and starts the goroutines; it returns how many
// activities it loaded.
func (e *Engine) recover(ctx context.Context) (int, error) {
	namespaces, err := e.st.ListNamespaces(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	for _, ns := range namespaces {
		e.NoteNamespace(ns)
	}
	if err := e.loadFlowLimits(ctx); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if e.cl != nil {
		// Open work stays in the store, where claims find it.
		e.done.Add(4)
		go e.runTimers()
		go e.runClaims()
		go e.runChores()
		go e.runRunClaims()
		e.NewWork(nil)
		return 0, nil
	}
	if e.ws != nil {
		n, err := e.recoverWaiting(ctx)
		if err != nil {
			return 0, err
		}
		return e.recoverRest(ctx, n)
	}
	open, err := e.st.OpenActivities(ctx, inlinePayload)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	now := e.now()
	e.mu.Lock()
	for _, rec := range open {
		// Starts are not written, so an attempt cut short by the stop left
		// the activity scheduled: it simply runs again.
		rec.State = store.StateScheduled
		a := &activity{rec: rec, size: rec.PayloadSize}
		e.addOpenLocked(a)
		e.shedPayloadLocked(a)
		if t := rec.Timeouts.ScheduleToClose; t > 0 {
			e.armLocked(rec.ScheduledAt.Add(t), a.key(), 0, timerScheduleToClose)
		}
	}
	e.mu.Unlock()

	e.mu.Lock()
	// In the store's order (oldest first), so each queue is FIFO again.
	for _, rec := range open {
		a := e.open[key{rec.Namespace, rec.ID}]
		if a == nil {
			continue
		}
		if a.rec.ReadyAt.After(now) {
			e.armLocked(a.rec.ReadyAt, a.key(), a.rec.Attempt, timerReady)
		} else {
			e.readyLocked(a, now)
		}
	}
	n := len(e.open)
	e.mu.Unlock()
	return e.recoverRest(ctx, n)
}

// recoverRest reads the open runs back and starts the timers; n is the
// open activities recovered.
func (e *Engine) recoverRest(ctx context.Context, n int) (int, error) {
	runs, err := e.recoverRuns(ctx)
	if err != nil {
		return 0, err
	}
	if runs > 0 {
		e.log.Info("open workflow runs recovered", "open_runs", runs)
	}

	e.done.Add(1)
	go e.runTimers()
	return n, nil
}
