// Package events is the cluster event bus: every topology change (a worker
// connecting, draining or leaving, a namespace created, a placement changed),
// a periodic pool-stats sample, and each workflow run starting or closing
// becomes an Event with a sequence number.
//
// The bus keeps the topology those events describe, so a subscriber gets a
// snapshot and the deltas after it from one lock: the snapshot as of sequence
// N is followed by exactly the events N+1, N+2, … and nothing is seen twice
// or missed.
//
// Events are held once, in one ring shared by every subscriber (bounded in
// count and in bytes); a subscriber is only a read position in it, so its
// cost does not grow with the events it has not read, and a publisher's
// cost does not grow with slow subscribers. A subscriber that falls further
// behind than its bound is dropped with ErrSlow; it never slows a publisher.
// What a subscriber derives from an event (its wire encoding) can be computed
// once per event for all of them with Event.Memo.
//
// A subscriber that lost its connection resumes from the Position of the
// last event it saw: while every later event is still in the ring it gets
// exactly those, without a snapshot; otherwise a fresh snapshot. Each bus
// has its own random Epoch, part of every Position, so a sequence number
// from a bus that has since restarted (and numbers its events from 1 again)
// is never taken for one of this bus's.
package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// ErrSlow ends a subscription that fell further behind than its bound: the
// subscriber did not keep up and must subscribe again, from the position of
// the last event it read (resumed when the bus still holds what followed,
// from a fresh snapshot otherwise).
var ErrSlow = errors.New("subscriber too slow: it fell too far behind the event stream")

// ErrClosed ends every subscription when the bus closes.
var ErrClosed = errors.New("event bus closed")

// Ring bounds: the events held for subscribers, by count and by approximate
// bytes (pool samples of a large cluster are big). A subscriber may fall
// behind by at most what the ring holds, whatever bound it asked for.
const (
	// RingEvents is the most events held.
	RingEvents = 4096
	// RingBytes bounds the approximate memory of the events held, including
	// what Memo computed from them.
	RingBytes = 16 << 20
)

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
	// RunStarted and RunClosed report a workflow run whose start or close
	// is durable. They are news, not topology: a snapshot holds no runs.
	RunStarted Kind = "run_started"
	RunClosed  Kind = "run_closed"
	// ScheduleFired reports what a schedule's tick came to: a fire started
	// or failed, or ticks skipped or missed. News, like runs.
	ScheduleFired Kind = "schedule_fired"
)

// Fire is what a schedule's ticks came to.
type Fire struct {
	Namespace  string `json:"namespace"`
	ScheduleID string `json:"schedule_id"`
	// Outcome is started or failed for one fire, skipped or missed for
	// Count ticks, the last of them at Nominal.
	Outcome string    `json:"outcome"`
	Origin  string    `json:"origin,omitempty"`
	Nominal time.Time `json:"nominal_time,omitzero"`
	Count   int       `json:"count"`
	// ActionID names the activity or workflow id a fire started, RunID
	// its run.
	ActionID string `json:"action_id,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Run names a workflow run that started or closed.
type Run struct {
	Namespace    string `json:"namespace"`
	WorkflowID   string `json:"workflow_id"`
	RunID        string `json:"run_id"`
	WorkflowType string `json:"workflow_type"`
	TaskQueue    string `json:"task_queue"`
	// Status is how the run closed; running for run_started.
	Status store.RunStatus `json:"status"`
}

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
	// Run is set for run_started and run_closed.
	Run *Run `json:"run,omitempty"`
	// Fire is set for schedule_fired.
	Fire *Fire `json:"fire,omitempty"`

	// memo is shared by every copy of a published event.
	memo *memo
}

// memo holds what subscribers computed from one event, by key.
type memo struct {
	mu   sync.Mutex
	vals map[any]any
}

// Memo returns f(e), computed once per published event and key however
// many subscribers ask, so fanning an event out to many subscribers costs
// one encoding. f must not depend on the subscriber. An event that was not
// published through a bus computes f every time.
func (e Event) Memo(key any, f func(Event) any) any {
	m := e.memo
	if m == nil {
		return f(e)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.vals[key]; ok {
		return v
	}
	v := f(e)
	if m.vals == nil {
		m.vals = make(map[any]any, 1)
	}
	m.vals[key] = v
	return v
}

// Snapshot is the topology as of event Seq.
type Snapshot struct {
	Seq        uint64                `json:"seq"`
	Time       time.Time             `json:"time"`
	Workers    []registry.WorkerInfo `json:"workers"`
	Namespaces []store.Namespace     `json:"namespaces"`
	Pools      []Pool                `json:"pools"`
}

// Epoch names one bus, from its start to its end: sequence numbers of
// different epochs say nothing about each other. It is never zero.
type Epoch uint64

// String is the epoch as 16 hex digits, the form ParseEpoch reads.
func (e Epoch) String() string { return fmt.Sprintf("%016x", uint64(e)) }

// ErrBadPosition is wrapped by the errors ParseEpoch and ParsePosition
// return for malformed input.
var ErrBadPosition = errors.New("malformed event stream position")

// ParseEpoch reads an epoch written by Epoch.String.
func ParseEpoch(s string) (Epoch, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("epoch %q is not 16 hex digits: %w", s, ErrBadPosition)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("epoch %q is not 16 hex digits naming a bus: %w", s, ErrBadPosition)
	}
	return Epoch(v), nil
}

// Position is a place in one bus's event stream: just after event Seq of
// the bus Epoch names (Seq 0 is before the first event).
type Position struct {
	Epoch Epoch
	Seq   uint64
}

// String is the position as "<epoch>-<seq>", the form ParsePosition reads
// (the SSE event id).
func (p Position) String() string { return p.Epoch.String() + "-" + strconv.FormatUint(p.Seq, 10) }

// ParsePosition reads a position written by Position.String.
func ParsePosition(s string) (Position, error) {
	ep, seq, ok := strings.Cut(s, "-")
	if !ok {
		return Position{}, fmt.Errorf("position %q is not <epoch>-<sequence>: %w", s, ErrBadPosition)
	}
	e, err := ParseEpoch(ep)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: %w", s, err)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: sequence %q is not a number: %w", s, seq, ErrBadPosition)
	}
	return Position{Epoch: e, Seq: n}, nil
}

// Bus numbers events, keeps the topology they describe and fans them out.
type Bus struct {
	epoch      Epoch
	mu         sync.Mutex
	seq        uint64
	workers    map[registry.WorkerID]registry.WorkerInfo
	namespaces map[string]store.Namespace
	pools      []Pool
	// ring holds events first..seq at ring[seq%RingEvents]; sizes holds
	// each one's approximate bytes and held their sum.
	ring  []Event
	sizes []int
	first uint64
	held  int
	subs  map[*Subscription]struct{}
	// wake is closed (and replaced) whenever subscribers may have something
	// new: an event, or their own end.
	wake    chan struct{}
	closed  bool
	dropped atomic.Uint64
	now     func() time.Time
}

// New returns an empty bus.
func New() *Bus {
	epoch := Epoch(rand.Uint64())
	for epoch == 0 {
		epoch = Epoch(rand.Uint64())
	}
	return &Bus{
		epoch:      epoch,
		workers:    make(map[registry.WorkerID]registry.WorkerInfo),
		namespaces: make(map[string]store.Namespace),
		ring:       make([]Event, RingEvents),
		sizes:      make([]int, RingEvents),
		first:      1,
		subs:       make(map[*Subscription]struct{}),
		wake:       make(chan struct{}),
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

// Publish numbers e, applies it to the topology and makes it available to
// every subscriber. It never blocks, and its cost does not depend on how far
// behind subscribers are: a subscriber past its bound is dropped.
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
	e.memo = &memo{}
	b.apply(e)
	b.holdLocked(e)
	for s := range b.subs {
		if behind := b.seq - s.next + 1; behind > uint64(s.bound) || s.next < b.first {
			b.endLocked(s, ErrSlow, min(s.next+uint64(s.bound), b.seq+1)-1)
			b.dropped.Add(1)
		}
	}
	b.wakeLocked()
	return e.Seq
}

// holdLocked puts e in the ring, letting go of the oldest events while the
// ring is over its bounds (the newest is always held).
func (b *Bus) holdLocked(e Event) {
	size := approxSize(e)
	for b.first < e.Seq && (e.Seq-b.first >= RingEvents || b.held+size > RingBytes) {
		i := b.first % RingEvents
		b.held -= b.sizes[i]
		b.ring[i], b.sizes[i] = Event{}, 0
		b.first++
	}
	i := e.Seq % RingEvents
	b.ring[i], b.sizes[i] = e, size
	b.held += size
}

// approxSize estimates the memory an event holds, with room for one
// encoding of it (about as large again) memoized beside it.
func approxSize(e Event) int {
	n := 128
	if w := e.Worker; w != nil {
		n += 160 + len(w.TaskQueue) + len(w.Node) + len(w.Identity) + len(w.SDKVersion) + len(w.Server)
		for _, s := range w.Namespaces {
			n += 16 + len(s)
		}
		for _, s := range w.ActivityTypes {
			n += 16 + len(s)
		}
	}
	if ns := e.Namespace; ns != nil {
		n += 96 + len(ns.Name)
		for _, s := range ns.Placement.Nodes {
			n += 16 + len(s)
		}
	}
	for _, p := range e.Pools {
		n += 64 + len(p.Namespace) + len(p.TaskQueue)
	}
	if r := e.Run; r != nil {
		n += 96 + len(r.Namespace) + len(r.WorkflowID) + len(r.RunID) + len(r.WorkflowType) + len(r.TaskQueue) + len(r.Status)
	}
	return 2 * n
}

func (b *Bus) wakeLocked() {
	close(b.wake)
	b.wake = make(chan struct{})
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

// Epoch returns the bus's epoch.
func (b *Bus) Epoch() Epoch { return b.epoch }

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

// Subscription receives the events after its snapshot. It is a position in
// the bus's ring; it is read by one goroutine at a time.
type Subscription struct {
	bus *Bus
	// next is the sequence number of the next event to deliver; bound is how
	// far behind the newest event it may fall. Guarded by the bus lock.
	next  uint64
	bound int
	// err ends the subscription once the events up to last are delivered.
	err  error
	last uint64
}

// Subscribe returns the topology as of now and a subscription that will
// deliver every later event, as long as it never falls more than bound
// events behind (at most RingEvents, and fewer when the events held pass
// RingBytes).
func (b *Bus) Subscribe(bound int) (Snapshot, *Subscription) {
	st, s := b.SubscribeAfter(Position{}, bound) // no epoch: a snapshot
	return st.Snapshot, s
}

// Start is how a subscription from a position begins.
type Start struct {
	// Resumed is true when the subscription delivers exactly the events
	// after the position asked for; Snapshot is then empty. When false,
	// Snapshot is the topology now and the events after it follow.
	Resumed  bool
	Snapshot Snapshot
	// After is the position the subscription delivers the events after:
	// the one asked for when resumed, the snapshot's otherwise.
	After Position
	// Time is when the subscription began.
	Time time.Time
}

// SubscribeAfter resumes a subscription from a position: when the position
// is this bus's, not past its last event, and every event after it is
// still held and fewer than bound, the subscription delivers exactly those
// events and then every later one (Start.Resumed). Otherwise (another
// epoch, events let go of, a sequence this bus never reached) it starts
// from a fresh snapshot, as Subscribe does.
func (b *Bus) SubscribeAfter(after Position, bound int) (Start, *Subscription) {
	bound = min(max(bound, 1), RingEvents)
	b.mu.Lock()
	defer b.mu.Unlock()
	resume := after.Epoch == b.epoch && after.Seq <= b.seq && after.Seq+1 >= b.first && b.seq-after.Seq <= uint64(bound)
	var st Start
	s := &Subscription{bus: b, bound: bound}
	if resume {
		st = Start{Resumed: true, After: after, Time: b.now()}
	} else {
		st = Start{Snapshot: b.snapshotLocked(), After: Position{Epoch: b.epoch, Seq: b.seq}}
		st.Time = st.Snapshot.Time
	}
	s.next = st.After.Seq + 1
	if b.closed {
		s.err, s.last = ErrClosed, b.seq
		return st, s
	}
	b.subs[s] = struct{}{}
	return st, s
}

// Next returns the next event, or the error that ended the subscription:
// ErrSlow, ErrClosed, or ctx's error. Events published before the
// subscription ended are delivered first.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	b := s.bus
	for {
		b.mu.Lock()
		if s.next < b.first && s.next <= b.seq {
			// The events it had not read are gone from the ring.
			if s.err == nil {
				b.endLocked(s, ErrSlow, s.next-1)
				b.dropped.Add(1)
			}
			b.mu.Unlock()
			return Event{}, ErrSlow
		}
		if s.next <= b.seq && (s.err == nil || s.next <= s.last) {
			e := b.ring[s.next%RingEvents]
			s.next++
			b.mu.Unlock()
			return e, nil
		}
		if s.err != nil {
			err := s.err
			b.mu.Unlock()
			return Event{}, err
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	s.bus.endLocked(s, ErrClosed, s.next-1)
}

// endLocked ends s with err once the events up to last are delivered.
func (b *Bus) endLocked(s *Subscription, err error, last uint64) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.err, s.last = err, last
	b.wakeLocked()
}

// Subscribers reports how many subscriptions are live.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Dropped reports how many subscriptions were ended with ErrSlow since the
// bus started.
func (b *Bus) Dropped() uint64 { return b.dropped.Load() }

// Close ends every subscription with ErrClosed, after the events already
// published.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		b.endLocked(s, ErrClosed, b.seq)
	}
}
