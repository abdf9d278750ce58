package registry_test

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The property test must run at least 1,000 random sequences; a
	// -rapid.checks given on the command line still wins.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = flag.Set("rapid.checks", "1000")
	}
	goleak.VerifyTestMain(m)
}

// delivery is the test transport: it records drain requests.
type delivery struct {
	mu     sync.Mutex
	drains int
}

func (d *delivery) Transport() registry.Transport { return registry.TransportGRPC }
func (d *delivery) RequestDrain() {
	d.mu.Lock()
	d.drains++
	d.mu.Unlock()
}
func (d *delivery) drainRequests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drains
}

type bundle struct {
	reg   *registry.Registry
	store *sqlite.Store // nil unless the registry mints
}

// setup returns a registry with no admission step: authorization only.
func setup(t *testing.T) bundle {
	t.Helper()
	return bundle{reg: registry.New(registry.Options{})}
}

// setupMinting returns a registry that mints through a real SQLite file.
func setupMinting(t *testing.T, policy namespace.AutoCreate) bundle {
	t.Helper()
	s := openStore(t)
	return bundle{reg: registry.New(registry.Options{Admission: namespace.NewMinter(s, policy, nil)}), store: s}
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// spec builds a one-slot registration.
func spec(namespaces []string, taskQueue, node string, types ...string) registry.Spec {
	return registry.Spec{
		Namespaces:    namespaces,
		TaskQueue:     taskQueue,
		Node:          node,
		ActivityTypes: types,
		Slots:         1,
		Delivery:      &delivery{},
	}
}

func caller(namespaces ...string) namespace.Identity {
	return namespace.NewIdentity("worker", namespaces...)
}

// accept registers through the full path and closes the token at test end.
func (b bundle) accept(t *testing.T, id namespace.Identity, s registry.Spec) *registry.Registration {
	t.Helper()
	g, err := b.reg.Accept(context.Background(), id, s)
	if err != nil {
		t.Fatalf("accept %v: %v", s.Namespaces, err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func ids(ws []registry.WorkerInfo) []registry.WorkerID {
	out := make([]registry.WorkerID, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.ID)
	}
	slices.Sort(out)
	return out
}

func candidates(b bundle, ns, tq, typ, node string) []registry.WorkerInfo {
	return b.reg.Candidates(registry.NewTriple(ns, tq, typ), node)
}

func TestSetCapabilitiesUpdatesLiveWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := b.accept(t, caller("default"), spec([]string{"default"}, "", "", "scout"))

	want := registry.Capabilities(0).With(registry.CapInjectMessage)
	if !b.reg.SetCapabilities(g.ID(), want) {
		t.Fatal("SetCapabilities on a live worker reported false")
	}
	info, ok := b.reg.Lookup(g.ID())
	if !ok {
		t.Fatal("worker vanished")
	}
	if info.Capabilities != want || g.Worker().Capabilities() != want {
		t.Fatalf("capabilities = %v / %v, want %v", info.Capabilities, g.Worker().Capabilities(), want)
	}
	if b.reg.SetCapabilities(registry.WorkerID(1<<62), want) {
		t.Fatal("SetCapabilities on an unknown worker reported true")
	}
}

func TestRegisterAndDeregisterAreNamespaceIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.accept(t, caller("tenant-a"), spec([]string{"tenant-a"}, "", "", "charge", "charge"))
	bw := b.accept(t, caller("tenant-b"), spec([]string{"tenant-b"}, "", "", "charge"))

	if got := candidates(b, "tenant-a", "", "charge", ""); len(got) != 1 {
		t.Fatalf("tenant-a charge: %d workers, want 1", len(got))
	}
	info, _ := b.reg.Lookup(a.ID())
	if !slices.Equal(info.ActivityTypes, []string{"charge"}) {
		t.Fatalf("duplicate activity types did not collapse: %v", info.ActivityTypes)
	}
	if got := candidates(b, "tenant-b", "", "charge", ""); len(got) != 1 {
		t.Fatalf("tenant-b charge: %d workers, want 1", len(got))
	}
	if got := candidates(b, "tenant-a", "", "missing", ""); len(got) != 0 {
		t.Fatalf("unadvertised type found %d workers", len(got))
	}
	if a.ID() == bw.ID() {
		t.Fatalf("two workers share id %v", a.ID())
	}

	a.Close()
	if got := candidates(b, "tenant-a", "", "charge", ""); len(got) != 0 {
		t.Fatalf("tenant-a still has %d workers after deregister", len(got))
	}
	if got := candidates(b, "tenant-b", "", "charge", ""); len(got) != 1 {
		t.Fatalf("deregistering tenant-a removed tenant-b's worker")
	}
	bw.Close()
	if got := candidates(b, "tenant-b", "", "charge", ""); len(got) != 0 {
		t.Fatalf("tenant-b still has %d workers after deregister", len(got))
	}
}

func TestDeniedNamespaceIsNotRegistered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.reg.Accept(context.Background(), caller("tenant-a"), spec([]string{"tenant-b"}, "", "", "charge"))
	if !errors.Is(err, namespace.ErrPermissionDenied) {
		t.Fatalf("err = %v, want ErrPermissionDenied", err)
	}
	if got := candidates(b, "tenant-b", "", "charge", ""); len(got) != 0 {
		t.Fatalf("denied registration inserted %d workers", len(got))
	}
	if c := b.reg.Census(); c != (registry.Census{}) {
		t.Fatalf("denied registration left %+v", c)
	}
}

func TestTaskQueuesPartitionPoolsWithinNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	norn := b.accept(t, caller("local"), spec([]string{"local"}, "norn", "", "dev"))
	claudeA := b.accept(t, caller("local"), spec([]string{"local"}, "claude", "", "dev"))
	claudeB := b.accept(t, caller("local"), spec([]string{"local"}, "claude", "", "dev"))

	nornPool := candidates(b, "local", "norn", "dev", "")
	if len(nornPool) != 1 || nornPool[0].ID != norn.ID() {
		t.Fatalf("norn pool = %v, want only %v", ids(nornPool), norn.ID())
	}
	claudePool := ids(candidates(b, "local", "claude", "dev", ""))
	if !slices.Equal(claudePool, []registry.WorkerID{claudeA.ID(), claudeB.ID()}) {
		t.Fatalf("claude pool = %v, want its two workers", claudePool)
	}

	first := candidates(b, "local", "claude", "dev", "")[0].ID
	second := candidates(b, "local", "claude", "dev", "")[0].ID
	if first == second {
		t.Fatalf("claude pool did not rotate: %v twice", first)
	}
	if got := candidates(b, "local", "norn", "dev", "")[0].ID; got != norn.ID() {
		t.Fatalf("norn pool rotation disturbed by claude traffic: %v", got)
	}

	// Selection keeps the same boundary and rotates per triple.
	seen := map[registry.WorkerID]bool{}
	for range 2 {
		w, ok := b.reg.Select(registry.NewTriple("local", "claude", "dev"), registry.AnyNode())
		if !ok {
			t.Fatal("select in claude pool found nobody")
		}
		seen[w.ID()] = true
		b.reg.Release(w)
	}
	if len(seen) != 2 || seen[norn.ID()] {
		t.Fatalf("two claude selections reached %v", seen)
	}
}

func TestSameTaskQueueInDifferentNamespacesIsIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	local := b.accept(t, caller("local"), spec([]string{"local"}, "gpu", "", "render"))
	remote := b.accept(t, caller("remote"), spec([]string{"remote"}, "gpu", "", "render"))

	l := candidates(b, "local", "gpu", "render", "")
	r := candidates(b, "remote", "gpu", "render", "")
	if len(l) != 1 || len(r) != 1 || l[0].ID == r[0].ID {
		t.Fatalf("local %v and remote %v pools are not separate", ids(l), ids(r))
	}
	local.Close()
	if got := candidates(b, "local", "gpu", "render", ""); len(got) != 0 {
		t.Fatalf("local pool kept %v", ids(got))
	}
	if got := candidates(b, "remote", "gpu", "render", ""); len(got) != 1 || got[0].ID != remote.ID() {
		t.Fatalf("remote pool = %v after local left", ids(got))
	}
}

func TestWorkerServingNamespaceSetIsReachableInEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	both := b.accept(t, caller("a", "b"), spec([]string{"a", "b"}, "default", "", "dev"))
	onlyA := b.accept(t, caller("a"), spec([]string{"a"}, "default", "", "dev"))

	if got := ids(candidates(b, "a", "default", "dev", "")); !slices.Equal(got, []registry.WorkerID{both.ID(), onlyA.ID()}) {
		t.Fatalf("namespace a reaches %v, want both workers", got)
	}
	if got := ids(candidates(b, "b", "default", "dev", "")); !slices.Equal(got, []registry.WorkerID{both.ID()}) {
		t.Fatalf("namespace b reaches %v, want only the {a,b} worker", got)
	}

	both.Close()
	if got := candidates(b, "b", "default", "dev", ""); len(got) != 0 {
		t.Fatalf("namespace b still reaches %v", ids(got))
	}
	if got := ids(candidates(b, "a", "default", "dev", "")); !slices.Equal(got, []registry.WorkerID{onlyA.ID()}) {
		t.Fatalf("namespace a reaches %v after the {a,b} worker left", got)
	}
}

func TestNodePinFiltersWithinPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n1 := b.accept(t, caller("ns"), spec([]string{"ns"}, "tq", "n1", "dev"))
	n2 := b.accept(t, caller("ns"), spec([]string{"ns"}, "tq", "n2", "dev"))
	key := registry.NewTriple("ns", "tq", "dev")

	if got := candidates(b, "ns", "tq", "dev", ""); len(got) != 2 {
		t.Fatalf("unpinned pool has %d workers, want 2", len(got))
	}
	first := candidates(b, "ns", "tq", "dev", "")[0].ID
	second := candidates(b, "ns", "tq", "dev", "")[0].ID
	if first == second {
		t.Fatal("unpinned candidates did not rotate across nodes")
	}
	for node, want := range map[string]registry.WorkerID{"n1": n1.ID(), "n2": n2.ID()} {
		got := candidates(b, "ns", "tq", "dev", node)
		if len(got) != 1 || got[0].ID != want {
			t.Fatalf("pinned to %s: %v, want [%v]", node, ids(got), want)
		}
		w, ok := b.reg.Select(key, registry.OnNodes(node))
		if !ok || w.ID() != want {
			t.Fatalf("select pinned to %s chose %v", node, w)
		}
		b.reg.Release(w)
	}
	if got := candidates(b, "ns", "tq", "dev", "absent"); len(got) != 0 {
		t.Fatalf("pin to a node with no worker found %v", ids(got))
	}
	if w, ok := b.reg.Select(key, registry.OnNodes("absent")); ok {
		t.Fatalf("select pinned to an absent node chose %v", w.ID())
	}
}

func TestSharedNodeRoundRobinsAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wa := b.accept(t, caller("ns"), spec([]string{"ns"}, "tq", "shared", "dev"))
	wb := b.accept(t, caller("ns"), spec([]string{"ns"}, "tq", "shared", "dev"))

	if got := ids(candidates(b, "ns", "tq", "dev", "shared")); !slices.Equal(got, []registry.WorkerID{wa.ID(), wb.ID()}) {
		t.Fatalf("pinned to shared: %v, want both", got)
	}
	first := candidates(b, "ns", "tq", "dev", "shared")[0].ID
	second := candidates(b, "ns", "tq", "dev", "shared")[0].ID
	if first == second {
		t.Fatal("pin to a shared node did not rotate")
	}
	key := registry.NewTriple("ns", "tq", "dev")
	x, _ := b.reg.Select(key, registry.OnNodes("shared"))
	y, _ := b.reg.Select(key, registry.OnNodes("shared"))
	if x == nil || y == nil || x.ID() == y.ID() {
		t.Fatalf("two pinned selections on a shared node: %v, %v", x, y)
	}
}

func TestCursorIsDeletedWithLastWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := b.accept(t, caller("ns"), spec([]string{"ns"}, "tq", "n1", "dev"))
	key := registry.NewTriple("ns", "tq", "dev")
	w, ok := b.reg.Select(key, registry.AnyNode())
	if !ok {
		t.Fatal("select found nobody")
	}
	b.reg.Release(w)
	_ = b.reg.Candidates(key, "")
	if c := b.reg.Census(); c.Triples != 1 || c.Rings != 2 {
		t.Fatalf("with one worker on a node: %+v, want 1 triple and 2 rings", c)
	}
	g.Close()
	if c := b.reg.Census(); c != (registry.Census{}) {
		t.Fatalf("after the last worker left: %+v, want nothing", c)
	}
}

func TestOpenMintsDurableRecordOnce(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Open)
	ctx := context.Background()
	b.accept(t, caller("orders"), spec([]string{"orders"}, "", "", "charge"))
	rec, err := b.store.GetNamespace(ctx, "orders")
	if err != nil {
		t.Fatalf("minted record: %v", err)
	}
	if rec.Name != "orders" || rec.Origin != store.OriginWorker {
		t.Fatalf("minted record = %+v, want orders/worker", rec)
	}
	b.accept(t, caller("orders"), spec([]string{"orders"}, "", "", "refund"))
	all, err := b.store.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("second registration left %d records, want 1", len(all))
	}
	if got := candidates(b, "orders", "", "charge", ""); len(got) != 1 {
		t.Fatalf("first worker disturbed by the second: %v", ids(got))
	}
}

func TestOpenMintsEveryNamespaceOfWorker(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Open)
	b.accept(t, caller("alpha", "beta"), spec([]string{"alpha", "beta"}, "", "", "charge"))
	for _, ns := range []string{"alpha", "beta"} {
		if _, err := b.store.GetNamespace(context.Background(), ns); err != nil {
			t.Fatalf("namespace %s not minted: %v", ns, err)
		}
	}
}

// setupPinned returns an open minting registry whose namespace ns is pinned{nodes}.
func setupPinned(t *testing.T, ns string, nodes ...string) bundle {
	t.Helper()
	b := setupMinting(t, namespace.Open)
	ctx := context.Background()
	if _, _, err := b.store.RegisterNamespace(ctx, ns, store.OriginExplicit); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SetPlacement(ctx, ns, store.Placement{Mode: store.Pinned, Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPinnedAdmitsWorkerOnListedNode(t *testing.T) {
	t.Parallel()
	b := setupPinned(t, "iso", "n1")
	b.accept(t, caller("iso"), spec([]string{"iso"}, "", "n1", "charge"))
	if got := candidates(b, "iso", "", "charge", "n1"); len(got) != 1 {
		t.Fatalf("n1 worker in pinned{n1}: %d candidates, want 1", len(got))
	}
}

func TestPinnedRefusesWorkers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		namespaces []string
		node       string
	}{
		{"WrongNode", []string{"iso"}, "n2"},
		{"NoNode", []string{"iso"}, ""},
		{"WholeMultiNamespaceRegistration", []string{"free", "iso"}, "n2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupPinned(t, "iso", "n1")
			_, err := b.reg.Accept(context.Background(), caller(c.namespaces...), spec(c.namespaces, "", c.node, "charge"))
			if !errors.Is(err, namespace.ErrPlacement) {
				t.Fatalf("err = %v, want ErrPlacement", err)
			}
			for _, ns := range c.namespaces {
				if got := candidates(b, ns, "", "charge", ""); len(got) != 0 {
					t.Fatalf("refused registration left %v in %s", ids(got), ns)
				}
			}
			if c := b.reg.Census(); c != (registry.Census{}) {
				t.Fatalf("refused registration left %+v", c)
			}
		})
	}
}

func TestUnplacedAndPreferNeverRefuse(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Open)
	ctx := context.Background()
	if _, _, err := b.store.RegisterNamespace(ctx, "pref", store.OriginExplicit); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SetPlacement(ctx, "pref", store.Placement{Mode: store.Prefer, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	b.accept(t, caller("unpl"), spec([]string{"unpl"}, "", "", "charge"))
	b.accept(t, caller("pref"), spec([]string{"pref"}, "", "", "charge"))
	for _, ns := range []string{"unpl", "pref"} {
		if got := candidates(b, ns, "", "charge", ""); len(got) != 1 {
			t.Fatalf("node-less worker in %s: %d candidates, want 1", ns, len(got))
		}
	}
}

func TestConcurrentFirstRegistrationsMintOneRecord(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Open)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			g, err := b.reg.Accept(context.Background(), caller("rush"), spec([]string{"rush"}, "", "", "charge"))
			if err != nil {
				errs <- err
				return
			}
			g.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent registration failed: %v", err)
	}
	all, err := b.store.ListNamespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Name != "rush" {
		t.Fatalf("records after 8 racing registrations: %+v, want exactly rush", all)
	}
}

func TestClosedRefusesUnknownNamespaceAndCreatesNothing(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Closed)
	_, err := b.reg.Accept(context.Background(), caller("ghost"), spec([]string{"ghost"}, "", "", "charge"))
	if !errors.Is(err, namespace.ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
	if _, err := b.store.GetNamespace(context.Background(), "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("closed policy created the refused namespace: %v", err)
	}
	if got := candidates(b, "ghost", "", "charge", ""); len(got) != 0 {
		t.Fatalf("refused registration inserted %v", ids(got))
	}
}

func TestClosedAdmitsKnownNamespace(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Closed)
	if _, _, err := b.store.RegisterNamespace(context.Background(), "known", store.OriginExplicit); err != nil {
		t.Fatal(err)
	}
	b.accept(t, caller("known"), spec([]string{"known"}, "", "", "charge"))
	if got := candidates(b, "known", "", "charge", ""); len(got) != 1 {
		t.Fatalf("known namespace under closed: %d candidates, want 1", len(got))
	}
}

// Without admission Accept only authorizes. Each registration is first
// shown to be one the namespace plane refuses, by a registry admitting
// through a real store: the registry without admission accepts what
// admission would refuse (it neither gates nor checks placement), and still
// refuses what authorization refuses, inserting nothing.
func TestWithoutAdmissionAcceptOnlyAuthorizes(t *testing.T) {
	t.Parallel()
	pin := func(t *testing.T, s *sqlite.Store) {
		ctx := context.Background()
		if _, _, err := s.RegisterNamespace(ctx, "plain", store.OriginExplicit); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetPlacement(ctx, "plain", store.Placement{Mode: store.Pinned, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		prepare  func(t *testing.T, s *sqlite.Store)
		caller   namespace.Identity
		spec     registry.Spec
		admitted error // what a registry admitting through the store answers
		without  error // what the registry without admission answers
	}{
		{"unknown namespace under closed auto-create is not gated", nil,
			caller("orders"), spec([]string{"orders"}, "", "", "charge"), namespace.ErrUnknown, nil},
		{"node outside a pinned placement is not checked", pin,
			caller("plain"), spec([]string{"plain"}, "", "n2", "charge"), namespace.ErrPlacement, nil},
		{"node-less worker in a pinned namespace is not checked", pin,
			caller("plain"), spec([]string{"plain"}, "", "", "charge"), namespace.ErrPlacement, nil},
		{"namespace the caller may not use is still refused", nil,
			caller("mine"), spec([]string{"mine", "theirs"}, "", "", "charge"), namespace.ErrPermissionDenied, namespace.ErrPermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openStore(t)
			if tc.prepare != nil {
				tc.prepare(t, s)
			}
			admitting := registry.New(registry.Options{Admission: namespace.NewMinter(s, namespace.Closed, nil)})
			if g, err := admitting.Accept(ctx, tc.caller, tc.spec); !errors.Is(err, tc.admitted) {
				if g != nil {
					g.Close()
				}
				t.Fatalf("with admission: %v, want %v (the case must be one admission refuses)", err, tc.admitted)
			}

			b := setup(t)
			g, err := b.reg.Accept(ctx, tc.caller, tc.spec)
			if tc.without != nil {
				if !errors.Is(err, tc.without) {
					t.Fatalf("without admission: %v, want %v", err, tc.without)
				}
				if c := b.reg.Census(); c != (registry.Census{}) {
					t.Fatalf("refused registration left %+v", c)
				}
				return
			}
			if err != nil {
				t.Fatalf("without admission: %v, want the registration accepted", err)
			}
			t.Cleanup(func() { g.Close() })
			for _, ns := range tc.spec.Namespaces {
				if got := candidates(b, ns, "", "charge", ""); len(got) != 1 || got[0].ID != g.ID() {
					t.Fatalf("candidates in %s: %v, want the accepted worker %d", ns, ids(got), g.ID())
				}
			}
		})
	}
}

// An unauthorized caller never mints, even under open auto-create.
func TestUnauthorizedCallerMintsNothing(t *testing.T) {
	t.Parallel()
	b := setupMinting(t, namespace.Open)
	_, err := b.reg.Accept(context.Background(), caller("mine"), spec([]string{"mine", "theirs"}, "", "", "charge"))
	if !errors.Is(err, namespace.ErrPermissionDenied) {
		t.Fatalf("err = %v, want ErrPermissionDenied", err)
	}
	all, err := b.store.ListNamespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Fatalf("refused caller minted %+v", all)
	}
}
