// Package registry is aion's connected-worker registry: which workers are
// connected, which (namespace, task queue, activity type) triples each serves,
// and which one gets the next attempt.
//
// Selection is round-robin per triple, skips draining and full workers, honours
// node filters, and costs O(1) whatever the pool size: each triple keeps a ring
// of the workers that can take work now, and a worker leaves the ring when its
// slots fill or it drains, and rejoins when a slot frees.
package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aion-run/aion/internal/namespace"
)

// ErrInvalidSpec reports a registration that cannot be accepted as given; the
// wrapping error names the field and value.
var ErrInvalidSpec = errors.New("invalid worker registration")

// Admission is the namespace plane's say on a registration whose namespaces
// are already authorized: it mints or gates each namespace and applies
// placement admission. namespace.Minter implements it.
type Admission interface {
	AdmitWorker(ctx context.Context, namespaces []string, node string) error
}

// Hooks observe the registry. Every field may be nil. Hooks run outside the
// registry lock, one at a time, in the order the changes happened; they must
// not register or deregister workers themselves.
type Hooks struct {
	// Connected is called once per registered worker.
	Connected func(WorkerInfo)
	// Draining is called when a worker starts draining.
	Draining func(WorkerInfo)
	// Disconnected is called once per worker that leaves, with the reason.
	Disconnected func(WorkerInfo, Reason)
	// NamespaceWorkers is told the number of workers connected in a
	// namespace each time it changes (for a gauge).
	NamespaceWorkers func(namespace string, connected int)
}

// Options configure a Registry.
type Options struct {
	// Admission, when set, runs after authorization and before insertion on
	// every Accept. Without it Accept only authorizes.
	Admission Admission
	// Hooks observe registrations, drains and departures.
	Hooks Hooks
	// Server names this server in every WorkerInfo; empty outside a cluster.
	Server string
	// FirstID is the ID the first worker gets (then FirstID+1, …); 0 means
	// 1. Servers sharing a store start from disjoint blocks so that a worker
	// ID names one worker across the whole cluster.
	FirstID WorkerID
}

// Worker is one connected worker. Its registration fields never change; its
// load and drain state belong to the registry and are read through Info.
type Worker struct {
	id            WorkerID
	namespaces    []string
	taskQueue     string
	node          string
	activityTypes []string
	slots         int
	delivery      Delivery
	connectedAt   time.Time
	identity      string
	sdkVersion    string
	server        string
	capabilities  atomic.Uint32
	workflowTypes []string
	buildID       string
	// builds are the builds whose runs it advances: buildID first, then
	// the compatible ones.
	builds  []string
	wfSlots int

	// Guarded by Registry.mu.
	used     int
	wfUsed   int
	draining bool
	gone     bool
	links    []*link
	triples  []*triple
}

// ID returns the worker's id.
func (w *Worker) ID() WorkerID { return w.id }

// Node returns the worker's node label, or "" for none.
func (w *Worker) Node() string { return w.node }

// Delivery returns the transport leg that reaches the worker.
func (w *Worker) Delivery() Delivery { return w.delivery }

// Capabilities returns the intervention primitives the worker supports now.
func (w *Worker) Capabilities() Capabilities { return Capabilities(w.capabilities.Load()) }

// TaskQueue returns the task queue the worker serves.
func (w *Worker) TaskQueue() string { return w.taskQueue }

// Slots returns how many attempts the worker runs at once.
func (w *Worker) Slots() int { return w.slots }

// Namespaces calls fn for each namespace the worker serves, in order.
func (w *Worker) Namespaces(fn func(ns string)) {
	for _, ns := range w.namespaces {
		fn(ns)
	}
}

// Triples calls fn for each (namespace, task queue, activity type) the
// worker serves. It allocates nothing, so dispatch can walk it per release.
func (w *Worker) Triples(fn func(Triple)) {
	for _, ns := range w.namespaces {
		for _, typ := range w.activityTypes {
			fn(Triple{Pool: PoolAddress{Namespace: ns, TaskQueue: w.taskQueue}, ActivityType: typ})
		}
	}
}

// WorkflowTriples calls fn for each workflow triple the worker serves: its
// workflow types, at its build id and the compatible ones, in each of its
// namespaces.
func (w *Worker) WorkflowTriples(fn func(Triple)) {
	for _, ns := range w.namespaces {
		for _, typ := range w.workflowTypes {
			for _, b := range w.builds {
				fn(Triple{Pool: PoolAddress{Namespace: ns, TaskQueue: w.taskQueue}, ActivityType: typ, Kind: KindWorkflow, Build: b})
			}
		}
	}
}

// BuildID returns the build id of the worker's workflow code, or "".
func (w *Worker) BuildID() string { return w.buildID }

// Serves reports whether the worker is registered for namespace ns.
func (w *Worker) Serves(ns string) bool {
	_, ok := slices.BinarySearch(w.namespaces, ns)
	return ok
}

// triple holds the workers of one (namespace, task queue, activity type).
type triple struct {
	key     Triple
	members map[WorkerID]*Worker
	ready   ring
	byNode  map[string]*ring
	// nodeTurn rotates which listed node a multi-node match tries first.
	nodeTurn uint
	// listTurn rotates Candidates, independently of selection.
	listTurn uint
}

// waitList is the wake-up channel for callers blocked on one triple.
type waitList struct {
	ch      chan struct{}
	waiters int
}

// Registry is the set of connected workers. It is safe for concurrent use.
type Registry struct {
	admission Admission
	hooks     Hooks
	server    string

	mu      sync.Mutex
	nextID  WorkerID
	workers map[WorkerID]*Worker
	triples map[Triple]*triple
	waits   map[Triple]*waitList
	perNS   map[string]int
	// builds orders the build ids of each workflow type in a pool by when
	// the server first saw them, while any worker of the type is connected.
	builds    map[workflowKey]*buildOrder
	pending   []func() // hook calls queued under mu, run in order by flush
	hooksBusy sync.Mutex
}

// New returns an empty registry.
func New(opts Options) *Registry {
	return &Registry{
		admission: opts.Admission,
		hooks:     opts.Hooks,
		server:    opts.Server,
		nextID:    max(opts.FirstID, 1),
		workers:   make(map[WorkerID]*Worker),
		triples:   make(map[Triple]*triple),
		waits:     make(map[Triple]*waitList),
		perNS:     make(map[string]int),
		builds:    make(map[workflowKey]*buildOrder),
	}
}

// Accept authorizes a worker registration for every namespace in its set,
// runs admission (minting and placement) and then inserts it. A refusal at
// any step leaves nothing behind: no worker is inserted and, when
// authorization fails, no namespace is minted.
func (r *Registry) Accept(ctx context.Context, caller namespace.Identity, spec Spec) (*Registration, error) {
	set, err := namespace.AuthorizeWorker(caller, spec.Namespaces)
	if err != nil {
		return nil, fmt.Errorf("register worker: %w", err)
	}
	spec.Namespaces = set
	if err := validate(&spec); err != nil {
		return nil, fmt.Errorf("register worker: %w", err)
	}
	if r.admission != nil {
		if err := r.admission.AdmitWorker(ctx, set, spec.Node); err != nil {
			return nil, fmt.Errorf("register worker: %w", err)
		}
	}
	return r.Register(spec)
}

// Register inserts a worker whose namespaces the caller has already
// authorized and admitted. Most callers want Accept.
func (r *Registry) Register(spec Spec) (*Registration, error) {
	if err := validate(&spec); err != nil {
		return nil, fmt.Errorf("register worker: %w", err)
	}
	w := &Worker{
		namespaces:    spec.Namespaces,
		taskQueue:     spec.TaskQueue,
		node:          spec.Node,
		activityTypes: spec.ActivityTypes,
		slots:         spec.Slots,
		delivery:      spec.Delivery,
		connectedAt:   time.Now(),
		identity:      spec.Identity,
		sdkVersion:    spec.SDKVersion,
		server:        r.server,
		workflowTypes: spec.WorkflowTypes,
		buildID:       spec.BuildID,
		builds:        append([]string{spec.BuildID}, spec.CompatibleBuilds...),
		wfSlots:       spec.WorkflowSlots,
	}
	w.capabilities.Store(uint32(spec.Capabilities))

	r.mu.Lock()
	w.id = r.nextID
	r.nextID++
	r.workers[w.id] = w
	for _, ns := range w.namespaces {
		for _, typ := range w.activityTypes {
			r.join(w, NewTriple(ns, w.taskQueue, typ))
		}
		for _, typ := range w.workflowTypes {
			for _, b := range w.builds {
				r.join(w, NewWorkflowTriple(ns, w.taskQueue, typ, b))
			}
			r.noteBuildLocked(workflowKey{Pool(ns, w.taskQueue), typ}, w.buildID)
		}
		r.perNS[ns]++
	}
	r.wakeLocked(w)
	info := w.infoLocked()
	r.queue(func() {
		if r.hooks.Connected != nil {
			r.hooks.Connected(info)
		}
	})
	r.queueGauges(w.namespaces)
	r.mu.Unlock()
	r.flush()
	return &Registration{r: r, w: w}, nil
}

// join adds w to triple key, creating the triple and its node ring as needed.
func (r *Registry) join(w *Worker, key Triple) {
	t := r.triples[key]
	if t == nil {
		t = &triple{key: key, members: make(map[WorkerID]*Worker)}
		r.triples[key] = t
	}
	t.members[w.id] = w
	w.triples = append(w.triples, t)
	l := &link{w: w, ring: &t.ready, kind: key.Kind}
	t.ready.members++
	t.ready.insert(l)
	w.links = append(w.links, l)
	if w.node == "" {
		return
	}
	if t.byNode == nil {
		t.byNode = make(map[string]*ring)
	}
	nr := t.byNode[w.node]
	if nr == nil {
		nr = &ring{}
		t.byNode[w.node] = nr
	}
	nl := &link{w: w, ring: nr, kind: key.Kind}
	nr.members++
	nr.insert(nl)
	w.links = append(w.links, nl)
}

func validate(spec *Spec) error {
	if len(spec.Namespaces) == 0 {
		return fmt.Errorf("namespaces: at least one is required: %w", ErrInvalidSpec)
	}
	spec.Namespaces = sortedSet(spec.Namespaces)
	for _, ns := range spec.Namespaces {
		if ns == "" {
			return fmt.Errorf("namespaces: empty name: %w", ErrInvalidSpec)
		}
	}
	if len(spec.ActivityTypes) == 0 && len(spec.WorkflowTypes) == 0 {
		return fmt.Errorf("activity_types: at least one activity type or workflow type is required: %w", ErrInvalidSpec)
	}
	spec.ActivityTypes = sortedSet(spec.ActivityTypes)
	for _, typ := range spec.ActivityTypes {
		if typ == "" {
			return fmt.Errorf("activity_types: empty name: %w", ErrInvalidSpec)
		}
	}
	if spec.Slots < 1 {
		return fmt.Errorf("slots: %d, want at least 1: %w", spec.Slots, ErrInvalidSpec)
	}
	spec.WorkflowTypes = sortedSet(spec.WorkflowTypes)
	for _, typ := range spec.WorkflowTypes {
		if typ == "" {
			return fmt.Errorf("workflow_types: empty name: %w", ErrInvalidSpec)
		}
	}
	spec.CompatibleBuilds = sortedSet(spec.CompatibleBuilds)
	for _, b := range spec.CompatibleBuilds {
		if b == "" || b == spec.BuildID {
			return fmt.Errorf("compatible_build_ids: %q is empty or the worker's own build id: %w", b, ErrInvalidSpec)
		}
	}
	if len(spec.WorkflowTypes) > 0 {
		if spec.BuildID == "" {
			return fmt.Errorf("build_id: required with workflow_types %q: %w", spec.WorkflowTypes, ErrInvalidSpec)
		}
		if spec.WorkflowSlots < 1 {
			return fmt.Errorf("workflow_slots: %d, want at least 1: %w", spec.WorkflowSlots, ErrInvalidSpec)
		}
	}
	if spec.Delivery == nil {
		return fmt.Errorf("delivery: missing: %w", ErrInvalidSpec)
	}
	if spec.TaskQueue == "" {
		spec.TaskQueue = DefaultTaskQueue
	}
	return nil
}

func sortedSet(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// Deregister removes worker id from every triple it serves, with reason. It
// reports whether the worker was registered; removing a worker twice is a
// no-op the second time and emits nothing.
func (r *Registry) Deregister(id WorkerID, reason Reason) bool {
	return r.remove(id, reason)
}

// remove takes worker id out; an empty reason means drained for a draining
// worker and disconnect otherwise, decided under the same lock as the removal.
func (r *Registry) remove(id WorkerID, reason Reason) bool {
	r.mu.Lock()
	w := r.workers[id]
	if w == nil {
		r.mu.Unlock()
		return false
	}
	if reason == "" {
		reason = ReasonDisconnect
		if w.draining {
			reason = ReasonDrained
		}
	}
	delete(r.workers, id)
	w.gone = true
	for _, l := range w.links {
		l.ring.remove(l)
		l.ring.members--
	}
	for _, t := range w.triples {
		delete(t.members, id)
		if w.node != "" && t.byNode[w.node].members == 0 {
			delete(t.byNode, w.node)
		}
		if len(t.members) == 0 {
			delete(r.triples, t.key)
		}
	}
	for _, ns := range w.namespaces {
		for _, typ := range w.workflowTypes {
			r.forgetBuildsLocked(workflowKey{Pool(ns, w.taskQueue), typ})
		}
	}
	w.links, w.triples = nil, nil
	for _, ns := range w.namespaces {
		if r.perNS[ns]--; r.perNS[ns] == 0 {
			delete(r.perNS, ns)
		}
	}
	info := w.infoLocked()
	r.queue(func() {
		if r.hooks.Disconnected != nil {
			r.hooks.Disconnected(info, reason)
		}
	})
	r.queueGauges(w.namespaces)
	r.mu.Unlock()
	r.flush()
	return true
}

// Select picks the next eligible worker of triple t that matches m and takes
// one of its slots; the caller must Release it when the attempt ends. It
// reports false when no worker can take work now. Select never allocates.
func (r *Registry) Select(t Triple, m Match) (*Worker, bool) {
	r.mu.Lock()
	w := r.selectLocked(t, m)
	r.mu.Unlock()
	return w, w != nil
}

func (r *Registry) selectLocked(key Triple, m Match) *Worker {
	t := r.triples[key]
	if t == nil {
		return nil
	}
	w := t.pick(m)
	if w == nil {
		return nil
	}
	w.takeLocked(key.Kind)
	return w
}

// takeLocked takes one slot of kind; a worker whose slots of that kind are
// all taken leaves the rings of that kind.
func (w *Worker) takeLocked(kind TaskKind) {
	if kind == KindWorkflow {
		w.wfUsed++
		if w.wfUsed >= w.wfSlots {
			w.unlink(KindWorkflow)
		}
		return
	}
	w.used++
	if w.used >= w.slots {
		w.unlink(KindActivity)
	}
}

// Take takes a slot of kind on worker w itself, bypassing round-robin: a
// workflow task goes back to the worker that holds its run in memory. It
// reports false when w has left, is draining or has no free slot of kind.
func (r *Registry) Take(w *Worker, kind TaskKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.gone || w.draining {
		return false
	}
	if kind == KindWorkflow {
		if w.wfUsed >= w.wfSlots {
			return false
		}
	} else if w.used >= w.slots {
		return false
	}
	w.takeLocked(kind)
	return true
}

// pick returns the next worker matching m without taking a slot.
func (t *triple) pick(m Match) *Worker {
	if len(m.Nodes) == 0 {
		return t.ready.next()
	}
	n := uint(len(m.Nodes))
	start := t.nodeTurn
	t.nodeTurn++
	for i := range n {
		if nr := t.byNode[m.Nodes[(start+i)%n]]; nr != nil {
			if w := nr.next(); w != nil {
				return w
			}
		}
	}
	if m.Spill {
		return t.ready.next()
	}
	return nil
}

func (w *Worker) unlinkAll() {
	for _, l := range w.links {
		l.ring.remove(l)
	}
}

// unlink takes w out of the rings of one kind.
func (w *Worker) unlink(kind TaskKind) {
	for _, l := range w.links {
		if l.kind == kind {
			l.ring.remove(l)
		}
	}
}

// link puts w back in the rings of one kind.
func (w *Worker) link(kind TaskKind) {
	for _, l := range w.links {
		if l.kind == kind {
			l.ring.insert(l)
		}
	}
}

// Release returns an activity slot taken by Select. A worker that was full
// becomes selectable again and wakes callers waiting on its triples.
// Releasing a worker that has since left is allowed and does nothing else.
func (r *Registry) Release(w *Worker) { r.ReleaseKind(w, KindActivity) }

// ReleaseKind returns a slot of kind taken by Select or Take.
func (r *Registry) ReleaseKind(w *Worker, kind TaskKind) {
	r.mu.Lock()
	used, slots := &w.used, w.slots
	if kind == KindWorkflow {
		used, slots = &w.wfUsed, w.wfSlots
	}
	if *used > 0 {
		*used--
	}
	if !w.gone && !w.draining && *used == slots-1 {
		w.link(kind)
		r.wakeLocked(w)
	}
	r.mu.Unlock()
}

// Await is Select that blocks until a worker can take work or ctx ends. It
// cannot miss a wake-up: the check and the wait are registered under one lock,
// and both a registration and a freed slot wake the triples they touch.
func (r *Registry) Await(ctx context.Context, t Triple, m Match) (*Worker, error) {
	for {
		r.mu.Lock()
		if w := r.selectLocked(t, m); w != nil {
			r.mu.Unlock()
			return w, nil
		}
		wl := r.waits[t]
		if wl == nil {
			wl = &waitList{ch: make(chan struct{})}
			r.waits[t] = wl
		}
		wl.waiters++
		r.mu.Unlock()

		select {
		case <-wl.ch:
		case <-ctx.Done():
			r.mu.Lock()
			// The list may already have been woken and replaced; only the
			// live one is ours to tidy.
			if wl.waiters--; wl.waiters == 0 && r.waits[t] == wl {
				delete(r.waits, t)
			}
			r.mu.Unlock()
			return nil, fmt.Errorf("await worker for %s: %w", t, ctx.Err())
		}
	}
}

// wakeLocked wakes every caller waiting on a triple w serves.
func (r *Registry) wakeLocked(w *Worker) {
	if len(r.waits) == 0 {
		return
	}
	for _, t := range w.triples {
		if wl := r.waits[t.key]; wl != nil {
			close(wl.ch)
			delete(r.waits, t.key)
		}
	}
}

// Drain stops new work for worker id and asks it, through its delivery, to
// finish and leave. The worker stays registered until it leaves. It reports
// whether the worker was registered.
func (r *Registry) Drain(id WorkerID) bool {
	r.mu.Lock()
	w := r.workers[id]
	if w != nil {
		r.drainLocked(w)
	}
	r.mu.Unlock()
	r.flush()
	return w != nil
}

// DrainAll drains every connected worker and returns how many were asked.
func (r *Registry) DrainAll() int {
	r.mu.Lock()
	n := 0
	for _, w := range r.workers {
		if !w.draining {
			r.drainLocked(w)
			n++
		}
	}
	r.mu.Unlock()
	r.flush()
	return n
}

func (r *Registry) drainLocked(w *Worker) {
	if w.draining {
		return
	}
	w.draining = true
	w.unlinkAll()
	info := w.infoLocked()
	r.queue(func() {
		if r.hooks.Draining != nil {
			r.hooks.Draining(info)
		}
		w.delivery.RequestDrain()
	})
}

// SetCapabilities replaces the intervention primitives a live worker
// supports. It reports false when the worker is not registered.
func (r *Registry) SetCapabilities(id WorkerID, cs Capabilities) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return false
	}
	w.capabilities.Store(uint32(cs))
	return true
}

// Lookup returns the current state of worker id.
func (r *Registry) Lookup(id WorkerID) (WorkerInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return WorkerInfo{}, false
	}
	return w.infoLocked(), true
}

// IsRegistered reports whether worker id is connected.
func (r *Registry) IsRegistered(id WorkerID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers[id] != nil
}

// Workers returns every connected worker, ordered by id.
func (r *Registry) Workers() []WorkerInfo {
	r.mu.Lock()
	out := make([]WorkerInfo, 0, len(r.workers))
	for _, w := range r.workers {
		out = append(out, w.infoLocked())
	}
	r.mu.Unlock()
	slices.SortFunc(out, byID)
	return out
}

// Triples lists every activity triple at least one connected worker serves.
func (r *Registry) Triples() []Triple {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Triple, 0, len(r.triples))
	for t := range r.triples {
		if t.Kind == KindActivity {
			out = append(out, t)
		}
	}
	return out
}

// Candidates lists every worker registered for triple t on node (any node
// when node is ""), full or draining ones included, ordered by id and rotated
// so that successive calls start one worker further on. It is the listing
// form for tooling; dispatch uses Select.
func (r *Registry) Candidates(t Triple, node string) []WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.triples[t]
	if tr == nil {
		return nil
	}
	var out []WorkerInfo
	for _, w := range tr.members {
		if node == "" || w.node == node {
			out = append(out, w.infoLocked())
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, byID)
	start := int(tr.listTurn % uint(len(out)))
	tr.listTurn++
	return append(out[start:], out[:start]...)
}

// Census counts what the registry holds.
func (r *Registry) Census() Census {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Census{
		Workers:    len(r.workers),
		Triples:    len(r.triples),
		Waiters:    len(r.waits),
		Namespaces: len(r.perNS),
		Builds:     len(r.builds),
	}
	for _, t := range r.triples {
		c.Rings += 1 + len(t.byNode)
	}
	return c
}

func (w *Worker) infoLocked() WorkerInfo {
	return WorkerInfo{
		ID:            w.id,
		Namespaces:    slices.Clone(w.namespaces),
		TaskQueue:     w.taskQueue,
		Node:          w.node,
		ActivityTypes: slices.Clone(w.activityTypes),
		Slots:         w.slots,
		SlotsInUse:    w.used,

		WorkflowTypes:      slices.Clone(w.workflowTypes),
		BuildID:            w.buildID,
		CompatibleBuilds:   slices.Clone(w.builds[1:]),
		WorkflowSlots:      w.wfSlots,
		WorkflowSlotsInUse: w.wfUsed,

		Draining:     w.draining,
		Capabilities: w.Capabilities(),
		Transport:    w.delivery.Transport(),
		ConnectedAt:  w.connectedAt,
		Identity:     w.identity,
		SDKVersion:   w.sdkVersion,
		Server:       w.server,
	}
}

func byID(a, b WorkerInfo) int { return cmp.Compare(a.ID, b.ID) }

// queue schedules a hook call; r.mu must be held so calls keep change order.
func (r *Registry) queue(f func()) { r.pending = append(r.pending, f) }

// queueGauges schedules a gauge update for each namespace in names.
func (r *Registry) queueGauges(names []string) {
	if r.hooks.NamespaceWorkers == nil {
		return
	}
	for _, ns := range names {
		n := r.perNS[ns]
		r.queue(func() { r.hooks.NamespaceWorkers(ns, n) })
	}
}

// flush runs queued hook calls outside r.mu, one caller at a time, in order.
func (r *Registry) flush() {
	r.hooksBusy.Lock()
	defer r.hooksBusy.Unlock()
	r.mu.Lock()
	calls := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, f := range calls {
		f()
	}
}

// Registration is the token a worker stream holds while it is registered.
// Closing it deregisters the worker exactly once.
type Registration struct {
	r *Registry
	w *Worker
}

// ID returns the registered worker's id.
func (g *Registration) ID() WorkerID { return g.w.id }

// Worker returns the registered worker.
func (g *Registration) Worker() *Worker { return g.w }

// Close deregisters the worker with reason drained if it was draining and
// disconnect otherwise. It is safe to call more than once and after the
// worker was removed some other way; only the first removal counts.
func (g *Registration) Close() error {
	g.r.remove(g.w.id, "")
	return nil
}

// Leave deregisters the worker with an explicit reason, once.
func (g *Registration) Leave(reason Reason) bool {
	return g.r.Deregister(g.w.id, reason)
}

// Match says which nodes a selection may use.
type Match struct {
	// Nodes, when not empty, restricts selection to workers on these nodes.
	Nodes []string
	// Spill, with Nodes, falls back to any worker of the triple when none on
	// Nodes can take work (prefer placement).
	Spill bool
}

// AnyNode matches every worker of the triple.
func AnyNode() Match { return Match{} }

// OnNodes matches only workers on one of nodes (a node pin or pinned placement).
func OnNodes(nodes ...string) Match { return Match{Nodes: nodes} }

// PreferNodes tries workers on nodes first, then any worker (prefer placement).
func PreferNodes(nodes ...string) Match { return Match{Nodes: nodes, Spill: true} }
