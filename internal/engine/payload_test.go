package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// Waiting work holds its large payloads in the store, not in memory, and
// small ones only up to a budget; every payload still reaches the worker
// whole.
func TestWaitingPayloadsAreHeldInMemoryOnlyWhenSmallAndFew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.eng
	e.heldBudget = 1 << 20 // so a few megabytes of payloads pass it
	want := map[string][]byte{"small": []byte("tiny"), "large": bytes.Repeat([]byte("L"), 2*inlinePayload)}
	for _, id := range []string{"small", "large"} {
		r := request(id, store.Timeouts{}, store.RetryPolicy{})
		r.Payload = want[id]
		b.schedule(r)
	}
	var reqs []Request
	for i := range 40 { // 2.4 MB of payloads under inlinePayload each, in one batch
		r := request(fmt.Sprint("mid-", i), store.Timeouts{}, store.RetryPolicy{})
		r.Payload = bytes.Repeat([]byte{byte(i)}, 60<<10)
		want[r.ID] = r.Payload
		reqs = append(reqs, r)
	}
	for i, r := range e.ScheduleBatch(context.Background(), anyone, reqs) {
		if r.Err != nil {
			t.Fatalf("schedule %s: %v", reqs[i].ID, r.Err)
		}
	}
	e.mu.Lock()
	held, small, large := e.heldPayload, e.open[key{"ns", "small"}], e.open[key{"ns", "large"}]
	if small.rec.Payload == nil || large.rec.Payload != nil || large.size != 2*inlinePayload {
		t.Errorf("small payload held: %v; large payload held: %v (size %d); want only the small one",
			small.rec.Payload != nil, large.rec.Payload != nil, large.size)
	}
	e.mu.Unlock()
	if held > e.heldBudget+inlinePayload {
		t.Fatalf("%d payload bytes held in memory, past the budget of %d", held, e.heldBudget)
	}

	fw := b.join(len(want))
	for range want {
		task := fw.task()
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
	b := setup(t)
	e := b.eng
	large := request("large", store.Timeouts{}, store.RetryPolicy{})
	large.Payload = bytes.Repeat([]byte("L"), 2*inlinePayload)
	b.schedule(large)
	conn := newFakeConn()
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1, Delivery: conn})
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
		t.Fatalf("the worker was asked to cancel %+v, an attempt it never had", c)
	default:
	}
	b.schedule(request("next", store.Timeouts{}, store.RetryPolicy{}))
	select {
	case task := <-conn.tasks:
		if task.ActivityID != "next" {
			t.Fatalf("the worker got %s, want next", task.ActivityID)
		}
	default:
		t.Fatal("the worker's only slot is still taken by an attempt it never received")
	}
}
