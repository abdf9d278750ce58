package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// pollEvery is how often the notice loop acts without a notice, and fullEvery
// how many of those polls pass between full re-reads: notices are the fast
// path, the polls make up for lost ones.
const (
	pollEvery = time.Second
	fullEvery = 5
)

// handleNotices acts on notices in order, merging a burst into one pass.
func (m *Membership) handleNotices(ctx context.Context) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	ticks := 0
	for {
		var (
			first store.Notice
			// reread: a periodic full re-read, not a reconnect. It
			// leaves work to the engine's own poll, which looks for
			// unannounced work every second without taking every free
			// slot from new work.
			reread bool
		)
		select {
		case <-ctx.Done():
			return
		case first = <-m.notices:
		case <-tick.C:
			ticks++
			first = store.Notice{Kind: store.NoticeMessage}
			reread = ticks%fullEvery == 0
		}
		var (
			// all: re-read everything; reconnected: notices may have
			// been lost, work included.
			all, reconnected, topology, messages bool
			namespaces                           = map[string]bool{}
			work                                 []registry.Triple
			anyWork                              bool
		)
		note := func(n store.Notice) {
			switch n.Kind {
			case store.NoticeWork:
				if n.Triples == nil {
					anyWork = true
				}
				work = append(work, noticeWork(n)...)
			case store.NoticeNamespace:
				namespaces[n.Name] = true
			case store.NoticeTopology:
				topology = true
				m.noteTopology(n.Name)
			case store.NoticeMessage:
				messages = true
			case store.NoticeReconnected:
				all, reconnected = true, true
			}
		}
		note(first)
	drain:
		for {
			select {
			case n := <-m.notices:
				note(n)
			default:
				break drain
			}
		}
		if m.missed.Swap(false) {
			all, reconnected = true, true
		}
		all = all || reread
		switch {
		case reconnected || anyWork:
			m.d.Engine.NewWork(nil)
		case len(work) > 0:
			m.d.Engine.NewWork(work)
		}
		if all || messages {
			m.receive(ctx)
		}
		if all {
			m.refreshNamespaces(ctx, nil)
		} else if len(namespaces) > 0 {
			m.refreshNamespaces(ctx, namespaces)
		}
		if all || topology {
			m.syncTopology(ctx)
		}
	}
}

// noticeWork is what a work notice asks the engine to claim: its triples,
// less, in a notice this server sent itself (Own), the activity triples:
// the engine marked those for a claim when it wrote or handed back their
// work, and that claim reads the store after the write, so it finds what
// the notice announces.
func noticeWork(n store.Notice) []registry.Triple {
	var out []registry.Triple
	for _, t := range n.Triples {
		if n.Own && store.IsActivityWork(t) {
			continue
		}
		out = append(out, registry.NewTriple(t[0], t[1], t[2]))
	}
	return out
}

// Topology notice payloads: "<server id>" (its workers changed),
// "<server id> lost <name>" (it was reaped) or "<server id> gone <worker>
// <reason>" (a worker left).
func topologyChanged(id store.ServerID) string { return strconv.FormatInt(int64(id), 10) }

func topologyGone(id store.ServerID, w registry.WorkerID, reason registry.Reason) string {
	return topologyChanged(id) + " gone " + strconv.FormatUint(uint64(w), 10) + " " + string(reason)
}

// noteTopology reads a topology payload.
func (m *Membership) noteTopology(p string) {
	f := strings.Fields(p)
	switch {
	case len(f) == 3 && f[1] == "lost":
		m.lostServers[f[2]] = true
	case len(f) == 4 && f[1] == "gone":
		if w, err := strconv.ParseUint(f[2], 10, 64); err == nil {
			m.goneReasons[registry.WorkerID(w)] = registry.Reason(f[3])
		}
	}
}

// syncTopology brings the bus's view of the other servers' workers up to
// date with the directory, publishing the difference as events.
func (m *Membership) syncTopology(ctx context.Context) {
	others, err := m.otherWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("read the worker directory", "err", err)
		}
		return
	}
	seen := make(map[registry.WorkerID]bool, len(others))
	for _, o := range others {
		info := o.Info
		seen[info.ID] = true
		old, known := m.remote[info.ID]
		m.remote[info.ID] = info
		switch {
		case !known:
			m.d.Bus.Publish(events.Event{Kind: events.WorkerConnected, Worker: &info})
			if info.Draining {
				m.d.Bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &info})
			}
		case info.Draining && !old.Draining:
			m.d.Bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &info})
		}
	}
	for id, info := range m.remote {
		if seen[id] {
			continue
		}
		delete(m.remote, id)
		reason := registry.ReasonDisconnect
		if r, ok := m.goneReasons[id]; ok {
			reason = r
		}
		if m.lostServers[info.Server] {
			reason = registry.ReasonServerLost
		}
		m.d.Bus.Publish(events.Event{Kind: events.WorkerDisconnected, Worker: &info, Reason: reason})
	}
	clear(m.goneReasons)
	clear(m.lostServers)
}

// refreshNamespaces re-reads namespaces another server created or changed
// (all of them when names is nil) into the minter, the engine and the bus.
func (m *Membership) refreshNamespaces(ctx context.Context, names map[string]bool) {
	var recs []store.Namespace
	if names == nil {
		all, err := m.d.Namespaces.ListNamespaces(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("read namespaces", "err", err)
			}
			return
		}
		recs = all
	} else {
		for n := range names {
			ns, err := m.d.Namespaces.GetNamespace(ctx, n)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
					m.log.Warn("read namespace", "namespace", n, "err", err)
				}
				continue
			}
			recs = append(recs, ns)
		}
	}
	limits, ok := m.readFlowLimits(ctx, names)
	for _, ns := range recs {
		m.d.Minter.Note(ns)
		m.d.Engine.NoteNamespace(ns)
		if ok {
			m.d.Engine.NoteFlowLimits(ns.Name, limits[ns.Name])
		}
		old, known := m.d.Bus.Namespace(ns.Name)
		switch {
		case !known:
			m.d.Bus.Publish(events.Event{Kind: events.NamespaceCreated, Namespace: &ns})
		case old.Placement.Normalize().String() != ns.Placement.Normalize().String():
			m.d.Bus.Publish(events.Event{Kind: events.PlacementChanged, Namespace: &ns})
		}
	}
}

// readFlowLimits reads the flow limits of the named namespaces (of all when
// names is nil), by namespace; ok is false when the store could not be read,
// so the limits held now are kept until the next refresh.
func (m *Membership) readFlowLimits(ctx context.Context, names map[string]bool) (map[string][]store.FlowLimit, bool) {
	out := map[string][]store.FlowLimit{}
	read := func(ns string) bool {
		ls, err := m.d.Namespaces.ListFlowLimits(ctx, ns)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("read flow limits", "namespace", ns, "err", err)
			}
			return false
		}
		for _, l := range ls {
			out[l.Namespace] = append(out[l.Namespace], l)
		}
		return true
	}
	if names == nil {
		return out, read("")
	}
	for n := range names {
		if !read(n) {
			return nil, false
		}
	}
	return out, true
}

// AnnounceNamespace tells the other servers that a namespace was created or
// its placement or flow limits changed. It does not wait for the database.
func (m *Membership) AnnounceNamespace(name string) {
	m.enqueue(func(ctx context.Context) error {
		return m.d.Store.PublishNotice(ctx, store.Notice{Kind: store.NoticeNamespace, Name: name})
	})
}
