package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// setLimit creates namespace "ns" if needed and sets l (its namespace and
// kind filled in) on it.
func (b *bench) setLimit(l store.FlowLimit) store.FlowLimit {
	b.t.Helper()
	ctx := context.Background()
	if _, _, err := b.eng.minter.Create(ctx, "ns"); err != nil {
		b.t.Fatalf("create namespace: %v", err)
	}
	l.Namespace = "ns"
	if l.Kind == "" {
		l.Kind = store.FlowActivity
	}
	if l.Type == "" {
		l.Type = "t"
	}
	got, err := b.eng.SetFlowLimit(ctx, anyone, l)
	if err != nil {
		b.t.Fatalf("set limit %+v: %v", l, err)
	}
	return got
}

// keyed is a request for activity id of type t with a concurrency key.
func keyed(id, key string) Request {
	r := request(id, store.Timeouts{}, store.RetryPolicy{})
	r.Flow.ConcurrencyKey = key
	return r
}

// drainTasks returns every task the worker holds now, without waiting: the
// engine sends what a call causes before the call returns.
func (fw *fakeWorker) drainTasks() []Task {
	var out []Task
	for {
		select {
		case task := <-fw.conn.tasks:
			out = append(out, task)
		default:
			return out
		}
	}
}

// With a concurrency limit of 2, each key runs at most 2 attempts at once,
// counted from the worker's side, and its work starts oldest first; work of
// other keys, and work without a key, is not held up behind a full key.
func TestConcurrencyKeyNeverRunsMoreThanItsLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 2})
	fw := b.join(50)
	keyOf := map[string]string{}
	var want = map[string][]string{} // per key, in scheduling order
	for i := range 30 {
		key := []string{"a", "a", "b", ""}[i%4]
		id := fmt.Sprintf("%s-%02d", key, i)
		keyOf[id] = key
		want[key] = append(want[key], id)
		b.schedule(keyed(id, key))
	}
	running := map[string]map[string]int{} // key -> id -> attempt
	var order = map[string][]string{}
	start := func(tasks []Task) {
		for _, task := range tasks {
			k := keyOf[task.ActivityID]
			if running[k] == nil {
				running[k] = map[string]int{}
			}
			running[k][task.ActivityID] = task.Attempt
			order[k] = append(order[k], task.ActivityID)
			if k != "" && len(running[k]) > 2 {
				t.Fatalf("key %q runs %d attempts at once: %v", k, len(running[k]), running[k])
			}
		}
	}
	start(fw.drainTasks())
	if len(running["a"]) != 2 || len(running["b"]) != 2 || len(running[""]) != 7 {
		t.Fatalf("at first: a %d, b %d, no key %d running; want 2, 2 and all 7 (nothing waits behind a full key)",
			len(running["a"]), len(running["b"]), len(running[""]))
	}
	if bl := b.eng.Backlog(); len(bl) != 1 || bl[0].Waiting != 30-11 {
		t.Fatalf("backlog %+v, want the 19 held activities waiting", bl)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for done := 0; done < 30; done++ {
		var ids []string
		for _, m := range running {
			for id := range m {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			t.Fatalf("nothing runs after %d of 30 completed", done)
		}
		id := ids[rng.IntN(len(ids))]
		k := keyOf[id]
		fw.complete(id, running[k][id], "1")
		delete(running[k], id)
		start(fw.drainTasks())
	}
	for _, k := range []string{"a", "b", ""} {
		if k != "" && fmt.Sprint(order[k]) != fmt.Sprint(want[k]) {
			t.Errorf("key %q started %v, want its work oldest first %v", k, order[k], want[k])
		}
		if len(order[k]) != len(want[k]) {
			t.Errorf("key %q started %d of %d", k, len(order[k]), len(want[k]))
		}
	}
}

// A rate of 10/s with a burst of 3: the burst starts at once, then one
// start every 100ms of the (fake) clock, each simulated second within one
// of the rate; the bucket's timer, not a poll, lets each start through.
func TestRateLimitStartsFollowTheRate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Rate: 10, Burst: 3})
	fw := b.join(200)
	for i := range 100 {
		b.schedule(request(fmt.Sprintf("r-%03d", i), store.Timeouts{}, store.RetryPolicy{}))
	}
	complete := func(tasks []Task) int {
		for _, task := range tasks {
			fw.complete(task.ActivityID, task.Attempt, "1")
		}
		return len(tasks)
	}
	if n := complete(fw.drainTasks()); n != 3 {
		t.Fatalf("%d started at once, want the burst of 3", n)
	}
	wantWhy(t, b.why("r-003"), WhyRateLimited, "10/s", "burst 3", "in 100ms")
	perSecond := make([]int, 5)
	for step := 1; step <= 500; step++ {
		b.advance(10 * time.Millisecond)
		perSecond[(step-1)/100] += complete(fw.drainTasks())
	}
	for s, n := range perSecond {
		if n < 9 || n > 11 {
			t.Errorf("second %d: %d starts, want 10 ± 1 (all: %v)", s, n, perSecond)
		}
	}
	if total := 3 + perSecond[0] + perSecond[1] + perSecond[2] + perSecond[3] + perSecond[4]; total != 53 {
		t.Errorf("%d starts in 5s, want 53: the burst of 3 plus 10 a second", total)
	}
}

// A per-key rate gives each concurrency key its own bucket; work without a
// key is not held by it, and a rate for the whole type counts every key.
func TestPerKeyRateCountsEachKeyApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Rate: 1, Burst: 1, PerKey: true})
	fw := b.join(100)
	for i := range 5 {
		for _, k := range []string{"a", "b", ""} {
			b.schedule(keyed(fmt.Sprintf("%s-%d", k, i), k))
		}
	}
	count := func() map[string]int {
		n := map[string]int{}
		for _, task := range fw.drainTasks() {
			n[strings.SplitN(task.ActivityID, "-", 2)[0]]++
			fw.complete(task.ActivityID, task.Attempt, "1")
		}
		return n
	}
	if got := count(); got["a"] != 1 || got["b"] != 1 || got[""] != 5 {
		t.Fatalf("at first %v; want one of each key and all five without a key", got)
	}
	b.advance(time.Second)
	if got := count(); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("after a second %v; want one more of each key", got)
	}
	wantWhy(t, b.why("a-2"), WhyRateLimited, `concurrency key "a"`, "in 1s")
}

// Raising a limit lets more start at once; clearing it lets everything
// held start; lowering it holds new starts until the running ones end.
func TestChangingALimitAppliesToHeldAndRunningWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 1})
	fw := b.join(10)
	for i := range 6 {
		b.schedule(keyed(fmt.Sprintf("k-%d", i), "k"))
	}
	if n := len(fw.drainTasks()); n != 1 {
		t.Fatalf("%d started under a limit of 1", n)
	}
	b.setLimit(store.FlowLimit{Concurrency: 3})
	if n := len(fw.drainTasks()); n != 2 {
		t.Fatalf("raising the limit to 3 started %d more, want 2 (one already runs)", n)
	}
	b.setLimit(store.FlowLimit{Concurrency: 1})
	if n := len(fw.drainTasks()); n != 0 {
		t.Fatalf("lowering the limit started %d", n)
	}
	wantWhy(t, b.why("k-3"), WhyConcurrencyLimit, `concurrency key "k"`, "runs 3 of its limit of 1")
	had, err := b.eng.ClearFlowLimit(context.Background(), anyone, "ns", store.FlowActivity, "t")
	if err != nil || !had {
		t.Fatalf("clear: %v, %v", had, err)
	}
	if n := len(fw.drainTasks()); n != 3 {
		t.Fatalf("clearing the limit started %d, want the 3 held", n)
	}
}

// Limits are durable: after a restart the held work is held again, and a
// canceled held activity neither starts nor keeps a slot.
func TestLimitsSurviveARestartAndCanceledHeldWorkFreesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 1})
	for i := range 3 {
		b.schedule(keyed(fmt.Sprintf("k-%d", i), "k"))
	}
	b.restart()
	fw := b.join(10)
	first := fw.drainTasks()
	if len(first) != 1 || first[0].ActivityID != "k-0" {
		t.Fatalf("after a restart started %v, want only k-0", first)
	}
	if _, err := b.eng.Cancel(context.Background(), anyone, "ns", "k-1", "not needed"); err != nil {
		t.Fatalf("cancel the held k-1: %v", err)
	}
	fw.complete("k-0", first[0].Attempt, "1")
	next := fw.drainTasks()
	if len(next) != 1 || next[0].ActivityID != "k-2" {
		t.Fatalf("after k-0 ended started %v, want k-2 (k-1 was canceled)", next)
	}
}

// When a slot of a key frees, it is reserved for the oldest held work of
// the key, which goes back to its queue; if that work is canceled before a
// worker takes it, the reservation passes to the next held.
func TestAReleasedActivityLeavingGivesItsSlotToTheNext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 1})
	fw := b.join(1)
	for i := range 3 {
		b.schedule(keyed(fmt.Sprintf("k-%d", i), "k"))
	}
	first := fw.task()
	// An urgent activity takes the worker's slot when k-0 ends, so k-1,
	// released with the key's slot, waits in its queue.
	urgent := request("urgent", store.Timeouts{}, store.RetryPolicy{})
	urgent.Priority = 1
	b.schedule(urgent)
	fw.complete(first.ActivityID, first.Attempt, "1")
	if task := fw.task(); task.ActivityID != "urgent" {
		t.Fatalf("started %s, want urgent", task.ActivityID)
	}
	wantWhy(t, b.why("k-1"), WhySlotsBusy)
	wantWhy(t, b.why("k-2"), WhyConcurrencyLimit, "runs 0 of its limit of 1 (1 reserved")
	if _, err := b.eng.Cancel(context.Background(), anyone, "ns", "k-1", "not needed"); err != nil {
		t.Fatalf("cancel k-1: %v", err)
	}
	wantWhy(t, b.why("k-2"), WhySlotsBusy)
	fw.complete("urgent", 1, "1")
	if task := fw.task(); task.ActivityID != "k-2" {
		t.Fatalf("started %s, want k-2", task.ActivityID)
	}
}

func TestFlowLimitBadInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.setLimit(store.FlowLimit{Concurrency: 2})
	ctx := context.Background()
	cases := []struct {
		l    store.FlowLimit
		says string
	}{
		{store.FlowLimit{Kind: "job", Type: "t", Concurrency: 1}, `kind: "job"`},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "", Concurrency: 1}, "activity_type"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t", Concurrency: -1}, "concurrency: -1"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t", Rate: -0.5}, "rate: -0.5"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t", Rate: 5, Burst: -3}, "burst: -3"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t", Concurrency: 1, Burst: 4}, "burst: 4 given without a rate"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t", Concurrency: 1, PerKey: true}, "per_key"},
		{store.FlowLimit{Kind: store.FlowActivity, Type: "t"}, "neither is set"},
		{store.FlowLimit{Kind: store.FlowWorkflow, Type: "order", Rate: 5}, "rate limits of workflow types are not enforced"},
	}
	for _, c := range cases {
		c.l.Namespace = "ns"
		_, err := b.eng.SetFlowLimit(ctx, anyone, c.l)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("set %+v: %v, want ErrInvalid saying %q", c.l, err, c.says)
		}
	}
	_, err := b.eng.SetFlowLimit(ctx, anyone, store.FlowLimit{Namespace: "ghost", Kind: store.FlowActivity, Type: "t", Concurrency: 1})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("set in a namespace never minted: %v, want ErrNotFound", err)
	}
	ls, err := b.eng.FlowLimits(ctx, anyone, "ns")
	if err != nil || len(ls) != 1 || ls[0] != good {
		t.Fatalf("limits after refused sets: %+v, %v; want only %+v", ls, err, good)
	}
}

// A flow limit holding work of fairness keys: a held activity leaves its
// key's FIFO without taking a turn, and comes back in it when a slot frees;
// every activity runs once, each concurrency key never above its limit, and
// no fairness key is left behind in the queue.
func TestFlowLimitHoldsWorkOfFairnessKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLimit(store.FlowLimit{Concurrency: 1})
	fw := b.join(8)
	keyOf := map[string]string{}
	for i := range 40 {
		r := keyed(fmt.Sprintf("x-%02d", i), []string{"k1", "k2"}[i%2])
		r.Flow.FairnessKey = []string{"tenant-a", "tenant-a", "tenant-b", "tenant-c", ""}[i%5]
		r.Flow.FairnessWeight = 1 + i%3
		keyOf[r.ID] = r.Flow.ConcurrencyKey
		b.schedule(r)
	}
	done := map[string]bool{}
	for len(done) < 40 {
		tasks := fw.drainTasks()
		if len(tasks) == 0 {
			t.Fatalf("nothing runs with %d of 40 done", len(done))
		}
		running := map[string]int{}
		for _, task := range tasks {
			running[keyOf[task.ActivityID]]++
		}
		for k, n := range running {
			if n > 1 {
				t.Fatalf("concurrency key %s runs %d at once, limit 1", k, n)
			}
		}
		for _, task := range tasks {
			if done[task.ActivityID] {
				t.Fatalf("%s ran twice", task.ActivityID)
			}
			done[task.ActivityID] = true
			fw.complete(task.ActivityID, task.Attempt, "1")
		}
	}
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	for t2, p := range b.eng.queues {
		for _, q := range p.byPin {
			for i := range q.lanes {
				if n := len(q.lanes[i].keyed); n > 0 || q.live != 0 {
					t.Fatalf("queue %v keeps %d fairness keys and %d live items after every activity ran", t2, n, q.live)
				}
			}
		}
	}
}
