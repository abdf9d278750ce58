package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
)

// TestWorkflowMetricsCountRunsAndTasks runs two workflows to their close by
// hand, one through two failed tasks, and reads the workflow series off
// /metrics.
func TestWorkflowMetricsCountRunsAndTasks(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	w := workflowWorker(t, srv, "m")
	wf := aionv1.NewWorkflowServiceClient(srv.Dial(t))
	ctx := context.Background()
	start := func(id string) {
		t.Helper()
		if _, err := wf.Start(ctx, &aionv1.StartWorkflowRequest{Namespace: "m", WorkflowId: id, WorkflowType: "order"}); err != nil {
			t.Fatal(err)
		}
	}

	// r-1: an activity step, then the close. Two tasks of 1 and 4 events;
	// 6 events in history.
	start("r-1")
	mustAccept(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.ScheduleActivity(1, "charge", nil)))
	if ack := w.Complete(w.Task(), []byte(`1`)); ack.GetRefused() != "" {
		t.Fatal(ack)
	}
	mustAccept(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.CompleteRun(nil)))

	// r-2: a non-deterministic failure, a failure of a type the server does
	// not know, then the close. Three tasks of 1 event; 3 events in history.
	start("r-2")
	mustAccept(t, w.FailWorkflowTask(w.WorkflowTask(), &aionv1.Failure{Type: "nondeterministic", Message: "step 1 differs"}))
	mustAccept(t, w.FailWorkflowTask(w.WorkflowTask(), &aionv1.Failure{Type: "made-up-by-worker-42", Message: "boom"}))
	mustAccept(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.CompleteRun(nil)))

	b := &bundle{srv: srv.Server}
	want := map[string]float64{
		`aion_workflow_runs_started_total{namespace="m"}`:                          2,
		`aion_workflow_runs_closed_total{namespace="m",status="completed"}`:        2,
		`aion_workflow_history_events_count{namespace="m"}`:                        2,
		`aion_workflow_history_events_sum{namespace="m"}`:                          9,
		`aion_workflow_tasks_total{namespace="m"}`:                                 5,
		`aion_workflow_tasks_completed_total{namespace="m"}`:                       3,
		`aion_workflow_task_failures_total{namespace="m",type="nondeterministic"}`: 1,
		`aion_workflow_task_failures_total{namespace="m",type="other"}`:            1,
		`aion_workflow_replays_total{namespace="m"}`:                               1, // r-1's second task: whole history, code had run
		`aion_workflow_task_events_count{namespace="m"}`:                           5,
		`aion_workflow_task_events_sum{namespace="m"}`:                             8,
		`aion_workflow_task_seconds_count{namespace="m"}`:                          5,
	}
	var m map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m = b.scrape(t)
		caughtUp := true
		for series, v := range want {
			caughtUp = caughtUp && m[series] == v
		}
		if caughtUp || time.Now().After(deadline) {
			break
		}
	}
	for series, v := range want {
		if got, ok := m[series]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, v)
		}
	}
	if s := m[`aion_workflow_task_seconds_sum{namespace="m"}`]; s <= 0 || s > 60 {
		t.Errorf("workflow task seconds sum = %v, want the few moments the tasks took", s)
	}
	for series := range m {
		if strings.Contains(series, "made-up") || strings.Contains(series, "run_id") || strings.Contains(series, "workflow_id") {
			t.Errorf("unbounded label in %s", series)
		}
	}
}

// sseEvent is one frame of the event stream.
type sseEvent struct {
	kind string
	data map[string]any
}

// sseEvents opens the event stream with token (none when empty) and sends
// its frames, snapshot first, on the channel until the test ends.
func sseEvents(t *testing.T, url, token string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	ch := make(chan sseEvent, 256)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			if k, ok := strings.CutPrefix(line, "event: "); ok {
				kind = k
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				var data map[string]any
				if err := json.Unmarshal([]byte(d), &data); err != nil {
					data = map[string]any{"undecodable": d}
				}
				select {
				case ch <- sseEvent{kind, data}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// runEvents reads the stream until it has n run events and returns them,
// failing on anything that is not JSON or on a sequence that goes back.
func runEvents(t *testing.T, ch <-chan sseEvent, n int) []sseEvent {
	t.Helper()
	return kindEvents(t, ch, "run_", n)
}

// kindEvents is runEvents for the events whose kind starts with prefix.
func kindEvents(t *testing.T, ch <-chan sseEvent, prefix string, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var last uint64
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("event stream ended after %d run events", len(out))
			}
			if u, bad := e.data["undecodable"]; bad {
				t.Fatalf("frame %s is not JSON: %v", e.kind, u)
			}
			if e.kind == "snapshot" {
				continue // its sequence is the last delta before it, 0 (left out) at first
			}
			seqText, _ := e.data["sequence"].(string)
			seq, err := strconv.ParseUint(seqText, 10, 64)
			if err != nil || seq <= last {
				t.Fatalf("frame %s has sequence %v after %d", e.kind, e.data["sequence"], last)
			}
			last = seq
			if strings.HasPrefix(e.kind, prefix) {
				out = append(out, e)
			}
		case <-deadline:
			t.Fatalf("only %d %s events within 10s, want %d", len(out), prefix, n)
		}
	}
	return out
}

// TestEventStreamCarriesRunStartsAndClosesScopedByNamespace: the HTTP event
// stream has run_started and run_closed, in order, each naming the run; a
// caller granted one namespace sees only its runs; the gRPC Watch, whose
// message has no run kinds, leaves them out and goes on with the topology.
func TestEventStreamCarriesRunStartsAndClosesScopedByNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = []auth.APIKey{
			key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*"),
			key("a-admin", "a-admin-secret", []auth.Role{auth.RoleAdmin}, "tenant-a"),
			key("fleet", "fleet-secret", []auth.Role{auth.RoleWorker}, "*"),
		}
	})
	events := "http://" + b.srv.HTTPAddr() + "/api/v1/events"
	all := sseEvents(t, events, "admin-secret")
	mine := sseEvents(t, events, "a-admin-secret")
	watch := b.as(t, "admin-secret").watch(t)
	nextDelta(t, watch) // the snapshot

	base := "http://" + b.srv.HTTPAddr() + "/api/v1/workflows"
	apiCall(t, "POST", base, "admin-secret", startBody("tenant-b", "b-1", "order", `{}`), 200)
	aRun := obj(apiCall(t, "POST", base, "admin-secret", startBody("tenant-a", "a-1", "order", `{}`), 200)["run"])
	apiCall(t, "POST", base+"/tenant-b/b-1/terminate", "admin-secret", "", 200)
	apiCall(t, "POST", base+"/tenant-a/a-1/terminate", "admin-secret", `{"reason":"done"}`, 200)

	type seen struct{ kind, ns, id, status string }
	describe := func(evs []sseEvent) []seen {
		var out []seen
		for _, e := range evs {
			run := obj(obj(e.data[e.kind])["run"])
			out = append(out, seen{e.kind, run["namespace"].(string), run["workflow_id"].(string), run["status"].(string)})
		}
		return out
	}
	wantAll := []seen{
		{"run_started", "tenant-b", "b-1", "RUN_STATUS_RUNNING"},
		{"run_started", "tenant-a", "a-1", "RUN_STATUS_RUNNING"},
		{"run_closed", "tenant-b", "b-1", "RUN_STATUS_TERMINATED"},
		{"run_closed", "tenant-a", "a-1", "RUN_STATUS_TERMINATED"},
	}
	if got := describe(runEvents(t, all, 4)); !slices.Equal(got, wantAll) {
		t.Errorf("admin's stream: %v, want %v", got, wantAll)
	}
	mineEvs := runEvents(t, mine, 2)
	if got := describe(mineEvs); !slices.Equal(got, []seen{wantAll[1], wantAll[3]}) {
		t.Errorf("tenant-a admin's stream: %v, want only tenant-a's run", got)
	}
	started := obj(obj(mineEvs[0].data["run_started"])["run"])
	if started["run_id"] != aRun["run_id"] || started["workflow_type"] != "order" || started["task_queue"] != "default" ||
		started["start_time"] == nil || mineEvs[0].data["time"] == nil {
		t.Errorf("run_started = %v, want the run's id, type, queue and start time", mineEvs[0].data)
	}
	if closed := obj(obj(mineEvs[1].data["run_closed"])["run"]); closed["close_time"] == nil {
		t.Errorf("run_closed = %v, want its close time", mineEvs[1].data)
	}

	// The gRPC watcher sees the same run events, in order, then the
	// worker connecting.
	var runIDs []string
	w := b.as(t, "fleet-secret").mustConnect(t, &aionv1.Register{Namespaces: []string{"tenant-a"}, ActivityTypes: []string{"job"}})
	for {
		e := nextDelta(t, watch)
		switch {
		case e.GetEvent() == nil:
			t.Fatalf("Watch sent an event without a kind: %v", e)
		case e.GetNamespaceCreated() != nil:
			continue // the starts minted tenant-a and tenant-b
		case e.GetRunStarted() != nil:
			runIDs = append(runIDs, "started "+e.GetRunStarted().GetRun().GetWorkflowId())
			continue
		case e.GetRunClosed() != nil:
			if e.GetRunClosed().GetRun().GetCloseTime() == nil {
				t.Fatalf("run_closed without a close time: %v", e)
			}
			runIDs = append(runIDs, "closed "+e.GetRunClosed().GetRun().GetWorkflowId())
			continue
		}
		if got := e.GetWorkerConnected().GetWorker().GetId(); got != w.id {
			t.Fatalf("after the runs, Watch sent %v, want the new worker %d connecting", e, w.id)
		}
		break
	}
	if len(runIDs) != 4 {
		t.Fatalf("Watch sent run events %v, want both runs started and closed", runIDs)
	}
}

// The event stream tells of schedule fires, each to the callers of its
// namespace only.
func TestEventStreamCarriesScheduleFiresScopedByNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = []auth.APIKey{
			key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*"),
			key("a-admin", "a-admin-secret", []auth.Role{auth.RoleAdmin}, "tenant-a"),
		}
	})
	events := "http://" + b.srv.HTTPAddr() + "/api/v1/events"
	all := sseEvents(t, events, "admin-secret")
	mine := sseEvents(t, events, "a-admin-secret")
	base := "http://" + b.srv.HTTPAddr() + "/api/v1/schedules"
	for _, ns := range []string{"tenant-b", "tenant-a"} {
		apiCall(t, "POST", base, "admin-secret", scheduleBody(ns, "hourly"), 200)
		apiCall(t, "POST", base+"/"+ns+"/hourly/trigger", "admin-secret", "", 200)
	}
	fire := func(e sseEvent) map[string]any { return obj(e.data["schedule_fired"]) }
	got := kindEvents(t, all, "schedule_", 2)
	if fire(got[0])["namespace"] != "tenant-b" || fire(got[1])["namespace"] != "tenant-a" {
		t.Fatalf("admin's stream: %v, %v", got[0].data, got[1].data)
	}
	f := fire(kindEvents(t, mine, "schedule_", 1)[0])
	if f["namespace"] != "tenant-a" || f["schedule_id"] != "hourly" || f["outcome"] != "SCHEDULE_ACTION_OUTCOME_STARTED" ||
		f["origin"] != "trigger" || !strings.HasPrefix(fmt.Sprint(f["action_id"]), "hourly@") || f["nominal_time"] == nil {
		t.Fatalf("tenant-a's fire = %v, want its trigger started under a tick's action id", f)
	}
}
