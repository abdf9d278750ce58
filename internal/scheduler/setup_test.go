package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/scheduler"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait for an event, so a lost event fails the test
// with a message instead of hanging it; on a healthy run each arrives in
// milliseconds.
const patience = 30 * time.Second

// epoch is where every test's fake clock starts: a whole hour.
var epoch = time.Date(2030, 1, 7, 9, 0, 0, 0, time.UTC)

var anyone = namespace.Anyone("test")

// counter is an Observer that counts.
type counter struct {
	mu      sync.Mutex
	fired   map[string]int // by origin
	skipped int
	missed  int
	failed  int
	lags    []time.Duration
}

func newCounter() *counter { return &counter{fired: map[string]int{}} }

func (c *counter) Fired(_, origin string, lag time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fired[origin]++
	c.lags = append(c.lags, lag)
}

func (c *counter) Skipped(_ string, n int) { c.mu.Lock(); c.skipped += n; c.mu.Unlock() }
func (c *counter) Missed(_ string, n int)  { c.mu.Lock(); c.missed += n; c.mu.Unlock() }
func (c *counter) Failed(string)           { c.mu.Lock(); c.failed++; c.mu.Unlock() }

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.fired {
		n += v
	}
	return n
}

// bench is an engine on a real SQLite file with a fake clock, and
// schedulers over the same store.
type bench struct {
	t    *testing.T
	clk  *clock.Fake
	path string
	st   *sqlite.Store
	eng  *engine.Engine
	scs  []*sched
}

// sched is one scheduler of the bench, with what its passes report.
type sched struct {
	b   *bench
	s   *scheduler.Scheduler
	obs *counter

	mu       sync.Mutex
	begun    int // passes begun
	finished int // passes finished
	passed   chan struct{}
}

func setup(t *testing.T) *bench {
	t.Helper()
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db")}
	b.startEngine()
	t.Cleanup(b.stop)
	return b
}

func (b *bench) startEngine() {
	b.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.path, sqlite.WithSynchronous("normal"))
	if err != nil {
		b.t.Fatalf("open store: %v", err)
	}
	b.st = st
	b.eng = engine.New(engine.Config{Store: st, Registry: registry.New(registry.Options{}),
		Minter: namespace.NewMinter(st, namespace.Open, nil), Defaults: engine.DefaultDefaults(), Clock: b.clk})
	if err := b.eng.Start(ctx); err != nil {
		b.t.Fatalf("start engine: %v", err)
	}
}

// scheduler starts a scheduler over the bench's store and engine (or eng,
// when given).
func (b *bench) scheduler(eng scheduler.Engine) *sched {
	b.t.Helper()
	if eng == nil {
		eng = b.eng
	}
	sc := &sched{b: b, obs: newCounter(), passed: make(chan struct{})}
	sc.s = scheduler.New(scheduler.Config{Store: b.st, Engine: eng, Clock: b.clk, Observer: sc.obs,
		Namespaces: namespace.NewMinter(b.st, namespace.Open, nil)})
	scheduler.SetOnPass(sc.s, func(begin bool) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if begin {
			sc.begun++
			return
		}
		sc.finished++
		close(sc.passed)
		sc.passed = make(chan struct{})
	})
	if err := sc.s.Start(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	b.scs = append(b.scs, sc)
	return sc
}

// stopScheduler stops one scheduler, as a server going down does.
func (sc *sched) stop() {
	sc.b.t.Helper()
	if err := sc.s.Stop(context.Background()); err != nil {
		sc.b.t.Errorf("stop scheduler: %v", err)
	}
	sc.b.scs = slices.DeleteFunc(sc.b.scs, func(x *sched) bool { return x == sc })
}

// stop stops the schedulers, the engine and the store.
func (b *bench) stop() {
	for len(b.scs) > 0 {
		b.scs[0].stop()
	}
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

// sync waits until every running scheduler has finished a pass begun
// after the call: one that saw the fake clock's time and every change made
// before it.
func (b *bench) sync() {
	b.t.Helper()
	for _, sc := range b.scs {
		sc.mu.Lock()
		mark := sc.begun
		sc.mu.Unlock()
		scheduler.Poke(sc.s)
		deadline := time.After(patience)
		for {
			sc.mu.Lock()
			done, ch := sc.finished > mark, sc.passed
			sc.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				b.t.Fatalf("no scheduler pass at %v within %v", b.clk.Now(), patience)
			}
		}
	}
}

// advanceTo moves the fake clock to at and waits for the schedulers'
// passes at that time.
func (b *bench) advanceTo(at time.Time) {
	b.t.Helper()
	b.clk.AdvanceTo(at)
	b.sync()
}

// stepTo moves the fake clock to at in steps of step, letting the
// schedulers pass at each.
func (b *bench) stepTo(at time.Time, step time.Duration) {
	b.t.Helper()
	for b.clk.Now().Before(at) {
		next := b.clk.Now().Add(step)
		if next.After(at) {
			next = at
		}
		b.advanceTo(next)
	}
}

// activities returns the ids of the activities of namespace ns whose id
// starts with prefix, oldest first.
func (b *bench) activities(ns, prefix string) []string {
	b.t.Helper()
	all, err := b.st.ListActivities(context.Background(), store.ActivityFilter{Namespace: ns, Limit: 100000, OmitPayloads: true})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, a := range all {
		if strings.HasPrefix(a.ID, prefix) {
			out = append(out, a.ID)
		}
	}
	sort.Strings(out)
	return out
}

// runs returns the runs of workflow ids starting with prefix, as
// "<workflow id>" once per run, sorted.
func (b *bench) runs(ns, prefix string) []string {
	b.t.Helper()
	all, err := b.st.ListRuns(context.Background(), store.RunFilter{Namespace: ns, Limit: 100000})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, r := range all {
		if strings.HasPrefix(r.WorkflowID, prefix) {
			out = append(out, r.WorkflowID)
		}
	}
	sort.Strings(out)
	return out
}

// ids are the action ids of schedule id's ticks at the given offsets from
// epoch.
func ids(id string, offsets ...time.Duration) []string {
	var out []string
	for _, d := range offsets {
		out = append(out, id+"@"+epoch.Add(d).Format(time.RFC3339Nano))
	}
	sort.Strings(out)
	return out
}

// minutes are offsets of whole minutes from..to.
func minutes(from, to int) []time.Duration {
	var out []time.Duration
	for m := from; m <= to; m++ {
		out = append(out, time.Duration(m)*time.Minute)
	}
	return out
}

func (b *bench) create(sc *sched, d scheduler.Definition) scheduler.View {
	b.t.Helper()
	v, _, err := sc.s.Create(context.Background(), anyone, d)
	if err != nil {
		b.t.Fatalf("create %s: %v", d.ID, err)
	}
	return v
}

func (b *bench) get(sc *sched, id string) store.Schedule {
	b.t.Helper()
	v, err := sc.s.Get(context.Background(), anyone, "ns", id, 0)
	if err != nil {
		b.t.Fatalf("get %s: %v", id, err)
	}
	return v.Schedule
}

// closeActivity closes an activity (as if its worker finished it).
func (b *bench) closeActivity(id string) {
	b.t.Helper()
	if _, err := b.eng.Cancel(context.Background(), anyone, "ns", id, "done"); err != nil {
		b.t.Fatalf("close %s: %v", id, err)
	}
}

// activityDef is a schedule of activity type "report" every minute.
func activityDef(id string, overlap store.Overlap) scheduler.Definition {
	return scheduler.Definition{Namespace: "ns", ID: id, Spec: store.ScheduleSpec{Every: time.Minute},
		Action: store.ScheduleAction{Kind: store.ActionActivity, Type: "report", Input: []byte(`{"q":1}`)},
		Policy: store.SchedulePolicy{Overlap: overlap}}
}

// crashing wraps an engine to fail starts with engine.ErrClosed, as a
// server going down does, before or after the start took effect.
type crashing struct {
	scheduler.Engine
	afterStart bool
}

var errCrash = fmt.Errorf("crash: %w", engine.ErrClosed)

func (c crashing) Schedule(ctx context.Context, caller namespace.Identity, r engine.Request) (store.Activity, bool, error) {
	if c.afterStart {
		if _, _, err := c.Engine.Schedule(ctx, caller, r); err != nil {
			return store.Activity{}, false, err
		}
	}
	return store.Activity{}, false, errCrash
}

func (c crashing) StartWorkflow(ctx context.Context, caller namespace.Identity, r engine.WorkflowRequest) (store.Run, bool, error) {
	if c.afterStart {
		if _, _, err := c.Engine.StartWorkflow(ctx, caller, r); err != nil {
			return store.Run{}, false, err
		}
	}
	return store.Run{}, false, errCrash
}

func isInvalid(err error) bool { return errors.Is(err, engine.ErrInvalid) }

// flaky wraps an engine to fail the first fails activity starts with err.
type flaky struct {
	scheduler.Engine
	mu    *sync.Mutex
	fails *int
	err   error
}

func (f flaky) Schedule(ctx context.Context, caller namespace.Identity, r engine.Request) (store.Activity, bool, error) {
	f.mu.Lock()
	if *f.fails > 0 {
		*f.fails--
		f.mu.Unlock()
		return store.Activity{}, false, f.err
	}
	f.mu.Unlock()
	return f.Engine.Schedule(ctx, caller, r)
}
