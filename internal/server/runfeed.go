package server

import (
	"context"
	"sync"

	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/scheduler"
	"github.com/aion-run/aion/internal/store"
)

// runFeed carries run starts and closes from the engine to the event bus.
// The engine reports them under its lock, and a publish costs a step per
// subscriber, so the engine only appends here and one goroutine publishes,
// in the order reported.
type runFeed struct {
	mu    sync.Mutex
	queue []engine.RunChange
	wake  chan struct{} // holds one signal at most
}

func newRunFeed() *runFeed { return &runFeed{wake: make(chan struct{}, 1)} }

// add queues c; it never blocks.
func (f *runFeed) add(c engine.RunChange) {
	f.mu.Lock()
	f.queue = append(f.queue, c)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and empties the queue.
func (f *runFeed) take() []engine.RunChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	return q
}

// publishRuns publishes the run changes on the bus until ctx ends.
func (s *Server) publishRuns(ctx context.Context) {
	defer s.bg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.runs.wake:
		}
		for _, c := range s.runs.take() {
			s.bus.Publish(runEvent(c))
		}
	}
}

// runEvent is the bus event of a run change.
func runEvent(c engine.RunChange) events.Event {
	kind := events.RunClosed
	if c.Status == store.RunRunning {
		kind = events.RunStarted
	}
	return events.Event{Kind: kind, Time: c.At, Run: &events.Run{Namespace: c.Namespace, WorkflowID: c.WorkflowID,
		RunID: c.RunID, WorkflowType: c.WorkflowType, TaskQueue: c.TaskQueue, Status: c.Status}}
}

// publishFire puts what a schedule's ticks came to on the event bus.
func (s *Server) publishFire(e scheduler.Event) {
	s.bus.Publish(events.Event{Kind: events.ScheduleFired, Fire: &events.Fire{Namespace: e.Namespace, ScheduleID: e.ScheduleID,
		Outcome: e.Outcome, Origin: e.Origin, Nominal: e.Nominal, Count: e.Count, ActionID: e.ActionID, RunID: e.RunID,
		Detail: e.Detail}})
}
