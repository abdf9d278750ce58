package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
)

// These tests run the workflow suite on a cluster of two server processes
// sharing one PostgreSQL database: clients start and steer runs through
// server a, which has no workers, while the demo workers connect to server
// b only, so b holds every run (docs/workflows.md, "In a cluster").

// openRuns lists the open runs of ns through c.
func openRuns(t *testing.T, c *client.Client, ns string) []*client.Run {
	t.Helper()
	var runs []*client.Run
	for page := (&client.RunPage{}); ; {
		var err error
		page, err = c.ListWorkflows(bounded(t, 30*time.Second),
			client.ListWorkflowsOptions{Namespace: ns, Status: client.RunRunning, PageToken: page.NextPageToken, PageSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, page.Runs...)
		if page.NextPageToken == "" {
			return runs
		}
	}
}

// advanced are the runs past their first workflow task: a history holds
// only its started event until a worker completes the run's first task.
func advanced(runs []*client.Run) map[string]bool {
	ids := map[string]bool{}
	for _, r := range runs {
		if r.HistoryLength > 1 {
			ids[r.WorkflowID] = true
		}
	}
	return ids
}

// taskServers are the servers whose workers completed the workflow tasks
// of a history, as the server ids worker ids are numbered from (a server
// numbers its workers from its id times 10⁹, and a restarted server joins
// with a new id).
func taskServers(t *testing.T, evs []client.Event) map[uint64]bool {
	t.Helper()
	servers := map[uint64]bool{}
	for _, ev := range evs {
		if ev.Kind != "workflow_task_completed" {
			continue
		}
		a, err := attrs(ev)
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseUint(a.WorkerID, 10, 64)
		if err != nil {
			t.Fatalf("event %d: worker id %q: %v", ev.Seq, a.WorkerID, err)
		}
		servers[id/1_000_000_000] = true
	}
	return servers
}

// busyWorkers names the workers of ns on server c with slots in use, ""
// when there are none.
func busyWorkers(t *testing.T, c *cluster, ns string) string {
	t.Helper()
	ctx, cancel := short()
	defer cancel()
	list, err := c.client.ListWorkers(ctx, ns)
	if err != nil {
		return fmt.Sprintf("list the workers of server %s: %v", c.name, err)
	}
	var busy []string
	for _, w := range list {
		if w.SlotsInUse != 0 {
			busy = append(busy, fmt.Sprintf("worker %d has %d of %d slots in use", w.ID, w.SlotsInUse, w.Slots))
		}
	}
	if len(busy) == 0 {
		return ""
	}
	return fmt.Sprintf("on server %s, %s", c.name, strings.Join(busy, ", "))
}

// TestWorkflowsSurviveKillsOnAPostgreSQLCluster runs order workflows on a
// cluster of two servers: every run is started through server a, and the
// two demo workers are connected to server b, which therefore holds the
// runs. Server b is SIGKILLed and restarted once (its runs are reaped after
// its lease, claimed by the restarted b and rebuilt from their history),
// server a once, and a worker once, at points chosen by progress. As on a
// lone server, every run completes with the right result, records each step
// once, and no step activity ran again after it had completed (W2).
func TestWorkflowsSurviveKillsOnAPostgreSQLCluster(t *testing.T) {
	// Not parallel: it kills processes under heavy load and would starve the
	// other process tests of this package (it runs before them instead).
	const (
		ns      = "orders"
		total   = 500
		slots   = 8  // activity slots of each demo worker
		open    = 50 // runs open at once: starts go on through the kills
		workers = 2
	)
	dsn := freshClusterDB(t)
	a := startMember(t, dsn, "a")
	b := startMember(t, dsn, "b")
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	args := []string{"--namespace", ns, "--slots", strconv.Itoa(slots), "--ledger", ledger}
	var ws [workers]*proc
	var firstB uint64 // the server id of b before its kill
	for i := range ws {
		var id uint64
		ws[i], id = b.worker(fmt.Sprintf("b/w%d", i), args...)
		firstB = id / 1_000_000_000
	}

	d := driveOrders(t, a.client, ns, total, open)
	d.stall = time.Minute
	d.stalled = func() string { return busyWorkers(t, b, ns) }
	var caught map[string]bool // runs b had advanced and held open when it was killed
	killB := func() {
		// The clients learn of closes by polling through a, so the runs
		// open come and go in waves: kill b when it holds many it has
		// advanced.
		eventually(t, time.Minute, fmt.Sprintf("%d advanced runs open", open/4), func() bool {
			return len(advanced(openRuns(t, a.client, ns))) >= open/4
		})
		b.server.signal(syscall.SIGKILL)
		b.server.exit(10 * time.Second)
		// Nothing advances the runs while b is down: only its workers
		// serve them.
		left := openRuns(t, a.client, ns)
		caught = advanced(left)
		if len(caught) == 0 {
			t.Fatal("no run b had advanced was open when it was killed")
		}
		b.boot()
		t.Logf("server b killed with %d runs open, %d of them advanced, and restarted", len(left), len(caught))
	}
	d.follow([]planStep{
		{total * 25 / 100, "kill server b, the holder of the runs", killB},
		{total * 45 / 100, "kill worker 0", func() {
			ws[0].signal(syscall.SIGKILL)
			ws[0].exit(10 * time.Second)
		}},
		{total * 50 / 100, "restart worker 0", func() { ws[0], _ = b.worker("b/w0-again", args...) }},
		{total * 65 / 100, "kill server a, the one clients start runs through", a.killServer},
	})
	runs := d.finish()
	histories := checkOrderRuns(t, a.client, ns, runs)

	// Every run b had advanced and held open at its kill went on after it:
	// its later workflow tasks were completed by workers of the restarted b
	// (another server id), which claimed the run once the dead b was
	// reaped, and rebuilt it from its history.
	for i, evs := range histories {
		if !caught[runs[i].WorkflowID] {
			continue
		}
		if servers := taskServers(t, evs); !servers[firstB] || len(servers) < 2 {
			t.Errorf("%s, advanced by server b (id %d) and open at its kill: workflow tasks completed on servers %v; want b before and after its restart: %s",
				runs[i].WorkflowID, firstB, servers, kinds(evs))
		}
	}

	// Once every run closed, b's workers are idle: each result was taken
	// and each slot given back. The checks below go on when one is not.
	busy := busyWorkers(t, b, ns)
	for deadline := time.Now().Add(15 * time.Second); busy != "" && time.Now().Before(deadline); busy = busyWorkers(t, b, ns) {
		time.Sleep(50 * time.Millisecond)
	}
	if busy != "" {
		t.Errorf("15s after every run closed, with nothing left to run: %s", busy)
	}

	steps := checkLedger(t, a.client, ns, ledger, runs, histories)
	// The cluster numbers each attempt it hands to a worker once, in the
	// store, and records how each ended, lost ones included: every
	// execution in the ledger is an attempt of its own with a record.
	for _, s := range steps {
		seen := map[int]bool{}
		for _, l := range s.ran {
			recorded := s.act != nil && slices.ContainsFunc(s.act.Attempts, func(at client.Attempt) bool { return int(at.Number) == l.attempt })
			switch {
			case seen[l.attempt]:
				t.Errorf("step activity %s: attempt %d ran twice: %s", s.id, l.attempt, s.describe())
			case !recorded:
				t.Errorf("step activity %s: attempt %d ran but has no record: %s", s.id, l.attempt, s.describe())
			}
			seen[l.attempt] = true
		}
	}
	repeated := repeats(t, steps)
	// A step runs more than once only when a kill cut its attempt short.
	// When b is killed, every attempt it had handed to its workers and not
	// yet closed durably is recorded server_lost once b is reaped, and runs
	// again. On a worker those are at most `slots` attempts running, and at
	// most `slots` finished ones whose results b was committing: in a
	// cluster b frees a slot when the result arrives, before it is durable,
	// but the slot's next attempt must first be claimed in the database, a
	// round trip of its own. So that kill explains at most
	// `2 × workers × slots` repeats. A worker kill explains at most `slots`
	// (its attempts running are retried; the results it had sent are
	// b's to commit). Server a has no worker: it runs no attempt and holds
	// no run, so its kill explains none.
	bound := slots * (2*workers + 1)
	t.Logf("%d step activities ran, %d of them more than once (the kills explain at most %d)", len(steps), repeated, bound)
	if len(steps) != 4*total {
		t.Errorf("%d step activities, want %d", len(steps), 4*total)
	}
	if repeated > bound {
		t.Errorf("%d step activities ran more than once; a kill of the holder with %d workers and a worker kill, with %d slots per worker, explain at most %d",
			repeated, workers, slots, bound)
	}
}

// TestSignalsAndCancelsThroughAnotherServerReachTheRun steers runs held by
// server b (the only one with workers) through server a: a's get shows the
// run, its query answers Unavailable naming the gap while b's answers, a
// signal sent through a completes an order, and "aion workflow cancel"
// against a cancels an agent run and its running model turn.
func TestSignalsAndCancelsThroughAnotherServerReachTheRun(t *testing.T) {
	t.Parallel()
	const ns = "steered"
	dsn := freshClusterDB(t)
	a := startMember(t, dsn, "a")
	b := startMember(t, dsn, "b")
	w, _ := b.worker("b/w", "--namespace", ns)

	h := a.startOrder(ns, "order-1", orderIn{OrderID: "1", ShipTimeout: "1h", Sleep: "10ms"})
	held := b.client.Workflow(ns, h.WorkflowID, "")
	eventually(t, 30*time.Second, "server b answers that the order awaits shipment", func() bool {
		return queryStatus(held) == "awaiting shipment"
	})

	// Through a, which does not hold the run: the query is refused as
	// Unavailable, naming why (the documented gap), and the run is shown
	// from the store. The rest goes on after a wrong refusal.
	ctx, cancel := short()
	err := h.Query(ctx, "status", nil, nil)
	cancel()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "held by another server") {
		t.Errorf("query through server a: %v; want Unavailable, held by another server", err)
	}
	out, code := a.cli("workflow", "get", "order-1", "--namespace", ns)
	if code != 0 || !regexp.MustCompile(`(?m)^status:\s+running$`).MatchString(out) || !strings.Contains(out, h.RunID) {
		t.Fatalf("aion workflow get through server a: exit %d, output:\n%s\nwant run %s running", code, out, h.RunID)
	}
	out, code = a.cli("workflow", "get", "order-1", "--namespace", ns, "--output", "json")
	var shown client.Run
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("aion workflow get --output json through server a: exit %d, %s", code, out)
	}
	if shown.RunID != h.RunID || shown.Status != client.RunRunning || shown.WorkflowType != "order" || shown.HistoryLength == 0 {
		t.Fatalf("server a shows %+v; want run %s of order running with a history", shown, h.RunID)
	}

	// A signal through a reaches the run b holds.
	if err := h.Signal(bounded(t, 10*time.Second), "ship", map[string]string{"carrier": "truck", "tracking": "T1"}); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, h, time.Minute)
	if err := checkOrder(run, "1", "truck:T1"); err != nil {
		t.Fatal(err)
	}
	evs := history(t, h)
	if count(evs, "signal_received") != 1 || count(evs, "activity_scheduled") != 4 || evs[len(evs)-1].Kind != "workflow_closed" {
		t.Fatalf("history %s; want the signal once, four steps, then the close", kinds(evs))
	}

	// A cancel through a reaches the run b holds and its running turn.
	agentTurnCanceled(t, ns, a, b, w)
}
