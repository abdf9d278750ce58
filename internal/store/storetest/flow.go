package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

func runFlow(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("FlowLimitsRoundTripReplaceAndClear", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, ns := range []string{"a", "b"} {
			if _, _, err := s.RegisterNamespace(ctx, ns, store.OriginExplicit); err != nil {
				t.Fatal(err)
			}
		}
		before := time.Now().Add(-time.Second)
		puts := []store.FlowLimit{
			{Namespace: "b", Kind: store.FlowActivity, Type: "charge", Concurrency: 2},
			{Namespace: "a", Kind: store.FlowWorkflow, Type: "order", Rate: 2.5},
			{Namespace: "a", Kind: store.FlowActivity, Type: "mail", Concurrency: 1, Rate: 200, Burst: 20, PerKey: true},
			{Namespace: "a", Kind: store.FlowActivity, Type: "charge", Rate: 1},
		}
		for _, l := range puts {
			got, err := s.PutFlowLimit(ctx, l)
			if err != nil {
				t.Fatalf("put %+v: %v", l, err)
			}
			if got.UpdatedAt.Before(before) {
				t.Fatalf("put %+v: updated at %v", l, got.UpdatedAt)
			}
		}
		all, err := s.ListFlowLimits(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := flowSummary(all); got != "[a/activity/charge:0,1,1,false a/activity/mail:1,200,20,true a/workflow/order:0,2.5,3,false b/activity/charge:2,0,0,false]" {
			t.Fatalf("list all = %s (the default burst of rate 2.5 is 3)", got)
		}
		// Put replaces the whole limit of its type.
		if _, err := s.PutFlowLimit(ctx, store.FlowLimit{Namespace: "a", Kind: store.FlowActivity, Type: "mail", Concurrency: 5}); err != nil {
			t.Fatal(err)
		}
		ofA, err := s.ListFlowLimits(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got := flowSummary(ofA); got != "[a/activity/charge:0,1,1,false a/activity/mail:5,0,0,false a/workflow/order:0,2.5,3,false]" {
			t.Fatalf("list of a after replacing mail = %s", got)
		}
		for _, c := range []struct {
			kind store.FlowKind
			typ  string
			want bool
		}{{store.FlowActivity, "mail", true}, {store.FlowActivity, "mail", false}, {store.FlowWorkflow, "charge", false}} {
			if had, err := s.DeleteFlowLimit(ctx, "a", c.kind, c.typ); err != nil || had != c.want {
				t.Fatalf("delete %s %s: %v, %v; want %v", c.kind, c.typ, had, err, c.want)
			}
		}
		ofA, _ = s.ListFlowLimits(ctx, "a")
		if got := flowSummary(ofA); got != "[a/activity/charge:0,1,1,false a/workflow/order:0,2.5,3,false]" {
			t.Fatalf("list of a after clearing mail = %s", got)
		}
	})

	t.Run("PutFlowLimitRefusesBadInputAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, _, err := s.RegisterNamespace(ctx, "a", store.OriginExplicit); err != nil {
			t.Fatal(err)
		}
		good := store.FlowLimit{Namespace: "a", Kind: store.FlowActivity, Type: "t", Concurrency: 3}
		if _, err := s.PutFlowLimit(ctx, good); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []store.FlowLimit{
			{Namespace: "a", Kind: "job", Type: "t", Concurrency: 1},
			{Namespace: "a", Kind: store.FlowActivity, Type: "", Concurrency: 1},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t", Concurrency: -1},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t", Rate: -2},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t", Rate: 5, Burst: -1},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t", Concurrency: 1, Burst: 3},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t", Concurrency: 1, PerKey: true},
			{Namespace: "a", Kind: store.FlowActivity, Type: "t"},
		} {
			if _, err := s.PutFlowLimit(ctx, bad); err == nil {
				t.Fatalf("put %+v: no error", bad)
			}
		}
		_, err := s.PutFlowLimit(ctx, store.FlowLimit{Namespace: "ghost", Kind: store.FlowActivity, Type: "t", Concurrency: 1})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("put in a missing namespace: %v, want ErrNotFound", err)
		}
		all, err := s.ListFlowLimits(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := flowSummary(all); got != "[a/activity/t:3,0,0,false]" {
			t.Fatalf("after refused puts: %s, want only the good limit", got)
		}
	})
}

// flowSummary renders limits as namespace/kind/type:concurrency,rate,burst,perkey.
func flowSummary(ls []store.FlowLimit) string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = fmt.Sprintf("%s/%s/%s:%d,%g,%d,%v", l.Namespace, l.Kind, l.Type, l.Concurrency, l.Rate, l.Burst, l.PerKey)
	}
	return fmt.Sprint(out)
}
