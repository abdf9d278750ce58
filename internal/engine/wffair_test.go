package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// startKeyed starts n runs of type "order" with fairness key k and weight
// w, workflow ids "<prefix>-<i>", oldest first when ordered is set (one at
// a time), else concurrently (the store groups their writes).
func (b *bench) startKeyed(prefix, k string, w, n int, ordered bool) {
	b.t.Helper()
	start := func(i int) error {
		_, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns",
			WorkflowID: fmt.Sprintf("%s-%05d", prefix, i), WorkflowType: "order", Input: []byte(`1`),
			Flow: store.Flow{FairnessKey: k, FairnessWeight: w}})
		return err
	}
	if ordered {
		for i := range n {
			if err := start(i); err != nil {
				b.t.Fatalf("start %s-%d: %v", prefix, i, err)
			}
		}
		return
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- start(i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.t.Fatalf("start %s runs: %v", prefix, err)
		}
	}
}

// workflowOf is the workflow id of a held run.
func (b *bench) workflowOf(runID string) string {
	b.t.Helper()
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	r := b.eng.runs[runKey{"ns", runID}]
	if r == nil {
		b.t.Fatalf("run %s is not held", runID)
	}
	return r.rec.WorkflowID
}

// With 100 runs of key a waiting and a 2-slot worker, the 10 runs of key b
// started afterwards all finish within the next 2 + 2×10 workflow tasks
// (alternating with a's, equal weights), oldest first: not after a's
// backlog.
func TestAKeysBacklogOfRunsDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startKeyed("a", "tenant-a", 0, 100, true)
	b.startKeyed("b", "tenant-b", 0, 10, true)
	fw := b.joinWorkflows("v1", 2, "order")

	tasks, aDone, bDone := 0, 0, 0
	for bDone < 10 {
		task := fw.next()
		tasks++
		id := b.workflowOf(task.GetRunId())
		if strings.HasPrefix(id, "b-") {
			if want := fmt.Sprintf("b-%05d", bDone); id != want {
				t.Fatalf("task %d: %s, want %s (a key's runs go oldest first)", tasks, id, want)
			}
			bDone++
		} else {
			aDone++
		}
		if tasks > 2+2*10 {
			t.Fatalf("after %d workflow tasks only %d of key b's 10 runs finished, want all within 2 + 2×10", tasks, bDone)
		}
		fw.mustAnswer(task, false, complete(`"ok"`))
	}
	if aDone < 9 {
		t.Fatalf("key a finished %d runs while key b's 10 did, want at least 9: b took more than its share", aDone)
	}
	t.Logf("key b's 10 runs all finished within %d workflow tasks (key a's %d meanwhile)", tasks, aDone)
}

// Keys of weights 3 and 1, both backlogged, share 160 workflow slots 3:1
// (within 10%).
func TestRunWeightsShareWorkflowSlotsInProportion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const slots = 160
	b.startKeyed("heavy", "heavy", 3, slots, false)
	b.startKeyed("light", "light", 1, slots, false)
	fw := b.joinWorkflows("v1", slots, "order")
	heavy := 0
	for range slots {
		if strings.HasPrefix(b.workflowOf(fw.next().GetRunId()), "heavy-") {
			heavy++
		}
	}
	idle(t, fw.conn.wf, "workflow task")
	ratio := float64(heavy) / float64(slots-heavy)
	if ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("heavy:light given tasks %d:%d (%.2f), want 3:1 within 10%%", heavy, slots-heavy, ratio)
	}
	t.Logf("heavy:light given tasks %d:%d (%.3f)", heavy, slots-heavy, ratio)
}

// A run that leaves its queue (terminated while it waits) leaves its key's
// turn to the others, and the queue keeps nothing of it.
func TestTerminatedWaitingRunLeavesTheFairQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startKeyed("a", "tenant-a", 0, 3, true)
	b.startKeyed("b", "tenant-b", 0, 1, true)
	if _, err := b.eng.TerminateWorkflow(context.Background(), anyone, "ns", "b-00000", "", "not needed"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	b.waitWF("b-00000")
	fw := b.joinWorkflows("v1", 1, "order")
	var got []string
	for range 3 {
		task := fw.next()
		got = append(got, b.workflowOf(task.GetRunId()))
		fw.mustAnswer(task, false, complete(`"ok"`))
	}
	if want := "[a-00000 a-00001 a-00002]"; fmt.Sprint(got) != want {
		t.Fatalf("tasks went to %v, want %s", got, want)
	}
	idle(t, fw.conn.wf, "workflow task")
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	if n := len(b.eng.wfQueues); n != 0 {
		t.Fatalf("%d workflow queues left with nothing waiting, want none", n)
	}
}

// Why, for a run waiting behind runs of other fairness keys, counts them.
func TestWhyNamesOtherFairnessKeysAheadOfAWaitingRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startKeyed("a", "tenant-a", 0, 4, true)
	b.startKeyed("b", "tenant-b", 0, 2, true)
	fw := b.joinWorkflows("v1", 1, "order")
	first := b.workflowOf(fw.next().GetRunId()) // holds the only slot
	if first != "a-00000" {
		t.Fatalf("first task went to %s, want a-00000", first)
	}
	// Left to wait: a-1 a-2 a-3 and b-0 b-1, served b-0 a-1 b-1 a-2 a-3.
	ex := b.whyWF("b-00001")
	wantWhy(t, ex, WhySlotsBusy, "2 runs wait before it", "1 of them of other fairness keys")
	if ex.Ahead != 2 || ex.AheadOfOtherKeys != 1 {
		t.Fatalf("ahead %d, of other keys %d; want 2 and 1", ex.Ahead, ex.AheadOfOtherKeys)
	}
	ex = b.whyWF("b-00000")
	wantWhy(t, ex, WhySlotsBusy, "0 runs wait before it")
	if strings.Contains(ex.Message, "other fairness keys") {
		t.Fatalf("why names other keys with none ahead: %q", ex.Message)
	}
}
