package server_test

import (
	"context"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func activityLimit(ns, typ string) *aionv1.FlowLimit {
	return &aionv1.FlowLimit{Namespace: ns, Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: typ}
}

// Set, get, list and clear over the wire; a rate's burst defaults to one
// second's worth; a type without a limit is NotFound to get.
func TestFlowLimitsRoundTripOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "flow"}); err != nil {
		t.Fatal(err)
	}
	l := activityLimit("flow", "charge")
	l.Concurrency, l.Rate, l.PerKey = proto.Int32(2), proto.Float64(2.5), true
	set, err := b.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: l})
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	if got := set.GetLimit(); got.GetConcurrency() != 2 || got.GetRate() != 2.5 || got.GetBurst() != 3 || !got.GetPerKey() || got.GetUpdatedTime() == nil {
		t.Fatalf("set answered %v; want concurrency 2, rate 2.5, the default burst 3, per key, a time", got)
	}
	got, err := b.namespaces.GetFlowLimit(ctx, &aionv1.GetFlowLimitRequest{Namespace: "flow", Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: "charge"})
	if err != nil || !proto.Equal(got.GetLimit(), set.GetLimit()) {
		t.Fatalf("get: %v, %v; want %v", got, err, set.GetLimit())
	}
	w := activityLimit("flow", "order")
	w.Rate = proto.Float64(1)
	if _, err := b.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: w}); err != nil {
		t.Fatal(err)
	}
	list, err := b.namespaces.ListFlowLimits(ctx, &aionv1.ListFlowLimitsRequest{Namespace: "flow"})
	if err != nil || len(list.GetLimits()) != 2 || list.GetLimits()[0].GetType() != "charge" || list.GetLimits()[1].GetType() != "order" {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, want := range []bool{true, false} {
		cl, err := b.namespaces.ClearFlowLimit(ctx, &aionv1.ClearFlowLimitRequest{Namespace: "flow", Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: "charge"})
		if err != nil || cl.GetCleared() != want {
			t.Fatalf("clear: %v, %v; want cleared %v", cl, err, want)
		}
	}
	_, err = b.namespaces.GetFlowLimit(ctx, &aionv1.GetFlowLimitRequest{Namespace: "flow", Kind: aionv1.FlowKind_FLOW_KIND_ACTIVITY, Type: "charge"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("get a cleared limit: %v, want NotFound", err)
	}
}

// Every refusal is InvalidArgument naming the field and its value (or
// NotFound for a namespace never minted), and changes nothing.
func TestFlowLimitBadInputMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "flow"}); err != nil {
		t.Fatal(err)
	}
	good := activityLimit("flow", "t")
	good.Concurrency = proto.Int32(3)
	if _, err := b.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: good}); err != nil {
		t.Fatal(err)
	}
	with := func(f func(l *aionv1.FlowLimit)) *aionv1.FlowLimit {
		l := activityLimit("flow", "t")
		f(l)
		return l
	}
	cases := []struct {
		name string
		l    *aionv1.FlowLimit
		code codes.Code
		says string
	}{
		{"no limit", nil, codes.InvalidArgument, "limit: missing"},
		{"kind unspecified", with(func(l *aionv1.FlowLimit) { l.Kind = 0; l.Concurrency = proto.Int32(1) }), codes.InvalidArgument, "kind: FLOW_KIND_UNSPECIFIED"},
		{"kind unknown", with(func(l *aionv1.FlowLimit) { l.Kind = 9; l.Concurrency = proto.Int32(1) }), codes.InvalidArgument, "kind: 9"},
		{"concurrency 0", with(func(l *aionv1.FlowLimit) { l.Concurrency = proto.Int32(0) }), codes.InvalidArgument, "concurrency: 0"},
		{"concurrency negative", with(func(l *aionv1.FlowLimit) { l.Concurrency = proto.Int32(-4) }), codes.InvalidArgument, "concurrency: -4"},
		{"rate 0", with(func(l *aionv1.FlowLimit) { l.Rate = proto.Float64(0) }), codes.InvalidArgument, "rate: 0"},
		{"rate negative", with(func(l *aionv1.FlowLimit) { l.Rate = proto.Float64(-1.5) }), codes.InvalidArgument, "rate: -1.5"},
		{"burst 0", with(func(l *aionv1.FlowLimit) { l.Rate = proto.Float64(5); l.Burst = proto.Int32(0) }), codes.InvalidArgument, "burst: 0"},
		{"burst without a rate", with(func(l *aionv1.FlowLimit) { l.Concurrency = proto.Int32(1); l.Burst = proto.Int32(5) }), codes.InvalidArgument, "burst: 5"},
		{"per key without a rate", with(func(l *aionv1.FlowLimit) { l.Concurrency = proto.Int32(1); l.PerKey = true }), codes.InvalidArgument, "per_key"},
		{"nothing limited", with(func(l *aionv1.FlowLimit) {}), codes.InvalidArgument, "neither is set"},
		{"workflow type rate (not enforced)", with(func(l *aionv1.FlowLimit) { l.Kind = aionv1.FlowKind_FLOW_KIND_WORKFLOW; l.Rate = proto.Float64(5) }), codes.InvalidArgument, "rate limits of workflow types are not enforced"},
		{"no type", with(func(l *aionv1.FlowLimit) { l.Type = ""; l.Concurrency = proto.Int32(1) }), codes.InvalidArgument, "activity_type"},
		{"bad namespace", with(func(l *aionv1.FlowLimit) { l.Namespace = "a b"; l.Concurrency = proto.Int32(1) }), codes.InvalidArgument, "namespace"},
		{"namespace never minted", with(func(l *aionv1.FlowLimit) { l.Namespace = "ghost"; l.Concurrency = proto.Int32(1) }), codes.NotFound, `"ghost"`},
	}
	for _, c := range cases {
		_, err := b.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: c.l})
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.says) {
			t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.says)
		}
	}
	_, err := b.namespaces.ClearFlowLimit(ctx, &aionv1.ClearFlowLimitRequest{Namespace: "flow", Kind: 7, Type: "t"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "kind: 7") {
		t.Errorf("clear with kind 7: %v, want InvalidArgument naming it", err)
	}
	list, err := b.namespaces.ListFlowLimits(ctx, &aionv1.ListFlowLimitsRequest{Namespace: "flow"})
	if err != nil || len(list.GetLimits()) != 1 || list.GetLimits()[0].GetConcurrency() != 3 {
		t.Fatalf("after the refusals: %v, %v; want only the concurrency-3 limit", list, err)
	}
}

// Why over the wire names the concurrency key that holds an activity, how
// many of its limit run, and for a rate limit until when.
func TestWhyNamesTheFlowLimitOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "flow"}); err != nil {
		t.Fatal(err)
	}
	conc := activityLimit("flow", "charge")
	conc.Concurrency = proto.Int32(1)
	rate := activityLimit("flow", "mail")
	rate.Rate, rate.Burst = proto.Float64(0.001), proto.Int32(1)
	for _, l := range []*aionv1.FlowLimit{conc, rate} {
		if _, err := b.namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: l}); err != nil {
			t.Fatal(err)
		}
	}
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"flow"}, ActivityTypes: []string{"charge", "mail"}, Slots: 10})
	for _, id := range []string{"c1", "c2"} {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "flow", Id: id, ActivityType: "charge", ConcurrencyKey: "acct-9"})
	}
	for _, id := range []string{"m1", "m2"} {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "flow", Id: id, ActivityType: "mail"})
	}
	started := map[string]bool{}
	for range 2 {
		started[w.nextTask().GetActivityId()] = true
	}
	if !started["c1"] || !started["m1"] {
		t.Fatalf("started %v, want c1 and m1", started)
	}
	got, err := b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "flow", Id: "c2"})
	if err != nil || got.GetReason() != "concurrency_limit" || got.GetConcurrencyKey() != "acct-9" || got.GetRunning() != 1 || got.GetLimit() != 1 {
		t.Fatalf("why c2: %v, %v; want concurrency_limit of key acct-9, 1 running of 1", got, err)
	}
	got, err = b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "flow", Id: "m2"})
	if err != nil || got.GetReason() != "rate_limited" || got.GetUntil() == nil || !strings.Contains(got.GetMessage(), `"mail"`) {
		t.Fatalf("why m2: %v, %v; want rate_limited with an until", got, err)
	}
}
