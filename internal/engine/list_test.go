package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// A start is not written to the store, so listing by an open state goes by
// what the engine holds: a running activity is listed as running, and not
// as scheduled.
func TestListByOpenStateFollowsTheEngine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := []string{"a", "b", "c", "d", "e"}
	for _, id := range all {
		b.schedule(request(id, store.Timeouts{}, store.RetryPolicy{}))
	}
	// Two slots: two attempts start; completing one starts a third.
	fw := b.join(2)
	first, second := fw.task().ActivityID, fw.task().ActivityID
	fw.complete(first, 1, "ok")
	third := fw.task().ActivityID
	done := first
	wantRunning := []string{second, third}
	var wantScheduled []string
	for _, id := range all {
		if id != first && id != second && id != third {
			wantScheduled = append(wantScheduled, id)
		}
	}
	for _, tc := range []struct {
		state store.ActivityState
		want  []string
	}{
		{store.StateRunning, wantRunning},
		{store.StateScheduled, wantScheduled},
		{store.StateCompleted, []string{done}},
	} {
		got, _, err := b.eng.List(context.Background(), anyone, ListFilter{Namespace: "ns", State: tc.state})
		if err != nil {
			t.Fatalf("list %s: %v", tc.state, err)
		}
		var ids []string
		for _, a := range got {
			if a.State != tc.state {
				t.Errorf("list %s returned %s in state %s", tc.state, a.ID, a.State)
			}
			ids = append(ids, a.ID)
		}
		slices.Sort(ids)
		slices.Sort(tc.want)
		if !slices.Equal(ids, tc.want) {
			t.Errorf("list %s: %v, want %v", tc.state, ids, tc.want)
		}
	}
}
