package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// fairKeyed is a request for activity id of fairness key k with weight w.
func fairKeyed(id, k string, w int) Request {
	r := request(id, store.Timeouts{}, store.RetryPolicy{})
	r.Flow = store.Flow{FairnessKey: k, FairnessWeight: w}
	return r
}

// scheduleAll schedules reqs in one batch, in order.
func (b *bench) scheduleAll(reqs []Request) {
	b.t.Helper()
	for _, res := range b.eng.ScheduleBatch(context.Background(), anyone, reqs) {
		if res.Err != nil {
			b.t.Fatalf("schedule: %v", res.Err)
		}
	}
}

// backlog is n requests of key k and weight w, ids "<prefix>-<i>".
func backlog(prefix, k string, w, n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = fairKeyed(fmt.Sprintf("%s-%05d", prefix, i), k, w)
	}
	return reqs
}

// joinWide registers a worker with slots slots whose connection holds all
// the tasks it can be sent, so one join starts up to slots activities in
// dispatch order without the test reading them as they come.
func (b *bench) joinWide(slots int) *fakeWorker {
	b.t.Helper()
	conn := newFakeConn()
	conn.tasks = make(chan Task, slots)
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: slots, Delivery: conn})
	if err != nil {
		b.t.Fatalf("register worker: %v", err)
	}
	b.eng.WorkerJoined(r.Worker())
	return &fakeWorker{b: b, reg: r, w: r.Worker(), conn: conn}
}

// started reads the n tasks the worker was sent, in order, by activity id.
func (fw *fakeWorker) started(n int) []string {
	fw.b.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fw.task().ActivityID
	}
	idle(fw.b.t, fw.conn.tasks, "task")
	return ids
}

// predicted is the queue's waiting order (what Why counts) for the work of
// type t in namespace ns, by activity id.
func (b *bench) predicted() []string {
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	var ids []string
	for _, q := range b.eng.queues[registry.NewTriple("ns", "", "t")].byPin {
		q.waiting(func(a *activity) bool {
			ids = append(ids, a.rec.ID)
			return true
		})
	}
	return ids
}

// With 20,000 activities of key a waiting and a 16-slot worker busy with
// them, the 200 of key b scheduled afterwards all start within the next 400
// starts (alternating with a's, equal weights): not after a's backlog.
func TestAKeysBacklogDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.join(16)
	b.scheduleAll(backlog("a", "tenant-a", 0, 20000))
	b.scheduleAll(backlog("b", "tenant-b", 0, 200))

	starts, aStarts, bStarts := 0, 0, 0
	for bStarts < 200 {
		task := fw.task()
		starts++
		if strings.HasPrefix(task.ActivityID, "b-") {
			if want := fmt.Sprintf("b-%05d", bStarts); task.ActivityID != want {
				t.Fatalf("start %d: %s, want %s (a key's work starts oldest first)", starts, task.ActivityID, want)
			}
			bStarts++
		} else {
			aStarts++
		}
		if starts > 16+2*200 {
			t.Fatalf("after %d starts only %d of key b's 200 started, want all within 16 (a's, running when b arrived) + 2×200", starts, bStarts)
		}
		fw.complete(task.ActivityID, task.Attempt, "1")
	}
	if aStarts < 16+199 {
		t.Fatalf("key a started %d while key b's 200 started, want at least %d: b took more than its share", aStarts, 16+199)
	}
	t.Logf("key b's 200 all started within %d starts (alone: 200; a's started %d meanwhile)", starts, aStarts)
}

// Keys of weights 3 and 1, both backlogged, share 4,000 starts 3:1 (within
// 10%), and each key's work starts oldest first.
func TestWeightsShareStartsInProportion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.scheduleAll(backlog("heavy", "heavy", 3, 4000))
	b.scheduleAll(backlog("light", "light", 1, 4000))
	ids := b.joinWide(4000).started(4000)
	heavy := 0
	next := map[string]int{}
	for _, id := range ids {
		prefix, _, _ := strings.Cut(id, "-")
		if want := fmt.Sprintf("%s-%05d", prefix, next[prefix]); id != want {
			t.Fatalf("started %s, want %s: a key's work starts oldest first", id, want)
		}
		next[prefix]++
		if prefix == "heavy" {
			heavy++
		}
	}
	ratio := float64(heavy) / float64(len(ids)-heavy)
	if ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("heavy:light started %d:%d (%.2f), want 3:1 within 10%%", heavy, len(ids)-heavy, ratio)
	}
	t.Logf("heavy:light started %d:%d (%.3f)", heavy, len(ids)-heavy, ratio)
}

// Work without a key is one key, the default, sharing with the others.
func TestWorkWithoutAKeySharesAsTheDefaultKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reqs := make([]Request, 10)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("plain-%05d", i), store.Timeouts{}, store.RetryPolicy{})
	}
	b.scheduleAll(reqs)
	b.scheduleAll(backlog("k", "k", 0, 10))
	ids := b.joinWide(20).started(20)
	for i := 0; i < 10; i += 2 {
		pair := []string{ids[i], ids[i+1]}
		slices.Sort(pair)
		if want := []string{fmt.Sprintf("k-%05d", i/2), fmt.Sprintf("plain-%05d", i/2)}; !slices.Equal(pair, want) {
			t.Fatalf("starts %d and %d: %v, want %v (the two keys alternate)", i, i+1, pair, want)
		}
	}
}

// A more urgent priority goes first whatever the keys: fairness shares out
// each priority on its own.
func TestPriorityComesBeforeFairness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.scheduleAll(backlog("a", "a", 1000, 50))
	urgent := fairKeyed("urgent-b", "b", 1)
	urgent.Priority = 1
	b.scheduleAll(append(backlog("b", "b", 1, 50), urgent))
	ids := b.joinWide(101).started(101)
	if ids[0] != "urgent-b" {
		t.Fatalf("first start %s, want urgent-b: priority 1 of a weight-1 key goes before priority 3 of a weight-1000 key", ids[0])
	}
}

// Why counts the activities ahead in dispatch order, which interleaves
// keys: its order is the order work then starts in, with default-key work,
// weights and cancelled entries mixed in.
func TestWhyOrderIsDispatchOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.join(1) // busy with the first activity, so the rest wait with every slot taken
	b.schedule(request("first", store.Timeouts{}, store.RetryPolicy{}))
	var reqs []Request
	for i := range 30 {
		switch i % 3 {
		case 0:
			reqs = append(reqs, request(fmt.Sprintf("plain-%05d", i), store.Timeouts{}, store.RetryPolicy{}))
		case 1:
			reqs = append(reqs, fairKeyed(fmt.Sprintf("x-%05d", i), "x", 2))
		default:
			reqs = append(reqs, fairKeyed(fmt.Sprintf("y-%05d", i), "y", 5))
		}
	}
	b.scheduleAll(reqs)
	for _, id := range []string{"x-00001", "y-00005", "plain-00012", "y-00029"} {
		if _, err := b.eng.Cancel(context.Background(), anyone, "ns", id, ""); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	want := b.predicted()
	if len(want) != 26 {
		t.Fatalf("%d predicted, want the 26 still waiting", len(want))
	}
	if ex := b.why(want[10]); ex.Reason != WhySlotsBusy || ex.Ahead != 10 {
		t.Fatalf("why %s: %s with %d ahead, want slots_busy with 10", want[10], ex.Reason, ex.Ahead)
	}
	if got := b.joinWide(26).started(26); !slices.Equal(got, want) {
		t.Fatalf("started\n%v\nwant the predicted order\n%v", got, want)
	}
}

// A restart restores each activity's key: the keys share the pool again.
func TestFairnessKeysSurviveARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.scheduleAll(backlog("a", "a", 0, 100))
	b.scheduleAll(backlog("b", "b", 0, 5))
	b.restart()
	ids := b.joinWide(10).started(10)
	if n := len(slices.DeleteFunc(ids, func(id string) bool { return !strings.HasPrefix(id, "b-") })); n != 5 {
		t.Fatalf("%d of key b's 5 among the first 10 starts after a restart, want all", n)
	}
}

// A key's FIFO goes as soon as nothing of it waits: work that started, and
// work cancelled while waiting, leave nothing named after the key behind.
func TestAKeyLeavesNothingBehindItsWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.scheduleAll(backlog("gone", "cancelled", 0, 3))
	b.scheduleAll(backlog("run", "started", 0, 2))
	b.scheduleAll(backlog("stay", "waiting", 0, 2))
	for i := range 3 {
		if _, err := b.eng.Cancel(context.Background(), anyone, "ns", fmt.Sprintf("gone-%05d", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	keys := func() []string {
		b.eng.mu.Lock()
		defer b.eng.mu.Unlock()
		var out []string
		for _, p := range b.eng.queues {
			for _, q := range p.byPin {
				for i := range q.lanes {
					for k := range q.lanes[i].keyed {
						out = append(out, k)
					}
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if got := keys(); !slices.Equal(got, []string{"started", "waiting"}) {
		t.Fatalf("keys held after cancelling key cancelled's work: %v", got)
	}
	fw := b.joinWide(3)
	fw.started(3) // run-0, stay-0, run-1: started is empty, waiting has one left
	if got := keys(); !slices.Equal(got, []string{"waiting"}) {
		t.Fatalf("keys held after key started's work started: %v", got)
	}
	if ex := b.why("stay-00001"); ex.Ahead != 0 {
		t.Fatalf("why stay-00001: %d ahead, want 0", ex.Ahead)
	}
}
