package engine

import (
	"container/heap"
	"slices"

	"github.com/aion-run/aion/internal/store"
)

// Fairness within a lane (one priority of one queue), for activities
// waiting for a worker slot and for runs waiting for a workflow task alike.
//
// Each fairness key has its own FIFO (a flow). While only the default key
// "" has work, the lane is that one FIFO and dispatch is what it was before
// keys existed: no pass arithmetic, no map lookup, no heap. Once another key
// has work, every flow with work sits in a min-heap ordered by its pass and
// dispatch serves the flow with the smallest pass (self-clocked fair
// queueing): a served item advances its flow's pass by its stride,
// strideUnit/weight, so over time flows with waiting work are served in
// proportion to their weights. The lane's virtual time is the pass of the
// item served last; a flow that gets work while it had none starts one
// stride past it, so a key that was idle has no credit banked and cannot
// take a burst of slots from keys that kept working. A flow whose work is
// gone is deleted at once: nothing keyed by a caller-chosen name outlives
// its work.
//
// Each item carries its own weight (normally every item of a key has the
// same): serving it costs its key strideUnit/weight of virtual time.

// fairItem is what a fair lane holds, waiting in an owner of type Q: an
// activity in its queue, or a run in its workflow queue.
type fairItem[Q any] interface {
	comparable
	// fairKey is the item's fairness key, "" for the default key.
	fairKey() string
	// fairWeight is the item's fairness weight as recorded (0 for the
	// default); stride bounds it.
	fairWeight() int
	// waitsIn reports whether the item still waits in q; an entry whose
	// item left is stale and skipped.
	waitsIn(q Q) bool
}

// The activity queue's lane, flow and FIFO.
type (
	lane = fairLane[*activity, *queue]
	flow = fairFlow[*activity]
	fifo = fairFIFO[*activity]
)

func (a *activity) fairKey() string       { return a.rec.Flow.FairnessKey }
func (a *activity) fairWeight() int       { return a.rec.Flow.FairnessWeight }
func (a *activity) waitsIn(q *queue) bool { return a.queued == q }

// strideUnit is the virtual time one item of weight 1 costs its key.
// Passes are compared modulo 2^64: live passes lie within one stride of
// the lane's virtual time, far below 2^63, so a wrap does no harm.
const strideUnit = 1 << 32

// strideOf is what serving an item of weight w costs its fairness key.
func strideOf(w int) uint64 {
	return strideUnit / uint64(min(max(store.EffectiveWeight(w), 1), store.MaxFairnessWeight))
}

// stride is what serving x costs its fairness key.
func stride[T fairItem[Q], Q any](x T) uint64 { return strideOf(x.fairWeight()) }

// before reports whether pass x comes before pass y, modulo 2^64.
func before(x, y uint64) bool { return int64(x-y) < 0 }

// fairFIFO is waiting items in arrival order.
type fairFIFO[T any] struct {
	items []T
	head  int
}

func (f *fairFIFO[T]) len() int { return len(f.items) - f.head }

func (f *fairFIFO[T]) pop() {
	var zero T
	f.items[f.head] = zero
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
}

// fairFlow is the FIFO of one fairness key within a lane.
type fairFlow[T any] struct {
	fairFIFO[T]
	key string
	// pass is the virtual time at which the head's turn ends; the flow
	// with the smallest pass is served next.
	pass uint64
	// order breaks ties between equal passes: the pass set first wins.
	order uint64
	// at is the flow's index in the lane's heap, -1 outside it (newQueue
	// sets it for the default flows).
	at int
	// live counts the items still waiting, for a keyed flow only: when it
	// reaches 0 the flow is deleted, whatever stale entries it holds.
	live int
}

// fairLane is the waiting work of one priority, one FIFO per fairness key.
type fairLane[T fairItem[Q], Q any] struct {
	// def holds the work of the default key "".
	def fairFlow[T]
	// keyed holds the flows of other keys, each with items; empty when
	// only the default key has work.
	keyed map[string]*fairFlow[T]
	// keyedItems counts the entries of the keyed flows, stale ones too.
	keyedItems int
	// heap holds every flow with items, by pass, while keyed is not
	// empty; it is empty otherwise.
	heap flowHeap[T]
	// vtime is the pass of the item served last; tick numbers passes
	// as they are set, for order.
	vtime, tick uint64
}

func (l *fairLane[T, Q]) len() int { return l.def.len() + l.keyedItems }

// push appends a to its fairness key's FIFO; it returns the keyed flow it
// joined, nil for the default key.
func (l *fairLane[T, Q]) push(a T) *fairFlow[T] {
	k := a.fairKey()
	if k == "" {
		l.def.items = append(l.def.items, a)
		if len(l.keyed) > 0 && l.def.at < 0 {
			l.join(&l.def) // the default key had no work while others had
		}
		return nil
	}
	f := l.keyed[k]
	if f == nil {
		if l.keyed == nil {
			l.keyed = make(map[string]*fairFlow[T])
		}
		if len(l.keyed) == 0 && l.def.len() > 0 {
			l.join(&l.def) // fairness starts: the default key's work competes from now on
		}
		f = &fairFlow[T]{key: k, at: -1}
		l.keyed[k] = f
		f.items = append(f.items, a)
		l.join(f)
	} else {
		f.items = append(f.items, a)
	}
	f.live++
	l.keyedItems++
	return f
}

// join puts a flow that just got work into the heap, one stride past the
// lane's virtual time: it starts level with the keys that kept working.
func (l *fairLane[T, Q]) join(f *fairFlow[T]) {
	f.pass = l.vtime + stride[T, Q](f.items[f.head])
	f.order = l.tick
	l.tick++
	heap.Push(&l.heap, f)
}

// next is the flow whose head is dispatched next; the lane has items.
func (l *fairLane[T, Q]) next() *fairFlow[T] {
	if len(l.heap) == 0 {
		return &l.def
	}
	return l.heap[0]
}

// pop takes the head of f, the flow next returned: served when it was
// dispatched (its key's pass moves on by the next head's stride), not when
// it was a stale entry (the next head takes its place at the same turn).
func (l *fairLane[T, Q]) pop(f *fairFlow[T], served bool) {
	head := f.items[f.head]
	f.fairFIFO.pop()
	if f != &l.def {
		l.keyedItems--
	}
	if len(l.heap) == 0 {
		return // only the default key has work: a plain FIFO
	}
	if served {
		l.vtime = f.pass
	}
	if f.len() == 0 {
		l.leave(f)
		return
	}
	if next := f.items[f.head]; served {
		f.pass += stride[T, Q](next)
		f.order = l.tick
		l.tick++
	} else {
		f.pass += stride[T, Q](next) - stride[T, Q](head)
	}
	heap.Fix(&l.heap, f.at)
}

// unqueued notes that an item of keyed flow f stopped waiting; once none
// does, f is deleted with its stale entries.
func (l *fairLane[T, Q]) unqueued(f *fairFlow[T]) {
	f.live--
	if f.live > 0 || l.keyed[f.key] != f {
		return
	}
	l.keyedItems -= f.len()
	clear(f.items)
	f.items, f.head = nil, 0
	l.leave(f)
}

// The two methods below serve owners that keep no stale entries (workflow
// queues): an item that stops waiting leaves its flow at once.

// dequeue takes the head of f, the flow next returned, as served.
func (l *fairLane[T, Q]) dequeue(f *fairFlow[T]) T {
	x := f.items[f.head]
	if f != &l.def {
		f.live--
	}
	l.pop(f, true)
	return x
}

// remove takes x out of the lane wherever it waits, in time linear in its
// key's backlog; it reports whether x was there. Its key's turn stays
// where it was, as when a stale head is skipped.
func (l *fairLane[T, Q]) remove(x T) bool {
	f := &l.def
	if k := x.fairKey(); k != "" {
		if f = l.keyed[k]; f == nil {
			return false
		}
	}
	i := slices.Index(f.items[f.head:], x)
	switch {
	case i < 0:
		return false
	case f != &l.def:
		f.live--
	}
	if i == 0 {
		l.pop(f, false)
		return true
	}
	f.items = slices.Delete(f.items, f.head+i, f.head+i+1)
	if f != &l.def {
		l.keyedItems--
	}
	return true
}

// leave takes a flow out of the heap (and a keyed flow out of the lane);
// when the last keyed flow leaves, the default key is a plain FIFO again.
func (l *fairLane[T, Q]) leave(f *fairFlow[T]) {
	if f.at >= 0 {
		heap.Remove(&l.heap, f.at)
	}
	if f == &l.def {
		return
	}
	delete(l.keyed, f.key)
	if len(l.keyed) == 0 && l.def.at >= 0 {
		heap.Remove(&l.heap, l.def.at)
	}
}

// waiting calls fn for the lane's items still waiting in q, in the
// order dispatch would start them if slots freed one by one and nothing new
// arrived: with keys, it replays dispatch's choices on copies of the flows'
// positions and passes, O(log K) per item. It reports false once fn does.
func (l *fairLane[T, Q]) waiting(q Q, fn func(T) bool) bool {
	if len(l.heap) == 0 {
		for _, a := range l.def.items[l.def.head:] {
			if a.waitsIn(q) && !fn(a) {
				return false
			}
		}
		return true
	}
	sim := make(replayHeap[T], len(l.heap))
	for i, f := range l.heap {
		sim[i] = replay[T]{f: f, next: f.head, pass: f.pass, order: f.order}
	}
	heap.Init(&sim)
	tick := l.tick
	for len(sim) > 0 {
		r := &sim[0]
		a := r.f.items[r.next]
		r.next++
		served := a.waitsIn(q)
		if served && !fn(a) {
			return false
		}
		if r.next == len(r.f.items) {
			heap.Pop(&sim)
			continue
		}
		if next := r.f.items[r.next]; served {
			r.pass += stride[T, Q](next)
			r.order = tick
			tick++
		} else {
			r.pass += stride[T, Q](next) - stride[T, Q](a)
		}
		heap.Fix(&sim, 0)
	}
	return true
}

// oldest calls fn for the first item still waiting in q of each flow.
func (l *fairLane[T, Q]) oldest(q Q, fn func(T)) {
	first := func(f *fairFlow[T]) {
		for _, a := range f.items[f.head:] {
			if a.waitsIn(q) {
				fn(a)
				return
			}
		}
	}
	first(&l.def)
	for _, f := range l.keyed {
		first(f)
	}
}

// flowHeap orders flows by pass, then by when the pass was set.
type flowHeap[T any] []*fairFlow[T]

func (h flowHeap[T]) Len() int { return len(h) }
func (h flowHeap[T]) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return before(h[i].pass, h[j].pass)
	}
	return before(h[i].order, h[j].order)
}
func (h flowHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *flowHeap[T]) Push(x any) {
	f := x.(*fairFlow[T])
	f.at = len(*h)
	*h = append(*h, f)
}
func (h *flowHeap[T]) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.at = -1
	return f
}

// replay is a flow's position and pass in waiting's replay of dispatch.
type replay[T any] struct {
	f           *fairFlow[T]
	next        int
	pass, order uint64
}

type replayHeap[T any] []replay[T]

func (h replayHeap[T]) Len() int { return len(h) }
func (h replayHeap[T]) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return before(h[i].pass, h[j].pass)
	}
	return before(h[i].order, h[j].order)
}
func (h replayHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *replayHeap[T]) Push(x any)   { *h = append(*h, x.(replay[T])) }
func (h *replayHeap[T]) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}
