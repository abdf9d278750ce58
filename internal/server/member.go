package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/proto"
)

// workerIDBlock is how many worker IDs each server start reserves: a server
// numbers its workers from its member ID times this, so a worker ID names one
// worker across the cluster and across restarts.
const workerIDBlock = 1_000_000_000

// Message kinds between servers.
const (
	msgCancel    = "cancel"
	msgDrain     = "drain"
	msgIntervene = "intervene"
	msgReply     = "reply"
)

// member is this server's part in a cluster: its lease, the notices and
// messages from the other servers, and the directory of its workers that
// the others read.
type member struct {
	s     *Server
	cl    store.Cluster
	self  store.Member
	lease time.Duration
	// joinSent is when the join was sent: the lease runs from no earlier.
	joinSent time.Time

	notices chan store.Notice
	// missed is set when the notice buffer overflowed: everything is
	// re-read on the next pass.
	missed atomic.Bool

	callsMu  sync.Mutex
	calls    map[int64]chan store.Message
	nextCall atomic.Int64

	// remote holds the workers of the other servers as the bus last heard
	// of them; only the notice loop touches it.
	remote map[registry.WorkerID]registry.WorkerInfo
	// lostServers names the members reaped since the last topology pass:
	// their workers leave with reason server_lost.
	lostServers map[string]bool
	// goneReasons carries why a remote worker left, from its server's notice.
	goneReasons map[registry.WorkerID]registry.Reason

	dirMu    sync.Mutex
	dirQueue []func(context.Context) error
	dirWake  chan struct{}
	// published holds the slot usage last written per local worker.
	published map[registry.WorkerID]int
}

// joinCluster records this server as a member: when a previous server of the
// same name has not been reaped yet, it waits for that lease to end.
func joinCluster(ctx context.Context, s *Server, cl store.Cluster, name, addr string, lease time.Duration) (*member, error) {
	deadline := time.Now().Add(lease + lease/2)
	for {
		sent := time.Now()
		m, err := cl.Join(ctx, name, addr, lease)
		if err == nil {
			return &member{s: s, cl: cl, self: m, lease: lease, joinSent: sent,
				notices:     make(chan store.Notice, 4096),
				calls:       make(map[int64]chan store.Message),
				remote:      make(map[registry.WorkerID]registry.WorkerInfo),
				lostServers: make(map[string]bool),
				goneReasons: make(map[registry.WorkerID]registry.Reason),
				dirWake:     make(chan struct{}, 1),
				published:   make(map[registry.WorkerID]int),
			}, nil
		}
		if !errors.Is(err, store.ErrNameTaken) || time.Now().After(deadline) {
			return nil, fmt.Errorf("%w; give each server its own --server-name", err)
		}
		s.log.Warn("another server holds this name; waiting for its lease to end", "server_name", name, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lease / 4):
		}
		if _, err := cl.Reap(ctx); err != nil {
			s.log.Warn("reap expired servers", "err", err)
		}
	}
}

// start runs the member's loops until ctx ends. fail is told when the lease
// is lost, after which this server must stop.
func (m *member) start(ctx context.Context, wg *sync.WaitGroup, fail func(error)) {
	wg.Add(5)
	go func() { defer wg.Done(); m.renew(ctx, fail) }()
	go func() { defer wg.Done(); m.reap(ctx) }()
	go func() {
		defer wg.Done()
		_ = m.cl.Listen(ctx, m.self.ID, func(n store.Notice) {
			select {
			case m.notices <- n:
			default:
				m.missed.Store(true)
			}
		})
	}()
	go func() { defer wg.Done(); m.handleNotices(ctx) }()
	go func() { defer wg.Done(); m.writeDirectory(ctx) }()
	m.notices <- store.Notice{Kind: store.NoticeReconnected} // first pass: read what exists
}

// renew extends the lease four times per lease period. A lease another
// server reaped, or one not renewed for three quarters of a lease period,
// ends this server: it stops before the others may reap it and retry its
// running attempts. The lease is counted from when a renewal was sent, which
// is never later than when the database extended it.
func (m *member) renew(ctx context.Context, fail func(error)) {
	t := time.NewTicker(m.lease / 8) // fine enough to stop close to the deadline
	defer t.Stop()
	last := m.joinSent // the last renewal that succeeded, as sent
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		if !failing && sent.Sub(last) < m.lease/4 {
			continue
		}
		deadline := last.Add(m.lease * 3 / 4)
		callEnd := sent.Add(m.lease / 4)
		if deadline.Before(callEnd) {
			callEnd = deadline
		}
		rctx, cancel := context.WithDeadline(ctx, callEnd)
		err := m.cl.Renew(rctx, m.self.ID, m.lease)
		cancel()
		switch {
		case err == nil:
			last, failing = sent, false
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrLeaseLost) || !time.Now().Before(deadline):
			fail(fmt.Errorf("cluster membership of server %q (%d) ended: %w", m.self.Name, m.self.ID, err))
			return
		default:
			if !failing { // once per outage; the deadline decides the rest
				m.s.log.Warn("renew cluster lease failed; retrying", "err", err,
					"stop_in", time.Until(deadline).Round(time.Millisecond))
			}
			failing = true
		}
	}
}

// reap removes servers whose lease ran out, twice per lease period.
func (m *member) reap(ctx context.Context) {
	t := time.NewTicker(max(m.lease/2, 100*time.Millisecond))
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, m.lease)
		reaped, err := m.cl.Reap(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !failing {
				m.s.log.Warn("reap expired servers failed; retrying", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		for _, r := range reaped {
			m.s.log.Warn("server lost: its lease ran out", "server_name", r.Member.Name, "server_id", r.Member.ID,
				"requeued_attempts", r.Requeued, "canceled", r.Canceled, "workers", len(r.Workers))
		}
	}
}

// handleNotices acts on notices in order, merging a burst into one pass.
func (m *member) handleNotices(ctx context.Context) {
	// Notices are the fast path; these polls make up for lost ones.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ticks := 0
	for {
		var first store.Notice
		select {
		case <-ctx.Done():
			return
		case first = <-m.notices:
		case <-tick.C:
			ticks++
			first = store.Notice{Kind: store.NoticeMessage}
			if ticks%5 == 0 {
				first = store.Notice{Kind: store.NoticeReconnected}
			}
		}
		var (
			all, topology, messages bool
			namespaces              = map[string]bool{}
			work                    []registry.Triple
			anyWork                 bool
		)
		note := func(n store.Notice) {
			switch n.Kind {
			case store.NoticeWork:
				if n.Triples == nil {
					anyWork = true
				}
				for _, t := range n.Triples {
					work = append(work, registry.NewTriple(t[0], t[1], t[2]))
				}
			case store.NoticeNamespace:
				namespaces[n.Name] = true
			case store.NoticeTopology:
				topology = true
				m.noteTopology(n.Name)
			case store.NoticeMessage:
				messages = true
			case store.NoticeReconnected:
				all = true
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
			all = true
		}
		switch {
		case all || anyWork:
			m.s.eng.NewWork(nil)
		case len(work) > 0:
			m.s.eng.NewWork(work)
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

// noteTopology reads a topology payload: "<server>", "<server> lost <name>"
// or "<server> gone <worker> <reason>".
func (m *member) noteTopology(p string) {
	f := strings.Fields(p)
	if len(f) == 0 {
		return
	}
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
func (m *member) syncTopology(ctx context.Context) {
	others, err := m.otherWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.s.log.Warn("read the worker directory", "err", err)
		}
		return
	}
	seen := make(map[registry.WorkerID]bool, len(others))
	for _, o := range others {
		info := o.info
		seen[info.ID] = true
		old, known := m.remote[info.ID]
		m.remote[info.ID] = info
		switch {
		case !known:
			m.s.bus.Publish(events.Event{Kind: events.WorkerConnected, Worker: &info})
			if info.Draining {
				m.s.bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &info})
			}
		case info.Draining && !old.Draining:
			m.s.bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &info})
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
		m.s.bus.Publish(events.Event{Kind: events.WorkerDisconnected, Worker: &info, Reason: reason})
	}
	clear(m.goneReasons)
	clear(m.lostServers)
}

// refreshNamespaces re-reads namespaces another server created or changed
// (all of them when names is nil) into the minter, the engine and the bus.
func (m *member) refreshNamespaces(ctx context.Context, names map[string]bool) {
	var recs []store.Namespace
	if names == nil {
		all, err := m.s.st.ListNamespaces(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.s.log.Warn("read namespaces", "err", err)
			}
			return
		}
		recs = all
	} else {
		for n := range names {
			ns, err := m.s.st.GetNamespace(ctx, n)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, store.ErrNotFound) {
					m.s.log.Warn("read namespace", "namespace", n, "err", err)
				}
				continue
			}
			recs = append(recs, ns)
		}
	}
	for _, ns := range recs {
		m.s.minter.Note(ns)
		m.s.eng.NoteNamespace(ns)
		old, known := m.s.bus.Namespace(ns.Name)
		switch {
		case !known:
			m.s.bus.Publish(namespaceEvent(events.NamespaceCreated, ns))
		case old.Placement.Normalize().String() != ns.Placement.Normalize().String():
			m.s.bus.Publish(namespaceEvent(events.PlacementChanged, ns))
		}
	}
}

// announceNamespace tells the other servers a namespace was created or its
// placement changed.
func (m *member) announceNamespace(name string) {
	m.enqueue(func(ctx context.Context) error {
		return m.cl.Announce(ctx, store.Notice{Kind: store.NoticeNamespace, Name: name})
	})
}

// Worker directory: the hooks queue writes that one goroutine applies in
// order, so the hooks never wait on the database.

func (m *member) enqueue(f func(context.Context) error) {
	m.dirMu.Lock()
	m.dirQueue = append(m.dirQueue, f)
	m.dirMu.Unlock()
	select {
	case m.dirWake <- struct{}{}:
	default:
	}
}

func (m *member) putWorker(w registry.WorkerInfo) {
	info, err := json.Marshal(w)
	if err != nil {
		m.s.log.Error("encode worker record", "worker", w.ID, "err", err)
		return
	}
	m.enqueue(func(ctx context.Context) error {
		if err := m.cl.PutWorker(ctx, store.WorkerRecord{ID: uint64(w.ID), Server: m.self.ID, Info: info}); err != nil {
			return err
		}
		return m.cl.Announce(ctx, store.Notice{Kind: store.NoticeTopology, Name: strconv.FormatInt(int64(m.self.ID), 10)})
	})
}

func (m *member) workerLeft(w registry.WorkerInfo, reason registry.Reason) {
	m.enqueue(func(ctx context.Context) error {
		if err := m.cl.DeleteWorker(ctx, uint64(w.ID)); err != nil {
			return err
		}
		return m.cl.Announce(ctx, store.Notice{Kind: store.NoticeTopology,
			Name: fmt.Sprintf("%d gone %d %s", m.self.ID, w.ID, reason)})
	})
}

// writeDirectory applies queued directory writes in order, and every
// second republishes local workers whose slot usage changed.
func (m *member) writeDirectory(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.dirWake:
		case <-t.C:
			m.publishUsage()
		}
		m.dirMu.Lock()
		q := m.dirQueue
		m.dirQueue = nil
		m.dirMu.Unlock()
		for _, f := range q {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				m.s.log.Warn("update the worker directory", "err", err)
			}
		}
	}
}

func (m *member) publishUsage() {
	live := map[registry.WorkerID]bool{}
	for _, w := range m.s.reg.Workers() {
		live[w.ID] = true
		if used, ok := m.published[w.ID]; ok && used == w.SlotsInUse {
			continue
		}
		m.published[w.ID] = w.SlotsInUse
		info, err := json.Marshal(w)
		if err != nil {
			continue
		}
		m.enqueue(func(ctx context.Context) error {
			if !m.s.reg.IsRegistered(w.ID) {
				return nil // it left meanwhile; its removal is queued before this
			}
			return m.cl.PutWorker(ctx, store.WorkerRecord{ID: uint64(w.ID), Server: m.self.ID, Info: info})
		})
	}
	for id := range m.published {
		if !live[id] {
			delete(m.published, id)
		}
	}
}

// otherWorker is a worker connected to another server of the cluster.
type otherWorker struct {
	server store.ServerID
	info   registry.WorkerInfo
}

// otherWorkers reads the directory's workers of the other servers; an
// unreadable record is logged and left out.
func (m *member) otherWorkers(ctx context.Context) ([]otherWorker, error) {
	recs, err := m.cl.Workers(ctx)
	if err != nil {
		return nil, err
	}
	var out []otherWorker
	for _, r := range recs {
		if r.Server == m.self.ID {
			continue
		}
		o := otherWorker{server: r.Server}
		if err := json.Unmarshal(r.Info, &o.info); err != nil {
			m.s.log.Warn("unreadable worker record", "worker", r.ID, "err", err)
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// remoteWorkers lists the workers connected to the other servers.
func (m *member) remoteWorkers(ctx context.Context) ([]registry.WorkerInfo, error) {
	others, err := m.otherWorkers(ctx)
	out := make([]registry.WorkerInfo, len(others))
	for i, o := range others {
		out[i] = o.info
	}
	return out, err
}

// serverOfWorker finds the server a remote worker is connected to.
func (m *member) serverOfWorker(ctx context.Context, id registry.WorkerID) (store.ServerID, registry.WorkerInfo, bool, error) {
	others, err := m.otherWorkers(ctx)
	for _, o := range others {
		if o.info.ID == id {
			return o.server, o.info, true, nil
		}
	}
	return 0, registry.WorkerInfo{}, false, err
}

// Messages between servers.

// call sends a request to another server and waits for its reply.
func (m *member) call(ctx context.Context, to store.ServerID, kind string, body []byte) ([]byte, error) {
	id := m.nextCall.Add(1)
	ch := make(chan store.Message, 1)
	m.callsMu.Lock()
	m.calls[id] = ch
	m.callsMu.Unlock()
	defer func() {
		m.callsMu.Lock()
		delete(m.calls, id)
		m.callsMu.Unlock()
	}()
	if _, err := m.cl.Send(ctx, to, store.Message{From: m.self.ID, Kind: kind, Body: body, Call: id}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case r := <-ch:
		if msg, ok := strings.CutPrefix(string(r.Body), "error:"); ok {
			return nil, errors.New(msg)
		}
		return r.Body, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("server %d did not answer %s: %w", to, kind, ctx.Err())
	}
}

// receive takes this server's messages and handles each.
func (m *member) receive(ctx context.Context) {
	msgs, err := m.cl.Receive(ctx, m.self.ID)
	if err != nil {
		if ctx.Err() == nil {
			m.s.log.Warn("receive messages", "err", err)
		}
		return
	}
	for _, msg := range msgs {
		if msg.Kind == msgReply {
			m.callsMu.Lock()
			ch := m.calls[msg.Call]
			m.callsMu.Unlock()
			if ch != nil {
				ch <- msg
			}
			continue
		}
		body, err := m.handle(ctx, msg)
		if msg.Call == 0 {
			continue
		}
		if err != nil {
			body = []byte("error:" + err.Error())
		}
		reply := store.Message{From: m.self.ID, Kind: msgReply, Body: body, Call: msg.Call}
		if _, err := m.cl.Send(ctx, msg.From, reply); err != nil && ctx.Err() == nil {
			m.s.log.Warn("reply to server", "server_id", msg.From, "err", err)
		}
	}
}

// handle serves one request from another server, which has already
// authorized its caller.
func (m *member) handle(ctx context.Context, msg store.Message) ([]byte, error) {
	switch msg.Kind {
	case msgCancel:
		f := strings.SplitN(string(msg.Body), "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("malformed cancel request %q: want namespace, id and reason separated by tabs", msg.Body)
		}
		m.s.eng.CancelOwned(f[0], f[1], f[2])
		return nil, nil
	case msgDrain:
		id, err := strconv.ParseUint(string(msg.Body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed drain request %q", msg.Body)
		}
		if !m.s.reg.Drain(registry.WorkerID(id)) {
			return nil, fmt.Errorf("worker %d is not connected", id)
		}
		info, _ := m.s.reg.Lookup(registry.WorkerID(id))
		return json.Marshal(info)
	case msgIntervene:
		var r aionv1.InterveneRequest
		if err := proto.Unmarshal(msg.Body, &r); err != nil {
			return nil, fmt.Errorf("malformed intervene request: %w", err)
		}
		out, err := m.s.deliverIntervention(&r)
		if err != nil {
			return nil, err
		}
		return proto.Marshal(out)
	}
	return nil, fmt.Errorf("unknown request %q", msg.Kind)
}

// forwardCancel asks the owner of a running activity to cancel it.
func (m *member) forwardCancel(ctx context.Context, owner store.ServerID, ns, id, reason string) {
	body := []byte(ns + "\t" + id + "\t" + reason)
	if _, err := m.cl.Send(ctx, owner, store.Message{From: m.self.ID, Kind: msgCancel, Body: body}); err != nil && ctx.Err() == nil {
		m.s.log.Warn("forward cancel", "server_id", owner, "namespace", ns, "activity", id, "err", err)
	}
}
