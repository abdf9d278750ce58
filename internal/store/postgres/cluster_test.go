package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
)

type clusterBundle struct {
	st  *postgres.Store
	ctx context.Context
}

func setupCluster(t *testing.T) clusterBundle {
	t.Helper()
	return clusterBundle{st: open(t, freshDatabase(t)), ctx: context.Background()}
}

func (b clusterBundle) schedule(t *testing.T, n int, typ, node string) {
	t.Helper()
	now := time.Now()
	var writes []store.Write
	for i := range n {
		writes = append(writes, store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: fmt.Sprintf("%s-%s-%d", typ, node, i),
			TaskQueue: "q", ActivityType: typ, Node: node, Fingerprint: "f", State: store.StateScheduled,
			Timeouts: store.Timeouts{ScheduleToClose: time.Hour}, ScheduledAt: now, ReadyAt: now}})
	}
	if _, err := b.st.Apply(b.ctx, writes); err != nil {
		t.Fatal(err)
	}
}

func (b clusterBundle) join(t *testing.T, name string, lease time.Duration) store.ServerID {
	t.Helper()
	m, err := b.st.Join(b.ctx, name, "127.0.0.1:0", lease)
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

func claimOf(typ, node string, limit int) store.Claim {
	return store.Claim{Namespace: "ns", TaskQueue: "q", ActivityType: typ, Node: node, Limit: limit}
}

// Four servers claiming at once never get the same activity.
func TestConcurrentClaimsHandEachActivityOutOnce(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	b.schedule(t, 600, "t", "")
	var (
		mu  sync.Mutex
		got = map[string]store.ServerID{}
		wg  sync.WaitGroup
	)
	for s := range 4 {
		id := b.join(t, fmt.Sprintf("s%d", s), time.Minute)
		wg.Go(func() {
			for {
				res, err := b.st.ClaimActivities(b.ctx, id, time.Now(), []store.Claim{claimOf("t", "", 7), claimOf("t", "", 5)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(res[0])+len(res[1]) == 0 {
					return
				}
				mu.Lock()
				for _, rows := range res {
					for _, a := range rows {
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
	if len(got) != 600 {
		t.Fatalf("%d of 600 activities claimed", len(got))
	}
}

func TestClaimsHonourNodePinsAndReadiness(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	id := b.join(t, "s", time.Minute)
	b.schedule(t, 2, "t", "gpu")
	b.schedule(t, 2, "t", "")
	later := time.Now().Add(time.Hour)
	if _, err := b.st.Apply(b.ctx, []store.Write{store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "later",
		TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, ScheduledAt: time.Now(), ReadyAt: later}}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		claim store.Claim
		want  int
	}{
		{"no label takes only unpinned work", claimOf("t", "", 10), 2},
		{"a label takes its pinned work", claimOf("t", "gpu", 10), 2},
		{"another label takes nothing pinned elsewhere", claimOf("t", "cpu", 10), 0},
		{"another type takes nothing", claimOf("u", "", 10), 0},
	}
	for _, tc := range tests {
		res, err := b.st.ClaimActivities(b.ctx, id, time.Now(), []store.Claim{tc.claim})
		if err != nil {
			t.Fatal(err)
		}
		if len(res[0]) != tc.want {
			t.Errorf("%s: claimed %d, want %d", tc.name, len(res[0]), tc.want)
		}
	}
	// Work not ready yet stays: nothing left now, the later one at its time.
	res, err := b.st.ClaimActivities(b.ctx, id, later, []store.Claim{claimOf("t", "", 10)})
	if err != nil || len(res[0]) != 1 || res[0][0].ID != "later" {
		t.Fatalf("claim at the retry time = %v, %v", res, err)
	}
}

func TestReapHandsBackTheAttemptsOfAnExpiredServer(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	dead := b.join(t, "dead", 300*time.Millisecond)
	alive := b.join(t, "alive", time.Minute)
	b.schedule(t, 3, "t", "")
	res, err := b.st.ClaimActivities(b.ctx, dead, time.Now(), []store.Claim{claimOf("t", "", 3)})
	if err != nil || len(res[0]) != 3 {
		t.Fatalf("claim: %v, %v", res, err)
	}
	if _, _, err := b.st.RequestCancel(b.ctx, "ns", res[0][0].ID, "stop it", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.st.PutWorker(b.ctx, store.WorkerRecord{ID: 7, Server: dead, Info: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if reaped, err := b.st.Reap(b.ctx); err != nil || len(reaped) != 0 {
		t.Fatalf("reap before the lease ended = %v, %v", reaped, err)
	}
	time.Sleep(400 * time.Millisecond)
	reaped, err := b.st.Reap(b.ctx)
	if err != nil || len(reaped) != 1 {
		t.Fatalf("reap = %v, %v", reaped, err)
	}
	r := reaped[0]
	if r.Member.ID != dead || r.Requeued != 2 || r.Canceled != 1 || len(r.Workers) != 1 || r.Workers[0] != 7 {
		t.Fatalf("reaped %+v", r)
	}
	if err := b.st.Renew(b.ctx, dead, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("renew after reap: %v, want ErrLeaseLost", err)
	}
	canceled, err := b.st.GetActivity(b.ctx, "ns", res[0][0].ID)
	if err != nil || canceled.State != store.StateCanceled || canceled.Failure.Message != "stop it" {
		t.Fatalf("activity with a cancel request: %+v, %v", canceled, err)
	}
	atts, err := b.st.ListAttempts(b.ctx, "ns", res[0][1].ID)
	if err != nil || len(atts) != 1 || atts[0].Failure == nil || atts[0].Failure.Type != "server_lost" {
		t.Fatalf("attempts of a requeued activity: %+v, %v", atts, err)
	}
	again, err := b.st.ClaimActivities(b.ctx, alive, time.Now(), []store.Claim{claimOf("t", "", 10)})
	if err != nil || len(again[0]) != 2 || again[0][0].Attempt != 2 {
		t.Fatalf("the survivor claims %v, %v; want 2 activities at attempt 2", again, err)
	}
}

func TestOwnedWritesApplyOnlyForTheOwner(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	owner := b.join(t, "owner", time.Minute)
	other := b.join(t, "other", time.Minute)
	b.schedule(t, 1, "t", "")
	res, err := b.st.ClaimActivities(b.ctx, owner, time.Now(), []store.Claim{claimOf("t", "", 1)})
	if err != nil || len(res[0]) != 1 {
		t.Fatal(res, err)
	}
	a := res[0][0]
	end := func(by store.ServerID) bool {
		changed, err := b.st.Apply(b.ctx, []store.Write{store.EndAttempt{Namespace: "ns", ID: a.ID, Owner: by,
			State: store.StateCompleted, ClosedAt: time.Now(),
			Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeCompleted}}})
		if err != nil {
			t.Fatal(err)
		}
		return changed[0]
	}
	if end(other) {
		t.Fatal("a server that does not own the activity ended it")
	}
	if !end(owner) {
		t.Fatal("the owner could not end its activity")
	}
}

func TestMessagesReachOnlyTheirServer(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	a, c := b.join(t, "a", time.Minute), b.join(t, "c", time.Minute)
	ctx, cancel := context.WithCancel(b.ctx)
	notices := make(chan store.Notice, 16)
	done := make(chan error, 1)
	go func() { done <- b.st.Listen(ctx, c, func(n store.Notice) { notices <- n }) }()
	defer func() { cancel(); <-done }()
	// Listening starts asynchronously: announce until the first notice arrives.
	for ready := false; !ready; {
		if err := b.st.Announce(b.ctx, store.Notice{Kind: store.NoticeNamespace, Name: "probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-notices:
			ready = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := b.st.Send(b.ctx, a, store.Message{From: c, Kind: "x", Body: []byte("for a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Send(b.ctx, c, store.Message{From: a, Kind: "x", Body: []byte("for c"), Call: 9}); err != nil {
		t.Fatal(err)
	}
	for n := range notices {
		if n.Kind == store.NoticeMessage {
			break
		}
	}
	msgs, err := b.st.Receive(b.ctx, c)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "for c" || msgs[0].From != a || msgs[0].Call != 9 {
		t.Fatalf("c received %+v, %v", msgs, err)
	}
	if again, err := b.st.Receive(b.ctx, c); err != nil || len(again) != 0 {
		t.Fatalf("a message was received twice: %+v, %v", again, err)
	}
}

// A server whose lease ran out claims nothing, reaped or not: its claims
// could otherwise outlive the reap that hands its work back.
func TestAnExpiredMemberClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	id := b.join(t, "late", 300*time.Millisecond)
	b.schedule(t, 2, "t", "")
	time.Sleep(400 * time.Millisecond)
	for _, reap := range []bool{false, true} {
		if reap {
			if _, err := b.st.Reap(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
		res, err := b.st.ClaimActivities(b.ctx, id, time.Now(), []store.Claim{claimOf("t", "", 2)})
		if err != nil || len(res[0]) != 0 {
			t.Fatalf("expired member (reaped: %v) claimed %v, %v", reap, res, err)
		}
	}
}

// A cancel requested while the attempt was ending wins over its retry, and
// over a claim handed back before it started.
func TestCancelRequestOutlivesRetryAndHandBack(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	owner := b.join(t, "owner", time.Minute)
	b.schedule(t, 2, "t", "")
	res, err := b.st.ClaimActivities(b.ctx, owner, time.Now(), []store.Claim{claimOf("t", "", 2)})
	if err != nil || len(res[0]) != 2 {
		t.Fatal(res, err)
	}
	retried, handedBack := res[0][0], res[0][1]
	for _, a := range res[0] {
		if outcome, got, err := b.st.RequestCancel(b.ctx, "ns", a.ID, "no longer needed", time.Now()); err != nil ||
			outcome != store.CancelForwarded || got != owner {
			t.Fatalf("request cancel of %s: %v %v %v", a.ID, outcome, got, err)
		}
	}
	if _, err := b.st.Apply(b.ctx, []store.Write{store.EndAttempt{Namespace: "ns", ID: retried.ID, Owner: owner,
		State: store.StateScheduled, ReadyAt: time.Now(), ActivityFailure: nil,
		Attempt: &store.Attempt{Number: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeFailed,
			Failure: &store.Failure{Type: "error", Retryable: true}}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Unclaim(b.ctx, owner, "ns", handedBack.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{retried.ID, handedBack.ID} {
		a, err := b.st.GetActivity(b.ctx, "ns", id)
		if err != nil || a.State != store.StateCanceled || a.Failure == nil || a.Failure.Message != "no longer needed" || a.ClosedAt.IsZero() {
			t.Fatalf("%s after its cancel request: %+v, %v", id, a, err)
		}
	}
}

// The sweep closes exactly the waiting work whose schedule-to-start (from
// when it became ready) or schedule-to-close deadline passed.
func TestExpireWaitingClosesOnlyDueWork(t *testing.T) {
	t.Parallel()
	b := setupCluster(t)
	owner := b.join(t, "owner", time.Minute)
	now := time.Now()
	insert := func(id string, to store.Timeouts, ready time.Time) {
		t.Helper()
		if _, err := b.st.Apply(b.ctx, []store.Write{store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id,
			TaskQueue: "q", ActivityType: id, Fingerprint: "f", State: store.StateScheduled, Timeouts: to,
			ScheduledAt: now, ReadyAt: ready}}}); err != nil {
			t.Fatal(err)
		}
	}
	insert("patient", store.Timeouts{ScheduleToStart: time.Hour, ScheduleToClose: time.Hour}, now)
	insert("start-due", store.Timeouts{ScheduleToStart: 10 * time.Millisecond}, now)
	insert("close-due", store.Timeouts{ScheduleToClose: 10 * time.Millisecond}, now)
	insert("no-deadline", store.Timeouts{}, now)
	insert("retried", store.Timeouts{ScheduleToStart: 10 * time.Millisecond}, now)
	// "retried" is claimed and fails; its retry is ready only in an hour, so
	// its schedule-to-start clock starts then.
	if res, err := b.st.ClaimActivities(b.ctx, owner, now, []store.Claim{claimOf("retried", "", 1)}); err != nil || len(res[0]) != 1 {
		t.Fatal(res, err)
	}
	if _, err := b.st.Apply(b.ctx, []store.Write{store.EndAttempt{Namespace: "ns", ID: "retried", Owner: owner,
		State: store.StateScheduled, ReadyAt: now.Add(time.Hour),
		Attempt: &store.Attempt{Number: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeFailed}}}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Second)
	closed, err := b.st.ExpireWaiting(b.ctx, later, 100, func(a store.Activity) *store.Failure {
		return &store.Failure{Type: "expired", Message: a.ID}
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range closed {
		ids = append(ids, a.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"close-due", "start-due"}) {
		t.Fatalf("the sweep closed %v, want close-due and start-due", ids)
	}
	for _, id := range ids {
		a, err := b.st.GetActivity(b.ctx, "ns", id)
		if err != nil || a.State != store.StateTimedOut || a.Failure == nil || a.Failure.Message != id {
			t.Fatalf("%s after the sweep: %+v, %v", id, a, err)
		}
	}
	if again, err := b.st.ExpireWaiting(b.ctx, later, 100, func(store.Activity) *store.Failure {
		return &store.Failure{Type: "expired"}
	}); err != nil || len(again) != 0 {
		t.Fatalf("a second sweep closed %v, %v", again, err)
	}
	if gone, err := b.st.ExpireWaiting(b.ctx, now.Add(2*time.Hour), 100, func(store.Activity) *store.Failure {
		return &store.Failure{Type: "expired"}
	}); err != nil || len(gone) != 2 {
		t.Fatalf("two hours on, the sweep closed %d (%v), want patient and retried", len(gone), err)
	}
}
