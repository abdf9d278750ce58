package engine

import (
	"fmt"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// BenchmarkFairLane measures the fair lane alone, without the registry or
// the store: one item served from a lane of 1,000 waiting and pushed back
// behind the others, with no fairness keys (the default key's plain FIFO)
// and with 16 keys.
func BenchmarkFairLane(b *testing.B) {
	for _, keys := range []int{0, 16} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			var l lane
			l.def.at = -1
			for i := range 1000 {
				a := &activity{rec: store.Activity{ID: fmt.Sprint(i)}}
				if keys > 0 {
					a.rec.Flow = store.Flow{FairnessKey: fmt.Sprint("k", i%keys), FairnessWeight: 1 + i%3}
				}
				a.flow = l.push(a)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f := l.next()
				a := f.items[f.head]
				l.pop(f, true)
				if a.flow != nil {
					l.unqueued(a.flow)
				}
				a.flow = l.push(a)
			}
		})
	}
}
