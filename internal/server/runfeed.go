package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/protobuf/encoding/protojson"
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

// runFrameJSON is the JSON of a run event on the event stream: the shape
// protojson gives a ClusterEvent, with the run under run_started or
// run_closed ({"run": Run}, as worker_connected holds {"worker": Worker}).
type runFrameJSON struct {
	Sequence   string        `json:"sequence"`
	Time       string        `json:"time"`
	RunStarted *runEventJSON `json:"run_started,omitempty"`
	RunClosed  *runEventJSON `json:"run_closed,omitempty"`
}

type runEventJSON struct {
	Run json.RawMessage `json:"run"`
}

// runFrame is the SSE frame of a run event. ClusterEvent (the gRPC Watch
// message) has no run kinds, so the stream writes their JSON itself; the Run
// inside is protojson of the wire's Run.
func runFrame(e events.Event) ([]byte, error) {
	r := e.Run
	run := &aionv1.Run{Namespace: r.Namespace, WorkflowId: r.WorkflowID, RunId: r.RunID, WorkflowType: r.WorkflowType,
		TaskQueue: r.TaskQueue, Status: engine.RunStatusProto(r.Status)}
	if e.Kind == events.RunStarted {
		run.StartTime = ts(e.Time)
	} else {
		run.CloseTime = ts(e.Time)
	}
	body, err := jsonOut.Marshal(run)
	if err != nil {
		return nil, fmt.Errorf("encode run event %d: %w", e.Seq, err)
	}
	when, err := protojson.Marshal(ts(e.Time))
	if err != nil {
		return nil, fmt.Errorf("encode run event %d: %w", e.Seq, err)
	}
	var t string
	if err := json.Unmarshal(when, &t); err != nil {
		return nil, fmt.Errorf("encode run event %d: %w", e.Seq, err)
	}
	out := runFrameJSON{Sequence: fmt.Sprint(e.Seq), Time: t}
	if e.Kind == events.RunStarted {
		out.RunStarted = &runEventJSON{Run: body}
	} else {
		out.RunClosed = &runEventJSON{Run: body}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode run event %d: %w", e.Seq, err)
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, data), nil
}
