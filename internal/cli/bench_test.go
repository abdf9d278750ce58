package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/server"
)

// A bench run in which the server refuses some activities prints their
// count, in the summary and in JSON, keeps them out of the rate, and exits
// non-zero.
func TestBenchShowsErrorsAndCountsOnlyCompletions(t *testing.T) {
	t.Parallel()
	// A pending cap of 4: of one batch of 100, the server accepts the first
	// 4 and then only as many more as have closed meanwhile (the bench's
	// worker completes them while the batch is being taken), so it refuses
	// most, and the counts must agree wherever they are shown.
	r := newCLIRig(t, func(c *server.Config) { c.MaxPendingPerNamespace = 4 })
	args := []string{"bench", "--activities", "100", "--batch", "100", "--workers", "1", "--slots", "8", "--concurrency", "1"}

	code, out, errOut := r.run(t, "", args...)
	m := regexp.MustCompile(`activities: +(\d+) of 100 completed in [0-9.]+s = \d+/s, (\d+) errors\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("summary lacks the activities line:\n%s", out)
	}
	completed, _ := strconv.Atoi(m[1])
	failed, _ := strconv.Atoi(m[2])
	if completed < 4 || failed < 1 || completed+failed != 100 {
		t.Errorf("summary: %d completed and %d errors, want at least 4 and at least 1, 100 in all", completed, failed)
	}
	if want := fmt.Sprintf("%d of 100 activities did not complete", failed); code == exitOK || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stderr %q: want a failure saying %q", code, errOut, want)
	}
	for _, want := range []string{"first error:", "not yet closed", "closed loop, 1 schedulers"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = r.run(t, "", append(args, "--json")...)
	var rep struct {
		Activities int     `json:"activities"`
		Scheduled  int     `json:"scheduled"`
		Errors     int     `json:"errors"`
		PerSec     float64 `json:"per_sec"`
		Seconds    float64 `json:"seconds"`
		FirstError string  `json:"first_error"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	if code == exitOK || rep.Activities < 4 || rep.Errors < 1 || rep.Activities+rep.Errors != 100 || rep.Scheduled != 100 ||
		!strings.Contains(rep.FirstError, "not yet closed") {
		t.Errorf("exit %d, JSON %+v: want at least 4 of 100 completed, the rest errors, and the first one", code, rep)
	}
	if rep.PerSec != float64(rep.Activities)/rep.Seconds {
		t.Errorf("per_sec %v, want completions only: %d / %v s", rep.PerSec, rep.Activities, rep.Seconds)
	}
}

// The help says what --rate and --concurrency do to the load, and which
// instants each latency runs between.
func TestBenchHelpDefinesTheLoadAndTheLatencies(t *testing.T) {
	t.Parallel()
	code, out, _ := (&invocation{}).run(t, "bench", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	out = strings.Join(strings.Fields(out), " ") // line breaks are layout
	for _, want := range []string{
		"is an open loop", "however many earlier calls are still outstanding; --concurrency does not apply",
		"end-to-end runs from each call's intended start",
		"scheduled_time is read when the server accepts the Schedule request (after checking it, before the commit that makes it durable)",
		"started_time when it hands the attempt to a worker whose slot it took, just before sending the task",
		"counts completions only",
		"--workflows N runs N workflows of the bench's own type (bench-steps), each running --steps K activities one after the other",
		"With --rate R workflow k is started at start + k/R on its own goroutine, however many earlier workflows are still open (open loop)",
		"without it --concurrency goroutines each start the next workflow when their previous one closed (closed loop)",
		"The step gap runs, inside one workflow, from a step's activity returning on a bench worker to the next step's activity starting on a bench worker",
		"--fanout M runs one workflow (bench-fanout) that starts M activities in one workflow task and waits for all of them",
		"Workflows run on either store",
		"whatever has not completed by then is an error",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// The workflow modes against a running server: --json carries the same
// fields as the activity mode plus the workflow ones, and the summary names
// the fan-out.
func TestBenchRunsWorkflowsAndAFanoutAgainstARunningServer(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	code, out, errOut := r.run(t, "", "bench", "--workflows", "4", "--steps", "3", "--workers", "1", "--slots", "2", "--concurrency", "2", "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep struct {
		Mode             string             `json:"mode"`
		Activities       int                `json:"activities"`
		Scheduled        int                `json:"scheduled"`
		Errors           int                `json:"errors"`
		PerSec           float64            `json:"per_sec"`
		Workflows        int                `json:"workflows"`
		WorkflowsPlanned int                `json:"workflows_planned"`
		WorkflowsPerSec  float64            `json:"workflows_per_sec"`
		Steps            int                `json:"steps"`
		StepGaps         int                `json:"step_gaps"`
		StepGap          map[string]float64 `json:"step_gap_ms"`
		EndToEnd         map[string]float64 `json:"end_to_end_ms"`
		ScheduleToStart  map[string]float64 `json:"schedule_to_start_ms"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	if rep.Mode != "workflows" || rep.Workflows != 4 || rep.WorkflowsPlanned != 4 || rep.Steps != 3 || rep.Activities != 12 ||
		rep.Scheduled != 12 || rep.Errors != 0 || rep.StepGaps != 8 || rep.WorkflowsPerSec <= 0 || rep.PerSec <= 0 {
		t.Fatalf("JSON %+v: want 4 workflows of 3 steps completed, 8 step gaps, no errors", rep)
	}
	for name, p := range map[string]map[string]float64{"step_gap_ms": rep.StepGap, "end_to_end_ms": rep.EndToEnd, "schedule_to_start_ms": rep.ScheduleToStart} {
		for _, q := range []string{"p50", "p90", "p99", "max"} {
			if _, ok := p[q]; !ok {
				t.Errorf("%s lacks %s: %v", name, q, p)
			}
		}
	}

	code, out, errOut = r.run(t, "", "bench", "--fanout", "8", "--workers", "1", "--slots", "4")
	if code != exitOK {
		t.Fatalf("fan-out: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"one workflow of 8 activities at once", "activities:        8 of 8 completed", ", 0 errors", "schedule-to-start: p50", "start-to-close:    p50"} {
		if !strings.Contains(out, want) {
			t.Errorf("fan-out summary lacks %q:\n%s", want, out)
		}
	}
}

// Workflows run on a PostgreSQL store too (every server there is a cluster
// member): the bench completes them and exits zero.
func TestBenchWorkflowsRunOnAPostgreSQLCluster(t *testing.T) {
	t.Parallel()
	store := pgtest.Fresh(t, 0)
	code, out, errOut := (&invocation{}).run(t, "bench", "--store", store, "--workflows", "3", "--workers", "1", "--slots", "1", "--timeout", "60s")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"3 of 3 completed", ", 0 errors", "on postgres"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// A flag of one mode given to another is refused, naming it, before
// anything runs.
func TestBenchRefusesFlagsOfAnotherMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		flag string
	}{
		{[]string{"--steps", "3"}, "--steps"},
		{[]string{"--workflows", "2", "--activities", "5"}, "--activities"},
		{[]string{"--fanout", "5", "--activities", "5"}, "--activities"},
		{[]string{"--fanout", "5", "--rate", "10"}, "--rate"},
		{[]string{"--workflows", "5", "--batch", "10"}, "--batch"},
		{[]string{"--workflows", "5", "--fanout", "5"}, "--fanout"},
		{[]string{"--timeout", "-1s"}, "--timeout"},
	}
	for _, tc := range tests {
		code, out, errOut := (&invocation{}).run(t, append([]string{"bench"}, tc.args...)...)
		if code == exitOK || !strings.Contains(errOut, tc.flag) || out != "" {
			t.Errorf("bench %v: exit %d, stdout %q, stderr %q; want a refusal naming %s", tc.args, code, out, errOut, tc.flag)
		}
	}
}
