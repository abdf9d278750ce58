package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// queueConn is a worker's outbound queue as the engine sees it: what the
// engine sends is kept, in order, for the test to read.
type queueConn struct {
	tasks   chan Task
	cancels chan string
}

func newQueueConn() *queueConn {
	return &queueConn{tasks: make(chan Task, 1024), cancels: make(chan string, 1024)}
}

func (c *queueConn) Transport() registry.Transport { return registry.TransportGRPC }
func (c *queueConn) RequestDrain()                 {}
func (c *queueConn) SendTask(t Task) error         { c.tasks <- t; return nil }
func (c *queueConn) SendCancel(ns, id string, attempt int, _ string) error {
	c.cancels <- fmt.Sprintf("%s/%s#%d", ns, id, attempt)
	return nil
}

// alone starts an engine on a real SQLite file, without a cluster.
func alone(t *testing.T) (*Engine, *registry.Registry) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "aion.db"), sqlite.WithSynchronous("normal"))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Options{})
	e := New(Config{Store: st, Registry: reg, Minter: namespace.NewMinter(st, namespace.Open, nil), Defaults: DefaultDefaults()})
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Stop(context.Background())
		st.Close()
	})
	return e, reg
}

func join(t *testing.T, e *Engine, reg *registry.Registry, slots int) (*registry.Worker, *queueConn) {
	t.Helper()
	conn := newQueueConn()
	r, err := reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: slots, Delivery: conn})
	if err != nil {
		t.Fatal(err)
	}
	e.WorkerJoined(r.Worker())
	return r.Worker(), conn
}

func schedule(t *testing.T, e *Engine, id string, payload []byte) {
	t.Helper()
	if _, _, err := e.Schedule(context.Background(), namespace.Anyone("test"),
		Request{Namespace: "ns", ID: id, ActivityType: "t", Payload: payload}); err != nil {
		t.Fatalf("schedule %s: %v", id, err)
	}
}

// Waiting work holds its large payloads in the store, not in memory, and
// small ones only up to a budget; every payload still reaches the worker
// whole.
func TestWaitingPayloadsAreHeldInMemoryOnlyWhenSmallAndFew(t *testing.T) {
	t.Parallel()
	e, reg := alone(t)
	want := map[string][]byte{"small": []byte("tiny"), "large": bytes.Repeat([]byte("L"), 1<<20)}
	schedule(t, e, "small", want["small"])
	schedule(t, e, "large", want["large"])
	for i := range 600 { // 36 MB of payloads under inlinePayload each
		id := fmt.Sprint("mid-", i)
		want[id] = bytes.Repeat([]byte{byte(i)}, 60<<10)
		schedule(t, e, id, want[id])
	}
	e.mu.Lock()
	held, small, large := e.heldPayload, e.open[key{"ns", "small"}], e.open[key{"ns", "large"}]
	if small.rec.Payload == nil || large.rec.Payload != nil || large.size != 1<<20 {
		t.Errorf("small payload held: %v; large payload held: %v (size %d); want only the small one",
			small.rec.Payload != nil, large.rec.Payload != nil, large.size)
	}
	e.mu.Unlock()
	if held > heldPayloadBudget+inlinePayload {
		t.Fatalf("%d payload bytes held in memory, past the budget of %d", held, heldPayloadBudget)
	}

	_, conn := join(t, e, reg, len(want))
	for range want {
		task := <-conn.tasks
		if !bytes.Equal(task.Payload, want[task.ActivityID]) {
			t.Fatalf("task %s: %d payload bytes, want the %d scheduled", task.ActivityID, len(task.Payload), len(want[task.ActivityID]))
		}
	}
}

// An attempt that ends (here, canceled) while its payload is being read
// back is never sent, and its worker's slot is free at once: the worker
// never knew of it, so it would never report it.
func TestAttemptEndedBeforeItsPayloadArrivedFreesItsSlot(t *testing.T) {
	t.Parallel()
	e, reg := alone(t)
	schedule(t, e, "large", bytes.Repeat([]byte("L"), 1<<20))
	conn := newQueueConn()
	r, err := reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1, Delivery: conn})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.dispatchWorkerLocked(r.Worker()) // starts the attempt; its payload is read without the lock
	a := e.open[key{"ns", "large"}]
	if a.worker == nil || !a.unsent {
		e.mu.Unlock()
		t.Fatalf("the attempt did not start waiting for its payload (worker %v, unsent %v)", a.worker, a.unsent)
	}
	e.closeLocked(a, store.StateCanceled, &store.Failure{Type: "canceled", Message: "test"}, e.now())
	e.mu.Unlock()
	e.bg.Wait() // the read is done, and found the attempt ended

	select {
	case task := <-conn.tasks:
		t.Fatalf("the ended attempt was sent: %s#%d", task.ActivityID, task.Attempt)
	case c := <-conn.cancels:
		t.Fatalf("the worker was asked to cancel %s, an attempt it never had", c)
	default:
	}
	schedule(t, e, "next", []byte("small"))
	select {
	case task := <-conn.tasks:
		if task.ActivityID != "next" {
			t.Fatalf("the worker got %s, want next", task.ActivityID)
		}
	default:
		t.Fatal("the worker's only slot is still taken by an attempt it never received")
	}
}
