package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/registry"
)

func register(t *testing.T, b bundle, s registry.Spec) *registry.Registration {
	t.Helper()
	g, err := b.reg.Register(s)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func withSlots(s registry.Spec, n int) registry.Spec { s.Slots = n; return s }

func TestSelectRoundRobinsInRegistrationOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []registry.WorkerID
	for range 4 {
		want = append(want, register(t, b, withSlots(spec([]string{"ns"}, "", "", "t"), 100)).ID())
	}
	key := registry.NewTriple("ns", "", "t")
	var got []registry.WorkerID
	for range 8 {
		w, ok := b.reg.Select(key, registry.AnyNode())
		if !ok {
			t.Fatal("select found nobody")
		}
		got = append(got, w.ID())
		b.reg.Release(w)
	}
	if !slices.Equal(got, append(want, want...)) {
		t.Fatalf("selection order = %v, want %v twice", got, want)
	}
}

func TestSelectSkipsFullWorkersUntilSlotFrees(t *testing.T) {
	t.Parallel()
	b := setup(t)
	two := register(t, b, withSlots(spec([]string{"ns"}, "", "", "t"), 2))
	one := register(t, b, spec([]string{"ns"}, "", "", "t"))
	key := registry.NewTriple("ns", "", "t")

	var held []*registry.Worker
	count := map[registry.WorkerID]int{}
	for range 3 {
		w, ok := b.reg.Select(key, registry.AnyNode())
		if !ok {
			t.Fatalf("select %d found nobody with free slots left", len(held)+1)
		}
		held = append(held, w)
		count[w.ID()]++
	}
	if count[two.ID()] != 2 || count[one.ID()] != 1 {
		t.Fatalf("slot use = %v, want 2 on the two-slot worker and 1 on the other", count)
	}
	if w, ok := b.reg.Select(key, registry.AnyNode()); ok {
		t.Fatalf("select gave a full worker %v", w.ID())
	}
	if info, _ := b.reg.Lookup(two.ID()); info.SlotsInUse != 2 {
		t.Fatalf("slots in use = %d, want 2", info.SlotsInUse)
	}
	b.reg.Release(held[0])
	w, ok := b.reg.Select(key, registry.AnyNode())
	if !ok || w.ID() != held[0].ID() {
		t.Fatalf("after one release select chose %v, want %v", w, held[0].ID())
	}
}

func TestDrainingWorkerGetsNothingNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := &delivery{}
	s := spec([]string{"ns"}, "", "", "t")
	s.Delivery = d
	drained := register(t, b, withSlots(s, 5))
	other := register(t, b, withSlots(spec([]string{"ns"}, "", "", "t"), 5))
	key := registry.NewTriple("ns", "", "t")

	if !b.reg.Drain(drained.ID()) {
		t.Fatal("Drain reported an unknown worker")
	}
	if d.drainRequests() != 1 {
		t.Fatalf("delivery got %d drain requests, want 1", d.drainRequests())
	}
	b.reg.Drain(drained.ID()) // twice is one drain
	if d.drainRequests() != 1 {
		t.Fatalf("second drain asked again: %d requests", d.drainRequests())
	}
	for range 4 {
		w, ok := b.reg.Select(key, registry.AnyNode())
		if !ok || w.ID() != other.ID() {
			t.Fatalf("select chose %v, want only the non-draining %v", w, other.ID())
		}
		b.reg.Release(w)
	}
	info, _ := b.reg.Lookup(drained.ID())
	if !info.Draining {
		t.Fatal("Lookup does not show the worker draining")
	}
	if n := b.reg.DrainAll(); n != 1 {
		t.Fatalf("DrainAll asked %d workers, want the 1 not yet draining", n)
	}
	if w, ok := b.reg.Select(key, registry.AnyNode()); ok {
		t.Fatalf("select after DrainAll chose %v", w.ID())
	}
}

func TestReleaseOnDrainingWorkerDoesNotRevive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := register(t, b, spec([]string{"ns"}, "", "", "t"))
	key := registry.NewTriple("ns", "", "t")
	w, _ := b.reg.Select(key, registry.AnyNode())
	b.reg.Drain(g.ID())
	b.reg.Release(w)
	if w, ok := b.reg.Select(key, registry.AnyNode()); ok {
		t.Fatalf("released draining worker %v was selected", w.ID())
	}
}

func TestPreferNodesFirstThenAny(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gpu := register(t, b, spec([]string{"ns"}, "", "gpu-1", "t"))
	plain := register(t, b, spec([]string{"ns"}, "", "", "t"))
	key := registry.NewTriple("ns", "", "t")

	first, ok := b.reg.Select(key, registry.PreferNodes("gpu-1"))
	if !ok || first.ID() != gpu.ID() {
		t.Fatalf("prefer gpu-1 chose %v, want the gpu-1 worker", first)
	}
	second, ok := b.reg.Select(key, registry.PreferNodes("gpu-1"))
	if !ok || second.ID() != plain.ID() {
		t.Fatalf("prefer with gpu-1 full chose %v, want a spill to the other worker", second)
	}
	if w, ok := b.reg.Select(key, registry.PreferNodes("gpu-1")); ok {
		t.Fatalf("prefer with every worker full chose %v", w.ID())
	}
	b.reg.Release(first)
	b.reg.Release(second)
	if w, _ := b.reg.Select(key, registry.PreferNodes("gpu-1")); w.ID() != gpu.ID() {
		t.Fatalf("after release prefer chose %v, want the gpu-1 worker again", w.ID())
	}
}

func TestOnNodesNeverSpills(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n1 := register(t, b, spec([]string{"ns"}, "", "n1", "t"))
	n2 := register(t, b, spec([]string{"ns"}, "", "n2", "t"))
	register(t, b, withSlots(spec([]string{"ns"}, "", "n3", "t"), 10))
	register(t, b, withSlots(spec([]string{"ns"}, "", "", "t"), 10))
	key := registry.NewTriple("ns", "", "t")

	got := map[registry.WorkerID]bool{}
	for range 2 {
		w, ok := b.reg.Select(key, registry.OnNodes("n1", "n2"))
		if !ok {
			t.Fatal("pinned{n1,n2} found nobody with both free")
		}
		got[w.ID()] = true
	}
	if !got[n1.ID()] || !got[n2.ID()] {
		t.Fatalf("pinned{n1,n2} used %v, want both listed nodes", got)
	}
	if w, ok := b.reg.Select(key, registry.OnNodes("n1", "n2")); ok {
		t.Fatalf("pinned{n1,n2} spilled to %v (node %q)", w.ID(), w.Node())
	}
}

func TestAwaitWakesOnRegistration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := registry.NewTriple("ns", "", "t")
	done := make(chan *registry.Worker)
	go func() {
		w, _ := b.reg.Await(context.Background(), key, registry.AnyNode())
		done <- w
	}()
	waitFor(t, func() bool { return b.reg.Census().Waiters == 1 })
	g := register(t, b, spec([]string{"ns"}, "", "", "t"))
	if w := <-done; w == nil || w.ID() != g.ID() {
		t.Fatalf("Await returned %v, want the new worker", w)
	}
	if c := b.reg.Census(); c.Waiters != 0 {
		t.Fatalf("waiters left after wake: %+v", c)
	}
}

func TestAwaitWakesOnFreedSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := registry.NewTriple("ns", "", "t")
	g := register(t, b, spec([]string{"ns"}, "", "", "t"))
	held, _ := b.reg.Select(key, registry.AnyNode())
	done := make(chan *registry.Worker)
	go func() {
		w, _ := b.reg.Await(context.Background(), key, registry.AnyNode())
		done <- w
	}()
	waitFor(t, func() bool { return b.reg.Census().Waiters == 1 })
	b.reg.Release(held)
	if w := <-done; w == nil || w.ID() != g.ID() {
		t.Fatalf("Await returned %v after release", w)
	}
}

func TestAwaitEndsWithContextAndLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := b.reg.Await(ctx, registry.NewTriple("nobody", "", "t"), registry.AnyNode())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if c := b.reg.Census(); c != (registry.Census{}) {
		t.Fatalf("expired wait left %+v", c)
	}
}

// Many waiters and many releases racing: every waiter is served, none hangs.
func TestAwaitMissesNoWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := registry.NewTriple("ns", "", "t")
	register(t, b, withSlots(spec([]string{"ns"}, "", "", "t"), 2))
	const rounds = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range rounds / 8 {
				w, err := b.reg.Await(ctx, key, registry.AnyNode())
				if err != nil {
					t.Errorf("await: %v", err)
					return
				}
				b.reg.Release(w)
			}
		})
	}
	wg.Wait()
}

func TestRegistrationCloseDeregistersOnce(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	reg := registry.New(registry.Options{Hooks: registry.Hooks{
		Connected:    func(w registry.WorkerInfo) { record(fmt.Sprintf("connected %v", w.ID)) },
		Draining:     func(w registry.WorkerInfo) { record(fmt.Sprintf("draining %v", w.ID)) },
		Disconnected: func(w registry.WorkerInfo, r registry.Reason) { record(fmt.Sprintf("disconnected %v %s", w.ID, r)) },
		NamespaceWorkers: func(ns string, n int) {
			record(fmt.Sprintf("gauge %s=%d", ns, n))
		},
	}})
	a, err := reg.Register(spec([]string{"x", "y"}, "", "", "t"))
	if err != nil {
		t.Fatal(err)
	}
	bw, err := reg.Register(spec([]string{"x"}, "", "", "t"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := reg.Register(spec([]string{"x"}, "", "", "t"))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close()
	if bw.Leave(registry.ReasonTimeout) != true || bw.Leave(registry.ReasonTimeout) != false {
		t.Fatal("Leave did not report the first removal only")
	}
	bw.Close()
	reg.Drain(c.ID())
	c.Close()
	want := []string{
		"connected 1", "gauge x=1", "gauge y=1",
		"connected 2", "gauge x=2",
		"connected 3", "gauge x=3",
		"disconnected 1 disconnect", "gauge x=2", "gauge y=0",
		"disconnected 2 timeout", "gauge x=1",
		"draining 3",
		"disconnected 3 drained", "gauge x=0",
	}
	if !slices.Equal(events, want) {
		t.Fatalf("hook calls:\n got %q\nwant %q", events, want)
	}
	if c := reg.Census(); c != (registry.Census{}) {
		t.Fatalf("after all left: %+v", c)
	}
}

// Hooks run outside the registry lock, so they may read the registry.
func TestHooksMayReadRegistry(t *testing.T) {
	t.Parallel()
	var reg *registry.Registry
	seen := make(chan int, 1)
	reg = registry.New(registry.Options{Hooks: registry.Hooks{
		Connected: func(registry.WorkerInfo) { seen <- len(reg.Workers()) },
	}})
	g, err := reg.Register(spec([]string{"x"}, "", "", "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if n := <-seen; n != 1 {
		t.Fatalf("hook saw %d workers, want 1", n)
	}
}

func TestRegisterRefusesBadSpec(t *testing.T) {
	t.Parallel()
	good := func() registry.Spec { return spec([]string{"ns"}, "", "", "t") }
	cases := []struct {
		name   string
		mutate func(*registry.Spec)
		field  string
	}{
		{"NoNamespaces", func(s *registry.Spec) { s.Namespaces = nil }, "namespaces"},
		{"EmptyNamespace", func(s *registry.Spec) { s.Namespaces = []string{"ns", ""} }, "namespaces"},
		{"NoTypes", func(s *registry.Spec) { s.ActivityTypes = nil }, "activity_types"},
		{"EmptyType", func(s *registry.Spec) { s.ActivityTypes = []string{""} }, "activity_types"},
		{"ZeroSlots", func(s *registry.Spec) { s.Slots = 0 }, "slots: 0"},
		{"NoDelivery", func(s *registry.Spec) { s.Delivery = nil }, "delivery"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := good()
			c.mutate(&s)
			_, err := b.reg.Register(s)
			if !errors.Is(err, registry.ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
			if got := err.Error(); !strings.Contains(got, c.field) {
				t.Fatalf("error %q does not name %q", got, c.field)
			}
			if c := b.reg.Census(); c != (registry.Census{}) {
				t.Fatalf("refused spec left %+v", c)
			}
		})
	}
}

func TestEmptyTaskQueueMeansDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	register(t, b, spec([]string{"ns"}, "", "", "t"))
	if _, ok := b.reg.Select(registry.NewTriple("ns", registry.DefaultTaskQueue, "t"), registry.AnyNode()); !ok {
		t.Fatal("a worker with no task queue is not in the default pool")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
