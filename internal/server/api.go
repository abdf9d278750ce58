package server

import (
	"context"
	"fmt"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracing"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type activityService struct {
	aionv1.UnimplementedActivityServiceServer
	s *Server
}

func (a *activityService) Schedule(ctx context.Context, r *aionv1.ScheduleRequest) (*aionv1.ScheduleResponse, error) {
	req, err := requestFromProto(r)
	if err != nil {
		return nil, toStatus(err)
	}
	var span trace.Span
	if t := a.s.tracing; t != nil {
		span = a.traceSchedule(t, &req)
	}
	rec, existing, err := a.s.eng.Schedule(ctx, a.s.caller(ctx), req)
	if span != nil {
		endSchedule(span, rec.ID, existing, err)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.ScheduleResponse{Activity: activityToProto(rec, nil), Existing: existing}, nil
}

func (a *activityService) ScheduleBatch(ctx context.Context, r *aionv1.ScheduleBatchRequest) (*aionv1.ScheduleBatchResponse, error) {
	n := len(r.GetRequests())
	if n == 0 || n > limit.BatchRequests {
		return nil, status.Errorf(codes.InvalidArgument, "requests: %d given, want 1 to %d", n, limit.BatchRequests)
	}
	out := &aionv1.ScheduleBatchResponse{Results: make([]*aionv1.ScheduleBatchResult, n)}
	reqs := make([]engine.Request, 0, n)
	index := make([]int, 0, n) // position in r of each request passed on
	for i, pr := range r.GetRequests() {
		req, err := requestFromProto(pr)
		if err != nil {
			out.Results[i] = batchError(fmt.Errorf("requests[%d]: %w", i, err))
			continue
		}
		reqs = append(reqs, req)
		index = append(index, i)
	}
	var spans []trace.Span
	if t := a.s.tracing; t != nil {
		spans = make([]trace.Span, len(reqs))
		for j := range reqs {
			spans[j] = a.traceSchedule(t, &reqs[j])
		}
	}
	for j, res := range a.s.eng.ScheduleBatch(ctx, a.s.caller(ctx), reqs) {
		i := index[j]
		if spans != nil && spans[j] != nil {
			endSchedule(spans[j], res.Activity.ID, res.Existing, res.Err)
		}
		if res.Err != nil {
			out.Results[i] = batchError(fmt.Errorf("requests[%d]: %w", i, res.Err))
			continue
		}
		out.Results[i] = &aionv1.ScheduleBatchResult{
			Result:   &aionv1.ScheduleBatchResult_Activity{Activity: activityToProto(res.Activity, nil)},
			Existing: res.Existing,
		}
	}
	return out, nil
}

// traceSchedule starts the span of scheduling req, child of the caller's
// trace context, and gives req the span's context to keep instead; nil when
// the caller's trace context is bad, which the engine refuses.
func (a *activityService) traceSchedule(t *tracing.Tracing, req *engine.Request) trace.Span {
	if req.Trace.Validate("") != nil {
		return nil
	}
	var span trace.Span
	span, req.Trace = startSpan(t, spanSchedule, req.Trace, attrNamespace.String(req.Namespace),
		attrActivityType.String(req.ActivityType), attrTaskQueue.String(req.TaskQueue))
	return span
}

// endSchedule ends a schedule span with the activity's id, and whether an
// identical request had scheduled it before.
func endSchedule(span trace.Span, id string, existing bool, err error) {
	if span.IsRecording() && id != "" {
		span.SetAttributes(attrActivityID.String(id))
		if existing {
			span.SetAttributes(attrExisting.Bool(true))
		}
	}
	endSpan(span, err)
}

func batchError(err error) *aionv1.ScheduleBatchResult {
	return &aionv1.ScheduleBatchResult{Result: &aionv1.ScheduleBatchResult_Error{
		Error: &aionv1.Status{Code: int32(codeOf(err)), Message: err.Error()},
	}}
}

func checkRef(ns, id string) error {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return err
	}
	return name.Check("id", id, name.MaxID)
}

func (a *activityService) Get(ctx context.Context, r *aionv1.GetActivityRequest) (*aionv1.GetActivityResponse, error) {
	if err := checkRef(r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	v, err := a.s.eng.Get(ctx, a.s.caller(ctx), r.GetNamespace(), r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.GetActivityResponse{Activity: activityToProto(v.Activity, v.Attempts)}, nil
}

func (a *activityService) Wait(ctx context.Context, r *aionv1.WaitRequest) (*aionv1.WaitResponse, error) {
	if err := checkRef(r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	v, err := a.s.eng.Wait(ctx, a.s.caller(ctx), r.GetNamespace(), r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.WaitResponse{Activity: activityToProto(v.Activity, v.Attempts)}, nil
}

func (a *activityService) List(ctx context.Context, r *aionv1.ListActivitiesRequest) (*aionv1.ListActivitiesResponse, error) {
	if err := name.Check("namespace", r.GetNamespace(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	state, err := stateFromProto(r.GetState())
	if err != nil {
		return nil, toStatus(err)
	}
	recs, next, err := a.s.eng.List(ctx, a.s.caller(ctx), engine.ListFilter{
		Namespace:    r.GetNamespace(),
		State:        state,
		ActivityType: r.GetActivityType(),
		PageSize:     int(r.GetPageSize()),
		PageToken:    r.GetPageToken(),
		Payloads:     r.GetIncludePayloads(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.ListActivitiesResponse{NextPageToken: next}
	for _, rec := range recs {
		out.Activities = append(out.Activities, activityToProto(rec, nil))
	}
	return out, nil
}

type namespaceService struct {
	aionv1.UnimplementedNamespaceServiceServer
	s *Server
}

func (n *namespaceService) Create(ctx context.Context, r *aionv1.CreateNamespaceRequest) (*aionv1.CreateNamespaceResponse, error) {
	if err := name.Check("name", r.GetName(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	if err := namespace.Authorize(n.s.caller(ctx), r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	ns, created, err := n.s.minter.Create(ctx, r.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.CreateNamespaceResponse{Namespace: namespaceToProto(ns), Created: created}, nil
}

func (n *namespaceService) Get(ctx context.Context, r *aionv1.GetNamespaceRequest) (*aionv1.GetNamespaceResponse, error) {
	if err := name.Check("name", r.GetName(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	if err := namespace.Authorize(n.s.caller(ctx), r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	ns, err := n.s.st.GetNamespace(ctx, r.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.GetNamespaceResponse{Namespace: namespaceToProto(ns)}, nil
}

func (n *namespaceService) List(ctx context.Context, r *aionv1.ListNamespacesRequest) (*aionv1.ListNamespacesResponse, error) {
	all, err := n.s.st.ListNamespaces(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	caller := n.s.caller(ctx)
	out := &aionv1.ListNamespacesResponse{}
	for _, ns := range all {
		if caller.Allows(ns.Name) {
			out.Namespaces = append(out.Namespaces, namespaceToProto(ns))
		}
	}
	return out, nil
}

func (n *namespaceService) SetPlacement(ctx context.Context, r *aionv1.SetPlacementRequest) (*aionv1.SetPlacementResponse, error) {
	if err := name.Check("name", r.GetName(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	p, err := placementFromProto(r.GetPlacement())
	if err != nil {
		return nil, toStatus(err)
	}
	for i, node := range p.Nodes {
		if err := name.Check(fmt.Sprintf("placement.nodes[%d]", i), node, name.MaxName); err != nil {
			return nil, toStatus(err)
		}
	}
	if err := namespace.Authorize(n.s.caller(ctx), r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	ns, err := n.s.minter.SetPlacement(ctx, r.GetName(), p)
	if err != nil {
		return nil, toStatus(err)
	}
	n.s.eng.NoteNamespace(ns)
	n.s.bus.Publish(namespaceEvent(events.PlacementChanged, ns))
	if n.s.cluster != nil {
		n.s.cluster.AnnounceNamespace(ns.Name)
	}
	n.s.log.Info("placement changed", "namespace", ns.Name, "placement", ns.Placement.String())
	return &aionv1.SetPlacementResponse{Namespace: namespaceToProto(ns)}, nil
}

func (n *namespaceService) SetRetention(ctx context.Context, r *aionv1.SetRetentionRequest) (*aionv1.SetRetentionResponse, error) {
	if err := name.Check("name", r.GetName(), name.MaxName); err != nil {
		return nil, toStatus(err)
	}
	d, err := fromDur("retention", r.GetRetention())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := store.Retention(d).Validate(); err != nil {
		return nil, toStatus(fmt.Errorf("retention: %w: %w", err, errInvalid))
	}
	if err := namespace.Authorize(n.s.caller(ctx), r.GetName()); err != nil {
		return nil, toStatus(err)
	}
	ns, err := n.s.st.SetRetention(ctx, r.GetName(), store.Retention(d))
	if err != nil {
		return nil, toStatus(err)
	}
	n.s.log.Info("retention changed", "namespace", ns.Name, "retention", ns.Retention.Effective().String())
	return &aionv1.SetRetentionResponse{Namespace: namespaceToProto(ns)}, nil
}

func (a *activityService) Why(ctx context.Context, r *aionv1.WhyRequest) (*aionv1.WhyResponse, error) {
	if err := checkRef(r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	ex, err := a.s.eng.Why(ctx, a.s.caller(ctx), r.GetNamespace(), r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return whyToProto(ex), nil
}

func whyToProto(ex engine.Explanation) *aionv1.WhyResponse {
	return &aionv1.WhyResponse{State: activityStates[ex.State], Reason: string(ex.Reason), Message: ex.Message, Until: ts(ex.Until),
		Ahead: uint32(ex.Ahead), Workers: uint32(ex.Workers), Eligible: uint32(ex.Eligible), FreeSlots: uint32(ex.FreeSlots),
		Nodes: ex.Nodes, WorkerId: uint64(ex.WorkerID), ConcurrencyKey: ex.ConcurrencyKey, Running: uint32(ex.Running),
		Limit: uint32(ex.Limit)}
}
