package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aion-run/aion/internal/store"
)

// Concurrency limits of workflow types on one server.
//
// A run is admitted when it is first given a workflow task and stays
// admitted until it closes; a workflow type's concurrency limit N lets at
// most N runs of one concurrency key be admitted at once. A run over the
// limit waits outside the workflow queue (so the runs behind it are not
// blocked), in a FIFO of its key, and is admitted, oldest first, when an
// admitted run of its key closes or the limit grows. Runs without a key are
// not limited. Admitted runs of every key are counted whether or not a
// limit is set, so a limit set later counts the runs already going.
//
// In cluster mode the runs of a key are held by several servers, so the
// store counts admissions (store AdmitRun): a keyed run waits in its key's
// FIFO on this server until the store admits it, off the engine lock; the
// head of the FIFO is asked again when an admitted run of its key closes
// (an AdmitWork notice, or the close of a run held here), when the limit
// changes, and at every run-claims poll, which catches a lost notice. An
// admission is recorded on the run, so it outlives a restart and a move to
// another server.

// wfGroupKey names the runs of one concurrency key of a workflow type.
type wfGroupKey struct {
	ns, typ, key string
}

// wfGroup is one concurrency key of a workflow type: how many of its runs
// are admitted and the runs waiting for admission, oldest first.
type wfGroup struct {
	admitted int
	held     []*wfRun
	// In cluster mode: fresh are the runs the store was not asked about
	// yet, each asked once whatever the runs before it get (the store may
	// have admitted it before, on this server or another); counted is the
	// key's admitted runs across the cluster the store last reported;
	// checking is set while a goroutine asks the store, again when it
	// must look once more before it stops.
	fresh           []*wfRun
	counted         int
	checking, again bool
}

// unholdLocked takes a run out of the key's FIFO.
func (g *wfGroup) unholdLocked(r *wfRun) {
	if i := slices.Index(g.held, r); i >= 0 {
		g.held = slices.Delete(g.held, i, i+1)
	}
	if i := slices.Index(g.fresh, r); i >= 0 {
		g.fresh = slices.Delete(g.fresh, i, i+1)
	}
	r.heldBy = nil
}

func runGroupKey(r *wfRun) wfGroupKey {
	return wfGroupKey{r.rec.Namespace, r.rec.WorkflowType, r.rec.Flow.ConcurrencyKey}
}

// wfLimitLocked is the concurrency limit of a run's workflow type, 0 for
// none.
func (e *Engine) wfLimitLocked(ns, typ string) int {
	if len(e.wfLimits) == 0 {
		return 0
	}
	return e.wfLimits[limitID{ns, store.FlowWorkflow, typ}]
}

// admitRunLocked reports whether the run may be given a workflow task,
// admitting it when it was not yet: a run without a key always, a keyed
// run while its key has fewer admitted runs than its type's limit. A run
// that may not is held in its key's FIFO (once).
func (e *Engine) admitRunLocked(r *wfRun) bool {
	if r.admitted {
		return true
	}
	if r.heldBy != nil {
		return false
	}
	k := runGroupKey(r)
	if k.key == "" {
		r.admitted = true
		return true
	}
	g := e.wfGroups[k]
	if g == nil {
		g = &wfGroup{}
		e.wfGroups[k] = g
	}
	if e.cl != nil {
		e.holdForStoreLocked(k, g, r)
		return false
	}
	// A run whose code has seen a recorded task was admitted before a
	// restart: it counts again whatever the limit.
	if lim := e.wfLimitLocked(k.ns, k.typ); r.seen == 0 && lim > 0 && (g.admitted >= lim || len(g.held) > 0 || e.recoveringRuns) {
		r.heldBy = g
		g.held = append(g.held, r)
		return false
	}
	g.admitted++
	r.admitted = true
	return true
}

// runLeftLimitLocked forgets a closing or dropped run's place in its key:
// its admission, which may admit the oldest held run, or its wait.
func (e *Engine) runLeftLimitLocked(r *wfRun) {
	k := runGroupKey(r)
	g := e.wfGroups[k]
	switch {
	case g == nil:
		return
	case r.heldBy != nil:
		g.unholdLocked(r)
	case r.admitted && k.key != "":
		g.admitted--
		r.admitted = false
	default:
		return
	}
	if e.cl != nil {
		e.checkHeldLocked(k, g)
		return
	}
	e.admitHeldLocked(k, g)
}

// admitHeldLocked admits held runs of a key, oldest first, while its limit
// allows, and gives them their first task; it drops a group left empty.
func (e *Engine) admitHeldLocked(k wfGroupKey, g *wfGroup) {
	lim := e.wfLimitLocked(k.ns, k.typ)
	for len(g.held) > 0 && (lim == 0 || g.admitted < lim) {
		r := g.held[0]
		g.held[0] = nil
		g.held = g.held[1:]
		r.heldBy = nil
		r.admitted = true
		g.admitted++
		e.needTaskLocked(r)
	}
	e.dropIdleGroupLocked(k, g)
}

// dropIdleGroupLocked forgets a key with no admitted, held or checked run.
func (e *Engine) dropIdleGroupLocked(k wfGroupKey, g *wfGroup) {
	if g.admitted == 0 && len(g.held) == 0 && len(g.fresh) == 0 && !g.checking && e.wfGroups[k] == g {
		delete(e.wfGroups, k)
	}
}

// noteWorkflowLimitsLocked applies the workflow concurrency limits of
// namespace ns and admits the held runs a raised or cleared limit lets go.
func (e *Engine) noteWorkflowLimitsLocked(ns string, limits []store.FlowLimit) {
	for id := range e.wfLimits {
		if id.ns == ns {
			delete(e.wfLimits, id)
		}
	}
	for _, l := range limits {
		if l.Namespace == ns && l.Kind == store.FlowWorkflow && l.Concurrency > 0 {
			e.wfLimits[limitID{ns, store.FlowWorkflow, l.Type}] = l.Concurrency
		}
	}
	for k, g := range e.wfGroups {
		switch {
		case k.ns != ns || len(g.held) == 0:
		case e.cl != nil:
			e.checkHeldLocked(k, g)
		default:
			e.admitHeldLocked(k, g)
		}
	}
}

// explainHeldRunLocked explains a run a workflow concurrency limit holds.
func (e *Engine) explainHeldRunLocked(r *wfRun) Explanation {
	g := r.heldBy
	k := runGroupKey(r)
	ex := Explanation{Reason: WhyConcurrencyLimit, ConcurrencyKey: k.key, Running: g.admitted,
		Limit: e.wfLimitLocked(k.ns, k.typ), Ahead: slices.Index(g.held, r)}
	if e.cl != nil {
		if slices.Contains(g.fresh, r) {
			return Explanation{Reason: WhyBeingRecorded, ConcurrencyKey: k.key,
				Message: fmt.Sprintf("the store is being asked to admit it under concurrency key %q of workflow type %q", k.key, k.typ)}
		}
		ex.Running = g.counted
		ex.Message = fmt.Sprintf("concurrency key %q of workflow type %q has %d runs admitted across the cluster of its limit of %d; %d wait before it for the key on this server",
			k.key, k.typ, ex.Running, ex.Limit, ex.Ahead)
		return ex
	}
	ex.Message = fmt.Sprintf("concurrency key %q of workflow type %q has %d runs admitted of its limit of %d; %d wait before it for the key",
		k.key, k.typ, ex.Running, ex.Limit, ex.Ahead)
	return ex
}

// admitRecoveredRuns ends recovery: the runs held while it ran are
// admitted in start order as their keys' limits allow.
func (e *Engine) admitRecoveredRuns() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recoveringRuns = false
	for k, g := range e.wfGroups {
		slices.SortStableFunc(g.held, func(a, b *wfRun) int { return cmp.Compare(a.rec.Seq, b.rec.Seq) })
		e.admitHeldLocked(k, g)
	}
}

// holdForStoreLocked puts a keyed run in its key's FIFO until the store
// admits it (cluster mode).
func (e *Engine) holdForStoreLocked(k wfGroupKey, g *wfGroup, r *wfRun) {
	r.heldBy = g
	g.fresh = append(g.fresh, r)
	e.checkHeldLocked(k, g)
}

// checkHeldLocked has the store asked to admit the key's held runs, by
// one goroutine per key; a call while one runs makes it look once more
// before it stops.
func (e *Engine) checkHeldLocked(k wfGroupKey, g *wfGroup) {
	switch {
	case len(g.held) == 0 && len(g.fresh) == 0 || e.closed:
	case g.checking:
		g.again = true
	default:
		g.checking = true
		e.bg.Add(1)
		go e.admitHeldInStore(k, g)
	}
}

// checkAllHeldLocked has the store asked about every key with held runs:
// the backstop, at each run-claims poll, for a close notice lost.
func (e *Engine) checkAllHeldLocked() {
	for k, g := range e.wfGroups {
		e.checkHeldLocked(k, g)
	}
}

// admitHeldInStore asks the store about each fresh run once, and to admit
// the key's oldest held run until it refuses one (the others would be
// refused too) or none is left; each admitted run is given its first
// task. A refused fresh run joins the end of the FIFO. The store is asked
// off the engine lock; a run that left the FIFO meanwhile (closed, or let
// go to another server) keeps what the store recorded, which the next
// holder reads back.
func (e *Engine) admitHeldInStore(k wfGroupKey, g *wfGroup) {
	defer e.bg.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	headRefused := false
ask:
	for !e.closed {
		if g.again {
			g.again, headRefused = false, false
		}
		var r *wfRun
		switch {
		case len(g.fresh) > 0:
			r = g.fresh[0]
		case len(g.held) > 0 && !headRefused:
			r = g.held[0]
		default:
			break ask
		}
		limit := e.wfLimitLocked(k.ns, k.typ)
		if r.seen > 0 {
			limit = 0 // admitted before: it counts again whatever the limit
		}
		e.mu.Unlock()
		var (
			ok bool
			n  int
		)
		err := e.call(func(ctx context.Context) (err error) {
			ok, n, err = e.st.AdmitRun(ctx, k.ns, r.rec.RunID, limit)
			return err
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			e.choreFailed("admit workflow runs", err)
			e.mu.Lock()
			break // the next poll asks again
		}
		e.choreOK("admit workflow runs")
		e.mu.Lock()
		if err == nil {
			g.counted = n
		}
		if r.heldBy != g {
			continue // it left the FIFO while the store was asked
		}
		switch {
		case err != nil:
			// Closed in the store: its holder drops it once the close is
			// read back.
			g.unholdLocked(r)
		case ok:
			g.unholdLocked(r)
			r.admitted = true
			g.admitted++
			e.needTaskLocked(r)
		default:
			if i := slices.Index(g.fresh, r); i >= 0 {
				g.fresh = slices.Delete(g.fresh, i, i+1)
				g.held = append(g.held, r)
			} else {
				headRefused = true
			}
		}
	}
	g.checking = false
	e.dropIdleGroupLocked(k, g)
}

// wakeOnCloseLocked names, for the write that closes a run, the key whose
// slot the close frees (cluster mode): other servers holding runs of the
// key ask the store again.
func (e *Engine) wakeOnCloseLocked(r *wfRun, w *store.AppendEvents) {
	if e.cl != nil && r.admitted && w.Update.Status.Closed() && r.rec.Flow.ConcurrencyKey != "" {
		w.Wake = append(w.Wake, store.AdmitWork(r.rec.Namespace, r.rec.WorkflowType, r.rec.Flow.ConcurrencyKey))
	}
}
