package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/server"
)

// A bench run in which the server refuses some activities prints their
// count, in the summary and in JSON, keeps them out of the rate, and exits
// non-zero.
func TestBenchShowsErrorsAndCountsOnlyCompletions(t *testing.T) {
	t.Parallel()
	// A pending cap of 4: of one batch of 10, the server refuses 6 items.
	r := newCLIRig(t, func(c *server.Config) { c.MaxPendingPerNamespace = 4 })
	args := []string{"bench", "--activities", "10", "--batch", "10", "--workers", "1", "--slots", "8", "--concurrency", "1"}

	code, out, errOut := r.run(t, "", args...)
	if code == exitOK || !strings.Contains(errOut, "6 of 10 activities did not complete") {
		t.Errorf("exit %d, stderr %q: want a failure naming the 6 activities that did not complete", code, errOut)
	}
	for _, want := range []string{"4 of 10 completed", ", 6 errors", "first error:", "not yet closed", "closed loop, 1 schedulers"} {
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
	if code == exitOK || rep.Activities != 4 || rep.Scheduled != 10 || rep.Errors != 6 || rep.FirstError == "" {
		t.Errorf("exit %d, JSON %+v: want 4 of 10 completed, 6 errors and the first one", code, rep)
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
	} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
