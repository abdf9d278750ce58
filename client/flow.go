package client

import (
	"context"
	"fmt"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// FlowKind says what a flow limit counts.
type FlowKind string

// The flow kinds.
const (
	// FlowActivity: attempts of activities of one activity type.
	FlowActivity FlowKind = "activity"
	// FlowWorkflow: runs of one workflow type.
	FlowWorkflow FlowKind = "workflow"
)

// FlowLimit is a namespace's flow control for one activity or workflow
// type: at most Concurrency running at once per concurrency key
// (ScheduleOptions.ConcurrencyKey), and at most Rate starts a second in
// bursts of up to Burst, for the whole type or, with PerKey, per
// concurrency key. Work over a limit waits; it is never failed. A zero
// Concurrency or Rate leaves that part unlimited; a zero Burst with a Rate
// means one second's worth.
type FlowLimit struct {
	Namespace   string    `json:"namespace"`
	Kind        FlowKind  `json:"kind"`
	Type        string    `json:"type"`
	Concurrency int       `json:"concurrency,omitempty"`
	Rate        float64   `json:"rate,omitempty"`
	Burst       int       `json:"burst,omitempty"`
	PerKey      bool      `json:"per_key,omitempty"`
	UpdatedTime time.Time `json:"updated_time,omitzero"`
}

// String renders the limit's figures, e.g. "concurrency 2 per key, rate
// 200/s burst 20".
func (l FlowLimit) String() string {
	var s string
	if l.Concurrency != 0 {
		s = fmt.Sprintf("concurrency %d per key", l.Concurrency)
	}
	if l.Rate != 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("rate %g/s burst %d", l.Rate, l.Burst)
		if l.PerKey {
			s += " per key"
		}
	}
	return s
}

func flowKindToProto(k FlowKind) aionv1.FlowKind {
	switch k {
	case FlowActivity:
		return aionv1.FlowKind_FLOW_KIND_ACTIVITY
	case FlowWorkflow:
		return aionv1.FlowKind_FLOW_KIND_WORKFLOW
	}
	return aionv1.FlowKind_FLOW_KIND_UNSPECIFIED
}

func flowKindFromProto(k aionv1.FlowKind) FlowKind {
	switch k {
	case aionv1.FlowKind_FLOW_KIND_ACTIVITY:
		return FlowActivity
	case aionv1.FlowKind_FLOW_KIND_WORKFLOW:
		return FlowWorkflow
	}
	return ""
}

// toProto sends the figures that are set (not zero); the server refuses
// the negative ones.
func (l FlowLimit) toProto() *aionv1.FlowLimit {
	p := &aionv1.FlowLimit{Namespace: l.Namespace, Kind: flowKindToProto(l.Kind), Type: l.Type, PerKey: l.PerKey}
	if l.Concurrency != 0 {
		c := int32(l.Concurrency)
		p.Concurrency = &c
	}
	if l.Rate != 0 {
		r := l.Rate
		p.Rate = &r
	}
	if l.Burst != 0 {
		b := int32(l.Burst)
		p.Burst = &b
	}
	return p
}

func flowLimitFromProto(p *aionv1.FlowLimit) FlowLimit {
	return FlowLimit{Namespace: p.GetNamespace(), Kind: flowKindFromProto(p.GetKind()), Type: p.GetType(),
		Concurrency: int(p.GetConcurrency()), Rate: p.GetRate(), Burst: int(p.GetBurst()), PerKey: p.GetPerKey(),
		UpdatedTime: timeFromProto(p.GetUpdatedTime())}
}

// SetFlowLimit sets the flow limit of l's namespace, kind and type,
// replacing the one it had, and returns it as recorded. Bad figures are
// InvalidArgument naming the field; a namespace never minted is NotFound.
func (c *Client) SetFlowLimit(ctx context.Context, l FlowLimit) (FlowLimit, error) {
	resp, err := c.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: l.toProto()})
	if err != nil {
		return FlowLimit{}, rpcError(fmt.Sprintf("set the %s limit of %q in namespace %q", l.Kind, l.Type, l.Namespace), err)
	}
	return flowLimitFromProto(resp.GetLimit()), nil
}

// GetFlowLimit returns the flow limit of one type; the error has code
// NotFound when it has none.
func (c *Client) GetFlowLimit(ctx context.Context, namespace string, kind FlowKind, typ string) (FlowLimit, error) {
	resp, err := c.namespaces.GetFlowLimit(ctx, &aionv1.GetFlowLimitRequest{Namespace: namespace, Kind: flowKindToProto(kind), Type: typ})
	if err != nil {
		return FlowLimit{}, rpcError(fmt.Sprintf("get the %s limit of %q in namespace %q", kind, typ, namespace), err)
	}
	return flowLimitFromProto(resp.GetLimit()), nil
}

// ListFlowLimits returns a namespace's flow limits, ordered by kind and type.
func (c *Client) ListFlowLimits(ctx context.Context, namespace string) ([]FlowLimit, error) {
	resp, err := c.namespaces.ListFlowLimits(ctx, &aionv1.ListFlowLimitsRequest{Namespace: namespace})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("list the flow limits of namespace %q", namespace), err)
	}
	out := make([]FlowLimit, len(resp.GetLimits()))
	for i, p := range resp.GetLimits() {
		out[i] = flowLimitFromProto(p)
	}
	return out, nil
}

// ClearFlowLimit removes the flow limit of one type; cleared is false when
// it had none.
func (c *Client) ClearFlowLimit(ctx context.Context, namespace string, kind FlowKind, typ string) (cleared bool, err error) {
	resp, err := c.namespaces.ClearFlowLimit(ctx, &aionv1.ClearFlowLimitRequest{Namespace: namespace, Kind: flowKindToProto(kind), Type: typ})
	if err != nil {
		return false, rpcError(fmt.Sprintf("clear the %s limit of %q in namespace %q", kind, typ, namespace), err)
	}
	return resp.GetCleared(), nil
}
