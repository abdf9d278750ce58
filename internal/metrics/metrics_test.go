package metrics_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/metrics"
	"github.com/aion-run/aion/internal/reaper"
	"github.com/aion-run/aion/internal/store"
)

// The workflow metrics are what the engine's workflow observer is told.
var _ engine.WorkflowObserver = (*metrics.Workflows)(nil)

// scrape serves the metrics through their handler and returns every sample
// by its series text.
func scrape(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func TestWorkflowObserverCountsRunsAndTasksByNamespace(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	wf := m.Workflows()
	wf.RunStarted("a")
	wf.RunStarted("a")
	wf.RunStarted("b")
	wf.RunClosed("a", store.RunCompleted, 7)
	wf.RunClosed("a", store.RunContinuedAsNew, 100)
	wf.TaskStarted("a", true, 1)
	wf.TaskStarted("a", false, 3)
	wf.TaskCompleted("a")
	wf.TaskFailed("a", "nondeterministic")
	wf.TaskFailed("a", "workflow_task_timeout")
	wf.TaskFailed("a", "bad_history")
	wf.TaskFailed("a", "whatever-a-worker-says")
	wf.TaskFailed("a", "and-another")
	wf.TaskLatency("a", 250*time.Millisecond, false)
	wf.TaskLatency("a", 50*time.Millisecond, true)

	got := scrape(t, m)
	for series, want := range map[string]float64{
		`aion_workflow_runs_started_total{namespace="a"}`:                               2,
		`aion_workflow_runs_started_total{namespace="b"}`:                               1,
		`aion_workflow_runs_closed_total{namespace="a",status="completed"}`:             1,
		`aion_workflow_runs_closed_total{namespace="a",status="continued_as_new"}`:      1,
		`aion_workflow_history_events_sum{namespace="a"}`:                               107,
		`aion_workflow_history_events_bucket{namespace="a",le="16"}`:                    1,
		`aion_workflow_tasks_total{namespace="a"}`:                                      2,
		`aion_workflow_replays_total{namespace="a"}`:                                    1,
		`aion_workflow_task_events_sum{namespace="a"}`:                                  4,
		`aion_workflow_tasks_completed_total{namespace="a"}`:                            1,
		`aion_workflow_task_failures_total{namespace="a",type="nondeterministic"}`:      1,
		`aion_workflow_task_failures_total{namespace="a",type="workflow_task_timeout"}`: 1,
		`aion_workflow_task_failures_total{namespace="a",type="bad_history"}`:           1,
		`aion_workflow_task_failures_total{namespace="a",type="other"}`:                 2,
		`aion_workflow_task_seconds_sum{namespace="a"}`:                                 0.3,
		`aion_workflow_task_seconds_count{namespace="a"}`:                               2,
		`aion_workflow_replay_seconds_sum{namespace="a"}`:                               0.05,
		`aion_workflow_replay_seconds_count{namespace="a"}`:                             1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for series := range got {
		if strings.Contains(series, "whatever") || strings.Contains(series, "another") {
			t.Errorf("a worker's own failure type became a label: %s", series)
		}
	}
}

func TestScheduleObserverCountsFiresTicksNotFiredAndLag(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	sc := m.Schedules()
	sc.Fired("a", "tick", 2*time.Second)
	sc.Fired("a", "tick", 0)
	sc.Fired("a", "backfill", time.Second)
	sc.Fired("b", "trigger", 0)
	sc.Skipped("a", 3)
	sc.Missed("a", 10)
	sc.Failed("a")

	got := scrape(t, m)
	for series, want := range map[string]float64{
		`aion_schedule_fires_total{namespace="a",origin="tick"}`:              2,
		`aion_schedule_fires_total{namespace="a",origin="backfill"}`:          1,
		`aion_schedule_fires_total{namespace="b",origin="trigger"}`:           1,
		`aion_schedule_ticks_not_fired_total{namespace="a",reason="overlap"}`: 3,
		`aion_schedule_ticks_not_fired_total{namespace="a",reason="missed"}`:  10,
		`aion_schedule_fire_failures_total{namespace="a"}`:                    1,
		`aion_schedule_fire_lag_seconds_sum{namespace="a"}`:                   3,
		`aion_schedule_fire_lag_seconds_count{namespace="a"}`:                 3,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
}

// The retention metrics are what the reaper's observer is told.
var _ reaper.Observer = (*metrics.Reaping)(nil)

func TestReapingCountsDeletedRowsByNamespaceAndKind(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	r := m.Reaping()
	r.Reaped("a", reaper.KindActivity, 500)
	r.Reaped("a", reaper.KindActivity, 20)
	r.Reaped("a", reaper.KindRun, 3)
	r.Reaped("b", reaper.KindActivity, 1)
	r.Passed(reaper.Pass{Activities: 521, Runs: 3, Took: 40 * time.Millisecond})
	got := scrape(t, m)
	for series, want := range map[string]float64{
		`aion_reaped_total{kind="activity",namespace="a"}`: 520,
		`aion_reaped_total{kind="run",namespace="a"}`:      3,
		`aion_reaped_total{kind="activity",namespace="b"}`: 1,
		`aion_reap_pass_seconds_count`:                     1,
		`aion_reap_pass_seconds_sum`:                       0.04,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
}
