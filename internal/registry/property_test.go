package registry_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/registry"
	"pgregory.net/rapid"
)

// Small alphabets make collisions (shared triples, shared nodes) common.
var (
	propNamespaces = []string{"a", "b", "c"}
	propQueues     = []string{"", "default", "gpu"}
	propNodes      = []string{"", "n1", "n2"}
	propTypes      = []string{"x", "y"}
)

// model is the property test's independent account of the registry.
type model struct {
	workers map[registry.WorkerID]*modelWorker
	held    []*registry.Worker // slots taken and not yet released
}

type modelWorker struct {
	reg        *registry.Registration
	namespaces []string
	queue      string
	node       string
	types      []string
	slots      int
	used       int
	draining   bool
}

func (m *modelWorker) serves(t registry.Triple) bool {
	return slices.Contains(m.namespaces, t.Pool.Namespace) &&
		registry.Pool("", m.queue).TaskQueue == t.Pool.TaskQueue &&
		slices.Contains(m.types, t.ActivityType)
}

func (m *modelWorker) matches(match registry.Match) bool {
	return len(match.Nodes) == 0 || slices.Contains(match.Nodes, m.node)
}

func (m *modelWorker) eligible(t registry.Triple, match registry.Match) bool {
	return m.serves(t) && m.matches(match) && !m.draining && m.used < m.slots
}

func (md *model) eligible(t registry.Triple, match registry.Match) []registry.WorkerID {
	var out []registry.WorkerID
	for id, w := range md.workers {
		if w.eligible(t, match) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func drawSubset(t *rapid.T, from []string, label string) []string {
	set := rapid.SliceOfNDistinct(rapid.SampledFrom(from), 1, len(from), rapid.ID[string]).Draw(t, label)
	return set
}

func drawTriple(t *rapid.T) registry.Triple {
	return registry.NewTriple(
		rapid.SampledFrom(propNamespaces).Draw(t, "ns"),
		rapid.SampledFrom(propQueues).Draw(t, "tq"),
		rapid.SampledFrom(propTypes).Draw(t, "type"),
	)
}

func drawMatch(t *rapid.T) registry.Match {
	switch rapid.IntRange(0, 2).Draw(t, "match") {
	case 0:
		return registry.AnyNode()
	case 1:
		return registry.OnNodes(drawSubset(t, []string{"n1", "n2", "n3"}, "pinned")...)
	default:
		return registry.PreferNodes(drawSubset(t, []string{"n1", "n2", "n3"}, "prefer")...)
	}
}

// checkSelection asserts every routing rule on one selection outcome.
func (md *model) checkSelection(t *rapid.T, key registry.Triple, match registry.Match, w *registry.Worker, ok bool) {
	strict := registry.Match{Nodes: match.Nodes}
	if !ok {
		if got := md.eligible(key, registry.Match{}); match.Spill && len(got) > 0 {
			t.Fatalf("prefer %v on %s found nobody though %v are eligible", match.Nodes, key, got)
		}
		if got := md.eligible(key, strict); len(got) > 0 {
			t.Fatalf("select %s %+v found nobody though %v are eligible", key, match, got)
		}
		return
	}
	mw := md.workers[w.ID()]
	if mw == nil {
		t.Fatalf("select %s chose %v, which is not registered", key, w.ID())
	}
	if !mw.serves(key) {
		t.Fatalf("select %s chose %v serving %v/%q/%v", key, w.ID(), mw.namespaces, mw.queue, mw.types)
	}
	if mw.draining {
		t.Fatalf("select %s chose draining worker %v", key, w.ID())
	}
	if mw.used >= mw.slots {
		t.Fatalf("select %s chose full worker %v (%d/%d)", key, w.ID(), mw.used, mw.slots)
	}
	if !mw.matches(strict) {
		// Allowed only as a prefer spill when no listed node could take it.
		if !match.Spill {
			t.Fatalf("select %s pinned to %v chose %v on node %q", key, match.Nodes, w.ID(), mw.node)
		}
		if got := md.eligible(key, strict); len(got) > 0 {
			t.Fatalf("prefer %v spilled to node %q though %v on listed nodes were free", match.Nodes, mw.node, got)
		}
	}
	mw.used++
	md.held = append(md.held, w)
}

func TestPropertySelectionKeepsRoutingRules(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		reg := registry.New(registry.Options{})
		md := &model{workers: map[registry.WorkerID]*modelWorker{}}

		t.Repeat(map[string]func(*rapid.T){
			"register": func(t *rapid.T) {
				s := registry.Spec{
					Namespaces:    drawSubset(t, propNamespaces, "namespaces"),
					TaskQueue:     rapid.SampledFrom(propQueues).Draw(t, "queue"),
					Node:          rapid.SampledFrom(propNodes).Draw(t, "node"),
					ActivityTypes: drawSubset(t, propTypes, "types"),
					Slots:         rapid.IntRange(1, 3).Draw(t, "slots"),
					Delivery:      &delivery{},
				}
				g, err := reg.Register(s)
				if err != nil {
					t.Fatalf("register %+v: %v", s, err)
				}
				md.workers[g.ID()] = &modelWorker{reg: g, namespaces: s.Namespaces, queue: s.TaskQueue,
					node: s.Node, types: s.ActivityTypes, slots: s.Slots}
			},
			"deregister": func(t *rapid.T) {
				if len(md.workers) == 0 {
					t.Skip("no worker")
				}
				id := rapid.SampledFrom(sortedIDs(md)).Draw(t, "victim")
				md.workers[id].reg.Close()
				delete(md.workers, id)
			},
			"drain": func(t *rapid.T) {
				if len(md.workers) == 0 {
					t.Skip("no worker")
				}
				id := rapid.SampledFrom(sortedIDs(md)).Draw(t, "drained")
				reg.Drain(id)
				md.workers[id].draining = true
			},
			"select": func(t *rapid.T) {
				key, match := drawTriple(t), drawMatch(t)
				w, ok := reg.Select(key, match)
				md.checkSelection(t, key, match, w, ok)
			},
			"release": func(t *rapid.T) {
				if len(md.held) == 0 {
					t.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(md.held)-1).Draw(t, "held")
				w := md.held[i]
				md.held = slices.Delete(md.held, i, i+1)
				reg.Release(w)
				if mw := md.workers[w.ID()]; mw != nil {
					mw.used--
				}
			},
			"rotation": func(t *rapid.T) {
				// One full rotation (select then release, as many times as
				// there are eligible workers) must visit every eligible one.
				key := drawTriple(t)
				var match registry.Match
				if rapid.Bool().Draw(t, "on node") {
					match = registry.OnNodes(rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "rotation node"))
				}
				want := md.eligible(key, match)
				var got []registry.WorkerID
				for range want {
					w, ok := reg.Select(key, match)
					if !ok {
						t.Fatalf("rotation on %s stopped after %v of %v", key, got, want)
					}
					got = append(got, w.ID())
					reg.Release(w)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("one rotation on %s %+v visited %v, want each of %v once", key, match, got, want)
				}
			},
			"": func(t *rapid.T) {
				for id, mw := range md.workers {
					info, ok := reg.Lookup(id)
					if !ok || info.SlotsInUse != mw.used || info.Draining != mw.draining {
						t.Fatalf("worker %v: registry %+v, model used=%d draining=%v", id, info, mw.used, mw.draining)
					}
				}
				if c := reg.Census(); c.Workers != len(md.workers) {
					t.Fatalf("census %+v, model has %d workers", c, len(md.workers))
				}
			},
		})

		for _, w := range md.held {
			reg.Release(w)
		}
		for _, mw := range md.workers {
			mw.reg.Close()
		}
		if c := reg.Census(); c != (registry.Census{}) {
			t.Fatalf("after every worker left the registry holds %+v", c)
		}
	})
}

func sortedIDs(md *model) []registry.WorkerID {
	ids := make([]registry.WorkerID, 0, len(md.workers))
	for id := range md.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Register, deregister, drain, select and release from many goroutines at
// once; run under -race. Afterwards nothing may be left behind.
func TestConcurrentRegistryUse(t *testing.T) {
	t.Parallel()
	reg := registry.New(registry.Options{})
	const goroutines, rounds = 16, 400
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ns := propNamespaces[g%len(propNamespaces)]
			for i := range rounds {
				s := registry.Spec{
					Namespaces:    []string{ns, propNamespaces[i%len(propNamespaces)]},
					Node:          propNodes[i%len(propNodes)],
					ActivityTypes: []string{propTypes[i%len(propTypes)]},
					Slots:         1 + i%3,
					Delivery:      &delivery{},
				}
				tok, err := reg.Register(s)
				if err != nil {
					t.Errorf("register: %v", err)
					return
				}
				key := registry.NewTriple(ns, "", propTypes[(i+g)%len(propTypes)])
				for range 3 {
					if w, ok := reg.Select(key, registry.AnyNode()); ok {
						if !w.Serves(ns) {
							t.Errorf("select in %s chose worker %v that does not serve it", ns, w.ID())
						}
						reg.Release(w)
					}
				}
				if i%5 == 0 {
					reg.Drain(tok.ID())
				}
				_ = reg.Workers()
				tok.Close()
			}
		})
	}
	wg.Wait()
	if c := reg.Census(); c != (registry.Census{}) {
		t.Fatalf("after %d goroutines x %d rounds the registry holds %+v", goroutines, rounds, c)
	}
}

func ExampleRegistry_Select() {
	reg := registry.New(registry.Options{})
	for _, node := range []string{"gpu-1", "gpu-2"} {
		_, _ = reg.Register(registry.Spec{
			Namespaces:    []string{"acme"},
			TaskQueue:     "gpu",
			Node:          node,
			ActivityTypes: []string{"render"},
			Slots:         4,
			Delivery:      exampleDelivery{},
		})
	}
	key := registry.NewTriple("acme", "gpu", "render")
	for range 3 {
		w, _ := reg.Select(key, registry.AnyNode())
		fmt.Println(w.ID(), w.Node())
		reg.Release(w)
	}
	w, _ := reg.Select(key, registry.OnNodes("gpu-2"))
	fmt.Println("pinned:", w.Node())
	// Output:
	// 1 gpu-1
	// 2 gpu-2
	// 1 gpu-1
	// pinned: gpu-2
}

type exampleDelivery struct{}

func (exampleDelivery) Transport() registry.Transport { return registry.TransportGRPC }
func (exampleDelivery) RequestDrain()                 {}
