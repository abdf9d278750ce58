package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/store"
)

// The kinds of waiting work a WaitingGroup counts.
const (
	// WaitingActivities: activities ready and waiting for a worker slot.
	WaitingActivities = "activity"
	// WaitingWorkflowTasks: runs waiting for a workflow task.
	WaitingWorkflowTasks = "workflow_task"
)

// WaitingGroup counts the ready work of one pool and type that shares a
// priority and a fairness key, and what holds it, if anything but a free
// slot.
type WaitingGroup struct {
	TaskQueue string
	// Kind is WaitingActivities or WaitingWorkflowTasks; Type the activity
	// or workflow type.
	Kind, Type  string
	Priority    int
	FairnessKey string
	// HeldBy is "" for work waiting in its queue, or the flow limit that
	// holds it: WhyConcurrencyLimit (for ConcurrencyKey) or WhyRateLimited.
	HeldBy         WaitReason
	ConcurrencyKey string
	Count          int
	// OldestReady is when the longest-waiting of them became ready.
	OldestReady time.Time
}

// MaxWaitingGroups bounds the groups one Waiting call reports; the rest are
// counted in Truncated.
const MaxWaitingGroups = 1000

// WaitingView is a namespace's ready work by pool, type, priority and key.
type WaitingView struct {
	Groups []WaitingGroup
	// Truncated counts the groups left out past MaxWaitingGroups (the
	// smallest).
	Truncated int
}

// Waiting reports the namespace's ready work grouped by task queue, type,
// priority and fairness key (with what a flow limit holds apart), the
// largest groups first. Alone it reads the queues (every waiting item held
// in memory once, under the engine lock, and the counts of those waiting in
// the store); in a cluster, the store.
func (e *Engine) Waiting(ctx context.Context, caller namespace.Identity, ns string) (WaitingView, error) {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return WaitingView{}, fmt.Errorf("waiting: %w: %w", err, ErrInvalid)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return WaitingView{}, fmt.Errorf("waiting: %w", err)
	}
	var groups []WaitingGroup
	if e.cl != nil {
		rows, err := e.cl.Store.ListWaitingGroups(ctx, ns, e.now())
		if err != nil {
			return WaitingView{}, fmt.Errorf("waiting in namespace %q: %w", ns, err)
		}
		for _, r := range rows {
			groups = append(groups, WaitingGroup{TaskQueue: r.TaskQueue, Kind: WaitingActivities, Type: r.ActivityType,
				Priority: r.Priority, FairnessKey: r.FairnessKey, Count: r.Count, OldestReady: r.OldestReadyAt})
		}
		e.mu.Lock()
		groups = append(groups, e.waitingRunsLocked(ns)...)
		e.mu.Unlock()
	} else {
		e.mu.Lock()
		groups = e.waitingLocked(ns)
		e.mu.Unlock()
	}
	slices.SortFunc(groups, func(x, y WaitingGroup) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.TaskQueue, y.TaskQueue), cmp.Compare(x.Type, y.Type),
			cmp.Compare(x.Priority, y.Priority), cmp.Compare(x.FairnessKey, y.FairnessKey), cmp.Compare(x.HeldBy, y.HeldBy),
			cmp.Compare(x.ConcurrencyKey, y.ConcurrencyKey))
	})
	v := WaitingView{Groups: groups}
	if n := len(groups); n > MaxWaitingGroups {
		v.Groups, v.Truncated = groups[:MaxWaitingGroups], n-MaxWaitingGroups
	}
	return v, nil
}

// groupKey identifies one WaitingGroup while counting.
type groupKey struct {
	tq, kind, typ string
	priority      int
	fairness      string
	heldBy        WaitReason
	conc          string
}

// tally counts waiting items into groups.
type tally map[groupKey]*WaitingGroup

func (t tally) add(k groupKey, ready time.Time) { t.addN(k, 1, ready) }

// addN counts n items, the oldest of them ready at ready.
func (t tally) addN(k groupKey, n int, ready time.Time) {
	g := t[k]
	if g == nil {
		g = &WaitingGroup{TaskQueue: k.tq, Kind: k.kind, Type: k.typ, Priority: k.priority, FairnessKey: k.fairness,
			HeldBy: k.heldBy, ConcurrencyKey: k.conc}
		t[k] = g
	}
	g.Count += n
	if g.OldestReady.IsZero() || ready.Before(g.OldestReady) {
		g.OldestReady = ready
	}
}

func (t tally) groups() []WaitingGroup {
	out := make([]WaitingGroup, 0, len(t))
	for _, g := range t {
		out = append(out, *g)
	}
	return out
}

// waitingLocked counts a namespace's queued and held activities and its
// runs waiting for a workflow task.
func (e *Engine) waitingLocked(ns string) []WaitingGroup {
	t := tally{}
	for tr, p := range e.queues {
		if tr.Pool.Namespace != ns {
			continue
		}
		for _, q := range p.byPin {
			for i := range q.lanes {
				l := &q.lanes[i]
				count := func(f *flow) {
					for _, a := range f.items[f.head:] {
						if a != nil && a.queued == q {
							t.add(groupKey{tq: tr.Pool.TaskQueue, kind: WaitingActivities, typ: tr.ActivityType,
								priority: i + store.HighestPriority, fairness: a.rec.Flow.FairnessKey}, a.readyAt)
						}
					}
				}
				count(&l.def)
				for _, f := range l.keyed {
					count(f)
				}
			}
			for _, sf := range q.spill {
				if sf.n > 0 {
					t.addN(groupKey{tq: tr.Pool.TaskQueue, kind: WaitingActivities, typ: tr.ActivityType,
						priority: sf.id.lane + store.HighestPriority, fairness: sf.id.key}, sf.n, sf.oldest)
				}
			}
		}
	}
	for id, l := range e.limits {
		if id.ns != ns {
			continue
		}
		held := func(f *heldFIFO, holds func(*activity) bool, reason WaitReason) {
			for _, a := range f.items[f.head:] {
				if a != nil && e.open[a.key()] == a && holds(a) {
					t.add(groupKey{tq: a.rec.TaskQueue, kind: WaitingActivities, typ: a.rec.ActivityType,
						priority: store.EffectivePriority(a.rec.Priority), fairness: a.rec.Flow.FairnessKey, heldBy: reason,
						conc: a.rec.Flow.ConcurrencyKey}, a.readyAt)
				}
			}
		}
		for _, g := range l.keys {
			held(&g.held, func(a *activity) bool { return a.lim != nil && a.lim.heldConc == g }, WhyConcurrencyLimit)
		}
		rates := make([]*rateGroup, 0, len(l.perKey)+1)
		if l.rate != nil {
			rates = append(rates, l.rate)
		}
		for _, g := range l.perKey {
			rates = append(rates, g)
		}
		for _, g := range rates {
			held(&g.held, func(a *activity) bool { return a.lim != nil && a.lim.heldRate == g }, WhyRateLimited)
		}
	}
	return append(t.groups(), e.waitingRunsLocked(ns)...)
}

// waitingRunsLocked counts a namespace's runs waiting for a workflow task
// on this server.
func (e *Engine) waitingRunsLocked(ns string) []WaitingGroup {
	t := tally{}
	for tr, q := range e.wfQueues {
		if tr.Pool.Namespace != ns {
			continue
		}
		for i := range q.lanes {
			l := &q.lanes[i]
			count := func(f *wfFlow) {
				for _, r := range f.items[f.head:] {
					t.add(groupKey{tq: tr.Pool.TaskQueue, kind: WaitingWorkflowTasks, typ: tr.ActivityType,
						priority: i + store.HighestPriority, fairness: r.rec.Flow.FairnessKey}, r.queuedAt)
				}
			}
			count(&l.def)
			for _, f := range l.keyed {
				count(f)
			}
		}
	}
	return t.groups()
}
