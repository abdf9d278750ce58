package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/cluster"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lease is the lease of the test servers: short, so that expiries show
// within a test, long enough for a loaded machine to renew in time.
const lease = time.Second

// bundle is one test's shared PostgreSQL store, and elsewhere, a store of
// its own on the same database that no server joins: what it publishes
// comes from outside every server (through st, a notice is the own notice
// of the one server that joined it, which ignores its activity work).
type bundle struct {
	t         *testing.T
	st        *postgres.Store
	elsewhere *postgres.Store
	ctx       context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dsn := pgtest.Fresh(t, 8)
	var stores [2]*postgres.Store
	for i := range stores {
		st, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	return &bundle{t: t, st: stores[0], elsewhere: stores[1], ctx: context.Background()}
}

// server is one cluster member as a server wires it: a real registry and
// event bus, and an engine that records what the membership tells it.
type server struct {
	self cluster.Self
	m    *cluster.Membership
	reg  *registry.Registry
	bus  *events.Bus
	eng  *engine
	lost chan error
}

// start joins a server named name and starts its membership; it stops and
// leaves when the test ends.
func (b *bundle) start(name string, intervene func(*aionv1.InterveneRequest) (*aionv1.InterveneResponse, error)) *server {
	b.t.Helper()
	self, err := cluster.Join(b.ctx, b.st, store.JoinRequest{Name: name, Addr: "127.0.0.1:1", Lease: lease}, nil)
	if err != nil {
		b.t.Fatalf("join %s: %v", name, err)
	}
	s := &server{self: self, bus: events.New(), eng: newEngine(), lost: make(chan error, 1)}
	s.reg = registry.New(registry.Options{Server: name, FirstID: cluster.FirstWorkerID(self.ID), Hooks: registry.Hooks{
		Connected:    func(w registry.WorkerInfo) { s.m.WorkerChanged(w) },
		Draining:     func(w registry.WorkerInfo) { s.m.WorkerChanged(w) },
		Disconnected: func(w registry.WorkerInfo, r registry.Reason) { s.m.WorkerLeft(w, r) },
	}})
	if intervene == nil {
		intervene = func(*aionv1.InterveneRequest) (*aionv1.InterveneResponse, error) {
			return nil, errors.New("no interventions here")
		}
	}
	s.m = cluster.New(cluster.Deps{Self: self, Store: b.st, Namespaces: b.st, Engine: s.eng, Registry: s.reg,
		Minter: namespace.NewMinter(b.st, namespace.Open, nil), Bus: s.bus, Intervene: intervene,
		Lost: func(err error) { s.lost <- err }})
	if err := s.m.Start(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	defer b.listening(s)
	b.t.Cleanup(func() {
		if err := s.m.Stop(context.Background()); err != nil {
			b.t.Errorf("stop %s: %v", name, err)
		}
		if err := cluster.Leave(context.Background(), b.st, self); err != nil {
			b.t.Errorf("leave %s: %v", name, err)
		}
		s.bus.Close()
	})
	return s
}

// connect registers a worker on s; its drain requests arrive on the
// returned channel.
func (s *server) connect(t *testing.T, ns string) (registry.WorkerID, chan struct{}) {
	t.Helper()
	d := &delivery{drains: make(chan struct{}, 4)}
	g, err := s.reg.Register(registry.Spec{Namespaces: []string{ns}, ActivityTypes: []string{"t"}, Slots: 2, Delivery: d})
	if err != nil {
		t.Fatal(err)
	}
	return g.ID(), d.drains
}

// delivery stands for a worker's stream.
type delivery struct{ drains chan struct{} }

func (d *delivery) Transport() registry.Transport { return registry.TransportGRPC }
func (d *delivery) RequestDrain()                 { d.drains <- struct{}{} }

// engine records what a membership tells the engine.
type engine struct {
	work       chan []registry.Triple
	cancels    chan [3]string
	namespaces chan store.Namespace
}

func newEngine() *engine {
	return &engine{work: make(chan []registry.Triple, 256), cancels: make(chan [3]string, 16), namespaces: make(chan store.Namespace, 256)}
}

func (e *engine) NewWork(ts []registry.Triple) {
	select {
	case e.work <- ts:
	default:
	}
}
func (e *engine) CancelOwned(ns, id, reason string) { e.cancels <- [3]string{ns, id, reason} }
func (e *engine) NoteNamespace(ns store.Namespace) {
	select {
	case e.namespaces <- ns:
	default:
	}
}

func (e *engine) NoteFlowLimits(string, []store.FlowLimit) {}

// listening waits until s hears notices: listening starts asynchronously
// with Start, so it publishes a work notice until s's engine is told of it.
func (b *bundle) listening(s *server) {
	b.t.Helper()
	probe := registry.NewTriple("probe", "", s.self.Name)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := b.elsewhere.PublishNotice(b.ctx, store.Notice{Kind: store.NoticeWork, Triples: [][3]string{{"probe", "", s.self.Name}}}); err != nil {
			b.t.Fatal(err)
		}
		wait := time.After(100 * time.Millisecond)
		for heard := false; !heard; {
			select {
			case ts := <-s.eng.work:
				if slices.Contains(ts, probe) {
					return
				}
			case <-wait:
				heard = true
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s does not hear notices", s.self.Name)
		}
	}
}

// await waits for a value on ch that matches ok.
func await[T any](t *testing.T, what string, ch <-chan T, ok func(T) bool) T {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case v := <-ch:
			if ok(v) {
				return v
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// watch follows a server's event bus.
func watch(t *testing.T, s *server) <-chan events.Event {
	t.Helper()
	_, sub := s.bus.Subscribe(1024)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan events.Event, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				return
			}
			out <- e
		}
	}()
	t.Cleanup(func() { cancel(); <-done; sub.Close() })
	return out
}

func TestJoinWaitsOutThePreviousLeaseOfItsName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A previous "a" that died without leaving: its lease is not renewed.
	dead, err := b.st.JoinCluster(b.ctx, store.JoinRequest{Name: "a", Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	self, err := cluster.Join(b.ctx, b.st, store.JoinRequest{Name: "a", Lease: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatalf("join after the previous lease ran out: %v", err)
	}
	if self.ID == dead.ID || self.Name != "a" || self.Lease != 300*time.Millisecond || self.JoinSent.IsZero() {
		t.Fatalf("joined as %+v after %+v", self, dead)
	}
	if err := b.st.RenewLease(b.ctx, dead.ID, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the previous member: %v, want it reaped (ErrLeaseLost)", err)
	}
}

func TestJoinRefusesANameALiveServerKeeps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start("busy", nil)
	_, err := cluster.Join(b.ctx, b.st, store.JoinRequest{Name: "busy", Lease: 300 * time.Millisecond}, nil)
	if !errors.Is(err, store.ErrNameTaken) || !strings.Contains(err.Error(), "--server-name") {
		t.Fatalf("join of a name a live server renews: %v, want ErrNameTaken and a hint to set --server-name", err)
	}
}

func TestLosingTheLeaseIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.start("s", nil)
	// Another party ends the membership, as a reap after a pause would.
	if err := b.st.LeaveCluster(b.ctx, s.self.ID); err != nil {
		t.Fatal(err)
	}
	err := await(t, "the lost membership to be reported", s.lost, func(error) bool { return true })
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("reported %v, want ErrLeaseLost", err)
	}
}

func TestAServerReapsAServerThatStoppedRenewing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.start("a", nil)
	seen := watch(t, a)
	// "dead" published a worker, then died: it never renews.
	dead, err := b.st.JoinCluster(b.ctx, store.JoinRequest{Name: "dead", Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	info := []byte(`{"ID":77,"Namespaces":["ns"],"Server":"dead"}`)
	if err := b.st.PutWorker(b.ctx, store.WorkerRecord{ID: 77, Server: dead.ID, Info: info}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.PublishNotice(b.ctx, store.Notice{Kind: store.NoticeTopology, Name: "x"}); err != nil {
		t.Fatal(err)
	}
	await(t, "the dead server's worker to show", seen, func(e events.Event) bool {
		return e.Kind == events.WorkerConnected && e.Worker.ID == 77
	})
	gone := await(t, "the dead server's worker to leave", seen, func(e events.Event) bool {
		return e.Kind == events.WorkerDisconnected && e.Worker.ID == 77
	})
	if gone.Reason != registry.ReasonServerLost {
		t.Fatalf("the dead server's worker left with %q, want server_lost", gone.Reason)
	}
	if err := b.st.RenewLease(b.ctx, dead.ID, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the dead server after the reap: %v, want ErrLeaseLost", err)
	}
}

func TestWorkersOfOneServerAreListedAndWatchedOnAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, c := b.start("a", nil), b.start("c", nil)
	seen := watch(t, a)
	id, _ := c.connect(t, "ns")
	if first := cluster.FirstWorkerID(c.self.ID); id != first {
		t.Fatalf("c's first worker is %d, want %d", id, first)
	}
	e := await(t, "c's worker on a's bus", seen, func(e events.Event) bool { return e.Kind == events.WorkerConnected })
	if e.Worker.ID != id || e.Worker.Server != "c" || !slices.Equal(e.Worker.Namespaces, []string{"ns"}) {
		t.Fatalf("a saw %+v, want worker %d of server c", e.Worker, id)
	}
	listed, err := a.m.RemoteWorkers(b.ctx)
	if err != nil || len(listed) != 1 || listed[0].ID != id {
		t.Fatalf("a lists %+v, %v; want c's worker", listed, err)
	}
	if own, err := c.m.RemoteWorkers(b.ctx); err != nil || len(own) != 0 {
		t.Fatalf("c lists its own worker as remote: %+v, %v", own, err)
	}
	found, ok, err := a.m.FindWorker(b.ctx, id)
	if err != nil || !ok || found.Server != c.self.ID {
		t.Fatalf("a finds %+v, %v, %v; want it on server %d", found, ok, err, c.self.ID)
	}
	if _, ok, err := a.m.FindWorker(b.ctx, id+1); err != nil || ok {
		t.Fatalf("a finds a worker nobody has: %v, %v", ok, err)
	}
	c.reg.Deregister(id, registry.ReasonTimeout)
	left := await(t, "c's worker to leave a's view", seen, func(e events.Event) bool { return e.Kind == events.WorkerDisconnected })
	if left.Worker.ID != id || left.Reason != registry.ReasonTimeout {
		t.Fatalf("a saw %+v leave with %q, want worker %d with timeout", left.Worker, left.Reason, id)
	}
}

func TestDrainReachesTheWorkerOnItsServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, c := b.start("a", nil), b.start("c", nil)
	id, drains := c.connect(t, "ns")
	info, err := a.m.DrainWorker(b.ctx, c.self.ID, id)
	if err != nil || info.ID != id || !info.Draining {
		t.Fatalf("drain through a: %+v, %v; want worker %d draining", info, err, id)
	}
	await(t, "the drain request on the worker's stream", drains, func(struct{}) bool { return true })
	if _, err := a.m.DrainWorker(b.ctx, c.self.ID, id+1); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("drain of a worker c does not have: %v", err)
	}
}

func TestCancelAndInterventionReachTheServerRunningTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.start("a", nil)
	c := b.start("c", func(r *aionv1.InterveneRequest) (*aionv1.InterveneResponse, error) {
		if r.GetId() == "missing" {
			return nil, errors.New("no such attempt here")
		}
		return &aionv1.InterveneResponse{Attempt: 3, InterventionId: "iv-" + r.GetId(),
			Outcome: aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED}, nil
	})
	a.m.ForwardCancel(b.ctx, c.self.ID, "ns", "job", "not needed")
	got := await(t, "the cancel on c's engine", c.eng.cancels, func([3]string) bool { return true })
	if got != [3]string{"ns", "job", "not needed"} {
		t.Fatalf("c's engine canceled %v", got)
	}
	out, err := a.m.Intervene(b.ctx, c.self.ID, &aionv1.InterveneRequest{Namespace: "ns", Id: "job"})
	if err != nil || out.GetInterventionId() != "iv-job" || out.GetAttempt() != 3 ||
		out.GetOutcome() != aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED {
		t.Fatalf("intervene through a: %v, %v", out, err)
	}
	if _, err := a.m.Intervene(b.ctx, c.self.ID, &aionv1.InterveneRequest{Namespace: "ns", Id: "missing"}); err == nil ||
		!strings.Contains(err.Error(), "no such attempt here") {
		t.Fatalf("an intervention c refused: %v, want c's error", err)
	}
}

func TestRunningElsewhereNamesOnlyAnotherServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, c := b.start("a", nil), b.start("c", nil)
	now := time.Now()
	if _, err := b.st.Apply(b.ctx, []store.Write{
		store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "on-c", TaskQueue: "q", ActivityType: "t",
			Fingerprint: "f", State: store.StateScheduled, ScheduledAt: now, ReadyAt: now}},
		store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: "on-a", TaskQueue: "q", ActivityType: "u",
			Fingerprint: "f", State: store.StateScheduled, ScheduledAt: now, ReadyAt: now}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, claim := range []struct {
		s   *server
		typ string
	}{{c, "t"}, {a, "u"}} {
		got, err := b.st.ClaimActivities(b.ctx, store.ClaimRequest{Owner: claim.s.self.ID, Now: now,
			Claims: []store.Claim{{Namespace: "ns", TaskQueue: "q", ActivityType: claim.typ, Workers: []uint64{1}}}})
		if err != nil || len(got[0].Activities) != 1 {
			t.Fatalf("claim: %v, %v", got, err)
		}
	}
	for id, want := range map[string]store.ServerID{"on-c": c.self.ID, "on-a": 0, "missing": 0} {
		if got, err := a.m.RunningElsewhere(b.ctx, "ns", id); err != nil || got != want {
			t.Errorf("%s runs elsewhere on %d, %v; want %d", id, got, err, want)
		}
	}
}

func TestNoticesWakeTheEngineAndShowNamespaces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.start("a", nil)
	seen := watch(t, a)
	if err := b.elsewhere.PublishNotice(b.ctx, store.Notice{Kind: store.NoticeWork, Triples: [][3]string{{"ns", "q", "t"}}}); err != nil {
		t.Fatal(err)
	}
	want := registry.NewTriple("ns", "q", "t")
	await(t, "the engine to be told of the work", a.eng.work, func(ts []registry.Triple) bool {
		return len(ts) == 1 && ts[0] == want
	})
	// Another server creates a namespace and announces it.
	if _, _, err := b.st.RegisterNamespace(b.ctx, "fresh", store.OriginExplicit); err != nil {
		t.Fatal(err)
	}
	c := b.start("c", nil)
	c.m.AnnounceNamespace("fresh")
	created := await(t, "the namespace on a's bus", seen, func(e events.Event) bool { return e.Kind == events.NamespaceCreated })
	if created.Namespace.Name != "fresh" {
		t.Fatalf("a's bus announced %+v", created.Namespace)
	}
	await(t, "the namespace noted by a's engine", a.eng.namespaces, func(ns store.Namespace) bool { return ns.Name == "fresh" })
	// A placement change shows as one.
	if _, err := b.st.SetPlacement(b.ctx, "fresh", store.Placement{Mode: store.Pinned, Nodes: []string{"gpu"}}); err != nil {
		t.Fatal(err)
	}
	c.m.AnnounceNamespace("fresh")
	changed := await(t, "the placement change on a's bus", seen, func(e events.Event) bool { return e.Kind == events.PlacementChanged })
	if changed.Namespace.Placement.String() != "pinned{gpu}" {
		t.Fatalf("a's bus shows placement %v", changed.Namespace.Placement)
	}
}

func TestStopEndsEveryGoroutineAndStartsOnlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	self, err := cluster.Join(b.ctx, b.st, store.JoinRequest{Name: "once", Lease: lease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := cluster.New(cluster.Deps{Self: self, Store: b.st, Namespaces: b.st, Engine: newEngine(),
		Registry: registry.New(registry.Options{}), Minter: namespace.NewMinter(b.st, namespace.Open, nil), Bus: events.New(),
		Lost: func(error) {}})
	if err := m.Stop(b.ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := m.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(b.ctx); err == nil {
		t.Fatal("a second start: no error")
	}
	for range 2 {
		if err := m.Stop(b.ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	if err := cluster.Leave(b.ctx, b.st, self); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Leave(b.ctx, b.st, self); err != nil {
		t.Fatalf("leave twice: %v, want no error", err)
	}
	// goleak (TestMain) checks that nothing Start began outlives Stop.
}
