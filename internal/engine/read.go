package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/store"
)

// View is an activity as a caller sees it: its record and its attempts.
type View struct {
	Activity store.Activity
	Attempts []store.Attempt
}

// Get returns the current view of one activity.
func (e *Engine) Get(ctx context.Context, caller namespace.Identity, ns, id string) (View, error) {
	if err := namespace.Authorize(caller, ns); err != nil {
		return View{}, fmt.Errorf("get activity: %w", err)
	}
	return e.view(ctx, ns, id)
}

func (e *Engine) view(ctx context.Context, ns, id string) (View, error) {
	k := key{ns, id}
	e.mu.Lock()
	a := e.open[k]
	var (
		live    store.Activity
		running *store.Attempt
	)
	if a != nil && a.creating == nil {
		live = a.rec
		if a.worker != nil {
			running = &store.Attempt{Number: a.rec.Attempt, WorkerID: uint64(a.worker.ID()), Node: a.worker.Node(),
				StartedAt: a.attemptStartedAt, Outcome: store.OutcomeRunning}
		}
	}
	e.mu.Unlock()

	rec, err := e.st.GetActivity(ctx, ns, id)
	if errors.Is(err, store.ErrNotFound) {
		return View{}, fmt.Errorf("activity %q in namespace %q: %w", id, ns, ErrNotFound)
	}
	if err != nil {
		return View{}, fmt.Errorf("get activity %q in namespace %q: %w", id, ns, err)
	}
	attempts, err := e.st.ListAttempts(ctx, ns, id)
	if err != nil {
		return View{}, fmt.Errorf("get activity %q in namespace %q: %w", id, ns, err)
	}
	if live.ID == "" && rec.State == store.StateRunning && e.cl != nil {
		// Another server runs it; the store knows which worker.
		if at, err := e.cl.Store.GetRunningAttempt(ctx, ns, id); err == nil && at != nil &&
			(len(attempts) == 0 || attempts[len(attempts)-1].Number < at.Number) {
			attempts = append(attempts, *at)
		}
	}
	if live.ID != "" && !rec.State.Terminal() {
		// Memory is ahead of the store: a start is written without waiting.
		// The payload never changes and may not be held in memory.
		live.Seq, live.Payload, live.PayloadSize = rec.Seq, rec.Payload, rec.PayloadSize
		rec = live
		if running != nil && (len(attempts) == 0 || attempts[len(attempts)-1].Number < running.Number) {
			attempts = append(attempts, *running)
		}
	}
	return View{Activity: rec, Attempts: attempts}, nil
}

// Wait blocks until the activity is closed or ctx ends, then returns its view.
func (e *Engine) Wait(ctx context.Context, caller namespace.Identity, ns, id string) (View, error) {
	if err := namespace.Authorize(caller, ns); err != nil {
		return View{}, fmt.Errorf("wait for activity: %w", err)
	}
	if e.cl != nil {
		err := e.awaitClosed(ctx, ns, id)
		if errors.Is(err, store.ErrNotFound) {
			return View{}, fmt.Errorf("activity %q in namespace %q: %w", id, ns, ErrNotFound)
		}
		if err != nil {
			return View{}, fmt.Errorf("wait for activity %q in namespace %q: %w", id, ns, err)
		}
		return e.view(ctx, ns, id)
	}
	ch, spilled, err := e.waiterOrSpilled(key{ns, id})
	if err != nil {
		return View{}, fmt.Errorf("wait for activity %q in namespace %q: %w", id, ns, err)
	}
	if spilled {
		// Not in memory: waiting in the store, closed, or unknown. The
		// waiter is in place before the store is read, so a close after
		// the read wakes it.
		rec, err := e.st.GetActivity(ctx, ns, id)
		if err != nil || rec.State.Terminal() {
			e.dropWaiter(key{ns, id}, ch)
			ch = nil
		}
	}
	if ch != nil {
		if err := e.await(ctx, key{ns, id}, ch); err != nil {
			return View{}, fmt.Errorf("wait for activity %q in namespace %q: %w", id, ns, err)
		}
	}
	v, err := e.view(ctx, ns, id)
	if err != nil {
		return View{}, err
	}
	if !v.Activity.State.Terminal() {
		return View{}, fmt.Errorf("wait for activity %q in namespace %q: server stopping: %w", id, ns, ErrClosed)
	}
	return v, nil
}

// waiterFor registers a waiter on activity k when this server holds it (nil
// when it does not), or fails once the server is stopping.
func (e *Engine) waiterFor(k key) (chan struct{}, error) {
	ch, _, err := e.waiterOrSpilled(k)
	return ch, err
}

// waiterOrSpilled is waiterFor that also waits for work in the store:
// spilled is set when k is not in memory but may wait in the store, and the
// waiter is then kept for it.
func (e *Engine) waiterOrSpilled(k key) (ch chan struct{}, spilled bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waitsReleased {
		return nil, false, fmt.Errorf("server stopping: %w", ErrClosed)
	}
	if e.closed {
		return nil, false, nil
	}
	if a := e.open[k]; a != nil {
		return a.addWaiter(), false, nil
	}
	if e.ws != nil {
		ch := make(chan struct{})
		e.spillWaiters[k] = append(e.spillWaiters[k], ch)
		return ch, true, nil
	}
	return nil, false, nil
}

// ReleaseWaiters ends every Wait in progress, and every later one, with
// ErrClosed, so a stopping server is not held up by long polls; callers
// retry against the next server.
func (e *Engine) ReleaseWaiters() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waitsReleased = true
	for _, a := range e.open {
		a.wakeWaiters()
	}
	e.wakeSpillWaitersLocked()
}

func (e *Engine) dropWaiter(k key, ch chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.open[k]; a != nil {
		for i, w := range a.waiters {
			if w == ch {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				break
			}
		}
	}
	if ws := e.spillWaiters[k]; len(ws) > 0 {
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(e.spillWaiters, k)
		} else {
			e.spillWaiters[k] = ws
		}
	}
}

// ListFilter selects activities for List.
type ListFilter struct {
	Namespace    string
	State        store.ActivityState
	ActivityType string
	PageSize     int
	PageToken    string
	// Payloads includes the payloads, results, heartbeat details and
	// failure details, which a listing leaves out by default.
	Payloads bool
}

// List returns one page of activities, newest first, and the token of the
// next page ("" at the end). A page ends early, with a token, before the
// Size of its activities passes the engine's MaxListBytes; its first
// activity is always included, so such a page may be followed by an empty
// one.
func (e *Engine) List(ctx context.Context, caller namespace.Identity, f ListFilter) ([]store.Activity, string, error) {
	if err := namespace.Authorize(caller, f.Namespace); err != nil {
		return nil, "", fmt.Errorf("list activities: %w", err)
	}
	if f.State != "" && !f.State.Valid() {
		return nil, "", fmt.Errorf("list activities: state: %q is not a known state: %w", f.State, ErrInvalid)
	}
	if f.PageSize < 0 || f.PageSize > MaxPageSize {
		return nil, "", fmt.Errorf("list activities: page_size: %d, want 0 to %d: %w", f.PageSize, MaxPageSize, ErrInvalid)
	}
	size := f.PageSize
	if size == 0 {
		size = 100
	}
	var before int64
	if f.PageToken != "" {
		n, err := strconv.ParseInt(f.PageToken, 10, 64)
		if err != nil || n <= 0 {
			return nil, "", fmt.Errorf("list activities: page_token: %q is not a token this server issued: %w", f.PageToken, ErrInvalid)
		}
		before = n
	}
	// The store lags memory for open work (a start is not written), so an
	// open state is looked for among all open activities in the store and
	// picked by the state memory holds.
	states := []store.ActivityState{f.State}
	if f.State != "" && !f.State.Terminal() {
		states = []store.ActivityState{store.StateScheduled, store.StateRunning}
	}
	var recs []store.Activity
	for _, st := range states {
		got, err := e.st.ListActivities(ctx, store.ActivityFilter{Namespace: f.Namespace, State: st,
			ActivityType: f.ActivityType, Limit: size + 1, Before: before, OmitPayloads: !f.Payloads, MaxBytes: e.maxListBytes})
		if err != nil {
			return nil, "", fmt.Errorf("list activities: %w", err)
		}
		recs = append(recs, got...)
	}
	if len(states) > 1 {
		slices.SortFunc(recs, func(a, b store.Activity) int { return cmp.Compare(b.Seq, a.Seq) })
	}
	next := ""
	total := 0
	for i := range recs {
		if total += recs[i].Size(); total > e.maxListBytes {
			recs = recs[:max(i, 1)]
			next = strconv.FormatInt(recs[len(recs)-1].Seq, 10)
			break
		}
	}
	if len(recs) > size {
		recs = recs[:size]
		next = strconv.FormatInt(recs[size-1].Seq, 10)
	}
	e.mu.Lock()
	for i := range recs {
		if a := e.open[key{recs[i].Namespace, recs[i].ID}]; a != nil && a.creating == nil && !recs[i].State.Terminal() {
			// Memory is ahead of the store, except for the payload, which
			// never changes and may not be held in memory.
			live := a.rec
			live.Seq, live.Payload, live.PayloadSize = recs[i].Seq, recs[i].Payload, recs[i].PayloadSize
			if !f.Payloads {
				omitPayloads(&live)
			}
			recs[i] = live
		}
	}
	e.mu.Unlock()
	if len(states) > 1 {
		recs = slices.DeleteFunc(recs, func(a store.Activity) bool { return a.State != f.State })
	}
	return recs, next, nil
}

// MaxPageSize caps the activities of one List page.
const MaxPageSize = 1000

// omitPayloads leaves out what a listing does not return by default.
func omitPayloads(a *store.Activity) {
	a.Payload, a.Result, a.HeartbeatDetails = nil, nil, nil
	if f := a.Failure; f != nil && f.Details != nil {
		c := *f
		c.Details = nil
		a.Failure = &c
	}
}
