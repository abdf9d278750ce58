package events_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func connected(id uint64) events.Event {
	return events.Event{Kind: events.WorkerConnected, Worker: &registry.WorkerInfo{ID: registry.WorkerID(id), Namespaces: []string{"ns"}}}
}

func disconnected(id uint64) events.Event {
	return events.Event{Kind: events.WorkerDisconnected, Worker: &registry.WorkerInfo{ID: registry.WorkerID(id)}, Reason: registry.ReasonTimeout}
}

func next(t *testing.T, s *events.Subscription) events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return e
}

func TestSnapshotThenEveryLaterEventInOrder(t *testing.T) {
	t.Parallel()
	b := events.New()
	b.Seed([]store.Namespace{{Name: "old", Origin: store.OriginExplicit}})
	b.Publish(connected(1))
	b.Publish(connected(2))
	b.Publish(disconnected(1))

	snap, sub := b.Subscribe(16)
	defer sub.Close()
	if snap.Seq != 3 || len(snap.Workers) != 1 || snap.Workers[0].ID != 2 || len(snap.Namespaces) != 1 {
		t.Fatalf("snapshot = %+v, want seq 3 with worker 2 and namespace old", snap)
	}
	b.Publish(events.Event{Kind: events.WorkerDraining, Worker: &registry.WorkerInfo{ID: 2}})
	b.Publish(events.Event{Kind: events.NamespaceCreated, Namespace: &store.Namespace{Name: "new", Origin: store.OriginWorker}})
	b.Publish(disconnected(2))
	for i, want := range []events.Kind{events.WorkerDraining, events.NamespaceCreated, events.WorkerDisconnected} {
		e := next(t, sub)
		if e.Seq != uint64(4+i) || e.Kind != want {
			t.Fatalf("event %d = seq %d %s, want seq %d %s", i, e.Seq, e.Kind, 4+i, want)
		}
	}
	if snap := b.Snapshot(); len(snap.Workers) != 0 || len(snap.Namespaces) != 2 {
		t.Fatalf("topology after the deltas = %+v", snap)
	}
}

// Concurrent publishers and subscribers: each subscriber sees a gap-free
// sequence starting right after its snapshot, and its snapshot plus the
// deltas it saw always equals the final topology.
func TestSubscribersNeverMissOrRepeat(t *testing.T) {
	t.Parallel()
	b := events.New()
	const publishers, each = 4, 200
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := range publishers {
		wg.Go(func() {
			<-start
			for i := range each {
				id := uint64(p*each + i)
				b.Publish(connected(id))
				if i%2 == 0 {
					b.Publish(disconnected(id))
				}
			}
		})
	}
	type view struct {
		workers map[registry.WorkerID]bool
		err     error
	}
	views := make(chan view, 4)
	for range 4 {
		wg.Go(func() {
			<-start
			snap, sub := b.Subscribe(publishers * each * 2)
			defer sub.Close()
			seen := map[registry.WorkerID]bool{}
			for _, w := range snap.Workers {
				seen[w.ID] = true
			}
			seq := snap.Seq
			total := uint64(publishers * each * 3 / 2)
			for seq < total {
				e, err := sub.Next(context.Background())
				if err != nil {
					views <- view{err: err}
					return
				}
				if e.Seq != seq+1 {
					views <- view{err: errors.New("sequence gap or repeat")}
					return
				}
				seq = e.Seq
				switch e.Kind {
				case events.WorkerConnected:
					seen[e.Worker.ID] = true
				case events.WorkerDisconnected:
					delete(seen, e.Worker.ID)
				}
			}
			views <- view{workers: seen}
		})
	}
	close(start)
	wg.Wait()
	close(views)
	final := b.Snapshot()
	for v := range views {
		if v.err != nil {
			t.Fatal(v.err)
		}
		if len(v.workers) != len(final.Workers) {
			t.Fatalf("a subscriber rebuilt %d workers, the bus holds %d", len(v.workers), len(final.Workers))
		}
	}
}

func TestSlowSubscriberIsDroppedWithoutBlocking(t *testing.T) {
	t.Parallel()
	b := events.New()
	_, slow := b.Subscribe(2)
	_, fast := b.Subscribe(100)
	defer fast.Close()
	done := make(chan struct{})
	go func() {
		for i := range 10 {
			b.Publish(connected(uint64(i)))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publishing blocked on a slow subscriber")
	}
	next(t, slow)
	next(t, slow)
	if _, err := slow.Next(context.Background()); !errors.Is(err, events.ErrSlow) {
		t.Fatalf("slow subscriber's third read: %v, want ErrSlow", err)
	}
	if b.Subscribers() != 1 {
		t.Fatalf("%d subscribers, want only the fast one", b.Subscribers())
	}
	for i := range 10 {
		if e := next(t, fast); e.Seq != uint64(i+1) {
			t.Fatalf("fast subscriber got seq %d, want %d", e.Seq, i+1)
		}
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	t.Parallel()
	b := events.New()
	_, sub := b.Subscribe(4)
	b.Close()
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Fatalf("after close: %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, other := events.New().Subscribe(1)
	if _, err := other.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// A subscriber that never reads costs the bus nothing per event: it holds
// no buffer of its own, publishers never wait for it, and once it falls
// more than its bound behind it is dropped and counted, its reads giving
// the events within its bound and then ErrSlow.
//
// It does not run in parallel: it reads the whole process's heap, and
// another test allocating meanwhile would be counted as its growth.
func TestSubscriberThatNeverReadsIsDroppedAndHoldsNoBuffer(t *testing.T) {
	b := events.New()
	const subscribers, bound = 500, 4000
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	subs := make([]*events.Subscription, subscribers)
	for i := range subs {
		_, subs[i] = b.Subscribe(bound)
	}
	for i := range bound {
		b.Publish(connected(uint64(i)))
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// A buffer of bound events per subscriber would be over 200 MB here.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 32<<20 {
		t.Fatalf("%d idle subscribers and %d events grew the heap by %d MB", subscribers, bound, grown>>20)
	}
	if b.Dropped() != 0 || b.Subscribers() != subscribers {
		t.Fatalf("at their bound: %d dropped, %d subscribed; want none dropped", b.Dropped(), b.Subscribers())
	}
	b.Publish(connected(bound))
	if b.Dropped() != subscribers || b.Subscribers() != 0 {
		t.Fatalf("past their bound: %d dropped, %d subscribed; want all %d dropped", b.Dropped(), b.Subscribers(), subscribers)
	}
	for i := range bound {
		if e := next(t, subs[0]); e.Seq != uint64(i+1) {
			t.Fatalf("dropped subscriber read seq %d, want %d", e.Seq, i+1)
		}
	}
	if _, err := subs[0].Next(context.Background()); !errors.Is(err, events.ErrSlow) {
		t.Fatalf("after its bound: %v, want ErrSlow", err)
	}
	runtime.KeepAlive(subs)
}

// The ring is bounded in bytes as well as in events: large pool samples
// push old events out, and a subscriber that had not read them is told it
// is too slow rather than given a gap.
func TestRingIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	b := events.New()
	_, sub := b.Subscribe(events.RingEvents)
	defer sub.Close()
	pools := make([]events.Pool, 1000)
	for i := range pools {
		pools[i] = events.Pool{Namespace: fmt.Sprint("namespace-", i), TaskQueue: "default"}
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 2000 {
		// Each sample its own slice, as publishPoolStats does.
		b.Publish(events.Event{Kind: events.PoolStatsUpdated, Pools: slices.Clone(pools)})
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2*events.RingBytes {
		t.Fatalf("2000 pool samples of 1000 pools held %d MB, want about %d MB at most", grown>>20, events.RingBytes>>20)
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrSlow) {
		t.Fatalf("reading an event pushed out of the ring: %v, want ErrSlow", err)
	}
	if b.Dropped() != 1 {
		t.Fatalf("%d subscribers dropped, want 1", b.Dropped())
	}
}

// What subscribers derive from an event is computed once, however many
// subscribers ask for it.
func TestMemoComputesOncePerEvent(t *testing.T) {
	t.Parallel()
	b := events.New()
	subs := make([]*events.Subscription, 50)
	for i := range subs {
		_, subs[i] = b.Subscribe(4)
	}
	b.Publish(connected(1))
	type key struct{}
	var calls atomic.Int32
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() {
			defer s.Close()
			e, err := s.Next(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			got := e.Memo(key{}, func(e events.Event) any { calls.Add(1); return fmt.Sprint("frame ", e.Seq) })
			if got != "frame 1" {
				t.Errorf("memo = %v", got)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("the encoding ran %d times for %d subscribers, want once", n, len(subs))
	}
}

// Run starts and closes are numbered and delivered like topology events,
// in order, and leave the topology (and so every snapshot) as it was.
func TestRunEventsAreDeliveredInOrderAndLeaveTheTopologyAlone(t *testing.T) {
	t.Parallel()
	b := events.New()
	b.Publish(connected(1))
	before := b.Snapshot()
	_, sub := b.Subscribe(16)
	defer sub.Close()
	run := func(kind events.Kind, id string, st store.RunStatus) events.Event {
		return events.Event{Kind: kind, Run: &events.Run{Namespace: "ns", WorkflowID: id, RunID: "r-" + id, WorkflowType: "order", Status: st}}
	}
	b.Publish(run(events.RunStarted, "w1", store.RunRunning))
	b.Publish(run(events.RunStarted, "w2", store.RunRunning))
	b.Publish(run(events.RunClosed, "w1", store.RunCompleted))
	for i, want := range []struct {
		kind events.Kind
		id   string
		st   store.RunStatus
	}{{events.RunStarted, "w1", store.RunRunning}, {events.RunStarted, "w2", store.RunRunning}, {events.RunClosed, "w1", store.RunCompleted}} {
		e := next(t, sub)
		if e.Seq != uint64(2+i) || e.Kind != want.kind || e.Run == nil || e.Run.WorkflowID != want.id || e.Run.Status != want.st {
			t.Fatalf("event %d = seq %d %s %+v, want seq %d %s of %s %s", i, e.Seq, e.Kind, e.Run, 2+i, want.kind, want.id, want.st)
		}
	}
	after := b.Snapshot()
	if after.Seq != 4 || len(after.Workers) != 1 || after.Workers[0].ID != before.Workers[0].ID ||
		len(after.Namespaces) != len(before.Namespaces) || len(after.Pools) != 0 {
		t.Fatalf("snapshot after the run events = %+v, want the topology of %+v at seq 4", after, before)
	}
}
