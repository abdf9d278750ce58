package engine

import (
	"context"
	"fmt"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// Cancel closes an activity as canceled. A waiting one is closed at once; a
// running one is closed too and its worker is sent CancelActivity, so its
// handler stops; whatever result that worker sends later is refused. It
// returns once the cancellation is durable. Cancelling a canceled activity
// returns it unchanged; cancelling one closed otherwise is
// ErrFailedPrecondition.
func (e *Engine) Cancel(ctx context.Context, caller namespace.Identity, ns, id, reason string) (View, error) {
	if err := namespace.Authorize(caller, ns); err != nil {
		return View{}, fmt.Errorf("cancel activity: %w", err)
	}
	k := key{ns, id}
	e.mu.Lock()
	a := e.open[k]
	if a != nil && a.creating != nil {
		creating := a.creating
		e.mu.Unlock()
		select {
		case <-creating:
		case <-ctx.Done():
			return View{}, fmt.Errorf("cancel activity %q in namespace %q: %w", id, ns, ctx.Err())
		}
		e.mu.Lock()
		a = e.open[k]
	}
	if e.cl != nil && a != nil && a.worker == nil && !a.closing {
		// Between attempts: its retry is being written, after which it
		// waits in the store; cancel it there.
		ch := a.addWaiter()
		e.mu.Unlock()
		if err := e.await(ctx, k, ch); err != nil {
			return View{}, fmt.Errorf("cancel activity %q in namespace %q: %w", id, ns, err)
		}
		e.mu.Lock()
		a = e.open[k]
	}
	if a == nil && e.ws != nil {
		// Not in memory: it waits in the store, or is closed.
		e.mu.Unlock()
		if reason == "" {
			reason = "canceled by request"
		}
		handled, err := e.cancelSpilled(ctx, k, reason)
		if err != nil {
			return View{}, err
		}
		if handled {
			return e.canceledView(ctx, ns, id)
		}
		return e.Cancel(ctx, caller, ns, id, reason) // paged in meanwhile
	}
	if a == nil && e.cl != nil {
		e.mu.Unlock()
		if reason == "" {
			reason = "canceled by request"
		}
		if err := e.cancelInStore(ctx, ns, id, reason); err != nil {
			return View{}, fmt.Errorf("cancel activity %q in namespace %q: %w", id, ns, err)
		}
		return e.canceledView(ctx, ns, id)
	}
	var done chan struct{}
	if a != nil && !a.closing {
		if reason == "" {
			reason = "canceled by request"
		}
		done = a.addWaiter()
		e.unqueueLocked(a)
		e.closeLocked(a, store.StateCanceled, &store.Failure{Type: "canceled", Message: reason}, e.now())
	} else if a != nil {
		done = a.addWaiter()
	}
	e.mu.Unlock()
	if done != nil {
		if err := e.await(ctx, k, done); err != nil {
			return View{}, fmt.Errorf("cancel activity %q in namespace %q: %w", id, ns, err)
		}
	}
	return e.canceledView(ctx, ns, id)
}

// canceledView returns the activity after a cancel, or ErrFailedPrecondition
// when it had closed otherwise.
func (e *Engine) canceledView(ctx context.Context, ns, id string) (View, error) {
	v, err := e.view(ctx, ns, id)
	if err != nil {
		return View{}, err
	}
	if st := v.Activity.State; st != store.StateCanceled {
		return v, fmt.Errorf("cancel activity %q in namespace %q: it is already %s: %w", id, ns, st, ErrFailedPrecondition)
	}
	return v, nil
}

// Owner returns the worker running the given attempt of an activity (0 means
// the current attempt) and that attempt's number. ok is false when no live
// worker owns it: the activity is not running, or the attempt moved on.
func (e *Engine) Owner(caller namespace.Identity, ns, id string, attempt int) (w *registry.Worker, current int, err error) {
	if err := namespace.Authorize(caller, ns); err != nil {
		return nil, 0, fmt.Errorf("find the worker of activity %q: %w", id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.open[key{ns, id}]
	if a == nil || a.closing || a.worker == nil || (attempt != 0 && attempt != a.rec.Attempt) {
		return nil, 0, nil
	}
	return a.worker, a.rec.Attempt, nil
}
