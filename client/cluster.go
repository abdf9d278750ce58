package client

import (
	"context"
	"fmt"
	"iter"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention/wire"
)

// Worker is a connected worker as the server sees it.
type Worker struct {
	ID            uint64   `json:"id"`
	Namespaces    []string `json:"namespaces"`
	TaskQueue     string   `json:"task_queue"`
	Node          string   `json:"node,omitempty"`
	ActivityTypes []string `json:"activity_types"`
	// Capabilities are the intervention primitives the worker advertised:
	// "inject_message", "cancel", "pause_resume", "update_budget",
	// "respond_to_approval".
	Capabilities      []string  `json:"capabilities"`
	Slots             int       `json:"slots"`
	SlotsInUse        int       `json:"slots_in_use"`
	Draining          bool      `json:"draining"`
	Transport         string    `json:"transport"`
	ConnectedTime     time.Time `json:"connected_time"`
	LastHeartbeatTime time.Time `json:"last_heartbeat_time"`
	Peer              string    `json:"peer,omitempty"`
	// WorkflowTypes, BuildID, CompatibleBuildIDs and the workflow slots
	// describe a worker that advances workflows.
	WorkflowTypes      []string `json:"workflow_types,omitempty"`
	BuildID            string   `json:"build_id,omitempty"`
	CompatibleBuildIDs []string `json:"compatible_build_ids,omitempty"`
	WorkflowSlots      int      `json:"workflow_slots,omitempty"`
	WorkflowSlotsInUse int      `json:"workflow_slots_in_use,omitempty"`
}

func workerFromProto(w *aionv1.Worker) *Worker {
	return &Worker{
		ID:                w.GetId(),
		Namespaces:        w.GetNamespaces(),
		TaskQueue:         w.GetTaskQueue(),
		Node:              w.GetNode(),
		ActivityTypes:     w.GetActivityTypes(),
		Capabilities:      capabilitiesFromProto(w.GetCapabilities()),
		Slots:             int(w.GetSlots()),
		SlotsInUse:        int(w.GetSlotsInUse()),
		Draining:          w.GetState() == aionv1.WorkerState_WORKER_STATE_DRAINING,
		Transport:         w.GetTransport(),
		ConnectedTime:     timeFromProto(w.GetConnectedTime()),
		LastHeartbeatTime: timeFromProto(w.GetLastHeartbeatTime()),
		Peer:              w.GetPeer(),

		WorkflowTypes:      w.GetWorkflowTypes(),
		BuildID:            w.GetBuildId(),
		CompatibleBuildIDs: w.GetCompatibleBuildIds(),
		WorkflowSlots:      int(w.GetWorkflowSlots()),
		WorkflowSlotsInUse: int(w.GetWorkflowSlotsInUse()),
	}
}

func capabilitiesFromProto(ps []aionv1.InterventionPrimitive) []string {
	out := make([]string, 0, len(ps))
	for _, enum := range ps {
		if p, ok := wire.FromProto(enum); ok {
			out = append(out, p.String())
		} else {
			out = append(out, enum.String()) // a primitive this client does not know: its number
		}
	}
	return out
}

// ListWorkers returns the connected workers, ordered by id; a non-empty
// namespace keeps only the workers serving it.
func (c *Client) ListWorkers(ctx context.Context, namespace string) ([]*Worker, error) {
	resp, err := c.cluster.ListWorkers(ctx, &aionv1.ListWorkersRequest{Namespace: namespace})
	if err != nil {
		return nil, rpcError("list workers", err)
	}
	out := make([]*Worker, 0, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		out = append(out, workerFromProto(w))
	}
	return out, nil
}

// DrainWorker asks one worker to finish its work and leave; it gets no new
// work from now on. The error has code NotFound when it is not connected.
func (c *Client) DrainWorker(ctx context.Context, id uint64) (*Worker, error) {
	resp, err := c.cluster.DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: id})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("drain worker %d", id), err)
	}
	return workerFromProto(resp.GetWorker()), nil
}

// WatchPosition is a place in a server's event stream: just after event
// Sequence of the stream Epoch names. The zero position is no place: a
// watch from it starts with a snapshot.
type WatchPosition struct {
	// Epoch names the stream; a server's restart starts a new one. Only
	// the first event of a watch carries it.
	Epoch string `json:"epoch"`
	// Sequence is the last event seen (or the snapshot's sequence).
	Sequence uint64 `json:"sequence"`
}

// Advance returns the position after e, an event of the watch p is a
// position of (or the first event of a new watch).
func (p WatchPosition) Advance(e *aionv1.ClusterEvent) WatchPosition {
	if ep := e.GetEpoch(); ep != "" {
		p.Epoch = ep
	}
	p.Sequence = e.GetSequence()
	return p
}

// WatchOption changes where a Watch starts.
type WatchOption func(*aionv1.WatchRequest)

// WatchAfter resumes a watch from pos, the position of the last event a
// previous watch saw: when the server still holds every event after it,
// the watch starts with a resumed event (GetResumed() != nil) and then
// exactly those events; otherwise (they were let go of, or the server has
// restarted since) with a fresh snapshot, as a watch without the option
// does. The zero position starts with a snapshot.
func WatchAfter(pos WatchPosition) WatchOption {
	return func(r *aionv1.WatchRequest) { r.Epoch, r.AfterSequence = pos.Epoch, pos.Sequence }
}

// Watch yields the cluster's events: first a snapshot (or, resuming with
// WatchAfter, a resumed event), then every change as it happens, until ctx
// ends or the stream fails (a final non-nil error). Keep the position of
// each event (WatchPosition.Advance) to resume after a failure without
// a new snapshot.
func (c *Client) Watch(ctx context.Context, opts ...WatchOption) iter.Seq2[*aionv1.ClusterEvent, error] {
	req := &aionv1.WatchRequest{}
	for _, o := range opts {
		o(req)
	}
	return func(yield func(*aionv1.ClusterEvent, error) bool) {
		// Ending the stream when the loop stops early frees the server's
		// subscription at once.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.cluster.Watch(ctx, req)
		if err != nil {
			yield(nil, rpcError("watch", err))
			return
		}
		for {
			e, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					yield(nil, rpcError("watch", err))
				}
				return
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// WaitingGroup counts the ready work of one pool and type that shares a
// priority and a fairness key, and what holds it apart from its queue.
type WaitingGroup struct {
	TaskQueue string `json:"task_queue"`
	// Kind is "activity" (waiting for a slot) or "workflow_task" (a run
	// waiting for a workflow task); Type the activity or workflow type.
	Kind        string `json:"kind"`
	Type        string `json:"type"`
	Priority    int    `json:"priority"`
	FairnessKey string `json:"fairness_key,omitempty"`
	// HeldBy is "" for work in its queue, or concurrency_limit or
	// rate_limited for work a flow limit holds (ConcurrencyKey names the
	// key a concurrency limit holds).
	HeldBy         string    `json:"held_by,omitempty"`
	ConcurrencyKey string    `json:"concurrency_key,omitempty"`
	Count          uint64    `json:"count"`
	OldestReady    time.Time `json:"oldest_ready_time,omitzero"`
}

// ListWaiting counts a namespace's ready work waiting for a worker, by task
// queue, type, priority and fairness key, the largest groups first;
// truncated counts the groups left out past the 1,000 returned.
func (c *Client) ListWaiting(ctx context.Context, namespace string) (groups []WaitingGroup, truncated int, err error) {
	resp, err := c.cluster.ListWaiting(ctx, &aionv1.ListWaitingRequest{Namespace: namespace})
	if err != nil {
		return nil, 0, rpcError(fmt.Sprintf("list waiting work of %q", namespace), err)
	}
	groups = make([]WaitingGroup, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		groups = append(groups, WaitingGroup{TaskQueue: g.GetTaskQueue(), Kind: g.GetKind(), Type: g.GetType(),
			Priority: int(g.GetPriority()), FairnessKey: g.GetFairnessKey(), HeldBy: g.GetHeldBy(),
			ConcurrencyKey: g.GetConcurrencyKey(), Count: g.GetCount(), OldestReady: timeFromProto(g.GetOldestReadyTime())})
	}
	return groups, int(resp.GetTruncated()), nil
}
