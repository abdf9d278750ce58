package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// These tests run the demo workflows (aion worker demo) on a real server
// process, killed and restarted with real signals, and check what the
// workflow rules (W2, W4, W5, W6, build ids) promise from the outside: the
// runs' results, their histories, and the demo worker's ledger of step
// executions.

// orderIn is the input of the demo order workflow.
type orderIn struct {
	OrderID     string `json:"order_id"`
	ShipTimeout string `json:"ship_timeout"`
	Sleep       string `json:"sleep"`
}

// orderOut is the result of the demo order workflow.
type orderOut struct {
	OrderID  string   `json:"order_id"`
	Status   string   `json:"status"`
	Tracking string   `json:"tracking"`
	Steps    []string `json:"steps"`
}

// orderSteps are the step results of an order that ran every step.
func orderSteps(orderID string) []string {
	return []string{"reserve " + orderID, "charge " + orderID, "ship " + orderID, "notify " + orderID}
}

// checkOrder reports what is wrong with a closed order run, or nil when it
// completed every step of orderID.
func checkOrder(r *client.Run, orderID, tracking string) error {
	out, err := client.WorkflowResult[orderOut](r)
	if err != nil {
		return err
	}
	if out.OrderID != orderID || out.Status != "done" || out.Tracking != tracking || !slices.Equal(out.Steps, orderSteps(orderID)) {
		return fmt.Errorf("workflow %s completed with %+v, want order %s done with tracking %q and steps %q",
			r.WorkflowID, out, orderID, tracking, orderSteps(orderID))
	}
	return nil
}

// eventually polls cond until it holds, and fails the test when it does not
// within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// short is a context for one call of a poll.
func short() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// bounded is a context for one call that ends with the test at the latest.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fetchHistory reads a run's whole history.
func fetchHistory(ctx context.Context, h *client.WorkflowHandle) ([]client.Event, error) {
	var evs []client.Event
	for ev, err := range h.History(ctx) {
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func history(t *testing.T, h *client.WorkflowHandle) []client.Event {
	t.Helper()
	evs, err := fetchHistory(bounded(t, 30*time.Second), h)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// count is how many events of kind evs holds.
func count(evs []client.Event, kind string) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// kinds lists the events' kinds, for failure messages.
func kinds(evs []client.Event) string {
	var ks []string
	for _, ev := range evs {
		ks = append(ks, ev.Kind)
	}
	return strings.Join(ks, " ")
}

// eventAttrs are the attributes of history events the tests read.
type eventAttrs struct {
	ActivityType string    `json:"activity_type"`
	ActivityID   string    `json:"activity_id"`
	BuildID      string    `json:"build_id"`
	WorkerID     string    `json:"worker_id"`
	FireTime     time.Time `json:"fire_time"`
	Name         string    `json:"name"`
}

func attrs(ev client.Event) (eventAttrs, error) {
	var a eventAttrs
	if err := json.Unmarshal(ev.Attributes, &a); err != nil {
		return a, fmt.Errorf("event %d %s attributes %s: %w", ev.Seq, ev.Kind, ev.Attributes, err)
	}
	return a, nil
}

// ledgerLine is one line of a demo worker's --ledger: one execution of a
// workflow step's activity.
type ledgerLine struct {
	at      int64 // unix nanoseconds, read just before the line was written
	attempt int
	typ     string
}

// readLedger reads a ledger file into its lines by activity id.
func readLedger(t *testing.T, path string) map[string][]ledgerLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[string][]ledgerLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("ledger line %q: want 4 fields", sc.Text())
		}
		at, err1 := strconv.ParseInt(fs[0], 10, 64)
		attempt, err2 := strconv.Atoi(fs[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("ledger line %q: bad time or attempt", sc.Text())
		}
		lines[fs[1]] = append(lines[fs[1]], ledgerLine{at: at, attempt: attempt, typ: fs[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// queryStatus asks a run's "status" query and returns the status field of the
// answer, "" when it could not be answered.
func queryStatus(h *client.WorkflowHandle) string {
	ctx, cancel := short()
	defer cancel()
	var out struct {
		Status string `json:"status"`
	}
	if err := h.Query(ctx, "status", nil, &out); err != nil {
		return ""
	}
	return out.Status
}

// startOrder starts an order run with the id.
func (c *cluster) startOrder(ns, id string, in orderIn) *client.WorkflowHandle {
	c.t.Helper()
	h, err := client.StartWorkflow(bounded(c.t, 10*time.Second), c.client,
		client.StartWorkflowOptions{Namespace: ns, WorkflowID: id, WorkflowType: "order"}, in)
	if err != nil {
		c.t.Fatal(err)
	}
	return h
}

// waitRun waits for the run to close.
func waitRun(t *testing.T, h *client.WorkflowHandle, within time.Duration) *client.Run {
	t.Helper()
	r, err := h.Wait(bounded(t, within))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// killServer SIGKILLs the server and starts it again on the same data dir
// and ports, returning once it is ready.
func (c *cluster) killServer() {
	c.t.Helper()
	c.server.signal(syscall.SIGKILL)
	c.server.exit(10 * time.Second)
	c.boot()
}

// runOrderThroughKills starts order i with its id, trying again while the
// server is down (the id and the reject policy make a repeated start safe),
// and waits for its run to close. tries counts the start calls; existing
// reports that the start found the run an earlier try had started.
func runOrderThroughKills(ctx context.Context, c *client.Client, ns string, i int) (run *client.Run, tries int, existing bool, err error) {
	id := fmt.Sprintf("order-%04d", i)
	opts := client.StartWorkflowOptions{Namespace: ns, WorkflowID: id, WorkflowType: "order", IDReuse: client.RejectDuplicate}
	in := orderIn{OrderID: strconv.Itoa(i), ShipTimeout: "0s", Sleep: "10ms"}
	var h *client.WorkflowHandle
	for h == nil {
		tries++
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		started, err := client.StartWorkflow(callCtx, c, opts, in)
		cancel()
		switch code := status.Code(err); {
		case err == nil:
			h, existing = started, started.Existing
		case code == codes.AlreadyExists:
			// A try whose answer the kill cut off had started the run,
			// and it has closed since; the reject policy kept a second
			// run from starting.
			h, existing = c.Workflow(ns, id, ""), true
		case (code == codes.Unavailable || code == codes.DeadlineExceeded) && ctx.Err() == nil:
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return nil, tries, false, fmt.Errorf("start %s: %w", id, err)
		}
	}
	run, err = h.Wait(ctx)
	if err != nil {
		return nil, tries, existing, fmt.Errorf("wait for %s: %w", id, err)
	}
	return run, tries, existing, nil
}

// orderRuns are order workflows driven through one client, a number of
// them open at once: each goroutine starts the next order, trying again
// through kills, and waits for its run to close.
type orderRuns struct {
	t     *testing.T
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	began time.Time
	// runs are the closed runs by order number.
	runs []*client.Run
	// done counts the closed runs; retried the orders whose start was
	// tried again after a kill, and existing those of them whose start
	// found the run an earlier try had started.
	done, retried, existing atomic.Int64
	// stall is how long progress waits for runs to close (3 minutes
	// unless set); stalled, when set, says what may hold them up.
	stall   time.Duration
	stalled func() string
}

// driveOrders starts total orders order-0000… in ns through c, open at
// once. The runs stop at the end of the test at the latest: no run
// goroutine outlives a failed test.
func driveOrders(t *testing.T, c *client.Client, ns string, total, open int) *orderRuns {
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Minute)
	d := &orderRuns{t: t, ctx: ctx, stop: stop, began: time.Now(), runs: make([]*client.Run, total), stall: 3 * time.Minute}
	t.Cleanup(func() { stop(); d.wg.Wait() })
	var next atomic.Int64
	for range open {
		d.wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				run, tries, found, err := runOrderThroughKills(ctx, c, ns, i)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("order %d: %v", i, err)
						stop()
					}
					return
				}
				if tries > 1 {
					d.retried.Add(1)
				}
				if found {
					d.existing.Add(1)
				}
				d.runs[i] = run
				d.done.Add(1)
			}
		})
	}
	return d
}

// progress waits until n runs have closed, and stops the test when the runs
// stopped first.
func (d *orderRuns) progress(n int64) {
	d.t.Helper()
	for deadline := time.Now().Add(d.stall); d.done.Load() < n && d.ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			why := ""
			if d.stalled != nil {
				why = "; " + d.stalled()
			}
			d.t.Fatalf("%d runs closed, not %d within %v%s", d.done.Load(), n, d.stall, why)
		}
	}
	if d.ctx.Err() != nil {
		d.wg.Wait()
		d.t.Fatalf("the runs stopped after %d closed: %v", d.done.Load(), d.ctx.Err())
	}
}

// planStep is something a kill test does once at runs closed.
type planStep struct {
	at   int64
	what string
	do   func()
}

// follow does each step of the plan when its number of runs has closed.
func (d *orderRuns) follow(plan []planStep) {
	d.t.Helper()
	for _, p := range plan {
		d.progress(p.at)
		at := time.Now()
		p.do()
		d.t.Logf("%s after %d runs closed (%v in): took %v", p.what, d.done.Load(), at.Sub(d.began).Round(time.Millisecond),
			time.Since(at).Round(time.Millisecond))
	}
}

// finish waits for every run to close and returns them by order number.
func (d *orderRuns) finish() []*client.Run {
	d.t.Helper()
	d.progress(int64(len(d.runs)))
	d.wg.Wait()
	d.t.Logf("%d runs closed in %v; %d starts were tried again after a kill, %d of them found the run an earlier try had started",
		len(d.runs), time.Since(d.began).Round(time.Millisecond), d.retried.Load(), d.existing.Load())
	return d.runs
}

// checkOrderRuns checks the closed runs of driveOrders, reading through c:
// every run completed with every step's result, each workflow id in ns has
// one run, and each history numbers its events from 1 without gaps and
// records each step once (four activities, one timer). It returns the
// histories by order number, and stops the test on a failure.
func checkOrderRuns(t *testing.T, c *client.Client, ns string, runs []*client.Run) [][]client.Event {
	t.Helper()
	for i, r := range runs {
		if err := checkOrder(r, strconv.Itoa(i), ""); err != nil {
			t.Error(err)
		}
	}
	perID := map[string]int{}
	for page := (&client.RunPage{}); ; {
		var err error
		page, err = c.ListWorkflows(bounded(t, 30*time.Second), client.ListWorkflowsOptions{Namespace: ns, PageToken: page.NextPageToken, PageSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			perID[r.WorkflowID]++
		}
		if page.NextPageToken == "" {
			break
		}
	}
	for id, n := range perID {
		if n != 1 {
			t.Errorf("workflow %s has %d runs, want 1", id, n)
		}
	}
	if len(perID) != len(runs) {
		t.Errorf("%d workflow ids have runs, want %d", len(perID), len(runs))
	}
	if t.Failed() {
		t.FailNow()
	}

	ctx := bounded(t, 2*time.Minute)
	histories := make([][]client.Event, len(runs))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(runs); i += 4 {
				r := runs[i]
				evs, err := fetchHistory(ctx, c.Workflow(ns, r.WorkflowID, r.RunID))
				if err != nil {
					t.Errorf("history of %s: %v", r.WorkflowID, err)
					continue
				}
				for k, ev := range evs {
					if ev.Seq != int64(k+1) {
						t.Errorf("history of %s: event %d has seq %d; want seqs from 1 without gaps", r.WorkflowID, k+1, ev.Seq)
						break
					}
				}
				if int64(len(evs)) != r.HistoryLength {
					t.Errorf("history of %s has %d events, its run says %d", r.WorkflowID, len(evs), r.HistoryLength)
				}
				if count(evs, "activity_scheduled") != 4 || count(evs, "timer_started") != 1 || count(evs, "timer_fired") != 1 ||
					count(evs, "workflow_closed") != 1 {
					t.Errorf("history of %s: %s; want 4 activity_scheduled, 1 timer_started, 1 timer_fired, 1 workflow_closed",
						r.WorkflowID, kinds(evs))
				}
				histories[i] = evs
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return histories
}

// stepRuns are the executions of one step activity in the ledger, and the
// activity as the server reports it.
type stepRuns struct {
	id  string
	ran []ledgerLine
	act *client.Activity
}

// checkLedger checks the demo workers' ledger against the runs' histories,
// reading the step activities through c: every step activity ran (the
// ledger has it), nothing ran that no history scheduled, and no step ran
// again once it had completed (W2): every execution of an activity began
// before the server recorded its close. It returns the step activities the
// histories scheduled with their executions.
//
// Both times are read from this machine's wall clock, and a ledger line is
// written and synced before the handler returns, hence before the worker
// sends the result whose arrival the server stamps as the close time: no
// tolerance is needed.
func checkLedger(t *testing.T, c *client.Client, ns, ledger string, runs []*client.Run, histories [][]client.Event) []stepRuns {
	t.Helper()
	lines := readLedger(t, ledger)
	known := map[string]bool{}
	var steps []stepRuns
	for i, evs := range histories {
		for _, ev := range evs {
			if ev.Kind != "activity_scheduled" {
				continue
			}
			a, err := attrs(ev)
			if err != nil {
				t.Error(err)
				continue
			}
			if known[a.ActivityID] {
				t.Errorf("run %s: step activity %s is scheduled twice", runs[i].WorkflowID, a.ActivityID)
				continue
			}
			known[a.ActivityID] = true
			ls := lines[a.ActivityID]
			if len(ls) == 0 {
				t.Errorf("run %s: step activity %s (%s) is not in the ledger", runs[i].WorkflowID, a.ActivityID, a.ActivityType)
				continue
			}
			for _, l := range ls {
				if l.typ != a.ActivityType {
					t.Errorf("ledger: %s ran as %s, history scheduled %s", a.ActivityID, l.typ, a.ActivityType)
				}
			}
			steps = append(steps, stepRuns{id: a.ActivityID, ran: ls})
		}
	}
	for id := range lines {
		if !known[id] {
			t.Errorf("ledger: activity %s ran, but no run's history scheduled it", id)
		}
	}
	ctx := bounded(t, 2*time.Minute)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := g; k < len(steps); k += 4 {
				s := &steps[k]
				a, err := c.Get(ctx, ns, s.id)
				if err != nil {
					t.Errorf("get %s: %v", s.id, err)
					continue
				}
				s.act = a
				if a.State != client.StateCompleted {
					t.Errorf("step activity %s is %s, want completed", s.id, a.State)
					continue
				}
				for _, l := range s.ran {
					if l.at >= a.ClosedTime.UnixNano() {
						t.Errorf("step activity %s ran (attempt %d) at %s, after it completed at %s",
							s.id, l.attempt, time.Unix(0, l.at).UTC().Format(time.RFC3339Nano), a.ClosedTime.UTC().Format(time.RFC3339Nano))
					}
				}
			}
		})
	}
	wg.Wait()
	return steps
}

// describe renders a step activity's executions and its recorded attempts,
// for logs and failure messages.
func (s stepRuns) describe() string {
	var ran, recorded []string
	for _, l := range s.ran {
		ran = append(ran, fmt.Sprintf("#%d at %s", l.attempt, time.Unix(0, l.at).UTC().Format("15:04:05.000000")))
	}
	if s.act != nil {
		for _, at := range s.act.Attempts {
			r := fmt.Sprintf("#%d on worker %d %s", at.Number, at.WorkerID, at.Outcome)
			if at.Failure != nil {
				r += " " + at.Failure.Type
			}
			recorded = append(recorded, r)
		}
	}
	return fmt.Sprintf("%s ran as %s; its attempts: %s", s.id, strings.Join(ran, ", "), strings.Join(recorded, ", "))
}

// repeats counts the step activities that ran more than once, and logs a
// few of them.
func repeats(t *testing.T, steps []stepRuns) int {
	t.Helper()
	n := 0
	for _, s := range steps {
		if len(s.ran) > 1 {
			if n++; n <= 3 {
				t.Logf("for example %s", s.describe())
			}
		}
	}
	return n
}

// TestWorkflowsSurviveServerAndWorkerKills runs 1,000 order workflows on
// two demo workers while the server is SIGKILLed three times and each
// worker once, at points chosen by progress. Every run completes with the
// right result, records each step once, and no step activity ran again
// after it had completed (W2).
func TestWorkflowsSurviveServerAndWorkerKills(t *testing.T) {
	// Not parallel: it kills processes under heavy load and would starve the
	// other process tests of this package (it runs before them instead).
	const (
		ns      = "orders"
		total   = 1000
		slots   = 8   // activity slots of each demo worker
		open    = 100 // runs open at once: starts go on through the kills
		workers = 2
	)
	c := startServer(t, "--sqlite-sync", "full")
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	args := []string{"--namespace", ns, "--slots", strconv.Itoa(slots), "--ledger", ledger}
	var ws [workers]*proc
	for i := range ws {
		ws[i], _ = c.worker(fmt.Sprintf("w%d", i), args...)
	}

	d := driveOrders(t, c.client, ns, total, open)
	// The restarted server logs how many open runs it loaded, when any: a
	// kill must catch runs open.
	recovered := regexp.MustCompile(`msg="open workflow runs recovered" open_runs=(\d+)`)
	killServer := func() {
		c.killServer()
		m := c.server.waitLine(recovered, 10*time.Second)
		t.Logf("the restarted server recovered %s open runs", m[1])
	}
	killWorker := func(i int) {
		ws[i].signal(syscall.SIGKILL)
		ws[i].exit(10 * time.Second)
	}
	d.follow([]planStep{
		{total * 20 / 100, "kill the server", killServer},
		{total * 30 / 100, "kill worker 0", func() { killWorker(0) }},
		{total * 35 / 100, "restart worker 0", func() { ws[0], _ = c.worker("w0", args...) }},
		{total * 45 / 100, "kill the server", killServer},
		{total * 60 / 100, "kill worker 1", func() { killWorker(1) }},
		{total * 65 / 100, "restart worker 1", func() { ws[1], _ = c.worker("w1", args...) }},
		{total * 70 / 100, "kill the server", killServer},
	})
	runs := d.finish()
	histories := checkOrderRuns(t, c.client, ns, runs)
	steps := checkLedger(t, c.client, ns, ledger, runs, histories)
	repeated := repeats(t, steps)

	// A step runs more than once only when a kill cut its attempt short:
	// an attempt in flight on a killed worker is retried elsewhere, and
	// every attempt in flight anywhere when the server is killed runs again
	// after the restart (its start was not written). The server keeps at
	// most `slots` attempts in flight on a worker until their results are
	// durable, so a worker kill explains at most `slots` repeats and a
	// server kill `workers × slots`.
	bound := slots * (3*workers + 2)
	t.Logf("%d step activities ran, %d of them more than once (the kills explain at most %d)", len(steps), repeated, bound)
	if len(steps) != 4*total {
		t.Errorf("%d step activities, want %d", len(steps), 4*total)
	}
	if repeated > bound {
		t.Errorf("%d step activities ran more than once; three server kills and two worker kills with %d slots per worker explain at most %d",
			repeated, slots, bound)
	}
}

// TestSignalSentWithNoWorkerIsDeliveredOnce: a signal sent while no worker
// is connected is in the run's history when the call returns, survives a
// server kill, and reaches the code exactly once when a worker comes back
// and replays the run from the top (W5, W2).
func TestSignalSentWithNoWorkerIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	const ns = "signals"
	c := startServer(t, "--sqlite-sync", "full")
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	w, _ := c.worker("w", "--namespace", ns, "--ledger", ledger)
	h := c.startOrder(ns, "order-7", orderIn{OrderID: "7", ShipTimeout: "1h", Sleep: "10ms"})
	eventually(t, 30*time.Second, "the order awaits shipment", func() bool { return queryStatus(h) == "awaiting shipment" })
	w.signal(syscall.SIGKILL)
	w.exit(10 * time.Second)
	eventually(t, 30*time.Second, "no worker connected", func() bool {
		ctx, cancel := short()
		defer cancel()
		ws, err := c.client.ListWorkers(ctx, "")
		return err == nil && len(ws) == 0
	})

	ship := map[string]string{"carrier": "post", "tracking": "1Z"}
	if err := h.Signal(bounded(t, 10*time.Second), "ship", ship); err != nil {
		t.Fatal(err)
	}
	evs := history(t, h)
	if n := count(evs, "signal_received"); n != 1 || evs[len(evs)-1].Kind != "signal_received" {
		t.Fatalf("history after the signal returned: %s; want the signal recorded once, last", kinds(evs))
	}
	c.killServer()
	after := history(t, h)
	if len(after) != len(evs) || count(after, "signal_received") != 1 {
		t.Fatalf("history after the server kill: %s; want it unchanged: %s", kinds(after), kinds(evs))
	}
	if r, err := h.Get(bounded(t, 10*time.Second)); err != nil || r.Status != client.RunRunning {
		t.Fatalf("run with no worker after the restart: %+v, %v; want it running", r, err)
	}

	c.worker("w-again", "--namespace", ns, "--ledger", ledger)
	run := waitRun(t, h, time.Minute)
	if err := checkOrder(run, "7", "post:1Z"); err != nil {
		t.Fatal(err)
	}
	evs = history(t, h)
	if count(evs, "signal_received") != 1 || count(evs, "activity_scheduled") != 4 {
		t.Fatalf("final history %s; want one signal_received and four activity_scheduled", kinds(evs))
	}
	// The new worker replayed reserve and charge from history: no attempt
	// was in flight at either kill, so every step ran exactly once.
	lines := readLedger(t, ledger)
	for _, ev := range evs {
		if ev.Kind != "activity_scheduled" {
			continue
		}
		a, err := attrs(ev)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(lines[a.ActivityID]); n != 1 {
			t.Errorf("step %d (%s) ran %d times, want once", ev.Step, a.ActivityType, n)
		}
	}
}

// TestSleepingWorkflowHoldsNoSlotAndWakesAfterRestart: a run in a durable
// sleep holds neither of a worker's only slots (a second run completes on
// that worker meanwhile, W4), and its timer survives a server kill and
// fires on time, not before.
func TestSleepingWorkflowHoldsNoSlotAndWakesAfterRestart(t *testing.T) {
	t.Parallel()
	const (
		ns  = "naps"
		nap = 6 * time.Second // long enough for a second run and a restart on a busy machine
	)
	c := startServer(t)
	c.worker("w", "--namespace", ns, "--slots", "1", "--workflow-slots", "1")
	sleepy := c.startOrder(ns, "sleepy", orderIn{OrderID: "1", ShipTimeout: "0s", Sleep: nap.String()})
	var fire time.Time
	eventually(t, 30*time.Second, "the sleepy order waits on its timer", func() bool {
		ctx, cancel := short()
		defer cancel()
		r, err := sleepy.Get(ctx)
		if err != nil {
			return false
		}
		for _, s := range r.PendingSteps {
			if s.Kind == "timer" && !s.FireTime.IsZero() {
				fire = s.FireTime
				return true
			}
		}
		return false
	})
	t.Logf("the timer fires in %v", time.Until(fire).Round(time.Millisecond))

	quick := c.startOrder(ns, "quick", orderIn{OrderID: "2", ShipTimeout: "0s", Sleep: "0s"})
	qr := waitRun(t, quick, 30*time.Second)
	if err := checkOrder(qr, "2", ""); err != nil {
		t.Fatal(err)
	}
	if !qr.CloseTime.Before(fire) {
		t.Fatalf("the second order closed at %s, not before the sleeper's timer at %s: the sleeping run held the worker's slot",
			qr.CloseTime.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
	}

	killedAt := time.Now()
	if !killedAt.Before(fire) {
		t.Fatalf("the timer fired (%s) before the server could be killed during the sleep", fire.Format(time.RFC3339Nano))
	}
	c.killServer()
	t.Logf("server killed %v before the timer and ready again %v before it", fire.Sub(killedAt).Round(time.Millisecond),
		time.Until(fire).Round(time.Millisecond))
	if r, err := sleepy.Get(bounded(t, 10*time.Second)); err != nil || r.Status != client.RunRunning {
		t.Fatalf("sleeping run after the restart: %+v, %v; want it still running", r, err)
	}

	run := waitRun(t, sleepy, time.Minute)
	if err := checkOrder(run, "1", ""); err != nil {
		t.Fatal(err)
	}
	if run.CloseTime.Before(fire) {
		t.Fatalf("the sleeper closed at %s, before its timer's fire time %s", run.CloseTime.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
	}
	evs := history(t, sleepy)
	if count(evs, "timer_started") != 1 || count(evs, "timer_fired") != 1 {
		t.Fatalf("history %s; want one timer started and fired", kinds(evs))
	}
	for _, ev := range evs {
		if ev.Kind == "timer_fired" && ev.Time.Before(fire) {
			t.Fatalf("timer fired at %s, before its fire time %s", ev.Time.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
		}
	}
	notify := c.wait(ns, run.RunID+"-5")
	if notify.ActivityType != "notify" || notify.ScheduledTime.Before(fire) {
		t.Fatalf("step 5 is %s scheduled at %s; want notify, scheduled after the timer's %s", notify.ActivityType,
			notify.ScheduledTime.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
	}
}

// buildOf checks that every workflow task of the run in evs was completed
// by the given build on the given worker, and that at least one followed
// the signal.
func buildOf(t *testing.T, id string, evs []client.Event, build string, workerID uint64) {
	t.Helper()
	afterSignal := 0
	signaled := false
	for _, ev := range evs {
		switch ev.Kind {
		case "signal_received":
			signaled = true
		case "workflow_task_completed":
			a, err := attrs(ev)
			if err != nil {
				t.Fatal(err)
			}
			if a.BuildID != build || a.WorkerID != strconv.FormatUint(workerID, 10) {
				t.Errorf("%s: event %d: workflow task completed by build %s on worker %s, want build %s on worker %d",
					id, ev.Seq, a.BuildID, a.WorkerID, build, workerID)
			}
			if signaled {
				afterSignal++
			}
		}
	}
	if afterSignal == 0 {
		t.Errorf("%s: no workflow task after the signal: %s", id, kinds(evs))
	}
}

// TestNewBuildTakesNewRunsAndOldRunsFinishOnTheirs: runs started on build
// v1 stay on it after a v2 worker joins, while new runs start on v2; the v1
// worker drains on SIGTERM once its runs closed, and nothing is lost.
func TestNewBuildTakesNewRunsAndOldRunsFinishOnTheirs(t *testing.T) {
	t.Parallel()
	const ns = "builds"
	c := startServer(t)
	v1, v1ID := c.worker("v1", "--namespace", ns, "--build-id", "v1")
	awaitShipment := func(h *client.WorkflowHandle, build string) {
		t.Helper()
		eventually(t, 30*time.Second, h.WorkflowID+" awaits shipment", func() bool { return queryStatus(h) == "awaiting shipment" })
		r, err := h.Get(bounded(t, 10*time.Second))
		if err != nil || r.BuildID != build {
			t.Fatalf("%s: %+v, %v; want it on build %s", h.WorkflowID, r, err, build)
		}
	}
	start := func(prefix string) []*client.WorkflowHandle {
		var hs []*client.WorkflowHandle
		for i := range 3 {
			id := fmt.Sprintf("%s-%d", prefix, i)
			hs = append(hs, c.startOrder(ns, id, orderIn{OrderID: id, ShipTimeout: "1h", Sleep: "10ms"}))
		}
		return hs
	}
	ship := func(h *client.WorkflowHandle) {
		t.Helper()
		if err := h.Signal(bounded(t, 10*time.Second), "ship", map[string]string{"carrier": "truck", "tracking": h.WorkflowID}); err != nil {
			t.Fatal(err)
		}
	}
	finished := func(h *client.WorkflowHandle, build string, workerID uint64) {
		t.Helper()
		r := waitRun(t, h, time.Minute)
		if err := checkOrder(r, h.WorkflowID, "truck:"+h.WorkflowID); err != nil {
			t.Fatal(err)
		}
		if r.BuildID != build {
			t.Fatalf("%s closed on build %s, want %s", h.WorkflowID, r.BuildID, build)
		}
		buildOf(t, h.WorkflowID, history(t, h), build, workerID)
	}

	old := start("old")
	for _, h := range old {
		awaitShipment(h, "v1")
	}
	_, v2ID := c.worker("v2", "--namespace", ns, "--build-id", "v2")
	fresh := start("new")
	for _, h := range fresh {
		awaitShipment(h, "v2")
	}
	for _, h := range old {
		ship(h)
	}
	for _, h := range old {
		finished(h, "v1", v1ID)
	}

	// Drain the v1 worker while the v2 runs go on; its in-flight step
	// activities (any worker may run those) finish or move to v2.
	for _, h := range fresh {
		ship(h)
	}
	v1.signal(syscall.SIGTERM)
	if code := v1.exit(60 * time.Second); code != 0 {
		t.Fatalf("the v1 worker exited %d after SIGTERM", code)
	}
	for _, h := range fresh {
		finished(h, "v2", v2ID)
	}
	page, err := c.client.ListWorkflows(bounded(t, 10*time.Second), client.ListWorkflowsOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 6 {
		t.Fatalf("%d runs, want 6", len(page.Runs))
	}
	for _, r := range page.Runs {
		if r.Status != client.RunCompleted {
			t.Errorf("%s is %s, want completed", r.WorkflowID, r.Status)
		}
	}
}

// TestCancelReachesActivitiesAndChildren: cancelling a run reaches its
// running activity and its child workflows (W6).
func TestCancelReachesActivitiesAndChildren(t *testing.T) {
	t.Parallel()
	t.Run("the demo agent's running turn", cancelAgentTurn)
	t.Run("a child workflow and its activity", cancelChild)
}

// cancelAgentTurn cancels a demo agent workflow with the CLI while its model
// turn runs: the turn's handler sees the cancellation and stops, its
// activity closes canceled, and the run closes canceled.
func cancelAgentTurn(t *testing.T) {
	t.Parallel()
	const ns = "agents"
	c := startServer(t)
	w, _ := c.worker("w", "--namespace", ns)
	agentTurnCanceled(t, ns, c, c, w)
}

// agentTurnCanceled starts a demo agent run with a minute-long model turn
// through front, and once the turn runs on the worker w, which serves ns on
// holder, cancels the run with "aion workflow cancel" against front: the
// turn's handler sees the cancellation and stops, its activity closes
// canceled with one attempt, and the run closes canceled with one
// cancel_requested in its history.
func agentTurnCanceled(t *testing.T, ns string, front, holder *cluster, w *proc) {
	t.Helper()
	h, err := client.StartWorkflow(bounded(t, 10*time.Second), front.client,
		client.StartWorkflowOptions{Namespace: ns, WorkflowID: "agent-1", WorkflowType: "agent"},
		map[string]any{"task": "write a poem", "turn_ms": 60000, "max_turns": 1})
	if err != nil {
		t.Fatal(err)
	}
	// The holder knows the run's pending steps and the worker of each.
	held := holder.client.Workflow(ns, h.WorkflowID, "")
	var turn string
	eventually(t, 30*time.Second, "the agent's model turn runs on the worker", func() bool {
		ctx, cancel := short()
		defer cancel()
		r, err := held.Get(ctx)
		if err != nil {
			return false
		}
		for _, s := range r.PendingSteps {
			if s.Kind == "activity" && s.Name == "agent" && s.WorkerID != 0 {
				turn = s.ActivityID
				return true
			}
		}
		return false
	})
	holder.waitState(ns, turn, client.StateRunning)

	out, code := front.cli("workflow", "cancel", "agent-1", "--namespace", ns, "--reason", "operator stop")
	if code != 0 || !strings.Contains(out, "cancel requested for workflow agent-1") {
		t.Fatalf("aion workflow cancel: exit %d, %s", code, out)
	}
	// The handler, a minute from the end of its turn, returns the
	// cancellation it saw.
	w.waitLine(regexp.MustCompile(`msg="task failed" namespace=`+ns+` activity_id=`+regexp.QuoteMeta(turn)+
		` attempt=1 type=agent duration=\S+ err="activity canceled: [^"]*operator stop`), 30*time.Second)
	run := waitRun(t, h, 30*time.Second)
	if run.Status != client.RunCanceled || run.Failure == nil || run.Failure.Type != "canceled" {
		t.Fatalf("run closed %s (%+v), want canceled", run.Status, run.Failure)
	}
	a := front.wait(ns, turn)
	if a.State != client.StateCanceled || len(a.Attempts) != 1 || a.Attempts[0].Outcome != client.OutcomeCanceled {
		t.Fatalf("the model turn's activity: %s, attempts %+v; want one attempt, canceled", a.State, a.Attempts)
	}
	evs := history(t, h)
	if count(evs, "cancel_requested") != 1 || count(evs, "activity_scheduled") != 1 || evs[len(evs)-1].Kind != "workflow_closed" {
		t.Fatalf("history %s; want one turn, one cancel_requested, then the close", kinds(evs))
	}
}

// cancelChild cancels a parent run with the CLI: its child is canceled, the
// child's running activity sees the cancellation, the child's code cleans
// up on a disconnected context, and both runs close canceled. The demo
// worker has no child workflow, so these workflows run on a worker in this
// process, against the server process.
func cancelChild(t *testing.T) {
	t.Parallel()
	const ns = "families"
	c := startServer(t)
	w, err := worker.New(c.grpc, worker.Options{Namespaces: []string{ns}, BuildID: "kids-1", Slots: 4,
		StopTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	causes := make(chan error, 4)
	var cleanups atomic.Int32
	worker.RegisterActivity(w, "block", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", context.Cause(ctx)
	})
	worker.RegisterActivity(w, "cleanup", func(context.Context, struct{}) (string, error) {
		cleanups.Add(1)
		return "clean", nil
	})
	worker.RegisterWorkflow(w, "parent", func(ctx workflow.Context, _ struct{}) (string, error) {
		return workflow.ExecuteChild[string](ctx, "child", nil, workflow.ChildOptions{WorkflowID: "kid-1"}).Get(ctx)
	})
	worker.RegisterWorkflow(w, "child", func(ctx workflow.Context, _ struct{}) (string, error) {
		opts := workflow.ActivityOptions{StartToCloseTimeout: time.Minute}
		_, err := workflow.ExecuteActivity[string](ctx, "block", nil, opts).Get(ctx)
		if !errors.Is(err, workflow.ErrCanceled) {
			return "", err
		}
		d := workflow.NewDisconnectedContext(ctx)
		if _, cerr := workflow.ExecuteActivity[string](d, "cleanup", nil, opts).Get(d); cerr != nil {
			return "", cerr
		}
		return "", fmt.Errorf("child cleaned up: %w", err)
	})
	wctx, stopWorker := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-ran; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	parent, err := client.StartWorkflow(bounded(t, 10*time.Second), c.client,
		client.StartWorkflowOptions{Namespace: ns, WorkflowID: "parent-1", WorkflowType: "parent"}, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	child := c.client.Workflow(ns, "kid-1", "")
	eventually(t, 30*time.Second, "the child's activity runs", func() bool {
		ctx, cancel := short()
		defer cancel()
		r, err := child.Get(ctx)
		return err == nil && len(r.PendingSteps) == 1 && r.PendingSteps[0].Kind == "activity" && r.PendingSteps[0].WorkerID != 0
	})
	if out, code := c.cli("workflow", "cancel", "parent-1", "--namespace", ns, "--reason", "parent stop"); code != 0 {
		t.Fatalf("aion workflow cancel: exit %d, %s", code, out)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrActivityCanceled) {
			t.Fatalf("the child's activity stopped with %v, want ErrActivityCanceled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child's activity saw no cancellation within 30s")
	}
	cr := waitRun(t, child, 30*time.Second)
	pr := waitRun(t, parent, 30*time.Second)
	if cr.Status != client.RunCanceled || cr.ParentWorkflowID != "parent-1" || cleanups.Load() != 1 {
		t.Fatalf("child closed %s (parent %q) after %d cleanups; want canceled after one", cr.Status, cr.ParentWorkflowID, cleanups.Load())
	}
	if pr.Status != client.RunCanceled {
		t.Fatalf("parent closed %s (%+v), want canceled", pr.Status, pr.Failure)
	}
	// The parent's code does not wait for the child's cleanup: its blocked
	// Get returns ErrCanceled at once, so its history may end before the
	// child closes.
	if evs := history(t, parent); count(evs, "cancel_requested") != 1 || count(evs, "child_started") != 1 {
		t.Fatalf("parent history %s; want the child started and one cancel_requested", kinds(evs))
	}
}

// TestWorkflowCommandsRunOrdersAndRefuseBadInput runs the workflow commands
// as the help shows them against a demo worker, and checks that a bad
// start exits non-zero naming the field and records nothing.
func TestWorkflowCommandsRunOrdersAndRefuseBadInput(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.worker("w", "--namespace", "shop")

	out, code := c.cli("workflow", "start", "--namespace", "shop", "--type", "order", "--id", "order-42",
		"--input", `{"order_id":"42","ship_timeout":"0s","sleep":"10ms"}`, "--wait")
	if code != 0 || !regexp.MustCompile(`(?m)^status:\s+completed$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^result:\s+\{"order_id":"42","status":"done","steps":\["reserve 42","charge 42","ship 42","notify 42"\]\}$`).MatchString(out) {
		t.Fatalf("workflow start --wait: exit %d, output:\n%s", code, out)
	}

	// Start, query, signal, wait and history of a run that waits for "ship".
	out, code = c.cli("workflow", "start", "-n", "shop", "--type", "order", "--id", "order-43", "--input", `{"order_id":"43","sleep":"10ms"}`)
	if code != 0 || !strings.HasPrefix(out, "started workflow order-43 run ") {
		t.Fatalf("workflow start: exit %d, %s", code, out)
	}
	eventually(t, 30*time.Second, "the query answers awaiting shipment", func() bool {
		out, code := c.cli("workflow", "query", "order-43", "-n", "shop", "--name", "status")
		return code == 0 && strings.Contains(out, `"status":"awaiting shipment"`)
	})
	out, code = c.cli("workflow", "signal", "order-43", "-n", "shop", "--name", "ship", "--input", `{"carrier":"post","tracking":"1Z"}`)
	if code != 0 || !strings.Contains(out, "signal ship recorded for workflow order-43") {
		t.Fatalf("workflow signal: exit %d, %s", code, out)
	}
	out, code = c.cli("workflow", "wait", "order-43", "-n", "shop", "--wait-timeout", "1m", "--output", "json")
	var run client.Run
	if code != 0 || json.Unmarshal([]byte(out), &run) != nil {
		t.Fatalf("workflow wait: exit %d, %s", code, out)
	}
	if err := checkOrder(&run, "43", "post:1Z"); err != nil {
		t.Fatal(err)
	}
	out, code = c.cli("workflow", "history", "order-43", "-n", "shop", "--output", "json")
	var evs []client.Event
	if code != 0 || json.Unmarshal([]byte(out), &evs) != nil || count(evs, "signal_received") != 1 || evs[len(evs)-1].Kind != "workflow_closed" {
		t.Fatalf("workflow history: exit %d, %s", code, out)
	}

	// Bad starts name the field and record nothing.
	if out, code := c.cli("namespace", "create", "refused"); code != 0 {
		t.Fatalf("namespace create: exit %d, %s", code, out)
	}
	cases := []struct {
		args  []string
		names string
	}{
		{[]string{"--type", "order", "--input", "{not json"}, "--input"},
		{[]string{"--type", "", "--input", "{}"}, "--type"},
		{[]string{"--type", "order", "--input", "{}", "--id-reuse", "sometimes"}, "--id-reuse"},
		{[]string{"--type", "order", "--input", "{}", "--wait-timeout", "soon"}, "--wait-timeout"},
		{[]string{"--type", "bad type", "--input", "{}"}, "workflow_type"},
		{[]string{"--type", "order", "--task-queue", "bad queue", "--input", "{}"}, "task_queue"},
	}
	for _, tc := range cases {
		args := append([]string{"workflow", "start", "--namespace", "refused", "--id", "refused-1"}, tc.args...)
		out, code := c.cli(args...)
		if code == 0 || !strings.Contains(out, tc.names) {
			t.Errorf("aion %s: exit %d, output %q; want a failure naming %s", strings.Join(args, " "), code, out, tc.names)
		}
	}
	if out, code := c.cli("workflow", "start", "--type", "order", "--input", "{}"); code == 0 || !strings.Contains(out, "--namespace") {
		t.Errorf("workflow start without a namespace: exit %d, %q; want a failure naming --namespace", code, out)
	}
	out, code = c.cli("workflow", "list", "--namespace", "refused", "--output", "json")
	var runs []client.Run
	if code != 0 || json.Unmarshal([]byte(out), &runs) != nil || len(runs) != 0 {
		t.Fatalf("workflow list after the refused starts: exit %d, %s; want no run", code, out)
	}
	if out, code := c.cli("workflow", "get", "refused-1", "--namespace", "refused"); code == 0 || !strings.Contains(out, "refused-1") {
		t.Fatalf("workflow get of a refused start: exit %d, %s; want a failure naming it", code, out)
	}
}
