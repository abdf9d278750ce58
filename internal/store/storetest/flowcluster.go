package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// scheduleKeyed inserts waiting activities of type typ in namespace "ns",
// queue "q", one per key given ("" for none), ready at ready, with ids
// "<typ>-<i>-<key>", oldest first.
func (c *clusterCase) scheduleKeyed(typ string, ready time.Time, keys ...string) []string {
	c.t.Helper()
	var (
		writes []store.Write
		ids    []string
	)
	for i, k := range keys {
		id := fmt.Sprintf("%s-%02d-%s", typ, i, k)
		ids = append(ids, id)
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id,
			TaskQueue: "q", ActivityType: typ, Fingerprint: "f", State: store.StateScheduled, Flow: store.Flow{ConcurrencyKey: k},
			Timeouts: store.Timeouts{ScheduleToClose: time.Hour}, ScheduledAt: ready, ReadyAt: ready}})
	}
	c.apply(writes...)
	return ids
}

// limitedClaim asks for activities of typ for workers under limit l.
func limitedClaim(typ string, l store.FlowLimit, workers ...uint64) store.Claim {
	cl := claimOf(typ, "", workers...)
	l.Namespace, l.Kind, l.Type = "ns", store.FlowActivity, typ
	l = l.Normalize()
	cl.Limit = &l
	return cl
}

// keysOf lists the concurrency keys of activities, in order.
func keysOf(as []store.Activity) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Flow.ConcurrencyKey
	}
	return out
}

// A concurrency limit holds across servers: running activities of a key
// are counted from the store, a full key does not hide the work behind it,
// work without a key is not held, and an ended attempt frees its slot.
func testLimitedClaimsHoldConcurrencyAcrossServers(t *testing.T, c *clusterCase) {
	one := c.join("one", time.Minute)
	two := c.join("two", time.Minute)
	now := time.Now()
	c.scheduleKeyed("t", now, "a", "a", "a", "a", "a", "b", "b", "b", "", "")
	limit := store.FlowLimit{Concurrency: 2}
	got := c.claimResults(one, now, limitedClaim("t", limit, workerIDs(1, 10)...))[0]
	if fmt.Sprint(keysOf(got.Activities)) != "[a a b b  ]" || !got.Limited {
		t.Fatalf("first claim took keys %q (limited %v), want two of a, two of b and both without a key, limited",
			keysOf(got.Activities), got.Limited)
	}
	if !got.NextToken.IsZero() {
		t.Fatalf("a concurrency limit named a next token time %v", got.NextToken)
	}
	for key, want := range map[string]int{"a": 2, "b": 2, "c": 0, "": 0} {
		u, err := c.s.ReadFlowUsage(c.ctx, store.FlowUsageRequest{Namespace: "ns", ActivityType: "t", ConcurrencyKey: key})
		if err != nil || u.Running != want || u.Bucket != nil {
			t.Fatalf("usage of key %q: %+v, %v; want %d running and no bucket", key, u, err, want)
		}
	}
	again := c.claimResults(two, now, limitedClaim("t", limit, workerIDs(20, 10)...))[0]
	if len(again.Activities) != 0 || !again.Limited {
		t.Fatalf("another server's claim took %v (limited %v), want nothing: both keys run 2", activityIDs(again.Activities), again.Limited)
	}
	ended := got.Activities[0]
	if !c.apply(store.EndAttempt{Namespace: "ns", ID: ended.ID, Owner: one, State: store.StateCompleted, ClosedAt: now,
		Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}})[0] {
		t.Fatalf("end %s", ended.ID)
	}
	after := c.claimResults(two, now, limitedClaim("t", limit, workerIDs(20, 10)...))[0]
	if fmt.Sprint(keysOf(after.Activities)) != "[a]" {
		t.Fatalf("after one of a ended the other server took keys %q, want one of a", keysOf(after.Activities))
	}
}

// Servers claiming one limited type at once never run more of a key than
// its limit between them.
func testConcurrentLimitedClaims(t *testing.T, c *clusterCase) {
	now := time.Now()
	var keys []string
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("k%d", i%3))
	}
	c.scheduleKeyed("t", now, keys...)
	var wg sync.WaitGroup
	for s := range 4 {
		id := c.join(fmt.Sprintf("s%d", s), time.Minute)
		wg.Go(func() {
			for range 5 {
				if _, err := c.s.ClaimActivities(c.ctx, store.ClaimRequest{Owner: id, Now: now,
					Claims: []store.Claim{limitedClaim("t", store.FlowLimit{Concurrency: 2}, workerIDs(1, 4)...)}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	running := map[string]int{}
	for _, a := range list(t, c.s, store.ActivityFilter{Namespace: "ns", State: store.StateRunning, Limit: 1000}) {
		running[a.Flow.ConcurrencyKey]++
	}
	if fmt.Sprint(running) != "map[k0:2 k1:2 k2:2]" {
		t.Fatalf("running per key after concurrent claims: %v, want 2 of each", running)
	}
}

// A rate limit's bucket lives in the store: the servers share it, a claim
// takes at most the tokens there are and says when the next comes, and the
// bucket refills at the rate on the claims' clock up to its burst.
func testLimitedClaimsShareARateBucket(t *testing.T, c *clusterCase) {
	one := c.join("one", time.Minute)
	two := c.join("two", time.Minute)
	t0 := time.Now().Truncate(time.Millisecond)
	c.scheduleKeyed("t", t0, make([]string, 20)...)
	limit := store.FlowLimit{Rate: 10, Burst: 3}
	claim := func(by store.ServerID, at time.Time) store.ClaimResult {
		t.Helper()
		return c.claimResults(by, at, limitedClaim("t", limit, workerIDs(1, 10)...))[0]
	}
	steps := []struct {
		by   store.ServerID
		at   time.Duration
		want int
		next time.Duration // 0: no next token
	}{
		{one, 0, 3, 100 * time.Millisecond},
		{two, 0, 0, 100 * time.Millisecond},
		{two, 50 * time.Millisecond, 0, 100 * time.Millisecond},
		{one, 100 * time.Millisecond, 1, 200 * time.Millisecond},
		{two, 1100 * time.Millisecond, 3, 1200 * time.Millisecond}, // a second's worth, capped at the burst
	}
	for i, s := range steps {
		got := claim(s.by, t0.Add(s.at))
		if len(got.Activities) != s.want || !got.Limited || !got.NextToken.Equal(t0.Add(s.next)) {
			t.Fatalf("step %d at +%v: took %d, limited %v, next token %v; want %d, limited, next at +%v",
				i, s.at, len(got.Activities), got.Limited, got.NextToken.Sub(t0), s.want, s.next)
		}
	}
	u, err := c.s.ReadFlowUsage(c.ctx, store.FlowUsageRequest{Namespace: "ns", ActivityType: "t"})
	if err != nil || u.Bucket == nil || u.Bucket.Available(limit.Normalize().Bucket(), t0.Add(1100*time.Millisecond)) != 0 ||
		u.Bucket.Available(limit.Normalize().Bucket(), t0.Add(1200*time.Millisecond)) != 1 {
		t.Fatalf("usage of the type's bucket: %+v, %v; want it empty at +1.1s and one token at +1.2s", u, err)
	}
	// A per-key rate keeps a bucket per key; work without a key passes.
	c.scheduleKeyed("u", t0, "a", "a", "b", "b", "")
	perKey := store.FlowLimit{Rate: 1, Burst: 1, PerKey: true}
	got := c.claimResults(one, t0, limitedClaim("u", perKey, workerIDs(1, 10)...))[0]
	if fmt.Sprint(keysOf(got.Activities)) != "[a b ]" || !got.NextToken.Equal(t0.Add(time.Second)) {
		t.Fatalf("per-key claim took keys %q, next token %v; want one of a, one of b and the keyless one, next at +1s",
			keysOf(got.Activities), got.NextToken.Sub(t0))
	}
	// A swept bucket is a full one; one not full yet is kept.
	if err := c.s.SweepFlowBuckets(c.ctx, t0.Add(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n := len(c.claimResults(two, t0, limitedClaim("u", perKey, workerIDs(1, 10)...))[0].Activities); n != 0 {
		t.Fatalf("after a sweep before the buckets refill: took %d, want 0", n)
	}
	if err := c.s.SweepFlowBuckets(c.ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := c.claimResults(two, t0, limitedClaim("u", perKey, workerIDs(1, 10)...))[0]; fmt.Sprint(keysOf(got.Activities)) != "[a b]" {
		t.Fatalf("after sweeping full buckets: took keys %q, want one more of a and b", keysOf(got.Activities))
	}
}

// The slot of a server that died stays taken until the server is reaped,
// then the work is claimable again: no slot leaks, none is given twice.
func testLimitedSlotOfADeadServer(t *testing.T, c *clusterCase) {
	dead := c.join("dead", shortLease)
	alive := c.join("alive", time.Minute)
	now := time.Now()
	ids := c.scheduleKeyed("t", now, "a", "a")
	limit := store.FlowLimit{Concurrency: 1}
	if got := c.claim(dead, now, limitedClaim("t", limit, 1))[0]; len(got) != 1 {
		t.Fatalf("the first claim took %v", activityIDs(got))
	}
	c.expire("dead")
	if got := c.claim(alive, now, limitedClaim("t", limit, 2))[0]; len(got) != 0 {
		t.Fatalf("claimed %v while the dead server's attempt still counts", activityIDs(got))
	}
	if _, err := c.s.ReapServers(c.ctx); err != nil {
		t.Fatal(err)
	}
	got := activityIDs(c.claim(alive, time.Now(), limitedClaim("t", limit, 2))[0])
	if len(got) != 1 || !slices.Contains(ids, got[0]) {
		t.Fatalf("after the reap claimed %v, want one of %v", got, ids)
	}
}
