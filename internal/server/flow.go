package server

import (
	"context"
	"fmt"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/store"
)

// flowKinds maps the wire's flow kinds to the store's.
var flowKinds = map[aionv1.FlowKind]store.FlowKind{
	aionv1.FlowKind_FLOW_KIND_ACTIVITY: store.FlowActivity,
	aionv1.FlowKind_FLOW_KIND_WORKFLOW: store.FlowWorkflow,
}

func flowKindFromProto(k aionv1.FlowKind) (store.FlowKind, error) {
	if kind, ok := flowKinds[k]; ok {
		return kind, nil
	}
	return "", fmt.Errorf("kind: %s (%d) is not FLOW_KIND_ACTIVITY or FLOW_KIND_WORKFLOW: %w", k, int32(k), errInvalid)
}

func flowKindToProto(k store.FlowKind) aionv1.FlowKind {
	for p, kind := range flowKinds {
		if kind == k {
			return p
		}
	}
	return aionv1.FlowKind_FLOW_KIND_UNSPECIFIED
}

// flowLimitFromProto reads a limit, refusing a figure that is given but not
// above 0 (the store's 0 means "not limited", so it must be checked here).
func flowLimitFromProto(p *aionv1.FlowLimit) (store.FlowLimit, error) {
	if p == nil {
		return store.FlowLimit{}, fmt.Errorf("limit: missing: %w", errInvalid)
	}
	kind, err := flowKindFromProto(p.GetKind())
	if err != nil {
		return store.FlowLimit{}, err
	}
	l := store.FlowLimit{Namespace: p.GetNamespace(), Kind: kind, Type: p.GetType(), PerKey: p.GetPerKey()}
	if p.Concurrency != nil {
		if p.GetConcurrency() <= 0 {
			return store.FlowLimit{}, fmt.Errorf("concurrency: %d is not above 0: %w", p.GetConcurrency(), errInvalid)
		}
		l.Concurrency = int(p.GetConcurrency())
	}
	if p.Rate != nil {
		if !(p.GetRate() > 0) {
			return store.FlowLimit{}, fmt.Errorf("rate: %g is not above 0: %w", p.GetRate(), errInvalid)
		}
		l.Rate = p.GetRate()
	}
	if p.Burst != nil {
		if p.GetBurst() < 1 {
			return store.FlowLimit{}, fmt.Errorf("burst: %d is less than 1: %w", p.GetBurst(), errInvalid)
		}
		l.Burst = int(p.GetBurst())
	}
	return l, nil
}

func flowLimitToProto(l store.FlowLimit) *aionv1.FlowLimit {
	p := &aionv1.FlowLimit{Namespace: l.Namespace, Kind: flowKindToProto(l.Kind), Type: l.Type, PerKey: l.PerKey,
		UpdatedTime: ts(l.UpdatedAt)}
	if l.Concurrency > 0 {
		c := int32(l.Concurrency)
		p.Concurrency = &c
	}
	if l.Rate > 0 {
		r, b := l.Rate, int32(l.Burst)
		p.Rate, p.Burst = &r, &b
	}
	return p
}

func (n *namespaceService) SetFlowLimit(ctx context.Context, r *aionv1.SetFlowLimitRequest) (*aionv1.SetFlowLimitResponse, error) {
	l, err := flowLimitFromProto(r.GetLimit())
	if err != nil {
		return nil, toStatus(fmt.Errorf("set flow limit: %w", err))
	}
	got, err := n.s.eng.SetFlowLimit(ctx, n.s.caller(ctx), l)
	if err != nil {
		return nil, toStatus(err)
	}
	n.announceLimits(got.Namespace)
	n.s.log.Info("flow limit set", "namespace", got.Namespace, "kind", got.Kind, "type", got.Type, "limit", got.String())
	return &aionv1.SetFlowLimitResponse{Limit: flowLimitToProto(got)}, nil
}

func (n *namespaceService) ClearFlowLimit(ctx context.Context, r *aionv1.ClearFlowLimitRequest) (*aionv1.ClearFlowLimitResponse, error) {
	kind, err := flowKindFromProto(r.GetKind())
	if err != nil {
		return nil, toStatus(fmt.Errorf("clear flow limit: %w", err))
	}
	had, err := n.s.eng.ClearFlowLimit(ctx, n.s.caller(ctx), r.GetNamespace(), kind, r.GetType())
	if err != nil {
		return nil, toStatus(err)
	}
	if had {
		n.announceLimits(r.GetNamespace())
		n.s.log.Info("flow limit cleared", "namespace", r.GetNamespace(), "kind", kind, "type", r.GetType())
	}
	return &aionv1.ClearFlowLimitResponse{Cleared: had}, nil
}

func (n *namespaceService) GetFlowLimit(ctx context.Context, r *aionv1.GetFlowLimitRequest) (*aionv1.GetFlowLimitResponse, error) {
	kind, err := flowKindFromProto(r.GetKind())
	if err != nil {
		return nil, toStatus(fmt.Errorf("get flow limit: %w", err))
	}
	all, err := n.s.eng.FlowLimits(ctx, n.s.caller(ctx), r.GetNamespace())
	if err != nil {
		return nil, toStatus(err)
	}
	for _, l := range all {
		if l.Kind == kind && l.Type == r.GetType() {
			return &aionv1.GetFlowLimitResponse{Limit: flowLimitToProto(l)}, nil
		}
	}
	return nil, toStatus(fmt.Errorf("%s type %q in namespace %q has no flow limit: %w", kind, r.GetType(), r.GetNamespace(), engine.ErrNotFound))
}

func (n *namespaceService) ListFlowLimits(ctx context.Context, r *aionv1.ListFlowLimitsRequest) (*aionv1.ListFlowLimitsResponse, error) {
	all, err := n.s.eng.FlowLimits(ctx, n.s.caller(ctx), r.GetNamespace())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.ListFlowLimitsResponse{Limits: make([]*aionv1.FlowLimit, len(all))}
	for i, l := range all {
		out.Limits[i] = flowLimitToProto(l)
	}
	return out, nil
}

// announceLimits tells the other servers of a cluster that a namespace's
// flow limits changed: they read them back from the store, as they do its
// placement.
func (n *namespaceService) announceLimits(ns string) {
	if n.s.cluster != nil {
		n.s.cluster.AnnounceNamespace(ns)
	}
}
