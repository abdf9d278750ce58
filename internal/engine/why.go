package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// WaitReason names why an activity is not running.
type WaitReason string

// The reasons Why gives.
const (
	// WhyClosed: the activity is closed; nothing waits.
	WhyClosed WaitReason = "closed"
	// WhyRunning: an attempt runs on a worker.
	WhyRunning WaitReason = "running"
	// WhyDelayedStart: it was scheduled to start later.
	WhyDelayedStart WaitReason = "delayed_start"
	// WhyRetryBackoff: its last attempt failed and the retry's backoff has
	// not ended.
	WhyRetryBackoff WaitReason = "retry_backoff"
	// WhyNoWorker: no connected worker serves its namespace, task queue and
	// activity type.
	WhyNoWorker WaitReason = "no_worker"
	// WhyNodePin: workers of its triple are connected, but none on the node
	// it is pinned to.
	WhyNodePin WaitReason = "node_pin"
	// WhyPlacement: workers of its triple are connected, but none on the
	// nodes its namespace's pinned placement allows.
	WhyPlacement WaitReason = "placement"
	// WhySlotsBusy: eligible workers are connected, every slot of theirs is
	// taken (or they drain); Ahead activities wait before it.
	WhySlotsBusy WaitReason = "slots_busy"
	// WhyInFlightCap: its namespace has as many attempts running as its cap
	// (--max-in-flight-per-namespace) allows.
	WhyInFlightCap WaitReason = "namespace_in_flight_cap"
	// WhyInStore: in a cluster it waits in the store for a server with an
	// eligible free worker to claim it.
	WhyInStore WaitReason = "waiting_for_a_claim"
	// WhyBeingRecorded: its schedule is being made durable (a run: its
	// start, or in a cluster its admission under its workflow type's
	// concurrency limit is being asked of the store).
	WhyBeingRecorded WaitReason = "being_recorded"
	// WhyConcurrencyLimit: its concurrency key runs as many attempts as its
	// activity type's concurrency limit allows (ConcurrencyKey, Running,
	// Limit).
	WhyConcurrencyLimit WaitReason = "concurrency_limit"
	// WhyRateLimited: its activity type's rate limit (or its key's) allows
	// no start before Until.
	WhyRateLimited WaitReason = "rate_limited"
)

// Explanation says why an activity is not running, from the server's live
// state at the moment of the call.
type Explanation struct {
	State  store.ActivityState
	Reason WaitReason
	// Message says it in words, with the figures that matter.
	Message string
	// Until is when a delayed start or a retry backoff ends, or when a
	// rate limit allows the next start.
	Until time.Time
	// Ahead counts the activities queued before it in its queue, in
	// dispatch order; AheadOfOtherKeys counts those of them of another
	// fairness key, which go first because their key's turn comes first.
	Ahead, AheadOfOtherKeys int
	// Workers counts the connected workers of its triple, Eligible those
	// its node pin or placement allows, FreeSlots their free slots.
	Workers, Eligible, FreeSlots int
	// Nodes are the nodes the connected workers of its triple advertise.
	Nodes []string
	// WorkerID is the worker running it, for WhyRunning.
	WorkerID registry.WorkerID
	// ConcurrencyKey is its concurrency key, Running the attempts of that
	// key running now and Limit the key's limit, for WhyConcurrencyLimit.
	ConcurrencyKey string
	Running, Limit int
}

// Why explains why activity id is not running now.
func (e *Engine) Why(ctx context.Context, caller namespace.Identity, ns, id string) (Explanation, error) {
	if err := namespace.Authorize(caller, ns); err != nil {
		return Explanation{}, fmt.Errorf("why: %w", err)
	}
	e.mu.Lock()
	a := e.open[key{ns, id}]
	if a != nil {
		ex := e.explainLocked(a)
		e.mu.Unlock()
		return ex, nil
	}
	e.mu.Unlock()
	v, err := e.view(ctx, ns, id)
	if err != nil {
		return Explanation{}, fmt.Errorf("why: %w", err)
	}
	rec := v.Activity
	now := e.now()
	switch {
	case rec.State.Terminal():
		return Explanation{State: rec.State, Reason: WhyClosed, Message: fmt.Sprintf("the activity is %s; nothing waits", rec.State)}, nil
	case rec.State == store.StateRunning:
		return Explanation{State: rec.State, Reason: WhyRunning, Message: "an attempt runs on a worker of another server"}, nil
	case rec.ReadyAt.After(now):
		return delayed(rec, now), nil
	}
	if e.cl == nil {
		// Alone, it waits in the store behind its flow's window.
		e.mu.Lock()
		ex := e.explainLocked(&activity{rec: rec, readyAt: rec.ReadyAt})
		e.mu.Unlock()
		if ex.Reason == WhySlotsBusy || ex.Reason == WhyInFlightCap {
			ex.Message += "; it waits in the store behind the activities held in memory"
		}
		return ex, nil
	}
	if ex, ok, err := e.explainLimitInStore(ctx, rec, now); err != nil {
		return Explanation{}, fmt.Errorf("why: %w", err)
	} else if ok {
		return ex, nil
	}
	return Explanation{State: rec.State, Reason: WhyInStore,
		Message: "it waits in the store for a server of the cluster with a free eligible worker to claim it"}, nil
}

// delayed explains a delayed start or a retry backoff.
func delayed(rec store.Activity, now time.Time) Explanation {
	ex := Explanation{State: rec.State, Reason: WhyDelayedStart, Until: rec.ReadyAt}
	if rec.Attempt > 0 {
		ex.Reason = WhyRetryBackoff
		ex.Message = fmt.Sprintf("attempt %d failed; the next may start at %s (in %v)", rec.Attempt,
			rec.ReadyAt.Format(time.RFC3339), rec.ReadyAt.Sub(now).Round(time.Millisecond))
	} else {
		ex.Message = fmt.Sprintf("it was scheduled to start at %s (in %v)", rec.ReadyAt.Format(time.RFC3339),
			rec.ReadyAt.Sub(now).Round(time.Millisecond))
	}
	return ex
}

func (e *Engine) explainLocked(a *activity) Explanation {
	now := e.now()
	rec := a.rec
	switch {
	case a.creating != nil:
		return Explanation{State: rec.State, Reason: WhyBeingRecorded, Message: "its schedule is being made durable"}
	case a.closing || rec.State.Terminal():
		return Explanation{State: rec.State, Reason: WhyClosed, Message: "the activity is closing; nothing waits"}
	case rec.State == store.StateRunning && a.worker != nil:
		return Explanation{State: rec.State, Reason: WhyRunning, WorkerID: a.worker.ID(),
			Message: fmt.Sprintf("attempt %d runs on worker %d", rec.Attempt, a.worker.ID())}
	case e.cl != nil && a.queued == nil:
		return Explanation{State: rec.State, Reason: WhyInStore,
			Message: "it waits in the store for a server of the cluster with a free eligible worker to claim it"}
	case a.lim != nil && (a.lim.heldConc != nil || a.lim.heldRate != nil):
		return e.explainHeldLocked(a, now)
	case a.queued == nil && rec.ReadyAt.After(now):
		return delayed(rec, now)
	}
	t := tripleOf(&rec)
	ex := Explanation{State: rec.State}
	all := e.reg.Candidates(t, "")
	ex.Workers = len(all)
	nodes := map[string]bool{}
	for _, w := range all {
		if w.Node != "" {
			nodes[w.Node] = true
		}
	}
	for n := range nodes {
		ex.Nodes = append(ex.Nodes, n)
	}
	slices.Sort(ex.Nodes)
	if len(all) == 0 {
		ex.Reason = WhyNoWorker
		ex.Message = fmt.Sprintf("no connected worker serves namespace %q, task queue %q and activity type %q", t.Pool.Namespace,
			t.Pool.TaskQueue, t.ActivityType)
		return ex
	}
	m := matchFor(rec.Node, e.placementLocked(rec.Namespace))
	for _, w := range all {
		if len(m.Nodes) == 0 || m.Spill || slices.Contains(m.Nodes, w.Node) {
			ex.Eligible++
			if !w.Draining {
				ex.FreeSlots += max(w.Slots-w.SlotsInUse, 0)
			}
		}
	}
	if ex.Eligible == 0 {
		ex.Reason = WhyPlacement
		what := fmt.Sprintf("its namespace's placement %s", e.placementLocked(rec.Namespace))
		if rec.Node != "" {
			ex.Reason = WhyNodePin
			what = fmt.Sprintf("its node pin %q", rec.Node)
		}
		ex.Message = fmt.Sprintf("%d workers serve it, none on the nodes %s allows; connected nodes: [%s]", ex.Workers, what,
			strings.Join(ex.Nodes, ", "))
		return ex
	}
	if q := a.queued; q != nil {
		q.waiting(func(o *activity) bool {
			if o == a {
				return false
			}
			ex.Ahead++
			if o.rec.Flow.FairnessKey != rec.Flow.FairnessKey {
				ex.AheadOfOtherKeys++
			}
			return true
		})
	}
	if e.maxRunning > 0 && e.running[rec.Namespace] >= e.maxRunning {
		ex.Reason = WhyInFlightCap
		ex.Message = fmt.Sprintf("namespace %q runs %d attempts, its cap (--max-in-flight-per-namespace); %d wait before it%s",
			rec.Namespace, e.running[rec.Namespace], ex.Ahead, otherKeys(ex.AheadOfOtherKeys))
		return ex
	}
	ex.Reason = WhySlotsBusy
	ex.Message = fmt.Sprintf("%d eligible workers, %d free slots; %d activities wait before it in its queue%s", ex.Eligible,
		ex.FreeSlots, ex.Ahead, otherKeys(ex.AheadOfOtherKeys))
	return ex
}

// otherKeys says how many of the activities ahead belong to other fairness
// keys, when any do.
func otherKeys(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d of them of other fairness keys", n)
}
