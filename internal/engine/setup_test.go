package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait for an event, so a lost event fails the test
// with a message instead of hanging it. It is not a timing assertion: on
// a healthy run each event arrives in milliseconds.
const patience = 30 * time.Second

// epoch is where every test's fake clock starts.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// anyone may act in every namespace.
var anyone = namespace.Anyone("test")

// bench is one engine run alone on a real SQLite file, with a fake clock
// and fake worker connections.
type bench struct {
	t    *testing.T
	clk  *clock.Fake
	path string
	st   *sqlite.Store
	reg  *registry.Registry
	eng  *Engine
	// tracer, set before start, is the engine's Config.Tracer.
	tracer Tracer
	// window, set before start, is the engine's Config.Window;
	// maxPendingBytes its Config.MaxPendingBytesPerNamespace.
	window          int
	maxPendingBytes int64
	// wrap, set before start, wraps the store the engine writes through.
	wrap func(*sqlite.Store) store.Store
}

// setup starts an engine on a new SQLite file; the test ends it.
func setup(t *testing.T) *bench {
	t.Helper()
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db")}
	b.start()
	t.Cleanup(b.stop)
	return b
}

// start opens the store and recovers an engine over it, with a new
// registry: no worker is connected.
func (b *bench) start() {
	b.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.path, sqlite.WithSynchronous("normal"))
	if err != nil {
		b.t.Fatalf("open store: %v", err)
	}
	b.st = st
	b.reg = registry.New(registry.Options{})
	var through store.Store = st
	if b.wrap != nil {
		through = b.wrap(st)
	}
	b.eng = New(Config{Store: through, Registry: b.reg, Minter: namespace.NewMinter(st, namespace.Open, nil),
		Defaults: DefaultDefaults(), Clock: b.clk, Tracer: b.tracer, Window: b.window,
		MaxPendingBytesPerNamespace: b.maxPendingBytes})
	if err := b.eng.Start(ctx); err != nil {
		b.t.Fatalf("recover: %v", err)
	}
}

// stop closes the engine and the store, once.
func (b *bench) stop() {
	if b.eng == nil {
		return
	}
	if err := b.eng.Stop(context.Background()); err != nil {
		b.t.Errorf("stop engine: %v", err)
	}
	if err := b.st.Close(); err != nil {
		b.t.Errorf("close store: %v", err)
	}
	b.eng, b.st = nil, nil
}

// restart stops the engine and starts a new one over the same file, as a
// server restart does; the fake clock keeps its time.
func (b *bench) restart() {
	b.t.Helper()
	b.stop()
	b.start()
}

// advanceTo moves the fake clock to at and fires the deadlines that passed
// before it returns, as the engine's timer loop would a moment later: so
// what a timer does, or does not do, is done by then.
func (b *bench) advanceTo(at time.Time) {
	b.clk.AdvanceTo(at)
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	b.eng.fireDueLocked(b.eng.now())
}

// advance moves the fake clock by d, as advanceTo.
func (b *bench) advance(d time.Duration) { b.advanceTo(b.clk.Now().Add(d)) }

// request is a request for activity id of type t in namespace ns with the
// given timeouts and retry policy (zero fields take the engine defaults).
func request(id string, to store.Timeouts, retry store.RetryPolicy) Request {
	return Request{Namespace: "ns", ID: id, ActivityType: "t", Payload: []byte(`"in"`), Timeouts: to, Retry: retry}
}

// schedule schedules r and returns the durable record.
func (b *bench) schedule(r Request) store.Activity {
	b.t.Helper()
	rec, _, err := b.eng.Schedule(context.Background(), anyone, r)
	if err != nil {
		b.t.Fatalf("schedule %s: %v", r.ID, err)
	}
	return rec
}

// wait waits for activity id to close and returns its view.
func (b *bench) wait(id string) View {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	v, err := b.eng.Wait(ctx, anyone, "ns", id)
	if err != nil {
		b.t.Fatalf("wait for %s: %v", id, err)
	}
	return v
}

// get returns the current view of activity id.
func (b *bench) get(id string) View {
	b.t.Helper()
	v, err := b.eng.Get(context.Background(), anyone, "ns", id)
	if err != nil {
		b.t.Fatalf("get %s: %v", id, err)
	}
	return v
}

// fakeConn is a worker's connection as the engine sees it: what the engine
// sends is kept, in order, for the test to read.
type fakeConn struct {
	tasks   chan Task
	cancels chan attemptRef
	drains  chan struct{}
}

func newFakeConn() *fakeConn {
	return &fakeConn{tasks: make(chan Task, 1024), cancels: make(chan attemptRef, 1024), drains: make(chan struct{}, 1)}
}

func (c *fakeConn) Transport() registry.Transport { return registry.TransportGRPC }

func (c *fakeConn) RequestDrain() {
	select {
	case c.drains <- struct{}{}:
	default:
	}
}

func (c *fakeConn) SendTask(t Task) error { c.tasks <- t; return nil }

func (c *fakeConn) SendCancel(ns, id string, attempt int, _ string) error {
	c.cancels <- attemptRef{key{ns, id}, attempt}
	return nil
}

// fakeWorker is one registered worker with a fake connection.
type fakeWorker struct {
	b    *bench
	reg  *registry.Registration
	w    *registry.Worker
	conn *fakeConn
}

// join registers a worker with slots slots for type t in namespace ns, as
// the server does when a worker connects.
func (b *bench) join(slots int) *fakeWorker {
	b.t.Helper()
	conn := newFakeConn()
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: slots, Delivery: conn})
	if err != nil {
		b.t.Fatalf("register worker: %v", err)
	}
	b.eng.WorkerJoined(r.Worker())
	return &fakeWorker{b: b, reg: r, w: r.Worker(), conn: conn}
}

// leave takes the worker out, as the server does when its stream ends.
func (fw *fakeWorker) leave(reason registry.Reason) {
	fw.reg.Leave(reason)
	fw.b.eng.WorkerLeft(fw.w)
}

// task waits for the next task the engine sends the worker.
func (fw *fakeWorker) task() Task {
	fw.b.t.Helper()
	return recv(fw.b.t, fw.conn.tasks, "task")
}

// cancel waits for the next cancel the engine sends the worker.
func (fw *fakeWorker) cancel() attemptRef {
	fw.b.t.Helper()
	return recv(fw.b.t, fw.conn.cancels, "cancel")
}

// report sends the worker's outcome of one attempt and waits for the
// engine's answer: "" once it is durable, else why it was refused.
func (fw *fakeWorker) report(id string, attempt int, out Outcome) (refused string) {
	fw.b.t.Helper()
	acks := make(chan string, 1)
	fw.b.eng.Complete(fw.w, "ns", id, attempt, out, func(refused string) { acks <- refused })
	return recv(fw.b.t, acks, "result ack")
}

// complete reports attempt of id completed with result and fails the test
// if the result is refused.
func (fw *fakeWorker) complete(id string, attempt int, result string) {
	fw.b.t.Helper()
	if refused := fw.report(id, attempt, Outcome{Completed: true, Result: []byte(result)}); refused != "" {
		fw.b.t.Fatalf("result of %s#%d refused: %s", id, attempt, refused)
	}
}

// fail reports attempt of id failed with f and fails the test if the
// result is refused.
func (fw *fakeWorker) fail(id string, attempt int, f store.Failure) {
	fw.b.t.Helper()
	if refused := fw.report(id, attempt, Outcome{Failure: &f}); refused != "" {
		fw.b.t.Fatalf("failure of %s#%d refused: %s", id, attempt, refused)
	}
}

// recv waits for one value on ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("no %s within %v", what, patience)
		panic("unreachable")
	}
}

// idle fails the test if ch holds a value: what the engine sends, it sends
// before the call that caused it returns, so an empty channel after that
// call means nothing was sent.
func idle[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %+v", what, v)
	default:
	}
}
