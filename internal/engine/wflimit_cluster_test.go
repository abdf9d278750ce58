package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
)

// listenForWork hands the work notices of the cluster to b's engine, as a
// server's notice loop does, until the test ends.
func listenForWork(t *testing.T, b *bench, st *postgres.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.ListenNotices(ctx, b.eng.cl.Self, func(n store.Notice) {
			if n.Kind != store.NoticeWork {
				return
			}
			var work []registry.Triple
			for _, t := range n.Triples {
				work = append(work, registry.NewTriple(t[0], t[1], t[2]))
			}
			b.eng.NewWork(work)
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// twoServers starts two engines of one cluster on a fresh database, with
// namespace "ns" and a concurrency limit on workflow type "order" applied
// on both.
func twoServers(t *testing.T, limit int) (a, b *bench) {
	t.Helper()
	dsn := pgtest.Fresh(t, 0)
	a, sa := setupCluster(t, dsn, "server-a")
	b, sb := setupCluster(t, dsn, "server-b")
	listenForWork(t, a, sa)
	listenForWork(t, b, sb)
	ctx := context.Background()
	if _, _, err := a.eng.minter.Create(ctx, "ns"); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	for _, x := range []*bench{a, b} {
		// Each server applies the limit as it would on the namespace notice.
		if _, err := x.eng.SetFlowLimit(ctx, anyone, store.FlowLimit{Namespace: "ns", Kind: store.FlowWorkflow, Type: "order",
			Concurrency: limit}); err != nil {
			t.Fatalf("set the workflow limit: %v", err)
		}
	}
	return a, b
}

// Acceptance: a workflow type with a concurrency limit of 2, two servers of
// one cluster with a workflow worker each, 20 runs of one key started
// through both: the workers never run more than 2 runs of the key between
// them (counted on the workers' side, from a run's first task to its
// close), the limit is used, and every run completes. The servers learn of
// each other's closes from the store's notices alone (the fake clocks
// never tick a poll).
func TestClusterWorkflowLimitNeverAdmitsMoreThanItsLimit(t *testing.T) {
	t.Parallel()
	a, b := twoServers(t, 2)
	const runs = 20
	var (
		running, peak atomic.Int64
		mu            sync.Mutex
		errs          []error
		ran           = map[string]int{}
		holder        = map[string]*bench{} // by workflow id: the server whose worker ran it
		answered      = make(chan struct{}, runs)
		wg            sync.WaitGroup
	)
	stop, gate := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for name, x := range map[string]*bench{"a": a, "b": b} {
		fw := x.joinWorkflows("v1", 10, "order")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var task *aionv1.WorkflowTask
				select {
				case task = <-fw.conn.wf:
				case <-stop:
					return
				}
				// Each task runs on its own, as a worker's slots do: the
				// worker would run every run it is given at once.
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := running.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					select {
					case <-gate:
					case <-stop:
						return
					}
					time.Sleep(5 * time.Millisecond) // the run's work: long enough for admissions to overlap it
					running.Add(-1)
					acks := make(chan string, 1)
					x.eng.CompleteWorkflowTask(fw.w, &aionv1.WorkflowTaskResult{Namespace: task.GetNamespace(), RunId: task.GetRunId(),
						Task: task.GetTask(), Commands: []*aionv1.WorkflowCommand{complete(`"done"`)}}, func(refused string) { acks <- refused })
					refused := <-acks
					mu.Lock()
					ran[name]++
					holder[task.GetWorkflowId()] = x
					answered <- struct{}{}
					if refused != "" {
						errs = append(errs, fmt.Errorf("task of %s refused on %s: %s", task.GetWorkflowId(), name, refused))
					}
					mu.Unlock()
				}()
			}
		}()
	}
	// The workers hold every task until all runs started: without the
	// limit all of them would be given a task at once.
	var ids []string
	for i := range runs {
		x, id := a, fmt.Sprintf("a-%02d", i)
		if i%2 == 1 {
			x, id = b, fmt.Sprintf("b-%02d", i)
		}
		x.startKeyedWF(id, "k")
		ids = append(ids, id)
	}
	close(gate)
	for range runs {
		recv(t, answered, "answered workflow task")
	}
	for _, id := range ids {
		mu.Lock()
		x := holder[id]
		mu.Unlock()
		// The server that ran it holds it until its close is durable.
		if rec := x.waitWF(id); rec.Status != store.RunCompleted {
			t.Fatalf("run %s ended %s, want completed", id, rec.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("ran on a: %d, on b: %d; peak %d at once", ran["a"], ran["b"], peak.Load())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("the workers ran up to %d runs of key k at once, want 2: never more than the limit, and the limit used", p)
	}
	if ran["a"]+ran["b"] != runs || ran["a"] == 0 || ran["b"] == 0 {
		t.Fatalf("ran %d on a and %d on b, want %d between both servers", ran["a"], ran["b"], runs)
	}
}

// A run one server holds waits while the key's slot is taken by a run of
// another server: why there names the limit and the cluster's count, no
// task is sent, and the other run's close admits it.
func TestClusterWorkflowLimitHoldsARunAndWhyExplainsIt(t *testing.T) {
	t.Parallel()
	a, b := twoServers(t, 1)
	fa := a.joinWorkflows("v1", 10, "order")
	fb := b.joinWorkflows("v1", 10, "order")
	a.startKeyedWF("first", "k")
	first := fa.nextRun("first")
	b.startKeyedWF("second", "k")
	ctx := context.Background()
	var ex Explanation
	deadline := time.Now().Add(patience)
	for {
		var err error
		ex, err = b.eng.WhyWorkflow(ctx, anyone, "ns", "second", "")
		if err != nil {
			t.Fatalf("why second: %v", err)
		}
		// The first answer waits for the store's count.
		if ex.Reason == WhyConcurrencyLimit && ex.Running == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("why second: %s running %d (%s), want concurrency_limit with 1 running", ex.Reason, ex.Running, ex.Message)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ex.ConcurrencyKey != "k" || ex.Limit != 1 || ex.Ahead != 0 {
		t.Fatalf("why second: key %q limit %d ahead %d (%s), want k, 1, 0", ex.ConcurrencyKey, ex.Limit, ex.Ahead, ex.Message)
	}
	idle(t, fb.conn.wf, "workflow task of a held run")
	fa.mustAnswer(first, false, complete(`"done"`))
	fb.nextRun("second")
	if rec := a.waitWF("first"); rec.Status != store.RunCompleted {
		t.Fatalf("first ended %s", rec.Status)
	}
}

// An admission is recorded on the run: a run admitted by the server that
// held it before (a restart, or a move to another server) keeps its slot
// when a server claims it, ahead of an older run the store never admitted,
// which waits until the admitted run closes.
func TestClusterRunAdmittedBeforeKeepsItsSlot(t *testing.T) {
	t.Parallel()
	_, b := twoServers(t, 1)
	ctx := context.Background()
	start := func(id string) store.Run {
		rec, _, err := b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: id,
			WorkflowType: "order", Flow: store.Flow{ConcurrencyKey: "k"}})
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		return rec
	}
	// No worker serves the type yet: both runs wait in the store, held by
	// no server; the older one was never admitted, the newer one was.
	start("older")
	newer := start("newer")
	if ok, n, err := b.eng.st.AdmitRun(ctx, "ns", newer.RunID, 1); err != nil || !ok || n != 1 {
		t.Fatalf("admit newer in the store: %v, %d, %v", ok, n, err)
	}
	fw := b.joinWorkflows("v1", 10, "order")
	task := fw.nextRun("newer")
	b.wantHeldRunOf("older", 1, 1)
	fw.mustAnswer(task, false, complete(`"done"`))
	fw.nextRun("older")
}

// wantHeldRunOf checks that why explains run id as held by key k's limit
// with admitted runs of limit.
func (b *bench) wantHeldRunOf(id string, admitted, limit int) {
	b.t.Helper()
	ex, err := b.eng.WhyWorkflow(context.Background(), anyone, "ns", id, "")
	if err != nil {
		b.t.Fatalf("why %s: %v", id, err)
	}
	if ex.Reason != WhyConcurrencyLimit || ex.ConcurrencyKey != "k" || ex.Running != admitted || ex.Limit != limit {
		b.t.Fatalf("why %s: %s key %q admitted %d limit %d (%s), want concurrency_limit k %d %d",
			id, ex.Reason, ex.ConcurrencyKey, ex.Running, ex.Limit, ex.Message, admitted, limit)
	}
}
