package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// activity is the in-memory state of one open activity.
type activity struct {
	rec store.Activity // as last made durable, plus the current attempt number and state

	// creating is closed once the activity's insert is durable (or failed).
	creating chan struct{}
	// queued is the queue the activity waits in, nil when it is not waiting.
	queued *queue
	// flow is its fairness key's FIFO in that queue, nil for the default key.
	flow *flow
	// readyAt is when the activity last became ready to run.
	readyAt time.Time
	// worker holds the running attempt; nil unless rec.State is running.
	worker           *registry.Worker
	attemptStartedAt time.Time
	lastHeartbeat    time.Time
	// closing is set once a terminal outcome is decided, before it is durable.
	closing bool
	// size is the payload's length; rec.Payload is nil when the payload
	// is not held in memory (see shedPayloadLocked).
	size int
	// unsent: the running attempt's task waits for its payload from the
	// store, so its worker does not know of it yet.
	unsent  bool
	waiters []chan struct{}
	// step names the workflow step the activity runs, nil for an activity
	// scheduled on its own.
	step *stepRef
	// lim is what flow limits keep for it, nil until one holds or admits it.
	lim *limitState
}

func (a *activity) key() key { return key{a.rec.Namespace, a.rec.ID} }

// addWaiter returns a channel closed when the activity closes or leaves
// memory; the caller holds the engine lock.
func (a *activity) addWaiter() chan struct{} {
	ch := make(chan struct{})
	a.waiters = append(a.waiters, ch)
	return ch
}

// await blocks until ch, a waiter of activity k, is closed or ctx ends.
func (e *Engine) await(ctx context.Context, k key, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		e.dropWaiter(k, ch)
		return ctx.Err()
	}
}

func (a *activity) wakeWaiters() {
	for _, ch := range a.waiters {
		close(ch)
	}
	a.waiters = nil
}

// pool holds the waiting work of one triple: one FIFO per node pin, since
// activities pinned to different nodes match different workers.
type pool struct {
	byPin map[string]*queue
}

// queue holds the activities that share a triple and a node match: one
// lane per priority, the most urgent lane served first; within a lane one
// FIFO per fairness key, shared out by weight (see fair.go).
type queue struct {
	triple registry.Triple
	pin    string
	match  registry.Match
	lanes  [store.LowestPriority]lane
	// live counts the items still waiting; the others left (timed out,
	// cancelled) and are skipped when they reach the head. liveByLane
	// counts them by priority.
	live       int
	liveByLane [store.LowestPriority]int
	// lim is the flow limit of the queue's activity type, nil for none.
	lim *flowLimit
	// spill holds the spill flows with work in the store only, nil for
	// none; spilled counts that work (see spill.go).
	spill   map[spillID]*spillFlow
	spilled int
	// inserting counts, per spill flow, the activities being inserted
	// that will be held in memory, so a flow's window counts them before
	// they are durable (see spillsLocked).
	inserting map[spillID]int
}

func newQueue(t registry.Triple, pin string, m registry.Match) *queue {
	q := &queue{triple: t, pin: pin, match: m}
	for i := range q.lanes {
		q.lanes[i].def.at = -1
	}
	return q
}

// push queues a in the lane of its priority.
func (q *queue) push(a *activity) {
	a.flow = q.lanes[laneOf(a.rec.Priority)].push(a)
}

// laneOf is the lane index of a priority: 0 for the most urgent.
func laneOf(priority int) int {
	return min(max(store.EffectivePriority(priority), store.HighestPriority), store.LowestPriority) - store.HighestPriority
}

// front is the most urgent lane with items, nil when the queue is empty.
func (q *queue) front() *lane {
	for i := range q.lanes {
		if q.lanes[i].len() > 0 {
			return &q.lanes[i]
		}
	}
	return nil
}

// waiting calls fn for the items still waiting, in dispatch order: most
// urgent first, and within a priority in the order the fair share between
// fairness keys gives (oldest first within a key, and for work without
// keys); fn returns false to stop.
func (q *queue) waiting(fn func(*activity) bool) {
	for i := range q.lanes {
		if !q.lanes[i].waiting(q, fn) {
			return
		}
	}
}

// matchFor turns an activity's node pin or its namespace's placement into a
// registry match. A pin overrides placement.
func matchFor(pin string, p store.Placement) registry.Match {
	if pin != "" {
		return registry.OnNodes(pin)
	}
	switch p.Mode {
	case store.Pinned:
		return registry.OnNodes(p.Nodes...)
	case store.Prefer:
		return registry.PreferNodes(p.Nodes...)
	}
	return registry.AnyNode()
}

func tripleOf(r *store.Activity) registry.Triple {
	return registry.NewTriple(r.Namespace, r.TaskQueue, r.ActivityType)
}

// enqueueLocked puts a ready activity in its queue and tries to dispatch.
func (e *Engine) enqueueLocked(a *activity) {
	a.readyAt = e.now()
	e.requeueLocked(a)
}

// requeueLocked puts a waiting activity in its queue, keeping the time it
// became ready, and tries to dispatch.
func (e *Engine) requeueLocked(a *activity) {
	q := e.queueForLocked(&a.rec)
	a.queued = q
	q.live++
	q.liveByLane[laneOf(a.rec.Priority)]++
	q.push(a)
	e.dispatchLocked(q)
}

// dispatchLocked hands queued work to free workers until the queue is empty
// or no eligible worker has a free slot, and reads more from the store when
// the queue's work there is due. An emptied queue is deleted, so nothing
// keyed by caller-chosen names outlives its work.
func (e *Engine) dispatchLocked(q *queue) {
	e.dispatchQueueLocked(q)
	if q.spill != nil {
		e.topUpLocked(q)
	}
}

func (e *Engine) dispatchQueueLocked(q *queue) {
	for l := q.front(); l != nil; l = q.front() {
		if q.spill != nil && e.awaitsPageLocked(q, l) {
			return // the page read for it dispatches again
		}
		f := l.next() // the fairness key whose turn it is
		a := f.items[f.head]
		if a.queued != q {
			l.pop(f, false) // timed out or cancelled while waiting
			continue
		}
		if e.maxRunning > 0 && e.running[q.triple.Pool.Namespace] >= e.maxRunning {
			return // the namespace is at its in-flight cap; a finishing attempt re-runs this
		}
		if q.lim != nil && e.holdLocked(q, q.lim, a) {
			// A flow limit holds it, outside the queue (limit.go); being
			// held is not a turn of its fairness key.
			l.pop(f, false)
			if a.flow != nil {
				l.unqueued(a.flow)
				a.flow = nil
			}
			continue
		}
		w, ok := e.reg.Select(q.triple, q.match)
		if !ok {
			return
		}
		l.pop(f, true)
		if q.lim != nil {
			e.admitLocked(q.lim, a)
		}
		e.unqueueLocked(a)
		e.startLocked(a, w)
	}
	if p := e.queues[q.triple]; p != nil && p.byPin[q.pin] == q && q.spilled == 0 && q.spill == nil {
		delete(p.byPin, q.pin)
		if len(p.byPin) == 0 {
			delete(e.queues, q.triple)
		}
	}
}

// unqueueLocked takes a waiting activity out of its queue's live count; the
// queue drops the entry itself when it reaches the head, or, for a fairness
// key, when the key has nothing else waiting.
func (e *Engine) unqueueLocked(a *activity) {
	if q := a.queued; q != nil {
		q.live--
		q.liveByLane[laneOf(a.rec.Priority)]--
		if f := a.flow; f != nil {
			q.lanes[laneOf(a.rec.Priority)].unqueued(f)
			a.flow = nil
		}
		a.queued = nil
	}
	if a.lim != nil {
		e.unholdLocked(a)
	}
}

// dispatchNamespaceLocked re-runs dispatch for every queue of a namespace.
func (e *Engine) dispatchNamespaceLocked(ns string) {
	if e.cl != nil {
		for _, t := range e.reg.Triples() {
			if t.Pool.Namespace == ns {
				e.claims.dirty[t] = struct{}{}
			}
		}
		e.claims.wake()
		return
	}
	for t, p := range e.queues {
		if t.Pool.Namespace != ns {
			continue
		}
		for _, q := range p.byPin {
			e.dispatchLocked(q)
		}
	}
}

// dispatchWorkerLocked re-runs dispatch for every queue a worker could serve:
// after it registers or a slot of it frees.
func (e *Engine) dispatchWorkerLocked(w *registry.Worker) {
	if e.cl != nil {
		w.Triples(func(t registry.Triple) { e.wantLocked(t, w.Node()) })
		return
	}
	if len(e.queues) == 0 {
		return
	}
	w.Triples(func(t registry.Triple) {
		p := e.queues[t]
		if p == nil {
			return
		}
		for _, q := range p.byPin {
			e.dispatchLocked(q)
		}
	})
}

// startLocked begins the next attempt of a on w, whose slot is already taken.
func (e *Engine) startLocked(a *activity, w *registry.Worker) {
	now := e.now()
	a.rec.Attempt++
	a.rec.State = store.StateRunning
	if a.rec.StartedAt.IsZero() {
		a.rec.StartedAt = now
	}
	a.worker = w
	e.running[a.rec.Namespace]++
	a.attemptStartedAt = now
	a.lastHeartbeat = now
	e.obs.Started(a.rec.Namespace, now.Sub(a.readyAt))
	if e.tracer != nil {
		e.tracer.Started(&a.rec, w.ID(), a.readyAt, now)
	}
	k := a.key()
	m := e.inflight[w.ID()]
	if m == nil {
		m = make(map[key]*activity)
		e.inflight[w.ID()] = m
	}
	m[k] = a

	// A start is kept in memory only; the attempt is written when it ends.
	// If the server dies first, recovery finds the activity scheduled and
	// runs it again, which at-least-once delivery allows.
	t := a.rec.Timeouts
	if t.StartToClose > 0 {
		e.armLocked(now.Add(t.StartToClose), k, a.rec.Attempt, timerStartToClose)
	}
	if t.Heartbeat > 0 {
		e.armLocked(now.Add(t.Heartbeat), k, a.rec.Attempt, timerHeartbeat)
	}
	task := Task{
		Namespace:        k.ns,
		ActivityID:       k.id,
		Attempt:          a.rec.Attempt,
		TaskQueue:        a.rec.TaskQueue,
		ActivityType:     a.rec.ActivityType,
		Payload:          a.rec.Payload,
		Node:             a.rec.Node,
		ScheduledAt:      a.rec.ScheduledAt,
		StartedAt:        now,
		StartToClose:     t.StartToClose,
		Heartbeat:        t.Heartbeat,
		Deadline:         e.attemptDeadline(a, now),
		HeartbeatDetails: a.rec.HeartbeatDetails,
		Trace:            a.rec.Trace,
	}
	if s := a.step; s != nil {
		task.WorkflowID, task.RunID, task.Step = s.workflowID, s.run.id, s.n
	} else if e.cl != nil {
		// A claimed step activity: its id names its run and step; the
		// workflow id is known when this server holds the run.
		if runID, n, ok := stepOfActivity(k.id); ok {
			if r := e.runs[runKey{k.ns, runID}]; r != nil {
				task.WorkflowID, task.RunID, task.Step = r.rec.WorkflowID, runID, n
			}
		}
	}
	a.unsent = a.rec.Payload == nil && a.size > 0
	if a.unsent {
		if !e.closed {
			e.bg.Add(1)
			go e.sendLoaded(a, w, task)
		}
		return
	}
	if conn, ok := w.Delivery().(Conn); ok {
		// A failed send means the stream is closing; the worker's departure
		// fails this attempt as worker_lost and it is retried.
		_ = conn.SendTask(task)
	}
	e.shedPayloadLocked(a)
}

// FailurePayloadUnavailable fails an attempt whose payload could not be read
// back from the store; it is retried.
const FailurePayloadUnavailable = "payload_unavailable"

// sendLoaded reads the payload of an attempt started without it in memory
// and sends the task, unless the attempt ended meanwhile (a timeout, a
// cancel, its worker leaving): then nothing is sent.
func (e *Engine) sendLoaded(a *activity, w *registry.Worker, task Task) {
	defer e.bg.Done()
	var rec store.Activity
	err := e.call(func(ctx context.Context) (err error) {
		rec, err = e.st.GetActivity(ctx, task.Namespace, task.ActivityID)
		return err
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open[a.key()] != a || a.closing || a.worker != w || a.rec.Attempt != task.Attempt {
		return
	}
	if err != nil {
		e.log.Error("read payload for an attempt", "namespace", task.Namespace, "activity", task.ActivityID, "err", err)
		e.failAttemptLocked(a, &store.Failure{Type: FailurePayloadUnavailable, Retryable: true,
			Message: fmt.Sprintf("the server could not read the payload of attempt %d: %v", task.Attempt, err)},
			store.OutcomeFailed, e.now(), false)
		e.dispatchWorkerLocked(w)
		return
	}
	task.Payload = rec.Payload
	a.unsent = false
	if conn, ok := w.Delivery().(Conn); ok {
		_ = conn.SendTask(task)
	}
}

// attemptDeadline is when this attempt must end: the earlier of its
// start-to-close and the activity's schedule-to-close.
func (e *Engine) attemptDeadline(a *activity, startedAt time.Time) time.Time {
	var d time.Time
	if t := a.rec.Timeouts.StartToClose; t > 0 {
		d = startedAt.Add(t)
	}
	if t := a.rec.Timeouts.ScheduleToClose; t > 0 {
		if c := a.rec.ScheduledAt.Add(t); d.IsZero() || c.Before(d) {
			d = c
		}
	}
	return d
}
