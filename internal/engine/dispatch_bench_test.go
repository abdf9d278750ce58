package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// discardConn is a worker connection that drops what it is sent.
type discardConn struct{}

func (discardConn) Transport() registry.Transport { return registry.TransportGRPC }
func (discardConn) RequestDrain()                 {}

func (discardConn) SendTask(Task) error                          { return nil }
func (discardConn) SendCancel(string, string, int, string) error { return nil }

// BenchmarkDispatch measures one slot freeing and the next waiting activity
// starting on it, with 1,000 activities waiting in the queue, for work
// without fairness keys (the default key's plain FIFO) and for work spread
// over 16 keys. An iteration is: the running activity ends, it is queued
// again behind the others, the head of the queue starts.
func BenchmarkDispatch(b *testing.B) {
	for _, keys := range []int{0, 16} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchDispatch(b, keys) })
	}
}

func benchDispatch(b *testing.B, keys int) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "aion.db"))
	if err != nil {
		b.Fatal(err)
	}
	reg := registry.New(registry.Options{})
	e := New(Config{Store: st, Registry: reg, Minter: namespace.NewMinter(st, namespace.Open, nil),
		Defaults: DefaultDefaults(), Clock: clock.NewFake(epoch)})
	defer func() {
		_ = e.Stop(ctx)
		_ = st.Close()
	}()
	r, err := reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1, Delivery: discardConn{}})
	if err != nil {
		b.Fatal(err)
	}
	w := r.Worker()
	const waiting = 1000
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range waiting + 1 { // the first starts, the others wait
		rec := store.Activity{Namespace: "ns", ID: fmt.Sprint(i), TaskQueue: "default", ActivityType: "t",
			Priority: store.DefaultPriority, State: store.StateScheduled}
		if keys > 0 {
			rec.Flow = store.Flow{FairnessKey: fmt.Sprint("k", i%keys), FairnessWeight: 1}
		}
		e.enqueueLocked(&activity{rec: rec})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var a *activity
		m := e.inflight[w.ID()]
		for k, x := range m {
			a = x
			delete(m, k)
		}
		e.running["ns"]--
		a.worker, a.rec.State = nil, store.StateScheduled
		reg.Release(w)
		e.enqueueLocked(a)
	}
}
