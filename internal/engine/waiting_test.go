package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// Waiting counts a namespace's ready work by queue, type, priority and
// fairness key, what a flow limit holds apart, and runs waiting for a
// workflow task; other namespaces' work is not in it.
func TestWaitingCountsReadyWorkByPriorityKeyAndHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 1})
	for i := range 3 {
		r := fairKeyed(fmt.Sprintf("a-%d", i), "tenant-a", 1)
		b.schedule(r)
	}
	urgent := request("urgent", store.Timeouts{}, store.RetryPolicy{})
	urgent.Priority = 1
	b.schedule(urgent)
	for i := range 2 {
		b.schedule(keyed(fmt.Sprintf("k-%d", i), "acct-7"))
	}
	other := request("elsewhere", store.Timeouts{}, store.RetryPolicy{})
	other.Namespace = "other"
	b.schedule(other)
	b.startWF("o-1", "order", `1`)

	fw := b.join(1) // takes the urgent one; k-0 then k-1 meet the limit only when dispatched
	if task := fw.task(); task.ActivityID != "urgent" {
		t.Fatalf("first start %s, want urgent", task.ActivityID)
	}
	v, err := b.eng.Waiting(context.Background(), anyone, "ns")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, g := range v.Groups {
		got[fmt.Sprintf("%s/%s/p%d/%s/%s/%s", g.Kind, g.Type, g.Priority, g.FairnessKey, g.HeldBy, g.ConcurrencyKey)] += g.Count
		if g.OldestReady.IsZero() {
			t.Errorf("group %+v has no oldest ready time", g)
		}
	}
	want := map[string]int{
		"activity/t/p3/tenant-a//":  3,
		"activity/t/p3///":          2,
		"workflow_task/order/p3///": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waiting = %v, want %v", got, want)
	}
	// Once one acct-7 activity runs, free slots start everything else but
	// the other acct-7 activity, which its concurrency limit of 1 holds.
	fw.complete("urgent", 1, "1")
	var running string
	for running == "" {
		task := fw.task()
		if task.ActivityID[0] == 'k' {
			running = task.ActivityID
			break
		}
		fw.complete(task.ActivityID, task.Attempt, "1")
	}
	b.join(10)
	v, err = b.eng.Waiting(context.Background(), anyone, "ns")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, g := range v.Groups {
		if g.HeldBy == WhyConcurrencyLimit && g.ConcurrencyKey == "acct-7" {
			held += g.Count
		}
	}
	if held != 1 {
		t.Fatalf("with %s running, groups %+v; want the other acct-7 activity held by its concurrency limit", running, v.Groups)
	}
}

// The backlog counts waiting work by priority exactly: work that leaves
// its queue (canceled) or starts is taken off its priority's count.
func TestBacklogCountsWaitingWorkByPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, p := range []int{1, 3, 5, 5, 5} {
		r := request(fmt.Sprintf("p%d-%d", p, i), store.Timeouts{}, store.RetryPolicy{})
		r.Priority = p
		b.schedule(r)
	}
	if _, err := b.eng.Cancel(context.Background(), anyone, "ns", "p5-3", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	fw := b.join(1)
	if task := fw.task(); task.ActivityID != "p1-0" {
		t.Fatalf("started %s, want the priority-1 activity", task.ActivityID)
	}
	bl := b.eng.Backlog()
	if len(bl) != 1 || bl[0].Waiting != 3 || bl[0].ByPriority != [store.LowestPriority]int{0, 0, 1, 0, 2} {
		t.Fatalf("backlog %+v, want 3 waiting: one of priority 3, two of priority 5", bl)
	}
}
