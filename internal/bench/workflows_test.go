package bench_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/bench"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/worker"
)

// ordered reports whether a distribution's figures rise from p50 to max.
func ordered(p bench.Percentiles) bool {
	return p.P50 <= p.P90 && p.P90 <= p.P99 && p.P99 <= p.Max
}

// Small runs of the workflow mode, closed and open loop, against the
// in-process server and against a running one: every workflow completes,
// each of its steps counts, and every step but the first has a gap.
func TestBenchWorkflowModeCompletesEveryWorkflowAndMeasuresTheGapBetweenSteps(t *testing.T) {
	t.Parallel()
	const workflows, steps = 6, 3
	tests := []struct {
		name    string
		arrange func(t *testing.T, o *bench.Options)
		// inFlight bounds max_in_flight.
		inFlight int
	}{
		{"closed loop on the in-process server", func(t *testing.T, o *bench.Options) { o.Concurrency = 3 }, 3},
		{"open loop against a running server", func(t *testing.T, o *bench.Options) {
			_, set := setup(t)
			o.Address, o.Rate = set.Address, 100
		}, workflows},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := bench.Defaults()
			o.Workflows, o.Steps, o.Workers, o.Slots, o.SQLiteSync = workflows, steps, 2, 2, "normal"
			tc.arrange(t, &o)
			rep, err := run(t, o)
			if err != nil {
				t.Fatalf("run: %v (report %+v)", err, rep)
			}
			if rep.Mode != bench.ModeWorkflows || rep.Workflows != workflows || rep.WorkflowsPlanned != workflows || rep.Errors != 0 ||
				rep.Steps != steps || rep.Activities != workflows*steps || rep.Scheduled != workflows*steps || rep.Calls != workflows {
				t.Fatalf("report %+v, want %d workflows of %d steps completed in %d starts, no errors", rep, workflows, steps, workflows)
			}
			if rep.StepGaps != workflows*(steps-1) {
				t.Errorf("%d step gaps, want %d: steps-1 per workflow", rep.StepGaps, workflows*(steps-1))
			}
			if rep.WorkflowsPerSec != float64(workflows)/rep.Seconds || rep.PerSec != float64(rep.Activities)/rep.Seconds {
				t.Errorf("workflows/s %v and activities/s %v, want %d and %d over %v s", rep.WorkflowsPerSec, rep.PerSec, workflows, rep.Activities, rep.Seconds)
			}
			// A gap lies inside its workflow's start-to-close.
			if rep.StepGap.P50 <= 0 || !ordered(rep.StepGap) || rep.StepGap.Max > rep.EndToEnd.Max ||
				rep.EndToEnd.P50 <= 0 || !ordered(rep.EndToEnd) || !ordered(rep.ScheduleToStart) {
				t.Errorf("implausible latencies: step gap %+v, start-to-close %+v, schedule-to-start %+v", rep.StepGap, rep.EndToEnd, rep.ScheduleToStart)
			}
			if rep.MaxInFlight < 1 || rep.MaxInFlight > tc.inFlight || len(rep.EndToEndTrend) != workflows {
				t.Errorf("at most %d open, trend %v: want 1 to %d open and one median per workflow", rep.MaxInFlight, rep.EndToEndTrend, tc.inFlight)
			}
		})
	}
}

// The fan-out's workflow starts its activities at once: the first ones
// wait for each other on the workers' slots, which activities started one
// after the other never could.
func TestBenchFanoutStartsEveryActivityAtOnceAndWaitsForAll(t *testing.T) {
	t.Parallel()
	const fanout, together = 20, 6 // together: the workers' slots, 2 × 3
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	o := bench.Defaults()
	o.Fanout, o.Workers, o.Slots, o.SQLiteSync, o.Timeout = fanout, 2, 3, "normal", 30*time.Second
	o = bench.WithHooks(o, bench.Hooks{Step: func(ctx context.Context, _ worker.ActivityInfo) error {
		mu.Lock()
		arrived++
		if arrived == together {
			close(all)
		}
		n := arrived
		mu.Unlock()
		if n > together {
			return nil
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	rep, err := run(t, o)
	if err != nil {
		t.Fatalf("run: %v (report %+v)", err, rep)
	}
	if rep.Mode != bench.ModeFanout || rep.Activities != fanout || rep.Scheduled != fanout || rep.Fanout != fanout || rep.Errors != 0 ||
		rep.Workflows != 1 || rep.WorkflowsPlanned != 1 || rep.Calls != 1 || rep.StepGaps != 0 || rep.Concurrency != 0 {
		t.Fatalf("report %+v, want one workflow with %d activities completed and no errors", rep, fanout)
	}
	if rep.PerSec != fanout/rep.Seconds || rep.EndToEnd.Max <= 0 || rep.EndToEnd.Max > rep.Seconds*1000 {
		t.Errorf("%v activities/s over %v s, start-to-close %+v: want %d over the time from start to close", rep.PerSec, rep.Seconds, rep.EndToEnd, fanout)
	}
	if rep.ScheduleToStart.Max <= 0 || !ordered(rep.ScheduleToStart) {
		t.Errorf("schedule-to-start %+v, want a distribution over the activities", rep.ScheduleToStart)
	}
}

// Workflows that do not complete are errors, never completions: a type no
// worker serves (bounded by Timeout), a step that fails, some activities of
// a fan-out that fail.
func TestBenchWorkflowModesCountWhatDidNotCompleteAsErrors(t *testing.T) {
	t.Parallel()
	failStep := func(ctx context.Context, info worker.ActivityInfo) error {
		if info.Step%2 == 0 {
			return worker.NonRetryable(errors.New("step refused by the test"))
		}
		return nil
	}
	tests := []struct {
		name          string
		set           func(o *bench.Options) bench.Options
		activities    int
		workflows     int
		errors        int
		firstErrorHas string
		errHas        string
	}{
		{
			name: "workflows of a type no worker serves, until the timeout",
			set: func(o *bench.Options) bench.Options {
				o.Workflows, o.Steps, o.Concurrency, o.Timeout = 3, 2, 2, time.Second
				return bench.WithHooks(*o, bench.Hooks{WorkflowType: "bench-unserved"})
			},
			errors: 3, firstErrorHas: "not finished within --timeout 1s", errHas: "3 of 3 workflows did not complete",
		},
		{
			name: "a fan-out of a type no worker serves, until the timeout",
			set: func(o *bench.Options) bench.Options {
				o.Fanout, o.Timeout = 5, time.Second
				return bench.WithHooks(*o, bench.Hooks{WorkflowType: "bench-unserved"})
			},
			errors: 5, firstErrorHas: "not finished within --timeout 1s", errHas: "5 of 5 activities did not complete",
		},
		{
			name: "workflows whose second step fails",
			set: func(o *bench.Options) bench.Options {
				o.Workflows, o.Steps, o.Concurrency = 3, 2, 3
				return bench.WithHooks(*o, bench.Hooks{Step: failStep})
			},
			errors: 3, firstErrorHas: "step refused by the test", errHas: "3 of 3 workflows did not complete",
		},
		{
			name: "a fan-out whose even steps fail",
			set: func(o *bench.Options) bench.Options {
				o.Fanout = 6
				return bench.WithHooks(*o, bench.Hooks{Step: failStep})
			},
			activities: 3, workflows: 1, errors: 3, firstErrorHas: "3 of the 6 activities", errHas: "3 of 6 activities did not complete",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := bench.Defaults()
			o.Workers, o.Slots, o.SQLiteSync = 1, 4, "normal"
			o = tc.set(&o)
			rep, err := run(t, o)
			if rep.Activities != tc.activities || rep.Workflows != tc.workflows || rep.Errors != tc.errors {
				t.Fatalf("report %+v (err %v), want %d activities and %d workflows completed, %d errors", rep, err, tc.activities, tc.workflows, tc.errors)
			}
			if rep.PerSec != float64(tc.activities)/rep.Seconds || rep.WorkflowsPerSec != float64(tc.workflows)/rep.Seconds {
				t.Errorf("%v activities/s, %v workflows/s over %v s: want completions only", rep.PerSec, rep.WorkflowsPerSec, rep.Seconds)
			}
			if !strings.Contains(rep.FirstError, tc.firstErrorHas) {
				t.Errorf("first error %q, want one with %q", rep.FirstError, tc.firstErrorHas)
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("run error %v, want one saying %q", err, tc.errHas)
			}
		})
	}
}

// On a PostgreSQL store every server is a cluster member: runs are held by
// the server whose workers serve them, and the bench runs them as on SQLite.
func TestBenchWorkflowModeRunsOnAPostgreSQLCluster(t *testing.T) {
	t.Parallel()
	o := bench.Defaults()
	o.Workflows, o.Steps, o.Workers, o.Slots, o.Concurrency = 4, 3, 1, 2, 2
	o.Store = pgtest.Fresh(t, 0)
	rep, err := run(t, o)
	if err != nil || rep.Workflows != 4 || rep.Errors != 0 || rep.Activities != 12 || rep.StepGaps != 8 {
		t.Fatalf("report %+v, err %v: want 4 workflows of 3 steps, 8 step gaps, no errors", rep, err)
	}
}
