package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
)

// apiCall sends one JSON API request (token as bearer unless empty) and
// decodes the JSON object it answers, failing unless the status is want.
func apiCall(t *testing.T, method, url, token, body string, want int) map[string]any {
	t.Helper()
	code, raw := httpCall(t, method, url, token, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, code, raw, want)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, url, err, raw)
	}
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// startBody is a StartWorkflowRequest as JSON.
func startBody(ns, id, typ, input string) string {
	return fmt.Sprintf(`{"namespace":%q,"workflow_id":%q,"workflow_type":%q,"input":%q}`, ns, id, typ, b64(input))
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// runIDs lists the workflow ids of a ListWorkflows answer, in order.
func runIDs(res map[string]any) []string {
	var ids []string
	for _, r := range list(res["runs"]) {
		ids = append(ids, obj(r)["workflow_id"].(string))
	}
	return ids
}

// eventKinds names each event of a history answer by its set field,
// prefixed with its seq.
func eventKinds(res map[string]any) []string {
	var out []string
	for _, e := range list(res["events"]) {
		ev := obj(e)
		for k := range ev {
			if k != "seq" && k != "time" {
				out = append(out, fmt.Sprintf("%v:%s", ev["seq"], k))
			}
		}
	}
	return out
}

// workflowWorker registers a worker that runs workflow type "order" at
// build b1 and activity type "charge" in namespace ns.
func workflowWorker(t *testing.T, srv *servertest.Server, ns string) *servertest.Worker {
	t.Helper()
	return srv.Connect(t, &aionv1.Register{Namespaces: []string{ns}, ActivityTypes: []string{"charge"}, Slots: 2,
		WorkflowTypes: []string{"order"}, BuildId: "b1", Identity: "order-worker"})
}

func mustAccept(t *testing.T, ack *aionv1.WorkflowTaskAck) {
	t.Helper()
	if ack.GetRefused() != "" {
		t.Fatalf("workflow task refused: %s", ack.GetRefused())
	}
}

// TestHTTPWorkflowRoutesStartReadAndChangeRuns walks a run through the JSON
// API as a worker advances it: start (idempotent), the run with its pending
// activity (and the worker running it) and timer, its history in order and
// by page, its close; then list filters and paging, signal, cancel with an
// empty body, terminate, and a workflow id holding an escaped '/'.
func TestHTTPWorkflowRoutesStartReadAndChangeRuns(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	w := workflowWorker(t, srv, "w")
	base := "http://" + srv.HTTPAddr() + "/api/v1/workflows"

	started := obj(apiCall(t, "POST", base, "", startBody("w", "o-1", "order", `{"items":2}`), 200)["run"])
	runID, _ := started["run_id"].(string)
	if runID == "" || started["status"] != "RUN_STATUS_RUNNING" || !reflect.DeepEqual(started["input"], map[string]any{"items": float64(2)}) {
		t.Fatalf("start answered %v", started)
	}
	again := apiCall(t, "POST", base, "", startBody("w", "o-1", "order", `{"items":2}`), 200)
	if again["existing"] != true || obj(again["run"])["run_id"] != runID {
		t.Fatalf("repeated start answered %v, want the same run, existing", again)
	}
	if e := apiCall(t, "POST", base, "", startBody("w", "o-1", "order", `{"items":3}`), 409); e["code"] != "AlreadyExists" {
		t.Fatalf("start with another input: %v", e)
	}

	task := w.WorkflowTask()
	mustAccept(t, w.AnswerWorkflowTask(task,
		servertest.ScheduleActivity(1, "charge", []byte(`{"amount":3}`)),
		servertest.StartTimer(2, "cool-off", time.Hour)))
	charge := w.Task()

	run := obj(apiCall(t, "GET", base+"/w/o-1", "", "", 200)["run"])
	if run["build_id"] != "b1" || run["history_length"] != "4" || run["task_queue"] != "default" {
		t.Errorf("run = %v, want build b1, 4 events, queue default", run)
	}
	steps := list(run["pending_steps"])
	if len(steps) != 2 {
		t.Fatalf("pending steps = %v, want the activity and the timer", steps)
	}
	act, timer := obj(steps[0]), obj(steps[1])
	wantAct := map[string]any{"step": "1", "kind": "STEP_KIND_ACTIVITY", "name": "charge", "activity_id": charge.GetActivityId(),
		"attempt": float64(1), "worker_id": fmt.Sprint(w.ID)}
	if !reflect.DeepEqual(act, wantAct) {
		t.Errorf("pending activity = %v, want %v", act, wantAct)
	}
	if timer["step"] != "2" || timer["kind"] != "STEP_KIND_TIMER" || timer["name"] != "cool-off" || timer["fire_time"] == nil {
		t.Errorf("pending timer = %v", timer)
	}

	hist := apiCall(t, "GET", base+"/w/o-1/history", "", "", 200)
	want := []string{"1:workflow_started", "2:workflow_task_completed", "3:activity_scheduled", "4:timer_started"}
	if got := eventKinds(hist); !reflect.DeepEqual(got, want) {
		t.Fatalf("history = %v, want %v", got, want)
	}
	evs := list(hist["events"])
	if in := obj(obj(evs[0])["workflow_started"])["input"]; !reflect.DeepEqual(in, map[string]any{"items": float64(2)}) {
		t.Errorf("started input = %#v, want the JSON", in)
	}
	if wtc := obj(obj(evs[1])["workflow_task_completed"]); wtc["build_id"] != "b1" || wtc["worker_id"] != fmt.Sprint(w.ID) {
		t.Errorf("task completed = %v", wtc)
	}
	if sched := obj(obj(evs[2])["activity_scheduled"]); !reflect.DeepEqual(sched["input"], map[string]any{"amount": float64(3)}) ||
		sched["activity_id"] != charge.GetActivityId() {
		t.Errorf("activity scheduled = %v", sched)
	}
	page := apiCall(t, "GET", base+"/w/o-1/history?page_size=3", "", "", 200)
	if got := eventKinds(page); len(got) != 3 || page["next_page_token"] != "3" {
		t.Fatalf("first page = %v, token %v", got, page["next_page_token"])
	}
	rest := apiCall(t, "GET", base+"/w/o-1/history?page_size=3&page_token=3", "", "", 200)
	if got := eventKinds(rest); !reflect.DeepEqual(got, want[3:]) || rest["next_page_token"] != nil {
		t.Fatalf("second page = %v, token %v", got, rest["next_page_token"])
	}

	if ack := w.Complete(charge, []byte(`{"charged":3}`)); ack.GetRefused() != "" {
		t.Fatal(ack)
	}
	mustAccept(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.CompleteRun([]byte(`{"ok":true}`))))
	done := obj(apiCall(t, "GET", base+"/w/o-1?run_id="+runID, "", "", 200)["run"])
	if done["status"] != "RUN_STATUS_COMPLETED" || !reflect.DeepEqual(done["result"], map[string]any{"ok": true}) || done["close_time"] == nil {
		t.Errorf("closed run = %v", done)
	}
	want = append(want, "5:activity_closed", "6:workflow_task_completed", "7:workflow_closed")
	if got := eventKinds(apiCall(t, "GET", base+"/w/o-1/history", "", "", 200)); !reflect.DeepEqual(got, want) {
		t.Fatalf("history after the close = %v, want %v", got, want)
	}

	// Runs nobody serves: listed newest first, filtered, paged.
	for _, id := range []string{"r-2", "r-3"} {
		apiCall(t, "POST", base, "", startBody("w", id, "report", `{}`), 200)
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"r-3", "r-2", "o-1"}},
		{"&status=completed", []string{"o-1"}},
		{"&status=RUN_STATUS_RUNNING", []string{"r-3", "r-2"}},
		{"&status=Terminated", nil},
		{"&type=report", []string{"r-3", "r-2"}},
		{"&type=order&status=running", nil},
	} {
		if got := runIDs(apiCall(t, "GET", base+"?namespace=w"+c.query, "", "", 200)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("list%s = %v, want %v", c.query, got, c.want)
		}
	}
	first := apiCall(t, "GET", base+"?namespace=w&page_size=2", "", "", 200)
	next, _ := first["next_page_token"].(string)
	if got := runIDs(first); !reflect.DeepEqual(got, []string{"r-3", "r-2"}) || next == "" {
		t.Fatalf("first page = %v, token %q", got, next)
	}
	if got := runIDs(apiCall(t, "GET", base+"?namespace=w&page_size=2&page_token="+next, "", "", 200)); !reflect.DeepEqual(got, []string{"o-1"}) {
		t.Fatalf("second page = %v, want [o-1]", got)
	}
	for _, r := range list(first["runs"]) {
		if obj(r)["input"] != nil {
			t.Errorf("a listed run carries its input: %v", r)
		}
	}

	// Signal, cancel (no body) and terminate, each as history shows it.
	sig := apiCall(t, "POST", base+"/w/r-2/signal", "", fmt.Sprintf(`{"signal_name":"poke","input":%q}`, b64(`{"n":1}`)), 200)
	if sig["event_seq"] != "2" {
		t.Errorf("signal answered %v, want event_seq 2", sig)
	}
	if c := obj(apiCall(t, "POST", base+"/w/r-2/cancel", "", "", 200)["run"]); c["status"] != "RUN_STATUS_RUNNING" {
		t.Errorf("cancel answered %v, want the run still running until its code acknowledges", c)
	}
	evs = list(apiCall(t, "GET", base+"/w/r-2/history", "", "", 200)["events"])
	if got := eventKinds(map[string]any{"events": evs}); !reflect.DeepEqual(got, []string{"1:workflow_started", "2:signal_received", "3:cancel_requested"}) {
		t.Fatalf("r-2 history = %v", got)
	}
	if s := obj(obj(evs[1])["signal_received"]); s["name"] != "poke" || !reflect.DeepEqual(s["input"], map[string]any{"n": float64(1)}) {
		t.Errorf("signal event = %v", s)
	}
	term := obj(apiCall(t, "POST", base+"/w/r-3/terminate", "", `{"reason":"stuck"}`, 200)["run"])
	if term["status"] != "RUN_STATUS_TERMINATED" || !strings.Contains(fmt.Sprint(obj(term["failure"])["message"]), "stuck") {
		t.Errorf("terminate answered %v", term)
	}
	if e := apiCall(t, "POST", base+"/w/r-3/cancel", "", `{"reason":"late"}`, 412); e["code"] != "FailedPrecondition" {
		t.Errorf("cancel of a terminated run: %v", e)
	}

	// An id with a '/' (a child's default id has one) travels escaped.
	apiCall(t, "POST", base, "", startBody("w", "batch/7", "report", `{}`), 200)
	if got := obj(apiCall(t, "GET", base+"/w/batch%2F7", "", "", 200)["run"]); got["workflow_id"] != "batch/7" {
		t.Errorf("GET batch%%2F7 = %v", got)
	}
	if got := eventKinds(apiCall(t, "GET", base+"/w/batch%2F7/history", "", "", 200)); len(got) != 1 {
		t.Errorf("history of batch/7 = %v", got)
	}
	apiCall(t, "POST", base+"/w/batch%2F7/terminate", "", "", 200)
}

// TestHTTPWorkflowBadInputIsRefusedNamingTheFieldAndValue: every route
// answers bad input with 400 (or the status of what is wrong) naming the
// field and the value, and changes nothing.
func TestHTTPWorkflowBadInputIsRefusedNamingTheFieldAndValue(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	base := "http://" + srv.HTTPAddr() + "/api/v1/workflows"
	apiCall(t, "POST", base, "", startBody("w", "o-1", "order", `{}`), 200)
	for _, c := range []struct {
		method, path, body string
		code               int
		says               []string
	}{
		{"GET", "?namespace=w&status=done", "", 400, []string{"status", `"done"`}},
		{"GET", "?namespace=w&status=RUN_STATUS_UNSPECIFIED", "", 400, []string{"status", "RUN_STATUS_UNSPECIFIED"}},
		{"GET", "?namespace=w&page_size=ten", "", 400, []string{"page_size", `"ten"`}},
		{"GET", "?namespace=w&page_size=-1", "", 400, []string{"page_size", `"-1"`}},
		{"GET", "?namespace=w&page_token=zz", "", 400, []string{"page_token", `"zz"`}},
		{"GET", "", "", 400, []string{"namespace", "empty"}},
		{"GET", "?namespace=bad%20ns", "", 400, []string{"namespace", `"bad ns"`}},
		{"GET", "/w/o-1/history?page_token=-4", "", 400, []string{"page_token", `"-4"`}},
		{"GET", "/w/o-1/history?page_size=x", "", 400, []string{"page_size", `"x"`}},
		{"GET", "/w/nope", "", 404, []string{"workflow_id", `"nope"`}},
		{"GET", "/w/o-1?run_id=nope", "", 404, []string{"run_id", `"nope"`}},
		{"POST", "", `{"namespace":"w","workflow_type":"bad type"}`, 400, []string{"workflow_type", `"bad type"`}},
		{"POST", "", `{"namespace":"w","workflow_type":"t","id_reuse":"ID_REUSE_POLICY_SOMETIMES"}`, 400, []string{"body", "ID_REUSE_POLICY_SOMETIMES"}},
		{"POST", "", `not json`, 400, []string{"body"}},
		{"POST", "", ``, 400, []string{"body"}},
		{"POST", "/w/o-1/signal", `{}`, 400, []string{"signal_name", "empty"}},
		{"POST", "/w/o-1/signal", `{"signal_name":"a b"}`, 400, []string{"signal_name", `"a b"`}},
		{"POST", "/w/o-1/signal", ``, 400, []string{"body"}},
		{"POST", "/w/o-1/signal", `{"signal_name":"s","namespace":"x"}`, 400, []string{"namespace", `"x"`, `"w"`}},
		{"POST", "/w/o-1/signal", `{"signal_name":"s","workflow_id":"o-2"}`, 400, []string{"workflow_id", `"o-2"`, `"o-1"`}},
		{"POST", "/w/o-1/signal?run_id=r1", `{"signal_name":"s","run_id":"r2"}`, 400, []string{"run_id", `"r2"`, `"r1"`}},
		{"POST", "/w/o-1/cancel", `{"reason":7}`, 400, []string{"body"}},
		{"POST", "/w/nope/terminate", ``, 404, []string{"workflow_id", `"nope"`}},
	} {
		code, body := httpCall(t, c.method, base+c.path, "", c.body)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != c.code {
			t.Errorf("%s %s %s: %d %s, want %d with a JSON error", c.method, c.path, c.body, code, body, c.code)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(e.Message, s) {
				t.Errorf("%s %s %s: %q does not say %s", c.method, c.path, c.body, e.Message, s)
			}
		}
		if strings.HasPrefix(e.Message, "rpc error") {
			t.Errorf("%s %s %s: message %q carries the gRPC error prefix", c.method, c.path, c.body, e.Message)
		}
	}
	// Nothing changed: o-1 has its one event, and no other run started.
	if got := eventKinds(apiCall(t, "GET", base+"/w/o-1/history", "", "", 200)); !reflect.DeepEqual(got, []string{"1:workflow_started"}) {
		t.Errorf("o-1 history after the bad requests = %v", got)
	}
	if got := runIDs(apiCall(t, "GET", base+"?namespace=w", "", "", 200)); !reflect.DeepEqual(got, []string{"o-1"}) {
		t.Errorf("runs after the bad requests = %v", got)
	}
}

// TestHTTPWorkflowRoutesKeepNamespacesApart: a caller granted tenant-a
// neither reads nor changes tenant-b's runs through any route, a body
// cannot point a route at another namespace, a reader reads and changes
// nothing, and a token in the query string is refused.
func TestHTTPWorkflowRoutesKeepNamespacesApart(t *testing.T) {
	t.Parallel()
	b := setup(t, withReaderKeys)
	base := "http://" + b.srv.HTTPAddr() + "/api/v1/workflows"
	apiCall(t, "POST", base, "admin-secret", startBody("tenant-a", "a-1", "order", `{}`), 200)
	apiCall(t, "POST", base, "admin-secret", startBody("tenant-b", "b-1", "order", `{"secret":"of b"}`), 200)

	for _, c := range []struct {
		token, method, path, body string
		code                      int
	}{
		{"tenant-a-client-secret", "GET", "?namespace=tenant-b", "", 403},
		{"tenant-a-client-secret", "GET", "/tenant-b/b-1", "", 403},
		{"tenant-a-client-secret", "GET", "/tenant-b/b-1/history", "", 403},
		{"tenant-a-client-secret", "POST", "/tenant-b/b-1/signal", `{"signal_name":"s"}`, 403},
		{"tenant-a-client-secret", "POST", "/tenant-b/b-1/cancel", "", 403},
		{"tenant-a-client-secret", "POST", "/tenant-b/b-1/terminate", "", 403},
		{"tenant-a-client-secret", "POST", "", startBody("tenant-b", "b-2", "order", `{}`), 403},
		{"tenant-a-client-secret", "POST", "/tenant-a/b-1/terminate", `{"namespace":"tenant-b"}`, 400},
		{"tenant-a-client-secret", "POST", "/tenant-a/b-1/terminate", "", 404},
		{"tenant-a-worker-secret", "GET", "?namespace=tenant-a", "", 403},
		{"tenant-a-reader-secret", "GET", "/tenant-a/a-1", "", 200},
		{"tenant-a-reader-secret", "GET", "/tenant-a/a-1/history", "", 200},
		{"tenant-a-reader-secret", "GET", "/tenant-b/b-1", "", 403},
		{"tenant-a-reader-secret", "POST", "/tenant-a/a-1/signal", `{"signal_name":"s"}`, 403},
		{"tenant-a-reader-secret", "POST", "/tenant-a/a-1/cancel", "", 403},
		{"tenant-a-reader-secret", "POST", "/tenant-a/a-1/terminate", "", 403},
		{"tenant-a-reader-secret", "POST", "", startBody("tenant-a", "a-2", "order", `{}`), 403},
		{"", "GET", "?namespace=tenant-a", "", 401},
		{"", "POST", "/tenant-a/a-1/cancel?access_token=tenant-a-client-secret", "", 401},
		{"", "GET", "/tenant-a/a-1?access_token=tenant-a-client-secret", "", 401},
	} {
		code, body := httpCall(t, c.method, base+c.path, c.token, c.body)
		if code != c.code {
			t.Errorf("%s %s as %q: %d %.300s, want %d", c.method, c.path, c.token, code, body, c.code)
		}
		if strings.Contains(body, "of b") {
			t.Errorf("%s %s as %q leaked tenant-b's input: %s", c.method, c.path, c.token, body)
		}
	}
	if got := runIDs(apiCall(t, "GET", base+"?namespace=tenant-a", "tenant-a-reader-secret", "", 200)); !reflect.DeepEqual(got, []string{"a-1"}) {
		t.Errorf("tenant-a's list = %v, want [a-1]", got)
	}
	// Nothing changed in either namespace.
	for _, ref := range []string{"/tenant-a/a-1", "/tenant-b/b-1"} {
		run := obj(apiCall(t, "GET", base+ref, "admin-secret", "", 200)["run"])
		if run["status"] != "RUN_STATUS_RUNNING" || run["history_length"] != "1" {
			t.Errorf("%s after the refused calls: %v", ref, run)
		}
	}
	if got := runIDs(apiCall(t, "GET", base+"?namespace=tenant-b", "admin-secret", "", 200)); !reflect.DeepEqual(got, []string{"b-1"}) {
		t.Errorf("tenant-b's runs = %v, want [b-1]", got)
	}
}
