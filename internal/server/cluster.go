package server

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/cluster"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/intervention/wire"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// watchBuffer is how many events a Watch subscriber may fall behind by
// before it is dropped.
const watchBuffer = 4096

type clusterService struct {
	aionv1.UnimplementedClusterServiceServer
	s *Server
}

var disconnectReasons = map[registry.Reason]aionv1.DisconnectReason{
	registry.ReasonDisconnect:   aionv1.DisconnectReason_DISCONNECT_REASON_DISCONNECT,
	registry.ReasonTimeout:      aionv1.DisconnectReason_DISCONNECT_REASON_TIMEOUT,
	registry.ReasonDeregistered: aionv1.DisconnectReason_DISCONNECT_REASON_DEREGISTERED,
	registry.ReasonDrained:      aionv1.DisconnectReason_DISCONNECT_REASON_DRAINED,
	registry.ReasonServerLost:   aionv1.DisconnectReason_DISCONNECT_REASON_SERVER_LOST,
}

func capabilitiesToProto(cs registry.Capabilities) []aionv1.InterventionPrimitive {
	return wire.Primitives(cs)
}

// workerToProto describes a worker; lastSeen is zero when unknown.
func workerToProto(w registry.WorkerInfo, lastSeen time.Time, peer string) *aionv1.Worker {
	state := aionv1.WorkerState_WORKER_STATE_CONNECTED
	if w.Draining {
		state = aionv1.WorkerState_WORKER_STATE_DRAINING
	}
	return &aionv1.Worker{
		Id:                uint64(w.ID),
		Namespaces:        w.Namespaces,
		TaskQueue:         w.TaskQueue,
		Node:              w.Node,
		ActivityTypes:     w.ActivityTypes,
		Slots:             uint32(w.Slots),
		SlotsInUse:        uint32(w.SlotsInUse),
		State:             state,
		Transport:         string(w.Transport),
		ConnectedTime:     ts(w.ConnectedAt),
		LastHeartbeatTime: ts(lastSeen),
		Capabilities:      capabilitiesToProto(w.Capabilities),
		Peer:              peer,
		Server:            w.Server,
		Identity:          w.Identity,
		SdkVersion:        w.SDKVersion,

		WorkflowTypes:      w.WorkflowTypes,
		BuildId:            w.BuildID,
		CompatibleBuildIds: w.CompatibleBuilds,
		WorkflowSlots:      uint32(w.WorkflowSlots),
		WorkflowSlotsInUse: uint32(w.WorkflowSlotsInUse),
	}
}

// workerView adds what only the stream knows (last sign of life, peer).
func (s *Server) workerView(w registry.WorkerInfo) *aionv1.Worker {
	s.connsMu.Lock()
	c := s.conns[w.ID]
	s.connsMu.Unlock()
	var seen time.Time
	peer := ""
	if c != nil {
		seen = time.Unix(0, c.lastSeen.Load())
		peer = c.peer
	}
	return workerToProto(w, seen, peer)
}

func (c *clusterService) ListWaiting(ctx context.Context, r *aionv1.ListWaitingRequest) (*aionv1.ListWaitingResponse, error) {
	v, err := c.s.eng.Waiting(ctx, c.s.caller(ctx), r.GetNamespace())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.ListWaitingResponse{Groups: make([]*aionv1.WaitingGroup, 0, len(v.Groups)), Truncated: uint32(v.Truncated)}
	for _, g := range v.Groups {
		out.Groups = append(out.Groups, &aionv1.WaitingGroup{TaskQueue: g.TaskQueue, Kind: g.Kind, Type: g.Type,
			Priority: int32(g.Priority), FairnessKey: g.FairnessKey, HeldBy: string(g.HeldBy), ConcurrencyKey: g.ConcurrencyKey,
			Count: uint64(g.Count), OldestReadyTime: ts(g.OldestReady)})
	}
	return out, nil
}

func (c *clusterService) ListWorkers(ctx context.Context, r *aionv1.ListWorkersRequest) (*aionv1.ListWorkersResponse, error) {
	if err := name.CheckOptional("namespace", r.GetNamespace(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	caller := c.s.caller(ctx)
	workers := c.s.reg.Workers()
	if c.s.cluster != nil {
		remote, err := c.s.cluster.RemoteWorkers(ctx)
		if err != nil {
			return nil, toStatus(err)
		}
		workers = append(workers, remote...)
		slices.SortFunc(workers, func(a, b registry.WorkerInfo) int { return cmp.Compare(a.ID, b.ID) })
	}
	out := &aionv1.ListWorkersResponse{Workers: []*aionv1.Worker{}}
	for _, w := range workers {
		if r.GetNamespace() != "" && !slices.Contains(w.Namespaces, r.GetNamespace()) {
			continue
		}
		w, ok := scopeWorker(caller, w)
		if !ok {
			continue
		}
		out.Workers = append(out.Workers, c.s.workerView(w))
	}
	return out, nil
}

func (c *clusterService) DrainWorker(ctx context.Context, r *aionv1.DrainWorkerRequest) (*aionv1.DrainWorkerResponse, error) {
	id := registry.WorkerID(r.GetWorkerId())
	info, ok := c.s.reg.Lookup(id)
	var owner store.ServerID
	if !ok && c.s.cluster != nil {
		remote, found, err := c.s.cluster.FindWorker(ctx, id)
		if err != nil {
			return nil, toStatus(err)
		}
		owner, info, ok = remote.Server, remote.Info, found
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "worker_id: worker %d is not connected", r.GetWorkerId())
	}
	caller := c.s.caller(ctx)
	for _, ns := range info.Namespaces {
		if !caller.Allows(ns) {
			return nil, status.Errorf(codes.PermissionDenied, "worker_id: worker %d serves namespace %q, which the caller may not use", id, ns)
		}
	}
	if owner != 0 {
		// The worker is connected to another server of the cluster.
		info, err := c.s.cluster.DrainWorker(ctx, owner, id)
		switch {
		case errors.Is(err, cluster.ErrBadReply):
			return nil, status.Errorf(codes.Internal, "worker_id: worker %d: %v", id, err)
		case err != nil:
			return nil, status.Errorf(codes.Unavailable, "worker_id: worker %d: forward the drain to its server: %v", id, err)
		}
		return &aionv1.DrainWorkerResponse{Worker: c.s.workerView(info)}, nil
	}
	c.s.reg.Drain(id)
	info, _ = c.s.reg.Lookup(id)
	return &aionv1.DrainWorkerResponse{Worker: c.s.workerView(info)}, nil
}

func (c *clusterService) Watch(r *aionv1.WatchRequest, stream grpc.ServerStreamingServer[aionv1.ClusterEvent]) error {
	from, err := watchFrom(r)
	if err != nil {
		return err
	}
	start, sub := c.s.subscribeAfter(from)
	defer sub.Close()
	caller := c.s.caller(stream.Context())
	if err := stream.Send(startToProto(caller, start, c.s)); err != nil {
		return err
	}
	for {
		e, err := sub.Next(stream.Context())
		switch {
		case errors.Is(err, events.ErrSlow):
			return status.Errorf(codes.ResourceExhausted, "watch: %v; watch again after the last event received (or for a fresh snapshot)", err)
		case errors.Is(err, events.ErrClosed):
			return status.Error(codes.Unavailable, "watch: server is shutting down")
		case err != nil:
			return status.FromContextError(err).Err()
		}
		e, ok := scopeEvent(caller, e)
		if !ok {
			continue
		}
		if err := stream.Send(eventToProto(e, c.s)); err != nil {
			return err
		}
	}
}

// watchFrom is the position a Watch asks to resume from; the zero
// position (no epoch) asks for a snapshot.
func watchFrom(r *aionv1.WatchRequest) (events.Position, error) {
	if r.GetEpoch() == "" {
		if r.GetAfterSequence() != 0 {
			return events.Position{}, status.Errorf(codes.InvalidArgument,
				"epoch: required with after_sequence %d (the epoch of the stream it came from)", r.GetAfterSequence())
		}
		return events.Position{}, nil
	}
	epoch, err := events.ParseEpoch(r.GetEpoch())
	if err != nil {
		return events.Position{}, status.Errorf(codes.InvalidArgument, "epoch: %v", err)
	}
	return events.Position{Epoch: epoch, Seq: r.GetAfterSequence()}, nil
}

// subscribeAfter subscribes to the bus from a position, or from a fresh
// snapshot for the zero position.
func (s *Server) subscribeAfter(from events.Position) (events.Start, *events.Subscription) {
	return s.bus.SubscribeAfter(from, watchBuffer)
}

// startToProto is the first message of a stream: the snapshot caller may
// see, or the news that it resumed; either names the stream's epoch.
func startToProto(caller namespace.Identity, st events.Start, s *Server) *aionv1.ClusterEvent {
	var out *aionv1.ClusterEvent
	if st.Resumed {
		out = &aionv1.ClusterEvent{Sequence: st.After.Seq, Time: timestamppb.New(st.Time),
			Event: &aionv1.ClusterEvent_Resumed{Resumed: &aionv1.Resumed{}}}
	} else {
		out = snapshotToProto(scopeSnapshot(caller, st.Snapshot), s)
	}
	out.Epoch = st.After.Epoch.String()
	return out
}

func snapshotToProto(snap events.Snapshot, s *Server) *aionv1.ClusterEvent {
	cs := &aionv1.ClusterSnapshot{}
	for _, w := range snap.Workers {
		cs.Workers = append(cs.Workers, s.workerView(w))
	}
	for _, ns := range snap.Namespaces {
		cs.Namespaces = append(cs.Namespaces, namespaceToProto(ns))
	}
	cs.Pools = poolsToProto(snap.Pools)
	return &aionv1.ClusterEvent{Sequence: snap.Seq, Time: timestamppb.New(snap.Time),
		Event: &aionv1.ClusterEvent_Snapshot{Snapshot: cs}}
}

func poolsToProto(pools []events.Pool) []*aionv1.PoolStats {
	out := make([]*aionv1.PoolStats, 0, len(pools))
	for _, p := range pools {
		out = append(out, &aionv1.PoolStats{Namespace: p.Namespace, TaskQueue: p.TaskQueue, Backlog: uint64(p.Backlog),
			OldestAge: durationpb.New(p.OldestAge), Workers: uint32(p.Workers), SlotsFree: uint32(p.SlotsFree)})
	}
	return out
}

func eventToProto(e events.Event, s *Server) *aionv1.ClusterEvent {
	out := &aionv1.ClusterEvent{Sequence: e.Seq, Time: timestamppb.New(e.Time)}
	switch e.Kind {
	case events.WorkerConnected:
		out.Event = &aionv1.ClusterEvent_WorkerConnected{WorkerConnected: &aionv1.WorkerConnected{
			Worker: workerToProto(*e.Worker, e.Worker.ConnectedAt, "")}}
	case events.WorkerDraining:
		out.Event = &aionv1.ClusterEvent_WorkerDraining{WorkerDraining: &aionv1.WorkerDraining{WorkerId: uint64(e.Worker.ID)}}
	case events.WorkerDisconnected:
		out.Event = &aionv1.ClusterEvent_WorkerDisconnected{WorkerDisconnected: &aionv1.WorkerDisconnected{
			WorkerId: uint64(e.Worker.ID), Namespaces: e.Worker.Namespaces, Reason: disconnectReasons[e.Reason]}}
	case events.NamespaceCreated:
		out.Event = &aionv1.ClusterEvent_NamespaceCreated{NamespaceCreated: &aionv1.NamespaceCreated{Namespace: namespaceToProto(*e.Namespace)}}
	case events.PlacementChanged:
		out.Event = &aionv1.ClusterEvent_PlacementChanged{PlacementChanged: &aionv1.PlacementChanged{Namespace: namespaceToProto(*e.Namespace)}}
	case events.PoolStatsUpdated:
		out.Event = &aionv1.ClusterEvent_PoolStats{PoolStats: &aionv1.PoolStatsUpdate{Pools: poolsToProto(e.Pools)}}
	case events.RunStarted:
		out.Event = &aionv1.ClusterEvent_RunStarted{RunStarted: &aionv1.RunStarted{Run: runEventToProto(e)}}
	case events.RunClosed:
		out.Event = &aionv1.ClusterEvent_RunClosed{RunClosed: &aionv1.RunClosed{Run: runEventToProto(e)}}
	case events.ScheduleFired:
		f := e.Fire
		out.Event = &aionv1.ClusterEvent_ScheduleFired{ScheduleFired: &aionv1.ScheduleFired{Namespace: f.Namespace,
			ScheduleId: f.ScheduleID, Outcome: outcomesToProto[f.Outcome], Origin: f.Origin, NominalTime: ts(f.Nominal),
			Count: int64(f.Count), ActionId: f.ActionID, RunId: f.RunID, Detail: f.Detail}}
	}
	return out
}

// runEventToProto is the run a run event names, stamped with its start or
// close time.
func runEventToProto(e events.Event) *aionv1.Run {
	r := e.Run
	run := &aionv1.Run{Namespace: r.Namespace, WorkflowId: r.WorkflowID, RunId: r.RunID, WorkflowType: r.WorkflowType,
		TaskQueue: r.TaskQueue, Status: engine.RunStatusProto(r.Status)}
	if e.Kind == events.RunStarted {
		run.StartTime = ts(e.Time)
	} else {
		run.CloseTime = ts(e.Time)
	}
	return run
}

// poolStats samples every pool with workers or waiting work.
func (s *Server) poolStats() []events.Pool {
	byPool := map[registry.PoolAddress]*events.Pool{}
	get := func(p registry.PoolAddress) *events.Pool {
		if byPool[p] == nil {
			byPool[p] = &events.Pool{Namespace: p.Namespace, TaskQueue: p.TaskQueue}
		}
		return byPool[p]
	}
	workers := s.reg.Workers()
	if s.cluster != nil { // and the other servers' workers, as last published
		for _, w := range s.bus.Snapshot().Workers {
			if w.Server != s.self.Name {
				workers = append(workers, w)
			}
		}
	}
	for _, w := range workers {
		for _, ns := range w.Namespaces {
			p := get(registry.Pool(ns, w.TaskQueue))
			p.Workers++
			if !w.Draining {
				p.SlotsFree += w.Slots - w.SlotsInUse
			}
		}
	}
	for _, b := range s.eng.Backlog() {
		p := get(registry.Pool(b.Namespace, b.TaskQueue))
		p.Backlog, p.OldestAge = b.Waiting, b.OldestAge
	}
	out := make([]events.Pool, 0, len(byPool))
	for _, p := range byPool {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b events.Pool) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.TaskQueue, b.TaskQueue))
	})
	return out
}

// publishPoolStats samples the pools every interval and publishes the
// sample when it differs from the last one published (a waiting backlog
// ages, so it is published every interval; an idle cluster is quiet).
func (s *Server) publishPoolStats(ctx context.Context, every time.Duration) {
	defer s.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	var last []events.Pool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pools := s.poolStats()
			if slices.Equal(pools, last) {
				continue
			}
			last = pools
			s.bus.Publish(events.Event{Kind: events.PoolStatsUpdated, Pools: pools})
		}
	}
}

func namespaceEvent(kind events.Kind, ns store.Namespace) events.Event {
	return events.Event{Kind: kind, Namespace: &ns}
}
