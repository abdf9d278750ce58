package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
)

// setupCluster starts an engine as server name of a cluster on the
// PostgreSQL database dsn, with a fake clock; the test ends it. The bench
// has no SQLite store: restart does not apply.
func setupCluster(t *testing.T, dsn, name string) (*bench, *postgres.Store) {
	t.Helper()
	b, st, _ := setupCountedCluster(t, dsn, name)
	return b, st
}

// claimCounter is the cluster store of a test server, counting the claim
// round trips it makes, its polls (each sweeps waiting deadlines once) and
// its looks for owned work it does not hold.
type claimCounter struct {
	*postgres.Store
	rounds, polls, looks atomic.Int64
}

func (c *claimCounter) ClaimActivities(ctx context.Context, r store.ClaimRequest) ([]store.ClaimResult, error) {
	c.rounds.Add(1)
	return c.Store.ClaimActivities(ctx, r)
}

func (c *claimCounter) ExpireWaitingActivities(ctx context.Context, r store.ExpireRequest) ([]store.Activity, error) {
	defer c.polls.Add(1)
	return c.Store.ExpireWaitingActivities(ctx, r)
}

func (c *claimCounter) ListOwnedActivities(ctx context.Context, owner store.ServerID) ([]store.ActivityRef, error) {
	defer c.looks.Add(1)
	return c.Store.ListOwnedActivities(ctx, owner)
}

// setupCountedCluster is setupCluster whose server counts its claims.
func setupCountedCluster(t *testing.T, dsn, name string) (*bench, *postgres.Store, *claimCounter) {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	self, err := st.JoinCluster(ctx, store.JoinRequest{Name: name, Addr: "127.0.0.1:0", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	reg := registry.New(registry.Options{})
	counted := &claimCounter{Store: st}
	e := New(Config{Store: st, Registry: reg, Minter: namespace.NewMinter(st, namespace.Open, nil),
		Defaults: DefaultDefaults(), Clock: clk, Cluster: &ClusterConfig{Store: counted, Self: self.ID}})
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return &bench{t: t, clk: clk, reg: reg, eng: e}, st, counted
}

// New work that nothing waiting would have gone before starts on a free
// local slot with its insert, without a claim; while this server's own
// work waits in the store (no free slot), new work waits behind it, and
// the claims ask for what waits, oldest first, not for every free slot.
func TestNewWorkStartsWithItsInsertUnlessWorkWaits(t *testing.T) {
	t.Parallel()
	b, st, claims := setupCountedCluster(t, pgtest.Fresh(t, 0), "server-direct")
	fw := b.join(1)
	drained := b.drained(registry.NewTriple("ns", "", "t"))
	pollUntil(t, "the claim for the new worker to find the end of the ready work", drained)
	before := claims.rounds.Load()
	b.schedule(request("first", store.Timeouts{}, store.RetryPolicy{}))
	if task := fw.task(); task.ActivityID != "first" || task.Attempt != 1 {
		t.Fatalf("started %s#%d, want first#1", task.ActivityID, task.Attempt)
	}
	if n := claims.rounds.Load() - before; n != 0 {
		t.Fatalf("%d claims to start new work on a free slot, want none", n)
	}
	if owner, err := st.GetActivityOwner(context.Background(), "ns", "first"); err != nil || owner == 0 {
		t.Fatalf("owner of the started insert: %d, %v; want this server", owner, err)
	}

	// The one slot is busy: second waits in the store, and third, with
	// the slot free again, still waits behind it.
	b.schedule(request("second", store.Timeouts{}, store.RetryPolicy{}))
	b.schedule(request("third", store.Timeouts{}, store.RetryPolicy{}))
	fw.complete("first", 1, "1")
	for _, want := range []string{"second", "third"} {
		task := fw.task()
		if task.ActivityID != want {
			t.Fatalf("started %s, want %s: waiting work goes first", task.ActivityID, want)
		}
		fw.complete(want, 1, "1")
	}
	b.wait("third")
	pollUntil(t, "the claims to take all of this server's waiting work", drained)
	before = claims.rounds.Load()
	b.schedule(request("fourth", store.Timeouts{}, store.RetryPolicy{}))
	if task := fw.task(); task.ActivityID != "fourth" {
		t.Fatalf("started %s, want fourth", task.ActivityID)
	}
	if n := claims.rounds.Load() - before; n != 0 {
		t.Fatalf("%d claims to start new work once nothing waits, want none", n)
	}
}

// drained reports whether the engine knows that no ready work of t waits
// in the store: its last claim found the end of it, or its tally counts
// none of its own.
func (b *bench) drained(t registry.Triple) func() bool {
	return func() bool {
		b.eng.mu.Lock()
		defer b.eng.mu.Unlock()
		tl, ok := b.eng.claims.tallies[t]
		return (ok && tl.waiting == 0 && !tl.probing) || b.eng.claims.empty[t][""]
	}
}

// A workflow step's activity starts as new work does: on a free slot of a
// local worker, with its insert, owned by the server, with no claim; its
// close still reaches the run through the run's inbox.
func TestStepActivityStartsWithItsInsert(t *testing.T) {
	t.Parallel()
	b, st, claims := setupCountedCluster(t, pgtest.Fresh(t, 0), "server-steps")
	listenForWork(t, b, st)
	fw := b.joinWorkflows("v1", 1, "order")
	pollUntil(t, "the claim for the new worker to find the end of the ready work", b.drained(registry.NewTriple("ns", "", "t")))
	b.startWF("wf", "order", `{}`)
	task := fw.next()
	before := claims.rounds.Load()
	fw.mustAnswer(task, false, scheduleActivity(1, "t", `"x"`))
	at := fw.activity()
	if at.Attempt != 1 || at.Step != 1 {
		t.Fatalf("step activity started as %s#%d (step %d), want attempt 1 of step 1", at.ActivityID, at.Attempt, at.Step)
	}
	if n := claims.rounds.Load() - before; n != 0 {
		t.Fatalf("%d claims to start a step's activity on a free slot, want none", n)
	}
	if owner, err := st.GetActivityOwner(context.Background(), "ns", at.ActivityID); err != nil || owner != b.eng.cl.Self {
		t.Fatalf("owner of the step's activity: %d, %v; want this server (%d)", owner, err, b.eng.cl.Self)
	}
	fw.completeActivity(at, `"done"`)
	task = fw.next()
	fw.mustAnswer(task, false, complete(`"ok"`))
	if run := b.waitWF("wf"); run.Status != store.RunCompleted {
		t.Fatalf("run closed %s, want completed", run.Status)
	}
	wantKinds(t, "history", b.history("wf"), "WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled#1",
		"ActivityClosed#1", "WorkflowTaskCompleted", "WorkflowClosed")
}

// The claim loop of cluster mode, on one database created once: the
// subtests run in turn, each as a server of its own.
func TestClusterClaims(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Fresh(t, 0)
	t.Run("work goes to local workers and retries return to the store", func(t *testing.T) {
		claimsWorkForLocalWorkers(t, dsn)
	})
	t.Run("a failed claim pauses on the clock without the lock", func(t *testing.T) {
		failedClaimsPause(t, dsn)
	})
	t.Run("claims share the slots between fairness keys", func(t *testing.T) {
		claimsShareBetweenKeys(t, dsn)
	})
}

// A claim that got less work than it had slots for saw the end of the ready
// work (a claim locks only the rows it takes), so it arms no second look:
// the triple is marked empty and claimed again only for new work.
func TestShortClaimArmsNoRecheck(t *testing.T) {
	t.Parallel()
	b, _ := setupCluster(t, pgtest.Fresh(t, 0), "server-d")
	fw := b.join(4)
	rec := b.schedule(request("short", store.Timeouts{}, store.RetryPolicy{}))
	if task := fw.task(); task.ActivityID != "short" {
		t.Fatalf("claimed %s, want short", task.ActivityID)
	}
	tr := tripleOf(&rec)
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	for _, tm := range b.eng.timers {
		if tm.kind == timerClaim && tm.triple == tr {
			t.Fatalf("a claim of 1 for 4 slots armed another claim at %v", tm.at)
		}
	}
	if !b.eng.claims.empty[tr][""] {
		t.Fatal("a claim of 1 for 4 slots left the triple not marked empty")
	}
}

// In cluster mode waiting work lives in the store: a claim round reserves a
// local worker's slot, claims the work for it, and starts it; a retry is
// handed back to the store and claimed again once its backoff has passed.
func claimsWorkForLocalWorkers(t *testing.T, dsn string) {
	b, _ := setupCluster(t, dsn, "server-a")
	b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{InitialInterval: 10 * time.Second}))
	fw := b.join(1)
	task := fw.task()
	if task.ActivityID != "a" || task.Attempt != 1 || !task.StartedAt.Equal(epoch) {
		t.Fatalf("claimed task %s#%d started %v, want a#1 at %v", task.ActivityID, task.Attempt, task.StartedAt, epoch)
	}
	fw.fail("a", 1, store.Failure{Type: "flaky", Retryable: true})

	// The retry waits in the store; the wake-up armed for its ready time
	// announces it, and the next claim round starts it on the free slot.
	readyAt := epoch.Add(10 * time.Second)
	b.advanceTo(readyAt)
	task = fw.task()
	if task.Attempt != 2 || !task.StartedAt.Equal(readyAt) {
		t.Fatalf("retry: attempt %d at %v, want attempt 2 at %v", task.Attempt, task.StartedAt, readyAt)
	}
	fw.complete("a", 2, "done")
	v := b.wait("a")
	if v.Activity.State != store.StateCompleted || string(v.Activity.Result) != "done" || len(v.Attempts) != 2 {
		t.Fatalf("closed %s with %q after %d attempts, want completed with done after 2", v.Activity.State, v.Activity.Result, len(v.Attempts))
	}
}

// A claim that fails (the database is gone) gives its reserved slots back
// and pauses on the engine's clock, longer after each failure in a row,
// without holding the engine lock meanwhile.
func failedClaimsPause(t *testing.T, dsn string) {
	b, st := setupCluster(t, dsn, "server-b")
	fw := b.join(1)
	st.Close() // every store call fails from now on
	b.eng.NewWork(nil)

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	failures := func() int {
		b.eng.mu.Lock()
		defer b.eng.mu.Unlock()
		return b.eng.claims.failures
	}
	// The poll tickers of the chores and of the run claims are always set;
	// a third waiter is the pause.
	const pausing = 3
	if err := b.clk.BlockUntil(ctx, pausing); err != nil {
		t.Fatalf("no pause after a failed claim: %v", err)
	}
	first := failures() // the lock is free during the pause, or this hangs
	if first < 1 {
		t.Fatalf("%d failed claims counted while pausing after one", first)
	}
	if info, _ := b.reg.Lookup(fw.w.ID()); info.SlotsInUse != 0 {
		t.Fatalf("%d slots held by the failed claim during the pause, want 0", info.SlotsInUse)
	}
	b.clk.Advance(claimPause(first))
	if err := b.clk.BlockUntil(ctx, pausing); err != nil {
		t.Fatalf("no pause after the next failed claim: %v", err)
	}
	if n := failures(); n != first+1 {
		t.Fatalf("%d failed claims after one more round, want %d", n, first+1)
	}
}

// In cluster mode too, one key's backlog does not starve another: with 30
// activities of key a waiting before 10 of key b, and a 4-slot worker that
// finishes its oldest attempt whenever all four run, b's 10 all start
// within the first 22 starts (the keys alternate), not after a's 30. The
// attempt whose end is still being written when its freed slot is claimed
// does not count for its key.
func claimsShareBetweenKeys(t *testing.T, dsn string) {
	b, _ := setupCluster(t, dsn, "server-c")
	b.scheduleAll(backlog("fair-a", "a", 0, 30))
	b.scheduleAll(backlog("fair-b", "b", 0, 10))
	fw := b.join(4)
	var running []Task
	var order []string
	for bStarts := 0; bStarts < 10; {
		if len(order) == 22 {
			t.Fatalf("after 22 starts only %d of key b's 10 started, want all: %v", bStarts, order)
		}
		task := fw.task()
		order = append(order, strings.TrimPrefix(task.ActivityID, "fair-"))
		if strings.HasPrefix(task.ActivityID, "fair-b-") {
			bStarts++
		}
		if running = append(running, task); len(running) == 4 {
			fw.complete(running[0].ActivityID, running[0].Attempt, "1")
			running = running[1:]
		}
	}
}

// An activity the store says this server runs but that the server does not
// hold (a claim or a started insert that committed, its answer lost) is
// handed back once two looks in a row found it, and then runs here.
func TestOwnedWorkTheServerDoesNotHoldIsHandedBack(t *testing.T) {
	t.Parallel()
	b, st, calls := setupCountedCluster(t, pgtest.Fresh(t, 0), "server-lost")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	now := b.clk.Now()
	lost := store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "lost", TaskQueue: registry.Pool("ns", "").TaskQueue,
		ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, ScheduledAt: now, ReadyAt: now},
		Start: &store.InsertStart{Owner: b.eng.cl.Self, Worker: 999, At: now}}
	if _, err := st.Apply(ctx, []store.Write{lost}); err != nil {
		t.Fatal(err)
	}
	fw := b.join(1)
	for poll := int64(1); ; poll++ {
		// One poll at a time: the next tick only once this one's sweep ran.
		b.advance(time.Second)
		pollUntil(t, fmt.Sprintf("poll %d to run", poll), func() bool { return calls.polls.Load() >= poll })
		if calls.looks.Load() < 2 {
			idle(t, fw.conn.tasks, "task before a second look")
			continue
		}
		task := fw.task()
		if task.ActivityID != "lost" || task.Attempt != 1 {
			t.Fatalf("started %s#%d, want lost#1", task.ActivityID, task.Attempt)
		}
		return
	}
}

// Whether a server may count a triple's waiting work depends on its
// namespace's placement (a prefer{nodes} namespace's work waits out a
// grace on other servers): a placement change drops the tally, so new work
// waits for a claim again until one has seen the end of what waits.
func TestPlacementChangeDropsTheTally(t *testing.T) {
	t.Parallel()
	b, _ := setupCluster(t, pgtest.Fresh(t, 0), "server-placed")
	b.join(1)
	tr := registry.NewTriple("ns", "", "t")
	counted := func() bool {
		b.eng.mu.Lock()
		defer b.eng.mu.Unlock()
		_, ok := b.eng.claims.tallies[tr]
		return ok
	}
	pollUntil(t, "the claim for the new worker to start a tally", counted)
	b.eng.NoteNamespace(store.Namespace{Name: "ns", Placement: store.Placement{Mode: store.Prefer, Nodes: []string{"gpu"}}})
	if counted() {
		t.Fatal("a placement change kept the namespace's tally")
	}
}
