package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/bench"
	"github.com/aion-run/aion/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A small closed-loop run completes every activity, counts them and its
// calls, and reports latencies.
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
		// A closed loop of 4 never has more than 4 calls out.
		if wantCalls := 500 / max(batch, 1); rep.Calls != wantCalls || rep.MaxInFlight < 1 || rep.MaxInFlight > 4 || len(rep.EndToEndTrend) != 10 {
			t.Fatalf("batch %d: %d calls, at most %d in flight, trend %v; want %d calls, 1 to 4 in flight, 10 tenths",
				batch, rep.Calls, rep.MaxInFlight, rep.EndToEndTrend, wantCalls)
		}
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		set   func(*bench.Options)
		field string
	}{
		{"payload below 8 bytes", func(o *bench.Options) { o.Payload = 4 }, "--payload"},
		{"no servers", func(o *bench.Options) { o.Servers = 0 }, "--servers"},
		{"several servers on SQLite", func(o *bench.Options) { o.Servers = 2 }, "--servers"},
		{"several servers with an address", func(o *bench.Options) { o.Servers, o.Address = 2, "127.0.0.1:1" }, "--servers"},
		{"negative workflows", func(o *bench.Options) { o.Workflows = -1 }, "--workflows"},
		{"workflows of no steps", func(o *bench.Options) { o.Workflows, o.Steps = 5, 0 }, "--steps"},
		{"workflows and a fan-out at once", func(o *bench.Options) { o.Workflows, o.Fanout = 5, 5 }, "--fanout"},
		{"a batch in a workflow mode", func(o *bench.Options) { o.Workflows, o.Batch = 5, 10 }, "--batch"},
		{"a rate for a fan-out", func(o *bench.Options) { o.Fanout, o.Rate = 5, 10 }, "--rate"},
		{"a fan-out too large for one workflow task", func(o *bench.Options) { o.Fanout, o.Payload = 10000, 1<<20 }, "--fanout"},
		{"a negative timeout", func(o *bench.Options) { o.Timeout = -time.Second }, "--timeout"},
	}
	for _, tc := range tests {
		o := bench.Defaults()
		tc.set(&o)
		_, err := bench.Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.field)
		}
	}
}

// Two servers on one PostgreSQL database share the work: workers and
// schedulers are spread over them and every activity completes.
func TestRunSpreadsOverServersOnPostgres(t *testing.T) {
	t.Parallel()
	o := bench.Defaults()
	o.Activities, o.Workers, o.Slots, o.Concurrency, o.Batch = 400, 2, 8, 2, 20
	o.Store, o.Servers = pgtest.Fresh(t, 0), 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Activities != 400 || rep.Errors != 0 || rep.Servers != 2 {
		t.Fatalf("report %+v", rep)
	}
}
