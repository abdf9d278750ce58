package server

import (
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
)

// The cluster view as a caller granted only some namespaces sees it: the
// workers serving at least one of them, each listing only those; those
// namespaces; their pools; their workflow runs' starts and closes. Another
// tenant's namespace never appears, not even as the other half of a shared
// worker's set. A caller granted every namespace sees everything.

// scopeWorker returns w with only the namespaces caller may see, and false
// when it serves none of them.
func scopeWorker(caller namespace.Identity, w registry.WorkerInfo) (registry.WorkerInfo, bool) {
	if caller.All {
		return w, true
	}
	var nss []string
	for _, ns := range w.Namespaces {
		if caller.Allows(ns) {
			nss = append(nss, ns)
		}
	}
	w.Namespaces = nss
	return w, len(nss) > 0
}

func scopePools(caller namespace.Identity, pools []events.Pool) []events.Pool {
	out := make([]events.Pool, 0, len(pools))
	for _, p := range pools {
		if caller.Allows(p.Namespace) {
			out = append(out, p)
		}
	}
	return out
}

// scopeSnapshot returns the part of snap caller may see.
func scopeSnapshot(caller namespace.Identity, snap events.Snapshot) events.Snapshot {
	if caller.All {
		return snap
	}
	out := events.Snapshot{Seq: snap.Seq, Time: snap.Time, Pools: scopePools(caller, snap.Pools)}
	for _, w := range snap.Workers {
		if w, ok := scopeWorker(caller, w); ok {
			out.Workers = append(out.Workers, w)
		}
	}
	for _, ns := range snap.Namespaces {
		if caller.Allows(ns.Name) {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	return out
}

// scopeEvent returns the part of e caller may see, and false when nothing
// of it is the caller's (the subscriber then sees a gap in the sequence).
func scopeEvent(caller namespace.Identity, e events.Event) (events.Event, bool) {
	if caller.All {
		return e, true
	}
	if e.Worker != nil {
		w, ok := scopeWorker(caller, *e.Worker)
		e.Worker = &w
		return e, ok
	}
	if e.Namespace != nil {
		return e, caller.Allows(e.Namespace.Name)
	}
	if e.Run != nil {
		return e, caller.Allows(e.Run.Namespace)
	}
	if e.Fire != nil {
		return e, caller.Allows(e.Fire.Namespace)
	}
	if e.Pools != nil {
		e.Pools = scopePools(caller, e.Pools)
	}
	return e, true
}
