package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/worker"
	"google.golang.org/protobuf/proto"
)

// setClusterLimit sets l through server "a" and waits until every server of
// c applies it (the others learn of it from the namespace notice).
func setClusterLimit(t *testing.T, c map[string]*bundle, l *aionv1.FlowLimit) {
	t.Helper()
	ctx := context.Background()
	if _, err := c["a"].namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: l.GetNamespace()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c["a"].namespaces.SetFlowLimit(ctx, &aionv1.SetFlowLimitRequest{Limit: l}); err != nil {
		t.Fatalf("set limit: %v", err)
	}
	for name, b := range c {
		deadline := time.Now().Add(20 * time.Second)
		for len(server.AppliedFlowLimits(b.srv, l.GetNamespace())) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("server %s never applied the limit", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// scheduleMany schedules n activities of type typ with key through server b,
// ids prefix-0 … prefix-(n-1), in batches.
func scheduleMany(t *testing.T, b *bundle, ns, typ, key, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for from := 0; from < n; from += 1000 {
		req := &aionv1.ScheduleBatchRequest{}
		for i := from; i < min(n, from+1000); i++ {
			id := fmt.Sprintf("%s-%04d", prefix, i)
			ids = append(ids, id)
			req.Requests = append(req.Requests, &aionv1.ScheduleRequest{Namespace: ns, Id: id, ActivityType: typ,
				ConcurrencyKey: key, Payload: []byte(`{}`)})
		}
		resp, err := b.activities.ScheduleBatch(context.Background(), req)
		if err != nil {
			t.Fatalf("schedule: %v", err)
		}
		for _, r := range resp.GetResults() {
			if r.GetError() != nil {
				t.Fatalf("schedule: %v", r.GetError())
			}
		}
	}
	return ids
}

// runWorker connects an SDK worker serving typ in ns to server b with fn as
// its handler, until the test ends.
func runWorker(t *testing.T, b *bundle, ns, typ string, slots int, fn func(ctx context.Context) error) {
	t.Helper()
	w, err := worker.New(b.srv.GRPCAddr(), worker.Options{Namespaces: []string{ns}, Slots: slots,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	worker.RegisterActivity(w, typ, func(ctx context.Context, _ struct{}) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker on %s: %v", b.srv.GRPCAddr(), err)
		}
	})
}

// Acceptance: a concurrency key with a limit of 2, 100 activities of that
// key, two servers on one PostgreSQL database with a worker each: the
// workers never run more than 2 at once between them (counted on the
// workers' side, by the handlers), and both servers' workers take part.
func TestClusterConcurrencyKeyNeverRunsMoreThanItsLimit(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b")
	l := activityLimit("acc", "charge")
	l.Concurrency = proto.Int32(2)
	setClusterLimit(t, c, l)

	var (
		running, peak atomic.Int64
		ran           = map[string]*atomic.Int64{"a": {}, "b": {}}
	)
	for name, b := range c {
		runWorker(t, b, "acc", "charge", 8, func(context.Context) error {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			ran[name].Add(1)
			time.Sleep(10 * time.Millisecond) // the work: long enough for claims to overlap it
			running.Add(-1)
			return nil
		})
	}
	ids := scheduleMany(t, c["a"], "acc", "charge", "acct-1", "x", 50)
	ids = append(ids, scheduleMany(t, c["b"], "acc", "charge", "acct-1", "y", 50)...)
	for _, id := range ids {
		if a := c["b"].wait(t, "acc", id); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
			t.Fatalf("%s ended %v", id, a.GetState())
		}
	}
	t.Logf("ran on a: %d, on b: %d; peak %d at once", ran["a"].Load(), ran["b"].Load(), peak.Load())
	if p := peak.Load(); p != 2 {
		t.Fatalf("the workers ran up to %d of key acct-1 at once, want 2: never more than the limit, and the limit used", p)
	}
	if ran["a"].Load()+ran["b"].Load() != 100 || ran["a"].Load() == 0 || ran["b"].Load() == 0 {
		t.Fatalf("ran %d on a and %d on b, want 100 between both servers", ran["a"].Load(), ran["b"].Load())
	}
}

// Acceptance: a rate limit of 200/s with a burst of 20, two servers on one
// PostgreSQL database, fast workers on each and more work waiting than the
// rate lets through: over ten seconds, every full second sees 200 ± 10%
// starts between both servers, and so does the total. The first second
// also carries the burst and is checked apart. The workers count each
// attempt at the start time its server stamped on it (so the delay of
// delivering it does not move it to the next second).
//
// This test runs in real time (the rate is the promise), about 12s, and not
// beside the package's other tests: a machine too busy to claim for a
// tenth of a second (the burst's worth at the rate) loses those tokens, as
// a rate limit should, and the count with them.
func TestClusterRateLimitHoldsAcrossTwoServers(t *testing.T) {
	c := cluster(t, "a", "b")
	l := activityLimit("acc", "mail")
	l.Rate, l.Burst = proto.Float64(200), proto.Int32(20)
	setClusterLimit(t, c, l)
	scheduleMany(t, c["a"], "acc", "mail", "", "x", 1300)
	scheduleMany(t, c["b"], "acc", "mail", "", "y", 1300)

	var (
		mu     sync.Mutex
		starts []time.Time
		ran    = map[string]int{}
	)
	for name, b := range c {
		runWorker(t, b, "acc", "mail", 64, func(ctx context.Context) error {
			started := worker.Info(ctx).StartedTime
			mu.Lock()
			starts = append(starts, started)
			ran[name]++
			mu.Unlock()
			return nil
		})
	}
	// Wait until 11 full seconds have passed since the first start.
	deadline := time.Now().Add(40 * time.Second)
	for {
		mu.Lock()
		var first time.Time
		if len(starts) > 0 {
			first = slices.MinFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
		}
		mu.Unlock()
		if !first.IsZero() && time.Since(first) > 11*time.Second+100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the workers did not run for 11 seconds")
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	got := slices.Clone(starts)
	onA, onB := ran["a"], ran["b"]
	mu.Unlock()
	slices.SortFunc(got, func(x, y time.Time) int { return x.Compare(y) })
	t0 := got[0]
	perSecond := make([]int, 11)
	for _, s := range got {
		if k := int(s.Sub(t0) / time.Second); k < len(perSecond) {
			perSecond[k]++
		}
	}
	t.Logf("starts per second from the first: %v (on a %d, on b %d)", perSecond, onA, onB)
	if perSecond[0] > 242 || perSecond[0] < 180 {
		t.Errorf("first second: %d starts, want the burst of 20 and 200 more, ± 10%%", perSecond[0])
	}
	total := 0
	for k, n := range perSecond[1:] {
		total += n
		if n < 180 || n > 220 {
			t.Errorf("second %d: %d starts, want 200 ± 10%%", k+1, n)
		}
	}
	if total < 1800 || total > 2200 {
		t.Errorf("%d starts in the 10 seconds after the first, want 2000 ± 10%%", total)
	}
	if onA == 0 || onB == 0 {
		t.Errorf("ran %d on a and %d on b, want both servers' workers to take part", onA, onB)
	}
}

// A limit set on one server holds work on another: why there names it,
// and clearing it lets the held work through.
func TestClusterWhyNamesTheLimitHeldInTheStore(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b")
	l := activityLimit("acc", "charge")
	l.Concurrency = proto.Int32(1)
	setClusterLimit(t, c, l)
	w := c["b"].mustConnect(t, &aionv1.Register{Namespaces: []string{"acc"}, ActivityTypes: []string{"charge"}, Slots: 4})
	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "acc", Id: "first", ActivityType: "charge", ConcurrencyKey: "k"})
	first := w.nextTask()
	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "acc", Id: "second", ActivityType: "charge", ConcurrencyKey: "k"})
	ctx := context.Background()
	why, err := c["a"].activities.Why(ctx, &aionv1.WhyRequest{Namespace: "acc", Id: "second"})
	if err != nil || why.GetReason() != "concurrency_limit" || why.GetConcurrencyKey() != "k" || why.GetRunning() != 1 || why.GetLimit() != 1 {
		t.Fatalf("why second, asked of a: %v, %v; want concurrency_limit, key k, 1 of 1 running", why, err)
	}
	w.complete(first, nil)
	if next := w.nextTask(); next.GetActivityId() != "second" {
		t.Fatalf("after first ended the worker got %v", next)
	}
}

// A workflow type's concurrency limit set through one server holds across
// the cluster: a run of the key another server holds waits, why there
// names the limit, and the close of the admitted run on the first server
// admits it (the close's notice reaches the other server).
func TestClusterWorkflowLimitHoldsRunsAcrossServers(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b")
	setClusterLimit(t, c, &aionv1.FlowLimit{Namespace: "wfl", Kind: aionv1.FlowKind_FLOW_KIND_WORKFLOW, Type: "order",
		Concurrency: proto.Int32(1)})
	workers := map[string]*servertest.Worker{}
	clients := map[string]aionv1.WorkflowServiceClient{}
	for name, b := range c {
		s := &servertest.Server{Server: b.srv, Addr: b.srv.GRPCAddr()}
		workers[name] = s.Connect(t, &aionv1.Register{Namespaces: []string{"wfl"}, WorkflowTypes: []string{"order"}, Slots: 1,
			BuildId: "b1"})
		clients[name] = aionv1.NewWorkflowServiceClient(b.cc)
	}
	ctx := context.Background()
	start := func(on, id string) {
		t.Helper()
		if _, err := clients[on].Start(ctx, &aionv1.StartWorkflowRequest{Namespace: "wfl", WorkflowId: id, WorkflowType: "order",
			ConcurrencyKey: "k"}); err != nil {
			t.Fatalf("start %s through %s: %v", id, on, err)
		}
	}
	start("a", "first")
	first := workers["a"].WorkflowTask()
	if first.GetWorkflowId() != "first" {
		t.Fatalf("a's worker got %s, want first", first.GetWorkflowId())
	}
	start("b", "second")
	deadline := time.Now().Add(20 * time.Second)
	for {
		why, err := clients["b"].Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: "wfl", WorkflowId: "second"})
		if err != nil {
			t.Fatalf("why second: %v", err)
		}
		if why.GetReason() == "concurrency_limit" {
			if why.GetConcurrencyKey() != "k" || why.GetRunning() != 1 || why.GetLimit() != 1 {
				t.Fatalf("why second: %v; want key k, 1 of 1 admitted", why)
			}
			break
		}
		if why.GetReason() != "being_recorded" || time.Now().After(deadline) {
			t.Fatalf("why second: %v; want concurrency_limit", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ack := workers["a"].AnswerWorkflowTask(first, servertest.CompleteRun(nil)); ack.GetRefused() != "" {
		t.Fatalf("close of first refused: %s", ack.GetRefused())
	}
	second := workers["b"].WorkflowTask()
	if second.GetWorkflowId() != "second" {
		t.Fatalf("b's worker got %s, want second", second.GetWorkflowId())
	}
	if ack := workers["b"].AnswerWorkflowTask(second, servertest.CompleteRun(nil)); ack.GetRefused() != "" {
		t.Fatalf("close of second refused: %s", ack.GetRefused())
	}
}
