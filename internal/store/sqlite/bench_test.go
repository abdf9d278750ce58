package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// BenchmarkApply measures one group commit as aion bench makes them: 50 new
// activities and 50 completions in one transaction, durable on disk
// (synchronous=full) or only in the page cache (normal, which shows the
// processor's share). It reports the 99th percentile and the longest
// commit too.
func BenchmarkApply(b *testing.B) {
	for _, mode := range []string{"full", "normal"} {
		b.Run("synchronous="+mode, func(b *testing.B) { benchmarkApply(b, mode) })
	}
}

func benchmarkApply(b *testing.B, mode string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "aion.db"), sqlite.WithSynchronous(mode))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, 64)
	n := 0
	now := time.Now()
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		ws := make([]store.Write, 0, 100)
		for range 50 {
			id := fmt.Sprintf("b-%09d", n)
			n++
			ws = append(ws, store.InsertActivity{Activity: store.Activity{Namespace: "bench", ID: id, TaskQueue: "bench",
				ActivityType: "echo", Payload: payload, Fingerprint: id, State: store.StateScheduled, ScheduledAt: now}})
			if n > 50 {
				done := fmt.Sprintf("b-%09d", n-51)
				ws = append(ws, store.EndAttempt{Namespace: "bench", ID: done, State: store.StateCompleted, Result: payload,
					StartedAt: now, ClosedAt: now, Attempt: &store.Attempt{Number: 1, WorkerID: 1, StartedAt: now, EndedAt: now, Outcome: store.OutcomeCompleted}})
			}
		}
		start := time.Now()
		if _, err := s.Apply(ctx, ws); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "writes/s")
	// The tail shows the commits that pay for more than their own writes.
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(took[len(took)-1].Microseconds()), "max-us")
}
