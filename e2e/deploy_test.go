package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/deploy"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// recordScrapeEnv names a file to write this test's final scrape to, the
// aion families and the other families the queries read only: the
// recorded scrape the rule tests (deploy/prometheus/aion-rules.test.yml)
// are built from.
// Record it again with
//
//	AION_RECORD_SCRAPE=$PWD/deploy/prometheus/testdata/scrape.prom go test ./e2e -run TestDashboardAndRulesReadOnlyExportedMetrics
const recordScrapeEnv = "AION_RECORD_SCRAPE"

// TestDashboardAndRulesReadOnlyExportedMetrics runs a workload on a real
// server process that makes it export every aion metric (activities
// completed, failed and retried; waiting work with and without workers;
// workflows completed, failed, panicking and replayed; schedule ticks fired,
// skipped, missed and failed; a worker leaving; a request refused for a
// cap), then scrapes /metrics and checks that every query of the Grafana
// dashboard, the alert rules and the KEDA example names only metrics,
// labels and label values the server exports, and that every series of the
// recorded scrape the rule tests are built from is still exported.
func TestDashboardAndRulesReadOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	queries, err := deploy.AllQueries()
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := deploy.ParseExposition(deploy.RecordedScrape)
	if err != nil {
		t.Fatalf("recorded scrape: %v", err)
	}
	// Three namespaces: shop (workers), reports (work, no worker), billing
	// (a schedule whose fires fail); a fourth is refused.
	c := startServer(t, "--max-namespaces", "3")
	run := func(args ...string) string {
		t.Helper()
		out, code := c.cli(args...)
		if code != 0 {
			t.Fatalf("aion %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return out
	}

	// Missed ticks: a schedule due every second with a one-second catch-up
	// window, and the server down for longer than that.
	run("schedule", "create", "ticker", "--namespace", "shop", "--every", "1s", "--activity-type", "echo",
		"--input", "{}", "--catchup", "skip", "--catchup-window", "1s")
	c.server.signal(syscall.SIGTERM)
	c.server.exit(30 * time.Second)
	time.Sleep(3 * time.Second) // real time: the ticks of these seconds come later than their window
	c.boot()

	c.worker("shop-default", "--namespace", "shop")
	c.worker("shop-batch", "--namespace", "shop", "--task-queue", "batch", "--slots", "1")

	// Skipped ticks: each run of this schedule waits an hour for a signal,
	// so the ticks after the first find it open (overlap policy skip).
	run("schedule", "create", "nightly", "--namespace", "shop", "--every", "1s", "--workflow-type", "order",
		"--input", `{"order_id":"nightly"}`)

	// Activities completed, failed and retried; workflows completed and
	// failed.
	for range 3 {
		run("activity", "schedule", "--namespace", "shop", "--type", "echo", "--input", `{"hello":"world"}`, "--wait")
	}
	run("activity", "schedule", "--namespace", "shop", "--type", "fail", "--input", `{"times":2}`,
		"--initial-interval", "50ms", "--wait")
	run("workflow", "start", "--namespace", "shop", "--type", "order", "--input",
		`{"order_id":"o-1","ship_timeout":"0s","sleep":"0s"}`, "--wait")
	if out, code := c.cli("workflow", "start", "--namespace", "shop", "--type", "order", "--input",
		`{"order_id":"o-2","fail_charge":true}`, "--wait"); code != 2 {
		t.Fatalf("a failing order: exit %d, want 2: %s", code, out)
	}

	// Waiting work with a worker: the batch worker's one slot holds a long
	// sleep, two echoes wait behind it. Without a worker: reports.
	run("activity", "schedule", "--namespace", "shop", "--task-queue", "batch", "--type", "sleep", "--input", `{"ms":600000}`)
	for range 2 {
		run("activity", "schedule", "--namespace", "shop", "--task-queue", "batch", "--type", "echo", "--input", "{}")
	}
	run("activity", "schedule", "--namespace", "reports", "--type", "echo", "--input", "{}")

	// Failed fires: the schedule pins its activities to node n1, then the
	// namespace's placement leaves n1 out; allow_all fires each tick even
	// though the first tick's activity still waits.
	run("schedule", "create", "invoices", "--namespace", "billing", "--every", "1s", "--activity-type", "echo",
		"--input", "{}", "--node", "n1", "--overlap", "allow_all")
	eventually(t, 30*time.Second, "the first tick of billing's schedule fires", func() bool {
		ctx, cancel := short()
		defer cancel()
		v, err := c.client.GetSchedule(ctx, "billing", "invoices", 0)
		return err == nil && v.Fired > 0
	})
	run("namespace", "place", "billing", "--pinned", "n2")

	// Refused for a cap: a fourth namespace.
	if out, code := c.cli("activity", "schedule", "--namespace", "overflow", "--type", "echo", "--input", "{}"); code == 0 ||
		!strings.Contains(out, "ResourceExhausted") {
		t.Fatalf("a fourth namespace: exit %d, want a ResourceExhausted refusal: %s", code, out)
	}

	// Workflow task failures, a worker leaving and a replay: workflows on a
	// worker in this process. "boom" panics; "gate" waits for a signal,
	// which reaches it on a second worker that never ran it.
	flows := func() (stop func()) {
		w, err := worker.New(c.grpc, worker.Options{Namespaces: []string{"shop"}, TaskQueue: "flows", BuildID: "flows-1",
			StopTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		worker.RegisterWorkflow(w, "boom", func(workflow.Context, struct{}) (string, error) { panic("boom on purpose") })
		worker.RegisterWorkflow(w, "gate", func(ctx workflow.Context, _ struct{}) (string, error) {
			return workflow.ReceiveSignal[string](ctx, "open")
		})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		return func() {
			cancel()
			if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("worker: %v", err)
			}
		}
	}
	stopFirst := flows()
	start := func(id, typ string) *client.WorkflowHandle {
		h, err := client.StartWorkflow(bounded(t, 10*time.Second), c.client,
			client.StartWorkflowOptions{Namespace: "shop", WorkflowID: id, WorkflowType: typ, TaskQueue: "flows"}, struct{}{})
		if err != nil {
			t.Fatalf("start %s: %v", typ, err)
		}
		return h
	}
	start("boom-1", "boom")
	gate := start("gate-1", "gate")
	eventually(t, 30*time.Second, "the gate run waits for its signal", func() bool {
		ctx, cancel := short()
		defer cancel()
		ex, err := gate.Why(ctx)
		return err == nil && ex.Reason == "waiting_on_steps"
	})
	stopFirst()
	stopSecond := flows()
	t.Cleanup(stopSecond)
	if err := gate.Signal(bounded(t, 10*time.Second), "open", "now"); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, gate, 30*time.Second); r.Status != client.RunCompleted {
		t.Fatalf("gate run: %s, want completed", r.Status)
	}

	// Every query checks out once the schedules have fired, skipped,
	// missed and failed and the panicking run has failed a task.
	var live deploy.Exposition
	var body []byte
	var problems []error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		body = scrapeMetrics(t, c.http)
		if live, err = deploy.ParseExposition(body); err != nil {
			t.Fatalf("live scrape: %v\n%s", err, body)
		}
		problems = problems[:0]
		for _, q := range queries {
			problems = append(problems, deploy.Check(q, live)...)
		}
		problems = append(problems, missingSeries(recorded, live)...)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		t.Logf("last scrape:\n%s", body)
		return
	}
	selectors := 0
	for _, q := range queries {
		selectors += len(q.Selectors)
	}
	t.Logf("%d queries (%d selectors) read only what the server exports; the recorded scrape's %d series are exported",
		len(queries), selectors, len(recorded.Samples))
	if path := os.Getenv(recordScrapeEnv); path != "" {
		if err := os.WriteFile(path, recordable(body, queries), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded the scrape in %s", path)
	}
}

// scrapeMetrics reads the server's /metrics.
func scrapeMetrics(t *testing.T, httpAddr string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	return body
}

// missingSeries reports each series of the recorded scrape whose name and
// label names no live sample has.
func missingSeries(recorded, live deploy.Exposition) []error {
	have := live.LabelSets()
	var out []error
	seen := map[string]bool{}
	for _, s := range recorded.Samples {
		names := strings.Join(slices.Sorted(maps.Keys(s.Labels)), ",")
		if seen[s.Name+"|"+names] {
			continue
		}
		seen[s.Name+"|"+names] = true
		if !have[s.Name][names] {
			out = append(out, fmt.Errorf("recorded scrape: %s with labels {%s} is not exported (record it again, see %s)",
				s.Name, names, recordScrapeEnv))
		}
	}
	return out
}

// recordable keeps the lines of a scrape that the queries may read: the
// aion families and the other families a query names (the process's start
// time, memory, goroutines).
func recordable(body []byte, queries []deploy.Query) []byte {
	read := map[string]bool{}
	for _, q := range queries {
		for _, s := range q.Selectors {
			read[s.Metric] = true
		}
	}
	var out bytes.Buffer
	out.WriteString("# A /metrics scrape of a real aion server after the workload of the e2e test\n")
	out.WriteString("# TestDashboardAndRulesReadOnlyExportedMetrics: the aion families and the other\n")
	out.WriteString("# families the dashboard and rules read. The rule tests' input series start from it.\n")
	for line := range strings.Lines(string(body)) {
		name := line
		for _, p := range []string{"# HELP ", "# TYPE "} {
			name = strings.TrimPrefix(name, p)
		}
		if i := strings.IndexAny(name, "{ "); i > 0 {
			name = name[:i]
		}
		if strings.HasPrefix(name, "aion_") || read[name] {
			out.WriteString(line)
		}
	}
	return out.Bytes()
}
