package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// The cluster conformance of workflow runs: claims, release, the inbox, and
// what a reap does to the runs a server held.

// startRun inserts an open run of type typ in pool ns/q held by owner (0
// for none), with one event.
func (c *clusterCase) startRun(id, typ string, owner store.ServerID) {
	c.t.Helper()
	got := c.apply(store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: "wf-" + id, RunID: id, WorkflowType: typ,
		TaskQueue: "q", StartedAt: time.Now()}, Events: []store.Event{{Seq: 1, Data: []byte("started")}}, Owner: owner})
	if !got[0] {
		c.t.Fatalf("insert run %s refused", id)
	}
}

// startKeyedRun inserts an open run of type "order" no server holds, with
// fairness key k, weight w and priority p.
func (c *clusterCase) startKeyedRun(id, k string, w, p int) {
	c.t.Helper()
	got := c.apply(store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: "wf-" + id, RunID: id, WorkflowType: "order",
		TaskQueue: "q", StartedAt: time.Now(), Priority: p, Flow: store.Flow{FairnessKey: k, FairnessWeight: w}},
		Events: []store.Event{{Seq: 1, Data: []byte("started")}}})
	if !got[0] {
		c.t.Fatalf("insert run %s refused", id)
	}
}

func (c *clusterCase) claimRuns(owner store.ServerID, limit int, claims ...store.RunClaim) []string {
	c.t.Helper()
	runs, err := c.s.ClaimRuns(c.ctx, owner, claims, limit)
	if err != nil {
		c.t.Fatalf("claim runs: %v", err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.RunID)
	}
	slices.Sort(ids)
	return ids
}

func (c *clusterCase) inbox(run string) []string {
	c.t.Helper()
	evs, err := c.s.ReadRunInbox(c.ctx, "ns", run)
	if err != nil {
		c.t.Fatalf("read inbox of %s: %v", run, err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Data))
	}
	return out
}

func runClaim(typ string) store.RunClaim {
	return store.RunClaim{Namespace: "ns", TaskQueue: "q", WorkflowType: typ}
}

func testRunClaims(t *testing.T, c *clusterCase) {
	a := c.join("a", time.Minute)
	b := c.join("b", time.Minute)
	c.startRun("held", "order", a)
	c.startRun("free-1", "order", 0)
	c.startRun("free-2", "order", 0)
	c.startRun("other-type", "agent", 0)
	c.startRun("free-3", "order", 0)

	if got := fmt.Sprint(c.claimRuns(b, 2, runClaim("order"))); got != "[free-1 free-2]" {
		t.Fatalf("first claim took %s, want the two oldest free runs of the type", got)
	}
	if got := fmt.Sprint(c.claimRuns(a, 10, runClaim("order"), runClaim("agent"))); got != "[free-3 other-type]" {
		t.Fatalf("second claim took %s, want what no server held", got)
	}
	if got := c.claimRuns(b, 10, runClaim("order"), runClaim("agent")); len(got) != 0 {
		t.Fatalf("a claim of held runs took %v", got)
	}
	// Only the holder appends.
	w := func(owner store.ServerID, run string, after int64) store.AppendEvents {
		return store.AppendEvents{Namespace: "ns", RunID: run, After: after, Events: []store.Event{{Seq: after + 1, Data: []byte("x")}}, Owner: owner}
	}
	if got := fmt.Sprint(c.apply(w(a, "free-1", 1), w(b, "free-1", 1), w(a, "held", 1))); got != "[false true true]" {
		t.Fatalf("appends by a non-holder, the holder, the holder: %s, want [false true true]", got)
	}
	// A release lets another server claim the run; releasing what one does
	// not hold changes nothing.
	if ok, err := c.s.ReleaseRun(c.ctx, a, "ns", "free-1"); err != nil || ok {
		t.Fatalf("release by a server that does not hold the run: %v %v", ok, err)
	}
	if ok, err := c.s.ReleaseRun(c.ctx, b, "ns", "free-1"); err != nil || !ok {
		t.Fatalf("release by the holder: %v %v", ok, err)
	}
	if got := fmt.Sprint(c.claimRuns(a, 10, runClaim("order"))); got != "[free-1]" {
		t.Fatalf("claim after the release took %s", got)
	}
	r, err := c.s.GetRun(c.ctx, "ns", "free-1")
	if err != nil || r.HistoryLength != 2 {
		t.Fatalf("released and claimed run: %+v %v", r, err)
	}
}

// A claim shares itself between the fairness keys waiting, by weight and
// oldest first within a key, the most urgent priority first: a backlog of
// one key does not take whole claims from another.
func testFairRunClaims(t *testing.T, c *clusterCase) {
	s := c.join("s", time.Minute)
	for i := range 20 {
		c.startKeyedRun(fmt.Sprintf("a-%02d", i), "tenant-a", 0, 0)
	}
	for i := range 4 {
		c.startKeyedRun(fmt.Sprintf("b-%02d", i), "tenant-b", 0, 0)
	}
	if got := fmt.Sprint(c.claimRuns(s, 8, runClaim("order"))); got != "[a-00 a-01 a-02 a-03 b-00 b-01 b-02 b-03]" {
		t.Fatalf("first claim of 8 took %s, want the 4 oldest of each key (equal weights)", got)
	}
	if got := fmt.Sprint(c.claimRuns(s, 4, runClaim("order"))); got != "[a-04 a-05 a-06 a-07]" {
		t.Fatalf("second claim took %s, want key a's next 4", got)
	}
	c.startKeyedRun("urgent", "tenant-c", 0, 1)
	if got := fmt.Sprint(c.claimRuns(s, 1, runClaim("order"))); got != "[urgent]" {
		t.Fatalf("a claim of 1 took %s, want the priority-1 run started last", got)
	}

	for i := range 40 {
		c.startKeyedRun(fmt.Sprintf("heavy-%02d", i), "heavy", 3, 2)
		c.startKeyedRun(fmt.Sprintf("light-%02d", i), "light", 1, 2)
	}
	heavy := 0
	for _, id := range c.claimRuns(s, 20, runClaim("order")) {
		if strings.HasPrefix(id, "heavy-") {
			heavy++
		}
	}
	if heavy < 14 || heavy > 16 {
		t.Fatalf("a claim of 20 took %d of weight 3 and %d of weight 1, want 15:5 (±1)", heavy, 20-heavy)
	}
}

func testConcurrentRunClaims(t *testing.T, c *clusterCase) {
	const runs, servers = 40, 4
	for i := range runs {
		c.startRun(fmt.Sprintf("r%02d", i), "order", 0)
	}
	var ids []store.ServerID
	for i := range servers {
		ids = append(ids, c.join(fmt.Sprintf("s%d", i), time.Minute))
	}
	var (
		mu   sync.Mutex
		seen = map[string]store.ServerID{}
		wg   sync.WaitGroup
	)
	for _, id := range ids {
		wg.Go(func() {
			for {
				got, err := c.s.ClaimRuns(c.ctx, id, []store.RunClaim{runClaim("order")}, 3)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, dup := seen[r.RunID]; dup {
						t.Errorf("run %s claimed by %d and %d", r.RunID, prev, id)
					}
					seen[r.RunID] = id
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != runs {
		t.Fatalf("%d runs claimed, want %d", len(seen), runs)
	}
}

func testRunInbox(t *testing.T, c *clusterCase) {
	a := c.join("a", time.Minute)
	c.startRun("run", "order", a)
	c.startRun("parent", "order", a)
	c.startRun("closed", "order", a)
	c.apply(store.AppendEvents{Namespace: "ns", RunID: "closed", After: 1, Owner: a, Update: store.RunUpdate{Status: store.RunCompleted, ClosedAt: time.Now()}})

	post := func(run, data string) bool {
		return c.apply(store.PostRunEvent{Event: store.RunEvent{Namespace: "ns", RunID: run, Data: []byte(data)}})[0]
	}
	if !post("run", "signal-1") || !post("run", "signal-2") {
		t.Fatal("a post to an open run was refused")
	}
	if post("closed", "late") || post("missing", "x") {
		t.Fatal("a post to a closed or missing run was taken")
	}
	if got := fmt.Sprint(c.inbox("run")); got != "[signal-1 signal-2]" {
		t.Fatalf("inbox = %s, want both signals in order", got)
	}
	owned, err := c.s.ListOwnedInbox(c.ctx, a)
	if err != nil || len(owned) != 2 || owned[0].RunID != "run" {
		t.Fatalf("owned inbox: %+v %v", owned, err)
	}
	// The holder appends the first and consumes it, posting to the parent,
	// in one write; a fenced-out write consumes and posts nothing.
	first := owned[0].ID
	stale := store.AppendEvents{Namespace: "ns", RunID: "run", After: 7, Events: []store.Event{{Seq: 8, Data: []byte("s1")}}, Owner: a,
		Consume: []int64{first}, Post: []store.RunEvent{{Namespace: "ns", RunID: "parent", Data: []byte("child-closed")}}}
	if c.apply(stale)[0] {
		t.Fatal("a write fenced on the wrong length applied")
	}
	if got := len(c.inbox("run")); got != 2 || len(c.inbox("parent")) != 0 {
		t.Fatalf("a refused write consumed or posted: inbox %d, parent %v", got, c.inbox("parent"))
	}
	ok := store.AppendEvents{Namespace: "ns", RunID: "run", After: 1, Events: []store.Event{{Seq: 2, Data: []byte("s1")}}, Owner: a,
		Consume: []int64{first}, Post: []store.RunEvent{{Namespace: "ns", RunID: "parent", Data: []byte("child-closed")},
			{Namespace: "ns", RunID: "closed", Data: []byte("dropped")}}}
	if !c.apply(ok)[0] {
		t.Fatal("the holder's append was refused")
	}
	if got := fmt.Sprint(c.inbox("run"), c.inbox("parent"), c.inbox("closed")); got != "[signal-2] [child-closed] []" {
		t.Fatalf("after the append: inboxes %s, want [signal-2] [child-closed] []", got)
	}
	// Closing the run empties its inbox.
	c.apply(store.AppendEvents{Namespace: "ns", RunID: "run", After: 2, Owner: a, Update: store.RunUpdate{Status: store.RunCanceled, ClosedAt: time.Now()}})
	if got := c.inbox("run"); len(got) != 0 {
		t.Fatalf("a closed run's inbox holds %v", got)
	}
}

func testStepClosePostsWithTheActivity(t *testing.T, c *clusterCase) {
	a := c.join("a", time.Minute)
	c.startRun("run", "order", a)
	ids := c.schedule(2, "step", "")
	got := c.claim(a, time.Now(), claimOf("step", "", 1, 2))
	if len(got[0]) != 2 {
		t.Fatalf("claim: %v", activityIDs(got[0]))
	}
	end := func(id string, state store.ActivityState, owner store.ServerID) store.EndAttempt {
		at := got[0][0]
		if at.ID != id {
			at = got[0][1]
		}
		return store.EndAttempt{Namespace: "ns", ID: id, Owner: owner, State: state, ClosedAt: time.Now(),
			Attempt: &store.Attempt{Number: at.Attempt, WorkerID: 1, StartedAt: time.Now(), EndedAt: time.Now(), Outcome: store.OutcomeCompleted},
			Post:    &store.RunEvent{Namespace: "ns", RunID: "run", Data: []byte("closed " + id)}}
	}
	// A write by a server that does not own the activity posts nothing;
	// the owner's closing write posts in the same transaction.
	if c.apply(end(ids[0], store.StateCompleted, a+100))[0] {
		t.Fatal("a non-owner closed the activity")
	}
	if got := c.inbox("run"); len(got) != 0 {
		t.Fatalf("a refused close posted %v", got)
	}
	if !c.apply(end(ids[0], store.StateCompleted, a))[0] {
		t.Fatal("the owner's close was refused")
	}
	if got := fmt.Sprint(c.inbox("run")); got != "[closed "+ids[0]+"]" {
		t.Fatalf("inbox after the close = %s", got)
	}
}

func testReapReleasesRuns(t *testing.T, c *clusterCase) {
	dead := c.join("dead", shortLease)
	alive := c.join("alive", time.Minute)
	c.startRun("held", "order", dead)
	eventually(t, "the dead server to be reaped", func() bool {
		r, err := c.s.ReapServers(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(r) > 0
	})
	if got := fmt.Sprint(c.claimRuns(alive, 10, runClaim("order"))); got != "[held]" {
		t.Fatalf("after the reap a live server claimed %s, want the dead server's run", got)
	}
	// The reaped server can neither claim nor append.
	if got := c.claimRuns(dead, 10, runClaim("order")); len(got) != 0 {
		t.Fatalf("a reaped server claimed %v", got)
	}
	w := store.AppendEvents{Namespace: "ns", RunID: "held", After: 1, Events: []store.Event{{Seq: 2, Data: []byte("x")}}, Owner: dead}
	if c.apply(w)[0] {
		t.Fatal("a reaped server appended to a run")
	}
	if _, err := c.s.GetRun(c.ctx, "ns", "held"); errors.Is(err, store.ErrNotFound) {
		t.Fatal("the run vanished")
	}
}

// An append's Wake triples are published to every server with the write
// (the close of an admitted run names its concurrency key).
func testAppendWakes(t *testing.T, c *clusterCase) {
	a := c.join("a", time.Minute)
	c.startRun("r1", "order", a)
	l := c.listen(a)
	c.ready(l)
	wake := store.AdmitWork("ns", "order", "k")
	got := c.apply(store.AppendEvents{Namespace: "ns", RunID: "r1", After: 1, Events: []store.Event{{Seq: 2, Data: []byte("closed")}},
		Update: store.RunUpdate{Status: store.RunCompleted, ClosedAt: time.Now()}, Owner: a, Wake: [][3]string{wake}})
	if !got[0] {
		t.Fatal("close of r1 refused")
	}
	if n := l.next(t); n.Kind != store.NoticeWork || !slices.Equal(n.Triples, [][3]string{wake}) {
		t.Fatalf("notice of the close: %+v, want work %v", n, wake)
	}
}
