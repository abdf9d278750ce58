package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// ClusterStore is a store several servers share: a backend that implements
// store.Cluster.
type ClusterStore interface {
	store.Store
	store.Cluster
}

// ClusterOpener returns a fresh, empty shared store; it registers its own
// cleanup on t.
type ClusterOpener func(t *testing.T) ClusterStore

// shortLease is the lease of members a test lets expire. Leases run on the
// store's clock, so tests wait for an expiry to show (polling), never sleep
// for it.
const shortLease = 300 * time.Millisecond

// RunCluster runs the conformance suite of store.Cluster against the backend
// open makes. Every subtest opens its own store.
func RunCluster(t *testing.T, open ClusterOpener) {
	t.Helper()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *clusterCase)
	}{
		{"JoinRefusesANameALiveServerHolds", testJoinRefusesALiveName},
		{"LeaveEndsTheMembership", testLeaveEndsTheMembership},
		{"ConcurrentClaimsHandEachActivityOutOnce", testConcurrentClaims},
		{"ClaimsHonourNodePinsAndReadiness", testClaimsHonourPinsAndReadiness},
		{"ClaimRecordsOwnerAndWorkerOfEachAttempt", testClaimRecordsOwnerAndWorker},
		{"OwnedWritesApplyOnlyForTheOwner", testOwnedWrites},
		{"UnclaimHandsBackOnlyTheOwnersWork", testUnclaim},
		{"AnExpiredMemberClaimsNothing", testExpiredMemberClaimsNothing},
		{"StartedInsertRunsAtOnceOnlyForALiveMember", testStartedInsert},
		{"ReapHandsBackTheAttemptsOfAnExpiredServer", testReap},
		{"RequestCancelByState", testRequestCancel},
		{"CancelRequestOutlivesRetryAndHandBack", testCancelOutlivesRetry},
		{"ExpireWaitingClosesOnlyDueWork", testExpireWaiting},
		{"BacklogAndOpenCountsReflectTheWork", testBacklogAndOpenCounts},
		{"WorkerDirectory", testWorkerDirectory},
		{"MessagesReachOnlyTheirServerOnce", testMessages},
		{"NoticesReachEveryListener", testNotices},
		{"CanceledContextChangesNothing", testClusterCanceledContext},
		{"ClaimsTakeTheMostUrgentFirst", testClaimsTakeTheMostUrgentFirst},
		{"LimitedClaimsHoldConcurrencyAcrossServers", testLimitedClaimsHoldConcurrencyAcrossServers},
		{"ConcurrentLimitedClaimsNeverExceedTheLimit", testConcurrentLimitedClaims},
		{"LimitedClaimsShareARateBucket", testLimitedClaimsShareARateBucket},
		{"LimitedSlotOfADeadServerIsFreedByTheReap", testLimitedSlotOfADeadServer},
		{"ClaimsShareOutFairnessKeysByWeight", testClaimsShareOutFairnessKeys},
		{"WaitingGroupsCountReadyWorkByPriorityAndKey", testWaitingGroups},
		{"RunClaimsGiveEachRunToOneServer", testRunClaims},
		{"ConcurrentRunClaimsHandEachRunOutOnce", testConcurrentRunClaims},
		{"RunClaimsShareByFairnessKeyAndWeight", testFairRunClaims},
		{"RunInboxIsConsumedWithTheAppend", testRunInbox},
		{"StepClosePostsWithTheActivity", testStepClosePostsWithTheActivity},
		{"ReapReleasesTheRunsOfAnExpiredServer", testReapReleasesRuns},
		{"AppendWakesWithItsNoticesOnceCommitted", testAppendWakes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, &clusterCase{t: t, s: open(t), ctx: context.Background()})
		})
	}
}

// clusterCase is one subtest's store with the helpers the subtests share.
type clusterCase struct {
	t   *testing.T
	s   ClusterStore
	ctx context.Context
}

func (c *clusterCase) join(name string, lease time.Duration) store.ServerID {
	c.t.Helper()
	rec, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: name, Addr: "127.0.0.1:1", Lease: lease})
	if err != nil {
		c.t.Fatalf("join %q: %v", name, err)
	}
	return rec.ID
}

// schedule inserts n waiting activities of type typ pinned to node, all in
// namespace "ns" and task queue "q", ready now, with ids "<typ>-<node>-<i>".
func (c *clusterCase) schedule(n int, typ, node string) []string {
	c.t.Helper()
	now := time.Now()
	var (
		writes []store.Write
		ids    []string
	)
	for i := range n {
		id := fmt.Sprintf("%s-%s-%d", typ, node, i)
		ids = append(ids, id)
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id,
			TaskQueue: "q", ActivityType: typ, Node: node, Fingerprint: "f", State: store.StateScheduled,
			Payload: []byte("12345"), Timeouts: store.Timeouts{ScheduleToClose: time.Hour}, ScheduledAt: now, ReadyAt: now,
			Trace: traceContext}})
	}
	c.apply(writes...)
	return ids
}

func (c *clusterCase) apply(ws ...store.Write) []bool {
	c.t.Helper()
	changed, err := c.s.Apply(c.ctx, ws)
	if err != nil {
		c.t.Fatalf("apply: %v", err)
	}
	return changed
}

// claim claims for owner at now, failing the test on an error, and
// returns the activities of each claim.
func (c *clusterCase) claim(owner store.ServerID, now time.Time, claims ...store.Claim) [][]store.Activity {
	c.t.Helper()
	res := c.claimResults(owner, now, claims...)
	out := make([][]store.Activity, len(res))
	for i, r := range res {
		out[i] = r.Activities
	}
	return out
}

// claimResults claims for owner at now, failing the test on an error.
func (c *clusterCase) claimResults(owner store.ServerID, now time.Time, claims ...store.Claim) []store.ClaimResult {
	c.t.Helper()
	got, err := c.s.ClaimActivities(c.ctx, store.ClaimRequest{Owner: owner, Now: now, Claims: claims})
	if err != nil {
		c.t.Fatalf("claim: %v", err)
	}
	if len(got) != len(claims) {
		c.t.Fatalf("claim: %d results for %d claims", len(got), len(claims))
	}
	return got
}

func (c *clusterCase) get(id string) store.Activity {
	c.t.Helper()
	a, err := c.s.GetActivity(c.ctx, "ns", id)
	if err != nil {
		c.t.Fatalf("get %s: %v", id, err)
	}
	return a
}

// claimOf asks for activities of typ for workers on node, one per worker.
func claimOf(typ, node string, workers ...uint64) store.Claim {
	return store.Claim{Namespace: "ns", TaskQueue: "q", ActivityType: typ, Node: node, Workers: workers}
}

// workerIDs are n worker IDs from first on.
func workerIDs(first uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

func activityIDs(as []store.Activity) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}

// eventually polls cond until it holds, or fails the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// expire waits until the lease of the member named name ran out on the
// store's clock: a join of the same name succeeds again (a probe member,
// which stays).
func (c *clusterCase) expire(name string) {
	c.t.Helper()
	eventually(c.t, "the lease of "+name+" to run out", func() bool {
		_, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: name, Addr: "probe", Lease: time.Hour})
		if err != nil && !errors.Is(err, store.ErrNameTaken) {
			c.t.Fatalf("probe join %q: %v", name, err)
		}
		return err == nil
	})
}

func testJoinRefusesALiveName(t *testing.T, c *clusterCase) {
	before := time.Now().Add(-time.Minute)
	rec, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: "a", Addr: "10.0.0.1:50051", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == 0 || rec.Name != "a" || rec.Addr != "10.0.0.1:50051" || rec.StartedAt.Before(before) ||
		rec.LeaseUntil.Sub(rec.StartedAt) < 59*time.Second {
		t.Fatalf("joined as %+v", rec)
	}
	if _, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: "a", Lease: time.Minute}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("second join of a live name: %v, want ErrNameTaken", err)
	}
	b := c.join("b", time.Minute)
	if b == rec.ID {
		t.Fatalf("two members share ID %d", b)
	}
	if err := c.s.RenewLease(c.ctx, rec.ID, time.Minute); err != nil {
		t.Fatalf("renew a live member: %v", err)
	}
	// Concurrent joins of one free name: exactly one wins.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		errs []error
	)
	for range 8 {
		wg.Go(func() {
			_, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: "rush", Lease: time.Minute})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrNameTaken):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if won != 1 || len(errs) > 0 {
		t.Fatalf("8 concurrent joins of one name: %d won, errors %v; want exactly 1", won, errs)
	}
}

func testLeaveEndsTheMembership(t *testing.T, c *clusterCase) {
	id := c.join("leaver", time.Minute)
	ids := c.schedule(2, "t", "")
	if got := c.claim(id, time.Now(), claimOf("t", "", 1, 2)); len(got[0]) != 2 {
		t.Fatalf("claimed %v, want both", activityIDs(got[0]))
	}
	if err := c.s.PutWorker(c.ctx, store.WorkerRecord{ID: 1, Server: id, Info: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := c.s.LeaveCluster(c.ctx, id); err != nil {
		t.Fatalf("leave: %v", err)
	}
	for _, aid := range ids {
		if a := c.get(aid); a.State != store.StateScheduled || a.Attempt != 1 {
			t.Fatalf("%s after its server left: %s attempt %d, want scheduled after attempt 1", aid, a.State, a.Attempt)
		}
		atts, err := c.s.ListAttempts(c.ctx, "ns", aid)
		if err != nil || len(atts) != 1 || atts[0].Outcome != store.OutcomeFailed || atts[0].Failure == nil ||
			atts[0].Failure.Type != "server_lost" || !atts[0].Failure.Retryable {
			t.Fatalf("attempts of %s after its server left: %+v, %v", aid, atts, err)
		}
	}
	if ws, err := c.s.ListWorkers(c.ctx); err != nil || len(ws) != 0 {
		t.Fatalf("workers after their server left: %+v, %v", ws, err)
	}
	if err := c.s.RenewLease(c.ctx, id, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("renew after leaving: %v, want ErrLeaseLost", err)
	}
	if err := c.s.LeaveCluster(c.ctx, id); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("leave twice: %v, want ErrLeaseLost", err)
	}
	again := c.join("leaver", time.Minute)
	if again == id {
		t.Fatalf("a new member reused ID %d", id)
	}
}

// Four servers claiming at once never get the same activity.
func testConcurrentClaims(t *testing.T, c *clusterCase) {
	c.schedule(300, "t", "")
	var (
		mu  sync.Mutex
		got = map[string]store.ServerID{}
		wg  sync.WaitGroup
	)
	for s := range 4 {
		id := c.join(fmt.Sprintf("s%d", s), time.Minute)
		wg.Go(func() {
			for {
				res, err := c.s.ClaimActivities(c.ctx, store.ClaimRequest{Owner: id, Now: time.Now(),
					Claims: []store.Claim{claimOf("t", "", workerIDs(1, 7)...), claimOf("t", "", workerIDs(100, 5)...)}})
				if err != nil {
					t.Error(err)
					return
				}
				if len(res[0].Activities)+len(res[1].Activities) == 0 {
					return
				}
				mu.Lock()
				for _, r := range res {
					for _, a := range r.Activities {
						if other, dup := got[a.ID]; dup {
							t.Errorf("%s claimed by server %d and %d", a.ID, other, id)
						}
						if a.State != store.StateRunning || a.Attempt != 1 {
							t.Errorf("%s claimed as %s attempt %d", a.ID, a.State, a.Attempt)
						}
						got[a.ID] = id
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != 300 {
		t.Fatalf("%d of 300 activities claimed", len(got))
	}
}

func testClaimsHonourPinsAndReadiness(t *testing.T, c *clusterCase) {
	id := c.join("s", time.Minute)
	c.schedule(2, "t", "gpu")
	c.schedule(2, "t", "")
	later := time.Now().Add(time.Hour)
	c.apply(store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "later",
		TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, ScheduledAt: time.Now(), ReadyAt: later}})
	ten := workerIDs(1, 10)
	for _, tc := range []struct {
		name  string
		claim store.Claim
		want  int
	}{
		{"no workers take nothing", claimOf("t", ""), 0},
		{"a young cutoff excludes what became ready since", store.Claim{Namespace: "ns", TaskQueue: "q",
			ActivityType: "t", Workers: ten, ReadyBefore: time.Now().Add(-time.Hour)}, 0},
		{"no label takes only unpinned work", claimOf("t", "", ten...), 2},
		{"a label takes its pinned work", claimOf("t", "gpu", ten...), 2},
		{"another label takes nothing pinned elsewhere", claimOf("t", "cpu", ten...), 0},
		{"another type takes nothing", claimOf("u", "", ten...), 0},
	} {
		if got := c.claim(id, time.Now(), tc.claim); len(got[0]) != tc.want {
			t.Errorf("%s: claimed %v, want %d", tc.name, activityIDs(got[0]), tc.want)
		}
	}
	// Work not ready yet stays: nothing left now, the later one at its time.
	if got := c.claim(id, later, claimOf("t", "", ten...)); len(got[0]) != 1 || got[0][0].ID != "later" {
		t.Fatalf("claim at the retry time = %v, want later", activityIDs(got[0]))
	}
}

func testClaimRecordsOwnerAndWorker(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	ids := c.schedule(3, "t", "gpu")
	now := time.Now().Truncate(time.Microsecond)
	got := c.claim(owner, now, claimOf("t", "gpu", 70, 80))
	if !slices.Equal(activityIDs(got[0]), ids[:2]) {
		t.Fatalf("two workers claimed %v, want the two oldest %v", activityIDs(got[0]), ids[:2])
	}
	if tc := got[0][0].Trace; tc != traceContext {
		t.Fatalf("claimed activity's trace context %+v, want %+v", tc, traceContext)
	}
	for i, w := range []uint64{70, 80} {
		at, err := c.s.GetRunningAttempt(c.ctx, "ns", ids[i])
		if err != nil || at == nil || at.Number != 1 || at.WorkerID != w || at.Node != "gpu" ||
			!at.StartedAt.Equal(now) || at.Outcome != store.OutcomeRunning {
			t.Fatalf("running attempt of %s: %+v, %v; want attempt 1 on worker %d, node gpu, started %v", ids[i], at, err, w, now)
		}
		if o, err := c.s.GetActivityOwner(c.ctx, "ns", ids[i]); err != nil || o != owner {
			t.Fatalf("owner of %s: %d, %v; want %d", ids[i], o, err, owner)
		}
	}
	if at, err := c.s.GetRunningAttempt(c.ctx, "ns", ids[2]); err != nil || at != nil {
		t.Fatalf("running attempt of a waiting activity: %+v, %v; want none", at, err)
	}
	for _, missing := range []string{ids[2], "ghost"} {
		if o, err := c.s.GetActivityOwner(c.ctx, "ns", missing); err != nil || o != 0 {
			t.Fatalf("owner of %s: %d, %v; want 0", missing, o, err)
		}
	}
	owned, err := c.s.ListOwnedActivities(c.ctx, owner)
	if err != nil || len(owned) != 2 || owned[0] != (store.ActivityRef{Namespace: "ns", ID: ids[0]}) ||
		owned[1] != (store.ActivityRef{Namespace: "ns", ID: ids[1]}) {
		t.Fatalf("owned: %+v, %v; want %v", owned, err, ids[:2])
	}
}

func testOwnedWrites(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	other := c.join("other", time.Minute)
	c.schedule(3, "t", "")
	got := c.claim(owner, time.Now(), claimOf("t", "", 1, 2, 3))
	if len(got[0]) != 3 {
		t.Fatalf("claimed %v", activityIDs(got[0]))
	}
	a, b, d := got[0][0], got[0][1], got[0][2]
	end := func(id string, by store.ServerID) store.Write {
		return store.EndAttempt{Namespace: "ns", ID: id, Owner: by, State: store.StateCompleted, ClosedAt: time.Now(),
			Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeCompleted}}
	}
	if c.apply(end(a.ID, other))[0] {
		t.Fatal("a server that does not own the activity ended it")
	}
	if !c.apply(end(a.ID, owner))[0] {
		t.Fatal("the owner could not end its activity")
	}
	if got := c.get(a.ID); got.State != store.StateCompleted {
		t.Fatalf("after the owner ended it: %s", got.State)
	}
	// Ends written together are each held to their own owner, and an
	// activity ended twice in one write is ended once.
	if got := fmt.Sprint(c.apply(end(b.ID, other), end(d.ID, owner), end(d.ID, owner), end(b.ID, owner))); got != "[false true false true]" {
		t.Fatalf("ends together changed %s, want [false true false true]", got)
	}
	for _, id := range []string{b.ID, d.ID} {
		if got := c.get(id); got.State != store.StateCompleted || got.Attempt != 1 {
			t.Fatalf("%s after its ends: %s, attempt %d", id, got.State, got.Attempt)
		}
	}
	if owned, err := c.s.ListOwnedActivities(c.ctx, owner); err != nil || len(owned) != 0 {
		t.Fatalf("owned after the end: %+v, %v", owned, err)
	}
}

func testUnclaim(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	other := c.join("other", time.Minute)
	ids := c.schedule(1, "t", "")
	c.claim(owner, time.Now(), claimOf("t", "", 1))
	if err := c.s.UnclaimActivity(c.ctx, other, "ns", ids[0]); err != nil {
		t.Fatal(err)
	}
	if a := c.get(ids[0]); a.State != store.StateRunning {
		t.Fatalf("another server handed back the owner's activity: %s", a.State)
	}
	if err := c.s.UnclaimActivity(c.ctx, owner, "ns", ids[0]); err != nil {
		t.Fatal(err)
	}
	if a := c.get(ids[0]); a.State != store.StateScheduled || a.Attempt != 0 {
		t.Fatalf("after hand-back: %s attempt %d, want scheduled before any attempt", a.State, a.Attempt)
	}
	if got := c.claim(other, time.Now(), claimOf("t", "", 2)); len(got[0]) != 1 || got[0][0].Attempt != 1 {
		t.Fatalf("claim after hand-back: %+v, want the activity at attempt 1", got[0])
	}
	if err := c.s.UnclaimActivity(c.ctx, owner, "ns", "ghost"); err != nil {
		t.Fatalf("hand back a missing activity: %v", err)
	}
}

// A server whose lease ran out claims nothing, reaped or not: its claims
// could otherwise outlive the reap that hands its work back.
func testExpiredMemberClaimsNothing(t *testing.T, c *clusterCase) {
	id := c.join("late", shortLease)
	c.schedule(2, "t", "")
	c.expire("late")
	for _, reap := range []bool{false, true} {
		if reap {
			if _, err := c.s.ReapServers(c.ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.claim(id, time.Now(), claimOf("t", "", 1, 2)); len(got[0]) != 0 {
			t.Fatalf("expired member (reaped: %v) claimed %v", reap, activityIDs(got[0]))
		}
	}
}

// A started insert leaves a new activity as a claim would: running its
// first attempt on the worker, owned, its owner's to end or hand back. An
// id in use, or an owner whose lease ran out (reaped or not), inserts
// nothing; a reap hands a started activity back like a claimed one.
func testStartedInsert(t *testing.T, c *clusterCase) {
	owner := c.join("starter", time.Minute)
	late := c.join("late-starter", shortLease)
	now := time.Now().Truncate(time.Microsecond)
	started := func(id string, by store.ServerID) store.Write {
		return store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id, TaskQueue: "q", ActivityType: "direct",
			Fingerprint: "f", State: store.StateScheduled, Payload: []byte("12345"), Timeouts: store.Timeouts{ScheduleToStart: time.Second},
			ScheduledAt: now, ReadyAt: now, Trace: traceContext},
			Start: &store.InsertStart{Owner: by, Worker: 71, Node: "gpu", At: now}}
	}
	if got := c.apply(started("s-1", owner), started("s-2", owner)); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("started inserts by a live member changed %v, want both", got)
	}
	a := c.get("s-1")
	if a.State != store.StateRunning || a.Attempt != 1 || !bytes.Equal(a.Payload, []byte("12345")) || a.Trace != traceContext {
		t.Fatalf("started insert: %s attempt %d payload %q trace %+v, want running attempt 1 with its payload and trace",
			a.State, a.Attempt, a.Payload, a.Trace)
	}
	at, err := c.s.GetRunningAttempt(c.ctx, "ns", "s-1")
	if err != nil || at == nil || at.Number != 1 || at.WorkerID != 71 || at.Node != "gpu" || !at.StartedAt.Equal(now) {
		t.Fatalf("running attempt of a started insert: %+v, %v; want attempt 1 on worker 71, node gpu, from %v", at, err, now)
	}
	if owned, err := c.s.ListOwnedActivities(c.ctx, owner); err != nil || len(owned) != 2 {
		t.Fatalf("owned after two started inserts: %+v, %v", owned, err)
	}
	// Nothing waits: a claim finds no work, and the schedule-to-start
	// deadline of a running activity closes nothing.
	if got := c.claim(owner, now, claimOf("direct", "gpu", 1, 2)); len(got[0]) != 0 {
		t.Fatalf("a claim took started activities %v", activityIDs(got[0]))
	}
	expired, err := c.s.ExpireWaitingActivities(c.ctx, store.ExpireRequest{Now: now.Add(time.Hour), Limit: 10,
		Failure: func(store.Activity) *store.Failure { return &store.Failure{Type: "timeout"} }})
	if err != nil || len(expired) != 0 {
		t.Fatalf("expire after a started insert: %v, %v; want none", activityIDs(expired), err)
	}
	if got := c.apply(started("s-1", owner)); got[0] {
		t.Fatal("a started insert of an id in use changed it")
	}
	if ended := c.apply(store.EndAttempt{Namespace: "ns", ID: "s-1", Owner: owner, State: store.StateCompleted, ClosedAt: now,
		Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}}); !ended[0] {
		t.Fatal("the owner could not end its started activity")
	}

	c.expire("late-starter")
	if got := c.apply(started("s-late", late)); got[0] {
		t.Fatal("a member whose lease ran out inserted a started activity")
	}
	if _, err := c.s.GetActivity(c.ctx, "ns", "s-late"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get the refused started insert: %v, want not found", err)
	}

	// A reap hands the started activity of a dead owner back.
	dead := c.join("dead-starter", shortLease)
	c.apply(started("s-dead", dead))
	c.expire("dead-starter")
	if _, err := c.s.ReapServers(c.ctx); err != nil {
		t.Fatal(err)
	}
	if a := c.get("s-dead"); a.State != store.StateScheduled {
		t.Fatalf("after its owner's reap a started activity is %s, want scheduled again", a.State)
	}
	if got := c.claim(owner, time.Now(), claimOf("direct", "", 3)); len(got[0]) != 1 || got[0][0].ID != "s-dead" {
		t.Fatalf("claim after the reap took %v, want s-dead", activityIDs(got[0]))
	}
}

func testReap(t *testing.T, c *clusterCase) {
	dead := c.join("dead", shortLease)
	alive := c.join("alive", time.Minute)
	c.schedule(3, "t", "")
	got := c.claim(dead, time.Now(), claimOf("t", "", 1, 2, 3))
	if len(got[0]) != 3 {
		t.Fatalf("claim: %v", activityIDs(got[0]))
	}
	if _, err := c.s.RequestCancel(c.ctx, store.CancelRequest{Namespace: "ns", ID: got[0][0].ID, Reason: "stop it", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []uint64{9, 7} {
		if err := c.s.PutWorker(c.ctx, store.WorkerRecord{ID: w, Server: dead, Info: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.s.SendMessage(c.ctx, store.Message{From: alive, To: dead, Kind: "x"}); err != nil {
		t.Fatal(err)
	}
	var reaped []store.ReapedServer
	eventually(t, "the dead server to be reaped", func() bool {
		r, err := c.s.ReapServers(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		reaped = append(reaped, r...)
		return len(reaped) > 0
	})
	if len(reaped) != 1 {
		t.Fatalf("reaped %+v, want only the dead server", reaped)
	}
	r := reaped[0]
	if r.Server.ID != dead || r.Server.Name != "dead" || r.Requeued != 2 || r.Canceled != 1 || !slices.Equal(r.Workers, []uint64{7, 9}) {
		t.Fatalf("reaped %+v, want server %d with 2 requeued, 1 canceled, workers [7 9]", r, dead)
	}
	if again, err := c.s.ReapServers(c.ctx); err != nil || len(again) != 0 {
		t.Fatalf("second reap: %+v, %v; want nothing", again, err)
	}
	if err := c.s.RenewLease(c.ctx, dead, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("renew after reap: %v, want ErrLeaseLost", err)
	}
	canceled := c.get(got[0][0].ID)
	if canceled.State != store.StateCanceled || canceled.Failure == nil || canceled.Failure.Message != "stop it" {
		t.Fatalf("activity with a cancel request: %+v", canceled)
	}
	atts, err := c.s.ListAttempts(c.ctx, "ns", got[0][1].ID)
	if err != nil || len(atts) != 1 || atts[0].Failure == nil || atts[0].Failure.Type != "server_lost" || atts[0].WorkerID != 2 {
		t.Fatalf("attempts of a requeued activity: %+v, %v", atts, err)
	}
	if ws, err := c.s.ListWorkers(c.ctx); err != nil || len(ws) != 0 {
		t.Fatalf("workers of the reaped server: %+v, %v", ws, err)
	}
	again := c.claim(alive, time.Now(), claimOf("t", "", workerIDs(1, 10)...))
	if len(again[0]) != 2 || again[0][0].Attempt != 2 || again[0][1].Attempt != 2 {
		t.Fatalf("the survivor claims %+v; want 2 activities at attempt 2", again[0])
	}
}

func testRequestCancel(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	ids := c.schedule(3, "t", "") // waiting, running, closed
	c.claim(owner, time.Now(), claimOf("t", "", 1, 2))
	c.apply(store.EndAttempt{Namespace: "ns", ID: ids[1], Owner: owner, State: store.StateCompleted, ClosedAt: time.Now(),
		Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeCompleted}})
	c.apply(store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "waiting", TaskQueue: "q", ActivityType: "t",
		Fingerprint: "f", State: store.StateScheduled, ScheduledAt: time.Now(), ReadyAt: time.Now()}})
	now := time.Now().Truncate(time.Microsecond)
	for _, tc := range []struct {
		id        string
		want      store.CancelResult
		wantState store.ActivityState
	}{
		{"waiting", store.CancelResult{Outcome: store.CancelDone}, store.StateCanceled},
		{ids[0], store.CancelResult{Outcome: store.CancelForwarded, Owner: owner}, store.StateRunning},
		{ids[1], store.CancelResult{Outcome: store.CancelClosed}, store.StateCompleted},
	} {
		res, err := c.s.RequestCancel(c.ctx, store.CancelRequest{Namespace: "ns", ID: tc.id, Reason: "no longer needed", Now: now})
		if err != nil || res != tc.want {
			t.Fatalf("cancel %s: %+v, %v; want %+v", tc.id, res, err, tc.want)
		}
		if a := c.get(tc.id); a.State != tc.wantState {
			t.Fatalf("%s after the cancel request: %s, want %s", tc.id, a.State, tc.wantState)
		}
	}
	if a := c.get("waiting"); a.Failure == nil || a.Failure.Type != "canceled" || a.Failure.Message != "no longer needed" || !a.ClosedAt.Equal(now) {
		t.Fatalf("canceled waiting activity: %+v", a)
	}
	reqs, err := c.s.ListCancelRequests(c.ctx, owner)
	want := []store.PendingCancel{{Activity: store.ActivityRef{Namespace: "ns", ID: ids[0]}, Reason: "no longer needed"}}
	if err != nil || !slices.Equal(reqs, want) {
		t.Fatalf("cancel requests: %+v, %v; want %+v", reqs, err, want)
	}
	other := c.join("other", time.Minute)
	if reqs, err := c.s.ListCancelRequests(c.ctx, other); err != nil || len(reqs) != 0 {
		t.Fatalf("cancel requests of another server: %+v, %v", reqs, err)
	}
	if _, err := c.s.RequestCancel(c.ctx, store.CancelRequest{Namespace: "ns", ID: "ghost", Reason: "x", Now: now}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel a missing activity: %v, want ErrNotFound", err)
	}
}

// A cancel requested while the attempt was ending wins over its retry, and
// over a claim handed back before it started.
func testCancelOutlivesRetry(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	c.schedule(2, "t", "")
	got := c.claim(owner, time.Now(), claimOf("t", "", 1, 2))
	if len(got[0]) != 2 {
		t.Fatalf("claimed %v", activityIDs(got[0]))
	}
	retried, handedBack := got[0][0], got[0][1]
	for _, a := range got[0] {
		res, err := c.s.RequestCancel(c.ctx, store.CancelRequest{Namespace: "ns", ID: a.ID, Reason: "no longer needed", Now: time.Now()})
		if err != nil || res.Outcome != store.CancelForwarded || res.Owner != owner {
			t.Fatalf("request cancel of %s: %+v %v", a.ID, res, err)
		}
	}
	c.apply(store.EndAttempt{Namespace: "ns", ID: retried.ID, Owner: owner, State: store.StateScheduled, ReadyAt: time.Now(),
		Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeFailed,
			Failure: &store.Failure{Type: "error", Retryable: true}}})
	if err := c.s.UnclaimActivity(c.ctx, owner, "ns", handedBack.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{retried.ID, handedBack.ID} {
		if a := c.get(id); a.State != store.StateCanceled || a.Failure == nil || a.Failure.Message != "no longer needed" || a.ClosedAt.IsZero() {
			t.Fatalf("%s after its cancel request: %+v", id, a)
		}
	}
}

// The sweep closes exactly the waiting work whose schedule-to-start (from
// when it became ready) or schedule-to-close deadline passed.
func testExpireWaiting(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	now := time.Now()
	insert := func(id string, to store.Timeouts) {
		t.Helper()
		c.apply(store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id,
			TaskQueue: "q", ActivityType: id, Fingerprint: "f", State: store.StateScheduled, Timeouts: to,
			ScheduledAt: now, ReadyAt: now}})
	}
	insert("patient", store.Timeouts{ScheduleToStart: time.Hour, ScheduleToClose: time.Hour})
	insert("start-due", store.Timeouts{ScheduleToStart: 10 * time.Millisecond})
	insert("close-due", store.Timeouts{ScheduleToClose: 10 * time.Millisecond})
	insert("no-deadline", store.Timeouts{})
	insert("retried", store.Timeouts{ScheduleToStart: 10 * time.Millisecond})
	insert("running", store.Timeouts{ScheduleToStart: 10 * time.Millisecond, ScheduleToClose: 10 * time.Millisecond})
	// "retried" is claimed and fails; its retry is ready only in an hour, so
	// its schedule-to-start clock starts then. "running" stays claimed: the
	// sweep leaves running work to its owner.
	if got := c.claim(owner, now, claimOf("retried", "", 1), claimOf("running", "", 2)); len(got[0]) != 1 || len(got[1]) != 1 {
		t.Fatalf("claimed %v", got)
	}
	c.apply(store.EndAttempt{Namespace: "ns", ID: "retried", Owner: owner, State: store.StateScheduled, ReadyAt: now.Add(time.Hour),
		Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeFailed}})
	expire := func(at time.Time, limit int) []string {
		t.Helper()
		closed, err := c.s.ExpireWaitingActivities(c.ctx, store.ExpireRequest{Now: at, Limit: limit,
			Failure: func(a store.Activity) *store.Failure { return &store.Failure{Type: "expired", Message: a.ID} }})
		if err != nil {
			t.Fatal(err)
		}
		ids := activityIDs(closed)
		slices.Sort(ids)
		return ids
	}
	later := now.Add(time.Second)
	if ids := expire(later, 100); !slices.Equal(ids, []string{"close-due", "start-due"}) {
		t.Fatalf("the sweep closed %v, want close-due and start-due", ids)
	}
	for _, id := range []string{"close-due", "start-due"} {
		if a := c.get(id); a.State != store.StateTimedOut || a.Failure == nil || a.Failure.Message != id || !a.ClosedAt.Equal(later) {
			t.Fatalf("%s after the sweep: %+v", id, a)
		}
	}
	if ids := expire(later, 100); len(ids) != 0 {
		t.Fatalf("a second sweep closed %v", ids)
	}
	if ids := expire(now.Add(2*time.Hour), 1); len(ids) != 1 {
		t.Fatalf("a sweep limited to 1 closed %v", ids)
	}
	if ids := expire(now.Add(2*time.Hour), 100); len(ids) != 1 {
		t.Fatalf("two hours on, the sweep closed %v, want the one of patient and retried left", ids)
	}
	if a := c.get("running"); a.State != store.StateRunning {
		t.Fatalf("the sweep touched running work: %s", a.State)
	}
	// A failure func that returns nil leaves the activity open.
	insert("spared", store.Timeouts{ScheduleToStart: 10 * time.Millisecond})
	closed, err := c.s.ExpireWaitingActivities(c.ctx, store.ExpireRequest{Now: later, Limit: 100,
		Failure: func(store.Activity) *store.Failure { return nil }})
	if err != nil || len(closed) != 0 || c.get("spared").State != store.StateScheduled {
		t.Fatalf("a nil failure closed %v, %v", activityIDs(closed), err)
	}
}

func testBacklogAndOpenCounts(t *testing.T, c *clusterCase) {
	owner := c.join("owner", time.Minute)
	old := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	var writes []store.Write
	for i, p := range []struct{ ns, tq string }{{"b", "q"}, {"a", "z"}, {"a", "q"}, {"a", "q"}} {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: p.ns, ID: fmt.Sprint(i), TaskQueue: p.tq,
			ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, Payload: make([]byte, 10*(i+1)),
			ScheduledAt: old, ReadyAt: old.Add(time.Duration(i) * time.Second)}})
	}
	// Not ready yet: not in the backlog, but open.
	writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "b", ID: "later", TaskQueue: "q",
		ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, Payload: make([]byte, 100),
		ScheduledAt: old, ReadyAt: time.Now().Add(time.Hour)}})
	c.apply(writes...)
	backlog, err := c.s.ListWaitingBacklog(c.ctx, time.Now())
	want := []store.WaitingBacklog{
		{Namespace: "a", TaskQueue: "q", Waiting: 2, OldestReadyAt: old.Add(2 * time.Second)},
		{Namespace: "a", TaskQueue: "z", Waiting: 1, OldestReadyAt: old.Add(time.Second)},
		{Namespace: "b", TaskQueue: "q", Waiting: 1, OldestReadyAt: old},
	}
	if err != nil || len(backlog) != len(want) {
		t.Fatalf("backlog: %+v, %v; want %+v", backlog, err, want)
	}
	for i := range want {
		if backlog[i].Namespace != want[i].Namespace || backlog[i].TaskQueue != want[i].TaskQueue ||
			backlog[i].Waiting != want[i].Waiting || !backlog[i].OldestReadyAt.Equal(want[i].OldestReadyAt) ||
			backlog[i].ByPriority != [store.LowestPriority]int{2: want[i].Waiting} {
			t.Fatalf("backlog[%d]: %+v, want %+v", i, backlog[i], want[i])
		}
	}
	// One running (still open), one closed (no longer open).
	got := c.claim(owner, time.Now(), store.Claim{Namespace: "a", TaskQueue: "q", ActivityType: "t", Workers: []uint64{1, 2}})
	if len(got[0]) != 2 {
		t.Fatalf("claimed %v", activityIDs(got[0]))
	}
	c.apply(store.EndAttempt{Namespace: "a", ID: got[0][1].ID, Owner: owner, State: store.StateCompleted, ClosedAt: time.Now(),
		Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeCompleted}})
	open, err := c.s.CountOpenActivities(c.ctx)
	wantOpen := map[string]store.OpenCount{"a": {Activities: 2, PayloadBytes: 20 + 30}, "b": {Activities: 2, PayloadBytes: 10 + 100}}
	if err != nil || len(open) != len(wantOpen) || open["a"] != wantOpen["a"] || open["b"] != wantOpen["b"] {
		t.Fatalf("open counts: %+v, %v; want %+v", open, err, wantOpen)
	}
}

func testWorkerDirectory(t *testing.T, c *clusterCase) {
	a, b := c.join("a", time.Minute), c.join("b", time.Minute)
	for _, w := range []store.WorkerRecord{
		{ID: 30, Server: b, Info: []byte(`{"v":1}`)},
		{ID: 10, Server: a, Info: []byte(`{"v":1}`)},
		{ID: 20, Server: a, Info: []byte(`{"v":1}`)},
		{ID: 30, Server: b, Info: []byte(`{"v":2}`)}, // replaces
	} {
		if err := c.s.PutWorker(c.ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.s.DeleteWorker(c.ctx, 20); err != nil {
		t.Fatal(err)
	}
	if err := c.s.DeleteWorker(c.ctx, 99); err != nil {
		t.Fatalf("delete a missing worker: %v", err)
	}
	ws, err := c.s.ListWorkers(c.ctx)
	if err != nil || len(ws) != 2 || ws[0].ID != 10 || ws[0].Server != a || ws[1].ID != 30 || ws[1].Server != b ||
		string(ws[1].Info) != `{"v":2}` {
		t.Fatalf("workers: %+v, %v; want 10 on a, then 30 on b with its second record", ws, err)
	}
}

func testMessages(t *testing.T, c *clusterCase) {
	a, b := c.join("a", time.Minute), c.join("b", time.Minute)
	var sent []int64
	for _, m := range []store.Message{
		{From: b, To: a, Kind: "x", Body: []byte("for a")},
		{From: a, To: b, Kind: "x", Body: []byte("first for b"), Call: 9},
		{From: a, To: b, Kind: "reply", Body: []byte("second for b")},
	} {
		id, err := c.s.SendMessage(c.ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	msgs, err := c.s.ReceiveMessages(c.ctx, b)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("b received %+v, %v; want two messages", msgs, err)
	}
	first, second := msgs[0], msgs[1]
	if first.ID != sent[1] || first.From != a || first.To != b || first.Kind != "x" || string(first.Body) != "first for b" || first.Call != 9 ||
		second.ID != sent[2] || string(second.Body) != "second for b" || second.Call != 0 {
		t.Fatalf("b received %+v, want its two messages in the order sent", msgs)
	}
	if again, err := c.s.ReceiveMessages(c.ctx, b); err != nil || len(again) != 0 {
		t.Fatalf("a message was received twice: %+v, %v", again, err)
	}
	if msgs, err := c.s.ReceiveMessages(c.ctx, a); err != nil || len(msgs) != 1 || string(msgs[0].Body) != "for a" {
		t.Fatalf("a received %+v, %v", msgs, err)
	}
}

// listener collects the notices one member receives.
type listener struct {
	notices chan store.Notice
	stop    func()
}

func (c *clusterCase) listen(self store.ServerID) *listener {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.ctx)
	l := &listener{notices: make(chan store.Notice, 256)}
	done := make(chan error, 1)
	go func() {
		done <- c.s.ListenNotices(ctx, self, func(n store.Notice) {
			select {
			case l.notices <- n:
			default: // a test that stopped reading
			}
		})
	}()
	l.stop = func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			c.t.Errorf("listen ended with %v, want context.Canceled", err)
		}
	}
	c.t.Cleanup(l.stop)
	return l
}

// next waits for the next notice that is not a namespace probe.
func (l *listener) next(t *testing.T) store.Notice {
	t.Helper()
	for {
		select {
		case n := <-l.notices:
			if n.Kind == store.NoticeNamespace && n.Name == "probe" {
				continue
			}
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no notice within 10s")
		}
	}
}

// ready waits until every listener hears notices: listening starts
// asynchronously, so it publishes probes until each has heard one.
func (c *clusterCase) ready(ls ...*listener) {
	c.t.Helper()
	for _, l := range ls {
		eventually(c.t, "the listener to hear a probe", func() bool {
			if err := c.s.PublishNotice(c.ctx, store.Notice{Kind: store.NoticeNamespace, Name: "probe"}); err != nil {
				c.t.Fatal(err)
			}
			select {
			case <-l.notices:
				return true
			case <-time.After(50 * time.Millisecond):
				return false
			}
		})
	}
	// Drain the probes still in flight, then mark the end of them.
	if err := c.s.PublishNotice(c.ctx, store.Notice{Kind: store.NoticeNamespace, Name: "ready"}); err != nil {
		c.t.Fatal(err)
	}
	for _, l := range ls {
		for n := l.next(c.t); n.Kind != store.NoticeNamespace || n.Name != "ready"; n = l.next(c.t) {
		}
	}
}

func testNotices(t *testing.T, c *clusterCase) {
	a, b := c.join("a", time.Minute), c.join("b", time.Minute)
	la, lb := c.listen(a), c.listen(b)
	c.ready(la, lb)

	// A committed insert names its triple; a published work notice carries
	// its triples, or none for any work. Two servers joined this store, so
	// neither can be told the notice is its own.
	c.schedule(1, "t", "")
	for _, l := range []*listener{la, lb} {
		if n := l.next(t); n.Kind != store.NoticeWork || !slices.Equal(n.Triples, [][3]string{{"ns", "q", "t"}}) || n.Own {
			t.Fatalf("notice of a schedule: %+v", n)
		}
	}
	for _, tc := range []store.Notice{
		{Kind: store.NoticeWork, Triples: [][3]string{{"n1", "q1", "t1"}, {"n2", "", "t2"}}},
		{Kind: store.NoticeWork},
		{Kind: store.NoticeNamespace, Name: "orders"},
		{Kind: store.NoticeTopology, Name: "7"},
	} {
		if err := c.s.PublishNotice(c.ctx, tc); err != nil {
			t.Fatal(err)
		}
		for _, l := range []*listener{la, lb} {
			if n := l.next(t); n.Kind != tc.Kind || n.Name != tc.Name || !slices.Equal(n.Triples, tc.Triples) {
				t.Fatalf("published %+v, heard %+v", tc, n)
			}
		}
	}
	if err := c.s.PublishNotice(c.ctx, store.Notice{Kind: store.NoticeMessage}); err == nil {
		t.Fatal("published a message notice without a message")
	}
	// A message wakes only its addressee.
	if _, err := c.s.SendMessage(c.ctx, store.Message{From: a, To: b, Kind: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := lb.next(t); n.Kind != store.NoticeMessage {
		t.Fatalf("b heard %+v, want a message notice", n)
	}
	if err := c.s.PublishNotice(c.ctx, store.Notice{Kind: store.NoticeNamespace, Name: "after"}); err != nil {
		t.Fatal(err)
	}
	if n := la.next(t); n.Kind != store.NoticeNamespace || n.Name != "after" {
		t.Fatalf("a heard %+v before the next notice, want nothing for b's message", n)
	}
}

func testClusterCanceledContext(t *testing.T, c *clusterCase) {
	id := c.join("s", time.Minute)
	ids := c.schedule(1, "t", "")
	cctx, cancel := context.WithCancel(c.ctx)
	cancel()
	if _, err := c.s.JoinCluster(cctx, store.JoinRequest{Name: "late", Lease: time.Minute}); err == nil {
		t.Fatal("join with a canceled context: no error")
	}
	if _, err := c.s.ClaimActivities(cctx, store.ClaimRequest{Owner: id, Now: time.Now(),
		Claims: []store.Claim{claimOf("t", "", 1)}}); err == nil {
		t.Fatal("claim with a canceled context: no error")
	}
	if err := c.s.PutWorker(cctx, store.WorkerRecord{ID: 1, Server: id}); err == nil {
		t.Fatal("put worker with a canceled context: no error")
	}
	if a := c.get(ids[0]); a.State != store.StateScheduled {
		t.Fatalf("a claim with a canceled context changed the activity: %s", a.State)
	}
	if _, err := c.s.JoinCluster(c.ctx, store.JoinRequest{Name: "late", Lease: time.Minute}); err != nil {
		t.Fatalf("a join with a canceled context left the name taken: %v", err)
	}
	if ws, err := c.s.ListWorkers(c.ctx); err != nil || len(ws) != 0 {
		t.Fatalf("a put with a canceled context left %+v, %v", ws, err)
	}
}

func testClaimsTakeTheMostUrgentFirst(t *testing.T, c *clusterCase) {
	owner := c.join("s", time.Minute)
	now := time.Now()
	var writes []store.Write
	for i, p := range []int{5, 5, 3, 1, 5} {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: fmt.Sprintf("p%d-%d", p, i),
			TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, Priority: p,
			Timeouts: store.Timeouts{ScheduleToClose: time.Hour}, ScheduledAt: now, ReadyAt: now}})
	}
	c.apply(writes...)
	first := c.claim(owner, time.Now(), claimOf("t", "", 1))
	second := c.claim(owner, time.Now(), claimOf("t", "", 2, 3))
	took := activityIDs(second[0])
	slices.Sort(took) // both start at once; the list is in scheduling order
	if got := fmt.Sprint(activityIDs(first[0]), took); got != "[p1-3] [p3-2 p5-0]" {
		t.Fatalf("claims took %s, want the priority-1 activity, then priority 3, then the oldest priority 5", got)
	}
}

// scheduleFair inserts n waiting activities of type typ, fairness key k,
// weight w and priority p, ready now, with ids "<k>-<i>".
func (c *clusterCase) scheduleFair(typ, k string, w, p, n int) {
	c.t.Helper()
	now := time.Now()
	var writes []store.Write
	for i := range n {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: fmt.Sprintf("%s-%d", k, i),
			TaskQueue: "q", ActivityType: typ, Fingerprint: "f", State: store.StateScheduled, Priority: p,
			Flow: store.Flow{FairnessKey: k, FairnessWeight: w}, Timeouts: store.Timeouts{ScheduleToClose: time.Hour},
			ScheduledAt: now, ReadyAt: now}})
	}
	c.apply(writes...)
}

// A claim shares out its slots between the fairness keys waiting, by
// weight and by the slots each key already holds, rather than taking the
// oldest work: a key's backlog does not starve a key that came later, and
// a more urgent priority still goes first.
func testClaimsShareOutFairnessKeys(t *testing.T, c *clusterCase) {
	owner := c.join("s", time.Minute)
	claimIDs := func(typ string, workers ...uint64) string {
		t.Helper()
		got := c.claim(owner, time.Now(), claimOf(typ, "", workers...))
		ids := activityIDs(got[0])
		slices.Sort(ids)
		return fmt.Sprint(ids)
	}

	// Equal weights: a's backlog is older, yet a claim of 4 takes two of
	// each; single-slot claims then go to the key holding fewer slots (on
	// a tie either), so no key ever holds two more than the other.
	c.scheduleFair("equal", "a", 1, 3, 20)
	c.scheduleFair("equal", "b", 1, 3, 5)
	if got := claimIDs("equal", 1, 2, 3, 4); got != "[a-0 a-1 b-0 b-1]" {
		t.Fatalf("claim of 4 took %s, want two of each key, oldest first", got)
	}
	held := map[byte]int{'a': 2, 'b': 2}
	var singles []string
	for range 6 {
		got := c.claim(owner, time.Now(), claimOf("equal", "", 5))[0]
		if len(got) != 1 {
			t.Fatalf("single-slot claim took %d", len(got))
		}
		id := got[0].ID
		singles = append(singles, id)
		if want := fmt.Sprintf("%c-%d", id[0], held[id[0]]); id != want {
			t.Fatalf("single-slot claim took %s, want %s: a key's oldest first", id, want)
		}
		held[id[0]]++
		if d := held['a'] - held['b']; d < -1 || d > 1 {
			t.Fatalf("single-slot claims took %v: a holds %d, b %d; want the keys in turn", singles, held['a'], held['b'])
		}
	}

	// Activities whose end the claimer is still writing (Ended) do not
	// hold their key's slots: of three claimed, the key holding two is
	// next once both are ended, not the key holding one.
	c.scheduleFair("ending", "c", 1, 3, 5)
	c.scheduleFair("ending", "d", 1, 3, 5)
	first := c.claim(owner, time.Now(), claimOf("ending", "", 30, 31, 32))[0]
	byKey := map[string][]string{}
	for _, a := range first {
		byKey[a.Flow.FairnessKey] = append(byKey[a.Flow.FairnessKey], a.ID)
	}
	two := "c"
	if len(byKey["d"]) == 2 {
		two = "d"
	}
	if len(byKey[two]) != 2 || len(first) != 3 {
		t.Fatalf("claim of 3 took %s, want two of one key and one of the other", activityIDs(first))
	}
	ended := claimOf("ending", "", 33)
	ended.Ended = byKey[two]
	if got := c.claim(owner, time.Now(), ended)[0]; len(got) != 1 || got[0].Flow.FairnessKey != two {
		t.Fatalf("with key %s's two ended, a claim took %s, want key %s's next", two, activityIDs(got), two)
	}

	// Weights 3 and 1: a claim of 8 takes 6 and 2.
	c.scheduleFair("weighted", "heavy", 3, 3, 12)
	c.scheduleFair("weighted", "light", 1, 3, 12)
	if got := claimIDs("weighted", workerIDs(10, 8)...); got != "[heavy-0 heavy-1 heavy-2 heavy-3 heavy-4 heavy-5 light-0 light-1]" {
		t.Fatalf("claim of 8 took %s, want 6 of the weight-3 key and 2 of the weight-1 key", got)
	}

	// Priority before fairness: the priority-1 activity of a key goes
	// before the priority-3 work of another, whatever their shares.
	c.scheduleFair("urgent", "x", 1000, 3, 3)
	c.scheduleFair("urgent", "y", 1, 1, 1)
	if got := claimIDs("urgent", 20); got != "[y-0]" {
		t.Fatalf("claim of 1 took %s, want the priority-1 activity", got)
	}
}

// ListWaitingGroups counts a namespace's ready waiting work by task queue,
// type, priority and fairness key, largest first, leaving out work not
// ready yet, claimed work and other namespaces.
func testWaitingGroups(t *testing.T, c *clusterCase) {
	owner := c.join("s", time.Minute)
	old := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	var writes []store.Write
	add := func(ns, id, tq, typ string, p int, key string, ready time.Time) {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: ns, ID: id, TaskQueue: tq,
			ActivityType: typ, Fingerprint: "f", State: store.StateScheduled, Priority: p, Flow: store.Flow{FairnessKey: key},
			Timeouts: store.Timeouts{ScheduleToClose: time.Hour}, ScheduledAt: old, ReadyAt: ready}})
	}
	for i := range 3 {
		add("ns", fmt.Sprint("a", i), "q", "t", 3, "tenant-a", old.Add(time.Duration(i)*time.Second))
	}
	add("ns", "b0", "q", "t", 3, "tenant-b", old)
	add("ns", "u0", "q", "t", 1, "", old.Add(5*time.Second))
	add("ns", "later", "q", "t", 3, "tenant-b", time.Now().Add(time.Hour))
	add("other", "x0", "q", "t", 3, "tenant-a", old)
	add("ns", "c0", "claimed", "t", 3, "", old)
	c.apply(writes...)
	if got := c.claim(owner, time.Now(), store.Claim{Namespace: "ns", TaskQueue: "claimed", ActivityType: "t", Workers: []uint64{1}}); len(got[0]) != 1 {
		t.Fatalf("claimed %v", activityIDs(got[0]))
	}
	groups, err := c.s.ListWaitingGroups(c.ctx, "ns", time.Now())
	want := []store.WaitingGroup{
		{TaskQueue: "q", ActivityType: "t", Priority: 3, FairnessKey: "tenant-a", Count: 3, OldestReadyAt: old},
		{TaskQueue: "q", ActivityType: "t", Priority: 1, FairnessKey: "", Count: 1, OldestReadyAt: old.Add(5 * time.Second)},
		{TaskQueue: "q", ActivityType: "t", Priority: 3, FairnessKey: "tenant-b", Count: 1, OldestReadyAt: old},
	}
	if err != nil || len(groups) != len(want) {
		t.Fatalf("waiting groups: %+v, %v; want %+v", groups, err, want)
	}
	for i := range want {
		g := groups[i]
		if g.TaskQueue != want[i].TaskQueue || g.ActivityType != want[i].ActivityType || g.Priority != want[i].Priority ||
			g.FairnessKey != want[i].FairnessKey || g.Count != want[i].Count || !g.OldestReadyAt.Equal(want[i].OldestReadyAt) {
			t.Fatalf("waiting group %d: %+v, want %+v", i, g, want[i])
		}
	}
}
