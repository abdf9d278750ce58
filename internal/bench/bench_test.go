package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/bench"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A small run completes every activity, counts them, and reports latencies.
func TestRunCompletesEveryActivity(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 50} {
		o := bench.Defaults()
		o.Activities, o.Workers, o.Slots, o.Concurrency, o.Batch = 500, 2, 8, 4, batch
		o.SQLiteSync = "normal"
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep, err := bench.Run(ctx, o)
		cancel()
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		if rep.Activities != 500 || rep.Errors != 0 {
			t.Fatalf("batch %d: report %+v, want 500 activities and no errors", batch, rep)
		}
		if rep.PerSec <= 0 || rep.EndToEnd.P50 <= 0 || rep.EndToEnd.P99 < rep.EndToEnd.P50 || rep.ScheduleToStart.P99 < rep.ScheduleToStart.P50 {
			t.Fatalf("batch %d: implausible figures %+v", batch, rep)
		}
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	t.Parallel()
	o := bench.Defaults()
	o.Payload = 4
	if _, err := bench.Run(context.Background(), o); err == nil {
		t.Fatal("payload of 4 bytes accepted")
	}
}
