package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

func (b *bench) why(id string) Explanation {
	b.t.Helper()
	ex, err := b.eng.Why(context.Background(), anyone, "ns", id)
	if err != nil {
		b.t.Fatalf("why %s: %v", id, err)
	}
	return ex
}

// joinOn registers a worker of type t with slots on node.
func (b *bench) joinOn(slots int, node string) *fakeWorker {
	b.t.Helper()
	conn := newFakeConn()
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: slots, Node: node, Delivery: conn})
	if err != nil {
		b.t.Fatalf("register worker: %v", err)
	}
	b.eng.WorkerJoined(r.Worker())
	return &fakeWorker{b: b, reg: r, w: r.Worker(), conn: conn}
}

func wantWhy(t *testing.T, ex Explanation, reason WaitReason, says ...string) {
	t.Helper()
	if ex.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", ex.Reason, ex.Message, reason)
	}
	for _, s := range says {
		if !strings.Contains(ex.Message, s) {
			t.Fatalf("message %q does not say %q", ex.Message, s)
		}
	}
}

func TestWhyNamesTheReasonAnActivityWaits(t *testing.T) {
	t.Parallel()
	t.Run("no worker serves it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
		wantWhy(t, b.why("a"), WhyNoWorker, `"ns"`, `"default"`, `"t"`)
	})
	t.Run("its node pin excludes the workers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.joinOn(1, "cpu-1")
		r := request("a", store.Timeouts{}, store.RetryPolicy{})
		r.Node = "gpu-1"
		b.schedule(r)
		ex := b.why("a")
		wantWhy(t, ex, WhyNodePin, `"gpu-1"`, "cpu-1")
		if ex.Workers != 1 || ex.Eligible != 0 {
			t.Fatalf("workers %d eligible %d, want 1 and 0", ex.Workers, ex.Eligible)
		}
	})
	t.Run("its namespace's placement excludes the workers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.joinOn(1, "cpu-1")
		b.eng.NoteNamespace(store.Namespace{Name: "ns", Placement: store.Placement{Mode: store.Pinned, Nodes: []string{"gpu-1"}}})
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
		wantWhy(t, b.why("a"), WhyPlacement, "pinned{gpu-1}", "cpu-1")
	})
	t.Run("every slot is busy, with others ahead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.join(1)
		for _, id := range []string{"first", "second", "third", "fourth"} {
			b.schedule(request(id, store.Timeouts{}, store.RetryPolicy{}))
		}
		fw.task()
		ex := b.why("fourth")
		wantWhy(t, ex, WhySlotsBusy, "1 eligible workers, 0 free slots", "2 activities wait before it")
		if ex.Ahead != 2 {
			t.Fatalf("ahead %d, want 2", ex.Ahead)
		}
		wantWhy(t, b.why("first"), WhyRunning, "runs on worker")
	})
	t.Run("every slot is busy, with other fairness keys' work ahead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.join(1)
		b.schedule(fairKeyed("a-1", "a", 1)) // starts at once
		fw.task()
		for _, id := range []string{"a-2", "a-3", "a-4"} {
			b.schedule(fairKeyed(id, "a", 1))
		}
		b.schedule(fairKeyed("b-1", "b", 1))
		// The keys alternate: a-2, b-1, a-3, a-4.
		ex := b.why("a-4")
		wantWhy(t, ex, WhySlotsBusy, "3 activities wait before it", "1 of them of other fairness keys")
		if ex.Ahead != 3 || ex.AheadOfOtherKeys != 1 {
			t.Fatalf("ahead %d, of other keys %d, want 3 and 1", ex.Ahead, ex.AheadOfOtherKeys)
		}
		ex = b.why("b-1")
		wantWhy(t, ex, WhySlotsBusy, "1 activities wait before it", "1 of them of other fairness keys")
		if ex = b.why("a-2"); ex.Ahead != 0 || strings.Contains(ex.Message, "fairness") {
			t.Fatalf("why a-2: %d ahead, %q; want none ahead and no word of other keys", ex.Ahead, ex.Message)
		}
	})
	t.Run("its namespace is at its in-flight cap", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.eng.mu.Lock()
		b.eng.maxRunning = 1
		b.eng.mu.Unlock()
		fw := b.join(2)
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
		b.schedule(request("b", store.Timeouts{}, store.RetryPolicy{}))
		fw.task()
		wantWhy(t, b.why("b"), WhyInFlightCap, "--max-in-flight-per-namespace")
	})
	t.Run("its concurrency key is at its limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.setLimit(store.FlowLimit{Concurrency: 2})
		fw := b.join(5)
		for _, id := range []string{"a", "b", "c", "d"} {
			b.schedule(keyed(id, "acct-7"))
		}
		fw.task()
		fw.task()
		ex := b.why("d")
		wantWhy(t, ex, WhyConcurrencyLimit, `concurrency key "acct-7"`, `activity type "t"`, "runs 2 of its limit of 2", "1 wait before it")
		if ex.ConcurrencyKey != "acct-7" || ex.Running != 2 || ex.Limit != 2 || ex.Ahead != 1 {
			t.Fatalf("key %q running %d limit %d ahead %d, want acct-7, 2, 2, 1", ex.ConcurrencyKey, ex.Running, ex.Limit, ex.Ahead)
		}
	})
	t.Run("its rate limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.setLimit(store.FlowLimit{Rate: 0.5, Burst: 1})
		fw := b.join(5)
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
		b.schedule(request("b", store.Timeouts{}, store.RetryPolicy{}))
		fw.task()
		ex := b.why("b")
		wantWhy(t, ex, WhyRateLimited, `activity type "t"`, "0.5/s, burst 1", "in 2s")
		if !ex.Until.Equal(epoch.Add(2 * time.Second)) {
			t.Fatalf("until %v, want 2s after the first start", ex.Until)
		}
	})
	t.Run("a delayed start", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.join(1)
		r := request("a", store.Timeouts{}, store.RetryPolicy{})
		r.StartDelay = time.Hour
		b.schedule(r)
		ex := b.why("a")
		wantWhy(t, ex, WhyDelayedStart, "in 1h0m0s")
		if !ex.Until.Equal(epoch.Add(time.Hour)) {
			t.Fatalf("until %v", ex.Until)
		}
	})
	t.Run("a retry backoff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.join(1)
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{InitialInterval: 30 * time.Second}))
		fw.task()
		fw.fail("a", 1, store.Failure{Type: "flaky", Retryable: true})
		wantWhy(t, b.why("a"), WhyRetryBackoff, "attempt 1 failed", "in 30s")
	})
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fw := b.join(1)
		b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
		fw.complete("a", fw.task().Attempt, "1")
		b.wait("a")
		wantWhy(t, b.why("a"), WhyClosed, "completed")
	})
}
