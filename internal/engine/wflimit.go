package engine

import (
	"cmp"
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
// Workflow limits are refused in cluster mode (see SetFlowLimit): runs are
// held by several servers there and no store count is kept yet.

// wfGroupKey names the runs of one concurrency key of a workflow type.
type wfGroupKey struct {
	ns, typ, key string
}

// wfGroup is one concurrency key of a workflow type: how many of its runs
// are admitted and the runs waiting for admission, oldest first.
type wfGroup struct {
	admitted int
	held     []*wfRun
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
		if i := slices.Index(g.held, r); i >= 0 {
			g.held = slices.Delete(g.held, i, i+1)
		}
		r.heldBy = nil
	case r.admitted && k.key != "":
		g.admitted--
		r.admitted = false
	default:
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
	if g.admitted == 0 && len(g.held) == 0 && e.wfGroups[k] == g {
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
		if k.ns == ns && len(g.held) > 0 {
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
