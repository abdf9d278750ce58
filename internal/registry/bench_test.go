package registry_test

import (
	"fmt"
	"testing"

	"github.com/aion-run/aion/internal/registry"
)

// benchRegistry registers pools × perPool workers, each with slots to spare,
// and returns the triples to select from.
func benchRegistry(b *testing.B, pools, perPool int) (*registry.Registry, []registry.Triple) {
	b.Helper()
	reg := registry.New(registry.Options{})
	keys := make([]registry.Triple, pools)
	for p := range pools {
		ns := fmt.Sprintf("ns-%03d", p)
		keys[p] = registry.NewTriple(ns, "", "work")
		for i := range perPool {
			_, err := reg.Register(registry.Spec{
				Namespaces:    []string{ns},
				Node:          fmt.Sprintf("node-%d", i%8),
				ActivityTypes: []string{"work"},
				Slots:         1 << 20,
				Delivery:      exampleDelivery{},
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	return reg, keys
}

// BenchmarkSelect measures one dispatch decision: select the next worker of a
// triple and give its slot back. It must cost the same at any pool size and
// allocate nothing.
func BenchmarkSelect(b *testing.B) {
	cases := []struct {
		name           string
		pools, perPool int
	}{
		{"workers=1", 1, 1},
		{"workers=100", 1, 100},
		{"workers=10000", 1, 10000},
		{"namespaces=100x100", 100, 100},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			reg, keys := benchRegistry(b, c.pools, c.perPool)
			match := registry.AnyNode()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				w, ok := reg.Select(keys[i%len(keys)], match)
				if !ok {
					b.Fatal("no worker")
				}
				reg.Release(w)
			}
		})
	}
	b.Run("pinned/workers=10000", func(b *testing.B) {
		reg, keys := benchRegistry(b, 1, 10000)
		match := registry.OnNodes("node-3")
		b.ReportAllocs()
		for b.Loop() {
			w, ok := reg.Select(keys[0], match)
			if !ok {
				b.Fatal("no worker")
			}
			reg.Release(w)
		}
	})
	b.Run("full-and-free/workers=10000", func(b *testing.B) {
		// One-slot workers: every selection fills a worker (it leaves the
		// ring) and every release frees it (it rejoins): the worst case.
		reg := registry.New(registry.Options{})
		for range 10000 {
			if _, err := reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"work"},
				Slots: 1, Delivery: exampleDelivery{}}); err != nil {
				b.Fatal(err)
			}
		}
		key := registry.NewTriple("ns", "", "work")
		b.ReportAllocs()
		for b.Loop() {
			w, ok := reg.Select(key, registry.AnyNode())
			if !ok {
				b.Fatal("no worker")
			}
			reg.Release(w)
		}
	})
}

// BenchmarkRegister measures register plus deregister of one worker serving
// two namespaces and three activity types into a registry of 1,000 workers.
func BenchmarkRegister(b *testing.B) {
	reg, _ := benchRegistry(b, 10, 100)
	spec := registry.Spec{
		Namespaces:    []string{"ns-001", "ns-002"},
		Node:          "node-1",
		ActivityTypes: []string{"work", "a", "b"},
		Slots:         4,
		Delivery:      exampleDelivery{},
	}
	b.ReportAllocs()
	for b.Loop() {
		g, err := reg.Register(spec)
		if err != nil {
			b.Fatal(err)
		}
		g.Close()
	}
}
