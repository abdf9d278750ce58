// Package events is the cluster event bus: every topology change (a worker
// connecting, draining or leaving, a namespace created, a placement changed)
// and a periodic pool-stats sample becomes an Event with a sequence number.
//
// The bus keeps the topology those events describe, so a subscriber gets a
// snapshot and the deltas after it from one lock: the snapshot as of sequence
// N is followed by exactly the events N+1, N+2, … and nothing is seen twice
// or missed. A subscriber that falls behind is dropped with ErrSlow; it never
// slows a publisher.
package events

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// ErrSlow ends a subscription whose buffer filled: the subscriber did not
// keep up and must subscribe again (getting a fresh snapshot).
var ErrSlow = errors.New("subscriber too slow: event buffer full")

// ErrClosed ends every subscription when the bus closes.
var ErrClosed = errors.New("event bus closed")

// Kind names what an event says happened.
type Kind string

// The event kinds.
const (
	WorkerConnected    Kind = "worker_connected"
	WorkerDraining     Kind = "worker_draining"
	WorkerDisconnected Kind = "worker_disconnected"
	NamespaceCreated   Kind = "namespace_created"
	PlacementChanged   Kind = "placement_changed"
	PoolStatsUpdated   Kind = "pool_stats"
)

// Pool is a sample of one (namespace, task queue) pool.
type Pool struct {
	Namespace string `json:"namespace"`
	TaskQueue string `json:"task_queue"`
	// Backlog is how many activities wait for a worker.
	Backlog int `json:"backlog"`
	// OldestAge is how long the oldest of them has waited.
	OldestAge time.Duration `json:"oldest_age_ns"`
	Workers   int           `json:"workers"`
	SlotsFree int           `json:"slots_free"`
}

// Event is one change, numbered by the bus.
type Event struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Worker is set for the worker kinds.
	Worker *registry.WorkerInfo `json:"worker,omitempty"`
	// Reason is why a worker disconnected.
	Reason registry.Reason `json:"reason,omitempty"`
	// Namespace is set for namespace_created and placement_changed.
	Namespace *store.Namespace `json:"namespace,omitempty"`
	Pools     []Pool           `json:"pools,omitempty"`
}

// Snapshot is the topology as of event Seq.
type Snapshot struct {
	Seq        uint64                `json:"seq"`
	Time       time.Time             `json:"time"`
	Workers    []registry.WorkerInfo `json:"workers"`
	Namespaces []store.Namespace     `json:"namespaces"`
	Pools      []Pool                `json:"pools"`
}

// Bus numbers events, keeps the topology they describe and fans them out.
type Bus struct {
	mu         sync.Mutex
	seq        uint64
	workers    map[registry.WorkerID]registry.WorkerInfo
	namespaces map[string]store.Namespace
	pools      []Pool
	subs       map[*Subscription]struct{}
	closed     bool
	now        func() time.Time
}

// New returns an empty bus.
func New() *Bus {
	return &Bus{
		workers:    make(map[registry.WorkerID]registry.WorkerInfo),
		namespaces: make(map[string]store.Namespace),
		subs:       make(map[*Subscription]struct{}),
		now:        time.Now,
	}
}

// Seed records namespaces that existed before the bus started, without
// events: they are part of every snapshot.
func (b *Bus) Seed(nss []store.Namespace) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ns := range nss {
		b.namespaces[ns.Name] = ns
	}
}

// Publish numbers e, applies it to the topology and hands it to every
// subscriber. It never blocks: a subscriber whose buffer is full is dropped.
func (b *Bus) Publish(e Event) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.seq
	}
	b.seq++
	e.Seq = b.seq
	if e.Time.IsZero() {
		e.Time = b.now()
	}
	b.apply(e)
	for s := range b.subs {
		select {
		case s.ch <- e:
		default:
			b.dropLocked(s, ErrSlow)
		}
	}
	return e.Seq
}

func (b *Bus) apply(e Event) {
	switch e.Kind {
	case WorkerConnected:
		if e.Worker != nil {
			b.workers[e.Worker.ID] = *e.Worker
		}
	case WorkerDraining:
		if e.Worker != nil {
			if w, ok := b.workers[e.Worker.ID]; ok {
				w.Draining = true
				b.workers[e.Worker.ID] = w
			}
		}
	case WorkerDisconnected:
		if e.Worker != nil {
			delete(b.workers, e.Worker.ID)
		}
	case NamespaceCreated, PlacementChanged:
		if e.Namespace != nil {
			b.namespaces[e.Namespace.Name] = *e.Namespace
		}
	case PoolStatsUpdated:
		b.pools = slices.Clone(e.Pools)
	}
}

// Namespace returns the bus's record of a namespace, if it has one.
func (b *Bus) Namespace(name string) (store.Namespace, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ns, ok := b.namespaces[name]
	return ns, ok
}

// Seq returns the number of the last event published.
func (b *Bus) Seq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}

// Snapshot returns the current topology.
func (b *Bus) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.snapshotLocked()
}

func (b *Bus) snapshotLocked() Snapshot {
	s := Snapshot{Seq: b.seq, Time: b.now(), Workers: make([]registry.WorkerInfo, 0, len(b.workers)),
		Namespaces: make([]store.Namespace, 0, len(b.namespaces)), Pools: slices.Clone(b.pools)}
	for _, w := range b.workers {
		s.Workers = append(s.Workers, w)
	}
	slices.SortFunc(s.Workers, func(a, b registry.WorkerInfo) int { return cmp.Compare(a.ID, b.ID) })
	for _, ns := range b.namespaces {
		s.Namespaces = append(s.Namespaces, ns)
	}
	slices.SortFunc(s.Namespaces, func(a, b store.Namespace) int { return cmp.Compare(a.Name, b.Name) })
	if s.Pools == nil {
		s.Pools = []Pool{}
	}
	return s
}

// Subscription receives the events after its snapshot.
type Subscription struct {
	bus  *Bus
	ch   chan Event
	done chan struct{}
	err  error
}

// Subscribe returns the topology as of now and a subscription that will
// deliver every later event, buffering up to buffer of them.
func (b *Bus) Subscribe(buffer int) (Snapshot, *Subscription) {
	if buffer < 1 {
		buffer = 1
	}
	s := &Subscription{bus: b, ch: make(chan Event, buffer), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.err = ErrClosed
		close(s.done)
		return b.snapshotLocked(), s
	}
	b.subs[s] = struct{}{}
	return b.snapshotLocked(), s
}

// Next returns the next event, or the error that ended the subscription:
// ErrSlow, ErrClosed, or ctx's error.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	select {
	case e := <-s.ch:
		return e, nil
	default:
	}
	select {
	case e := <-s.ch:
		return e, nil
	case <-s.done:
		// Deliver what was buffered before the end.
		select {
		case e := <-s.ch:
			return e, nil
		default:
		}
		return Event{}, s.err
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	s.bus.dropLocked(s, ErrClosed)
}

func (b *Bus) dropLocked(s *Subscription, err error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.err = err
	close(s.done)
}

// Subscribers reports how many subscriptions are live.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Close ends every subscription with ErrClosed.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		b.dropLocked(s, ErrClosed)
	}
}
