package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/pgtest"
)

// freshClusterDB is an empty database for t's servers.
func freshClusterDB(t *testing.T) string { return pgtest.Fresh(t, 0) }

// fleet is several aion server processes sharing one PostgreSQL database,
// and the demo workers connected to them.
type fleet struct {
	t       *testing.T
	servers map[string]*cluster
	mu      sync.Mutex
	// serverOf maps each worker id, from its registration line, to the
	// name of the server it connected to.
	serverOf map[uint64]string
}

// startFleet starts one server per name on the database dsn, one after the
// other, each with its own ports, data dir and client, and a 2s lease.
func startFleet(t *testing.T, dsn string, names ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, servers: make(map[string]*cluster), serverOf: make(map[uint64]string)}
	for _, name := range names {
		f.servers[name] = startMember(t, dsn, name)
	}
	return f
}

// startMember is startServer for a cluster member named name on the
// database dsn, with a 2s lease; killServer restarts it under the same name.
func startMember(t *testing.T, dsn, name string) *cluster {
	t.Helper()
	c := &cluster{t: t, name: name, grpc: freePort(t), http: freePort(t), dataDir: t.TempDir(),
		extra: []string{"--store", dsn, "--server-name", name, "--lease", "2s"}}
	c.boot()
	cl, err := client.Dial(context.Background(), c.grpc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	c.client = cl
	return c
}

// worker starts a demo worker on the named server and records which server
// its id belongs to.
func (f *fleet) worker(server, name string, args ...string) (*proc, uint64) {
	f.t.Helper()
	p, id := f.servers[server].worker(server+"/"+name, args...)
	f.mu.Lock()
	defer f.mu.Unlock()
	if other, dup := f.serverOf[id]; dup {
		f.t.Fatalf("worker %s on server %s got id %d, already given to a worker on server %s", name, server, id, other)
	}
	// Worker ids are member id × 1e9 + n: one block per server.
	for wid, s := range f.serverOf {
		if sameBlock := wid/1_000_000_000 == id/1_000_000_000; sameBlock != (s == server) {
			f.t.Fatalf("worker %d on server %s and worker %d on server %s: ids not in per-server blocks", id, server, wid, s)
		}
	}
	f.serverOf[id] = server
	return p, id
}

// where names the server of a worker id ("?" when unknown).
func (f *fleet) where(id uint64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.serverOf[id]; ok {
		return s
	}
	return fmt.Sprintf("?(worker %d)", id)
}

// describe renders an activity's attempts for failure messages.
func (f *fleet) describe(a *client.Activity) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s state=%s", a.Namespace, a.ID, a.State)
	for _, at := range a.Attempts {
		fmt.Fprintf(&b, " [#%d worker %d on server %s node %q %s", at.Number, at.WorkerID, f.where(at.WorkerID), at.Node, at.Outcome)
		if at.Failure != nil {
			fmt.Fprintf(&b, " %s", at.Failure.Type)
		}
		b.WriteString("]")
	}
	return b.String()
}

// TestClusterRoutesWorkAcrossServerProcesses runs three servers on one
// database with workers spread over them, schedules everything through
// server a, and reads results back through the others: work reaches an
// eligible worker on whichever server it is connected to, and node pins,
// namespace isolation and pinned placement hold across servers.
func TestClusterRoutesWorkAcrossServerProcesses(t *testing.T) {
	t.Parallel()
	f := startFleet(t, freshClusterDB(t), "a", "b", "c")
	a, b, c := f.servers["a"], f.servers["b"], f.servers["c"]
	ctx := context.Background()

	_, bPlain := f.worker("b", "plain", "--namespace", "route")
	_, cGPU := f.worker("c", "gpu", "--namespace", "route", "--node", "gpu")
	_, aOther := f.worker("a", "other", "--namespace", "other")

	type want struct {
		ns, id string
		on     []uint64
	}
	var all []want
	for i := range 8 {
		free := a.schedule(client.ScheduleOptions{Namespace: "route", ID: fmt.Sprintf("free-%d", i), ActivityType: "echo"},
			echo{Hello: fmt.Sprintf("free-%d", i)})
		pinned := a.schedule(client.ScheduleOptions{Namespace: "route", ID: fmt.Sprintf("gpu-%d", i), ActivityType: "echo", Node: "gpu"},
			echo{Hello: fmt.Sprintf("gpu-%d", i)})
		other := a.schedule(client.ScheduleOptions{Namespace: "other", ID: fmt.Sprintf("other-%d", i), ActivityType: "echo"},
			echo{Hello: fmt.Sprintf("other-%d", i)})
		all = append(all,
			want{free.Namespace, free.ID, []uint64{bPlain, cGPU}},
			want{pinned.Namespace, pinned.ID, []uint64{cGPU}},
			want{other.Namespace, other.ID, []uint64{aOther}})
	}
	// A namespace nobody serves: its work waits, whatever else is idle.
	lonely := a.schedule(client.ScheduleOptions{Namespace: "lonely", ID: "lonely", ActivityType: "echo"}, echo{Hello: "lonely"})

	ranOnServer := map[string]int{}
	for i, w := range all {
		reader, check := b, c // read through servers other than the scheduler
		if i%2 == 1 {
			reader, check = c, b
		}
		got := reader.wait(w.ns, w.id)
		if got.State != client.StateCompleted || len(got.Attempts) != 1 || !slices.Contains(w.on, ranOn(got)) {
			t.Fatalf("%s: want one completed attempt on worker %v; got %s", w.id, w.on, f.describe(got))
		}
		var res echo
		if err := json.Unmarshal(got.Result, &res); err != nil || res.Hello != w.id {
			t.Fatalf("%s result = %s", w.id, got.Result)
		}
		again, err := check.client.Get(ctx, w.ns, w.id)
		if err != nil || again.State != client.StateCompleted || ranOn(again) != ranOn(got) || string(again.Result) != string(got.Result) {
			t.Fatalf("%s read through the other server: %v %+v", w.id, err, again)
		}
		if w.ns == "route" && got.Node == "gpu" && got.Attempts[0].Node != "gpu" {
			t.Fatalf("%s pinned to gpu ran on node %q", w.id, got.Attempts[0].Node)
		}
		ranOnServer[w.ns+"@"+f.where(ranOn(got))]++
	}
	t.Logf("scheduled through a, ran on: %v", ranOnServer)
	if ranOnServer["route@b"]+ranOnServer["route@c"] != 16 || ranOnServer["other@a"] != 8 {
		t.Fatalf("work ran on the wrong servers: %v", ranOnServer)
	}
	if l, err := c.client.Get(ctx, "lonely", lonely.ID); err != nil || l.State != client.StateScheduled || len(l.Attempts) != 0 {
		t.Fatalf("work of a namespace no worker serves: %v %+v", err, l)
	}

	// Pinned placement: a worker on node cpu serves "placed" and gets its
	// work; once the namespace is pinned to node tpu (through server a),
	// its work waits rather than run there, a new cpu worker is refused,
	// and the work runs when a tpu worker connects to server c.
	if _, _, err := a.client.CreateNamespace(ctx, "placed"); err != nil {
		t.Fatal(err)
	}
	_, bCPU := f.worker("b", "cpu", "--namespace", "placed", "--node", "cpu")
	before := a.schedule(client.ScheduleOptions{Namespace: "placed", ID: "before-pin", ActivityType: "echo"}, echo{Hello: "before"})
	if got := c.wait("placed", before.ID); got.State != client.StateCompleted || ranOn(got) != bCPU {
		t.Fatalf("before the pin: want completed on the cpu worker %d; got %s", bCPU, f.describe(got))
	}
	if out, code := a.cli("namespace", "place", "placed", "--pinned", "tpu"); code != 0 {
		t.Fatalf("namespace place: exit %d, %s", code, out)
	}
	// Every server learns the new placement.
	for _, name := range []string{"a", "b", "c"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ns, err := f.servers[name].client.GetNamespace(ctx, "placed")
			if err == nil && ns.Placement.Mode == client.PlacementPinned && slices.Equal(ns.Placement.Nodes, []string{"tpu"}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s still reports placement %v (err %v) 10s after the pin", name, ns, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var held []string
	for i := range 3 {
		h := a.schedule(client.ScheduleOptions{Namespace: "placed", ID: fmt.Sprintf("held-%d", i), ActivityType: "echo"},
			echo{Hello: fmt.Sprintf("held-%d", i)})
		held = append(held, h.ID)
	}
	// The cpu worker is idle and connected; the work must still wait, and
	// below it runs once, on the tpu worker that joins later.
	for _, id := range held {
		got, err := c.client.Get(ctx, "placed", id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != client.StateScheduled || len(got.Attempts) != 0 {
			t.Fatalf("namespace pinned to tpu, yet its work did not wait: %s (the cpu worker is %d on server b)",
				f.describe(got), bCPU)
		}
	}
	refused := start(t, "c/cpu-refused", "worker", "demo", "--address", c.grpc, "--namespace", "placed", "--node", "cpu")
	if code := refused.exit(30 * time.Second); code == 0 || !strings.Contains(refused.output(), "FailedPrecondition") {
		t.Fatalf("cpu worker into pinned{tpu} through server c: exit %d, output:\n%s", code, refused.output())
	}
	_, cTPU := f.worker("c", "tpu", "--namespace", "placed", "--node", "tpu")
	for i, id := range held {
		reader := b
		if i%2 == 1 {
			reader = a
		}
		got := reader.wait("placed", id)
		if got.State != client.StateCompleted || len(got.Attempts) != 1 || ranOn(got) != cTPU {
			t.Fatalf("after a tpu worker joined server c: want completed on worker %d; got %s", cTPU, f.describe(got))
		}
	}
}

// TestClusterServerKilledUnderLoadLosesNothing SIGKILLs one of three
// servers while clients schedule through all of them and workers on all of
// them run attempts. The server is not restarted: every activity Schedule
// acknowledged completes on the survivors, and attempts the dead server had
// in flight are recorded as server_lost and retried elsewhere.
func TestClusterServerKilledUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	f := startFleet(t, freshClusterDB(t), "a", "b", "c")
	order := []string{"a", "b", "c"}
	const victimName = "b"
	victim := f.servers[victimName]
	victimWorkers := map[uint64]bool{}
	for _, s := range order {
		for i := range 2 {
			_, id := f.worker(s, fmt.Sprintf("w%d", i), "--namespace", "load", "--slots", "8")
			if s == victimName {
				victimWorkers[id] = true
			}
		}
	}
	const sleepMs = 600
	l := startLoad(t, sleepMs, func(g, i int) *client.Client { return f.servers[order[(g+i)%len(order)]].client })
	ctx := context.Background()
	// Kill once real load has built up and the victim has a sleep in flight
	// with time left to run, however busy the machine is.
	survivor := f.servers["a"]
	var (
		inFlight   string
		inFlightAt client.Attempt
	)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			n := l.count()
			t.Fatalf("in 60s: %d activities acknowledged, none running on server %s with time left", n, victimName)
		}
		if l.count() < 150 {
			continue
		}
		// Only the owner of a running activity reports its attempt in
		// flight, so ask the victim itself.
		page, err := victim.client.List(ctx, client.ListOptions{Namespace: "load", State: client.StateRunning, ActivityType: "sleep", PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range page.Activities {
			if i == 16 {
				break
			}
			got, err := victim.client.Get(ctx, "load", a.ID)
			if err != nil || got.State != client.StateRunning || len(got.Attempts) == 0 {
				continue
			}
			last := got.Attempts[len(got.Attempts)-1]
			if victimWorkers[last.WorkerID] && last.Outcome == client.OutcomeRunning &&
				time.Since(last.StartedTime) < sleepMs*time.Millisecond/2 {
				inFlight, inFlightAt = a.ID, last
				break
			}
		}
		if inFlight != "" {
			break
		}
	}
	victim.server.signal(syscall.SIGKILL)
	victim.server.exit(10 * time.Second)
	atKill := l.count()
	t.Logf("killed server %s with %d acknowledged, %s attempt %d on worker %d among its attempts in flight",
		victimName, atKill, inFlight, inFlightAt.Number, inFlightAt.WorkerID)
	// The load goes on through the survivors (schedules through the dead
	// server fail) before it stops.
	for deadline := time.Now().Add(60 * time.Second); l.count() < atKill+30; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d activities acknowledged in 60s after the kill", l.count()-atKill)
		}
	}
	ids := l.finish()
	if len(ids) < 150 {
		t.Fatalf("only %d activities acknowledged; the load was too light to mean anything", len(ids))
	}
	survivors := []*cluster{f.servers["a"], f.servers["c"]}
	completed, lostThenDone := 0, 0
	var example string
	for i, id := range ids {
		a := survivors[i%2].wait("load", id)
		if a.State != client.StateCompleted {
			t.Errorf("%s ended %s (%+v): %s", id, a.State, a.Failure, f.describe(a))
			continue
		}
		completed++
		lost := slices.IndexFunc(a.Attempts, func(at client.Attempt) bool {
			return at.Failure != nil && at.Failure.Type == "server_lost"
		})
		if lost < 0 {
			continue
		}
		// The dead server's attempt failed; a later one completed on a
		// worker of a surviving server.
		final := a.Attempts[len(a.Attempts)-1]
		if on := f.where(final.WorkerID); lost == len(a.Attempts)-1 || final.Outcome != client.OutcomeCompleted || (on != "a" && on != "c") {
			t.Errorf("%s lost its attempt with server %s but did not complete on a survivor: %s", id, victimName, f.describe(a))
			continue
		}
		if w := a.Attempts[lost].WorkerID; w != 0 && f.where(w) != victimName {
			t.Errorf("%s: a server_lost attempt is attributed to worker %d on live server %s: %s", id, w, f.where(w), f.describe(a))
		}
		lostThenDone++
		if example == "" {
			example = f.describe(a)
		}
	}
	t.Logf("%d acknowledged, %d completed; %d had a server_lost attempt and completed on a surviving server (e.g. %s)",
		len(ids), completed, lostThenDone, example)
	if completed != len(ids) {
		t.Fatalf("%d of %d acknowledged activities did not complete", len(ids)-completed, len(ids))
	}
	if lostThenDone == 0 {
		t.Fatalf("no activity has a server_lost attempt, though %s was in flight on server %s when it was killed", inFlight, victimName)
	}
	// The attempt seen running on the dead server is the one recorded as
	// lost, and the record names the worker it was delivered to.
	a := survivor.wait("load", inFlight)
	lost := slices.IndexFunc(a.Attempts, func(at client.Attempt) bool {
		return at.Failure != nil && at.Failure.Type == "server_lost"
	})
	if lost < 0 {
		t.Fatalf("%s was running on server %s when it was killed, yet has no server_lost attempt: %s", inFlight, victimName, f.describe(a))
	}
	if at := a.Attempts[lost]; at.Number != inFlightAt.Number || at.WorkerID != inFlightAt.WorkerID {
		t.Errorf("%s: the server_lost attempt is #%d on worker %d; it was delivered as #%d to worker %d on server %s: %s",
			inFlight, at.Number, at.WorkerID, inFlightAt.Number, inFlightAt.WorkerID, victimName, f.describe(a))
	}
}
