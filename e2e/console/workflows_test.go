package console

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/chromedp/chromedp"
)

// startRun starts a workflow run through the JSON API.
func startRun(t *testing.T, base, ns, id, typ, input string) {
	t.Helper()
	sendJSON(t, http.MethodPost, base+"/api/v1/workflows", fmt.Sprintf(`{"namespace":%q,"workflow_id":%q,"workflow_type":%q,"input":%q}`,
		ns, id, typ, base64.StdEncoding.EncodeToString([]byte(input))))
}

func accepted(t *testing.T, ack *aionv1.WorkflowTaskAck) {
	t.Helper()
	if ack.GetRefused() != "" {
		t.Fatalf("workflow task refused: %s", ack.GetRefused())
	}
}

// texts is a JavaScript expression: the trimmed text of every element the
// selector matches, in document order.
func texts(selector string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%s)].map(e => e.textContent.trim())`, jsString(selector))
}

// TestConsoleWorkflowsListRunsAndShowEachRunsTimeline drives runs with a
// hand-written worker over the real worker stream, then reads them in the
// console: the list (newest first, filtered, live), a run's page with its
// pending activity (and the worker running it) and timer and its history as
// a timeline in order, a closed run's step durations and result, and a run
// whose workflow task fails.
func TestConsoleWorkflowsListRunsAndShowEachRunsTimeline(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	w := servertest.ConnectTo(t, srv.GRPCAddr(), &aionv1.Register{Namespaces: []string{"shop"}, ActivityTypes: []string{"charge"}, Slots: 2,
		Node: "n1", Identity: "order-worker", WorkflowTypes: []string{"order"}, BuildId: "build-7"})

	// order-0 runs to its end: an activity step, then the close.
	startRun(t, base, "shop", "order-0", "order", `{"items":1}`)
	accepted(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.ScheduleActivity(1, "charge", []byte(`{"amount":1}`))))
	if ack := w.Complete(w.Task(), []byte(`{"charged":1}`)); ack.GetRefused() != "" {
		t.Fatal(ack)
	}
	accepted(t, w.AnswerWorkflowTask(w.WorkflowTask(), servertest.CompleteRun([]byte(`{"ok":true}`))))

	// order-1 waits on an activity its worker is running and on a timer,
	// and has received a signal.
	startRun(t, base, "shop", "order-1", "order", `{"items":2}`)
	accepted(t, w.AnswerWorkflowTask(w.WorkflowTask(),
		servertest.ScheduleActivity(1, "charge", []byte(`{"amount":2}`)),
		servertest.StartTimer(2, "cool-off", time.Hour)))
	charge := w.Task()
	sendJSON(t, http.MethodPost, base+"/api/v1/workflows/shop/order-1/signal",
		fmt.Sprintf(`{"signal_name":"poke","input":%q}`, base64.StdEncoding.EncodeToString([]byte(`{"n":1}`))))
	accepted(t, w.AnswerWorkflowTask(w.WorkflowTask())) // the code goes on waiting

	// report-1 only started: nobody runs its type.
	startRun(t, base, "shop", "report-1", "report", `{"day":"mon"}`)

	// refund-1's code diverged from its history; its worker then left, so
	// the run waits with the failure shown.
	b := servertest.ConnectTo(t, srv.GRPCAddr(), &aionv1.Register{Namespaces: []string{"shop"}, WorkflowTypes: []string{"refund"}, BuildId: "build-7"})
	startRun(t, base, "shop", "refund-1", "refund", `{}`)
	accepted(t, b.FailWorkflowTask(b.WorkflowTask(), &aionv1.Failure{Type: "nondeterministic",
		Message: `step 1: the code took activity "refund", the history has activity "charge"`}))
	b.Close()

	p := openBrowser(t, srv.HTTPAddr())
	p.open("/")
	p.waitFor("the runs, newest first", texts(`#workflows-body td[data-col="workflow_id"]`)+`.join() === "refund-1,report-1,order-1,order-0"`, 15*time.Second)
	if got := must[string](p, `document.getElementById("wf-ns").value`); got != "shop" {
		t.Errorf("the workflow menu shows %q, want shop", got)
	}
	row := func(id string) string { return fmt.Sprintf(`#workflows-body tr[data-workflow-id=%q]`, id) }
	for id, want := range map[string]string{"order-0": "completed", "order-1": "running", "report-1": "running", "refund-1": "runningtask failing"} {
		if got := p.text(row(id) + ` td[data-col="status"]`); got != want {
			t.Errorf("%s status = %q, want %q", id, got, want)
		}
	}
	if got := p.text(row("order-1") + ` td[data-col="build"]`); got != "build-7" {
		t.Errorf("order-1 build = %q", got)
	}
	if got := p.text(row("refund-1") + ` td[data-col="failure"]`); !strings.Contains(got, "task: nondeterministic") {
		t.Errorf("refund-1 failure column = %q", got)
	}

	// The filters: completed runs only, then runs of type report.
	must[chromedp.Void](p, `(() => {
		const f = document.getElementById("workflow-filter");
		f.querySelector("#wf-status").value = "completed";
		f.requestSubmit();
	})()`)
	p.waitFor("completed runs only", texts(`#workflows-body td[data-col="workflow_id"]`)+`.join() === "order-0"`, 10*time.Second)
	must[chromedp.Void](p, `(() => {
		const f = document.getElementById("workflow-filter");
		f.querySelector("#wf-status").value = "";
		f.querySelector("#wf-type").value = "report";
		f.requestSubmit();
	})()`)
	p.waitFor("report runs only", texts(`#workflows-body td[data-col="workflow_id"]`)+`.join() === "report-1"`, 10*time.Second)
	must[chromedp.Void](p, `(() => {
		const f = document.getElementById("workflow-filter");
		f.querySelector("#wf-type").value = "";
		f.requestSubmit();
	})()`)
	p.waitFor("every run again", texts(`#workflows-body td[data-col="workflow_id"]`)+`.length === 4`, 10*time.Second)

	openRun := func(id string) {
		t.Helper()
		if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(row(id)))); err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		p.waitFor(id+"'s page", textOf("#run-detail h3")+fmt.Sprintf(`.includes(%s)`, jsString(id)), 10*time.Second)
	}

	// order-1's page: its pending steps, the worker running the activity,
	// and the timeline in order.
	openRun("order-1")
	p.waitFor("order-1's timeline", `document.querySelectorAll("#run-detail tr[data-seq]").length === 6`, 10*time.Second)
	if got := must[[]string](p, `[...document.querySelectorAll("#run-detail tr[data-seq]")].map(r => r.dataset.seq + ":" + r.dataset.kind)`); !slices.Equal(got,
		[]string{"1:workflow_started", "2:workflow_task_completed", "3:activity_scheduled", "4:timer_started", "5:signal_received", "6:workflow_task_completed"}) {
		t.Errorf("order-1 timeline = %v", got)
	}
	ev := func(seq int, col string) string {
		return p.text(fmt.Sprintf(`#run-detail tr[data-seq="%d"] td[data-col=%q]`, seq, col))
	}
	if got := ev(3, "summary"); !strings.Contains(got, "charge") || !strings.Contains(got, `{"amount":2}`) || !strings.Contains(got, charge.GetActivityId()) {
		t.Errorf("activity_scheduled summary = %q", got)
	}
	if got := ev(3, "step"); got != "1" {
		t.Errorf("activity_scheduled step = %q", got)
	}
	if got := ev(3, "duration"); got != "pending" {
		t.Errorf("running activity's duration = %q, want pending", got)
	}
	if got := ev(4, "summary"); !strings.Contains(got, "cool-off") || !strings.Contains(got, "after 1h00m") {
		t.Errorf("timer_started summary = %q", got)
	}
	if got := ev(5, "summary"); !strings.Contains(got, "poke") || !strings.Contains(got, `{"n":1}`) {
		t.Errorf("signal_received summary = %q", got)
	}
	if got := ev(2, "summary"); !strings.Contains(got, fmt.Sprintf("worker %d", w.ID)) || !strings.Contains(got, "build-7") {
		t.Errorf("workflow_task_completed summary = %q", got)
	}
	pending := `#run-detail tr[data-step="1"]`
	for col, want := range map[string]string{"kind": "activity", "name": "charge", "what": charge.GetActivityId(), "attempt": "1",
		"worker": fmt.Sprint(w.ID), "node": "n1"} {
		if got := p.text(pending + fmt.Sprintf(` td[data-col=%q]`, col)); got != want {
			t.Errorf("pending activity %s = %q, want %q", col, got, want)
		}
	}
	if got := p.text(`#run-detail tr[data-step="2"] td[data-col="kind"]`); got != "timer" {
		t.Errorf("pending step 2 kind = %q, want timer", got)
	}
	if got := p.text(`#run-detail tr[data-step="2"] td[data-col="what"]`); !strings.HasPrefix(got, "fires ") {
		t.Errorf("pending timer = %q, want when it fires", got)
	}
	if got := p.text("#run-detail .io"); !strings.Contains(got, `{"items":2}`) {
		t.Errorf("order-1 input = %q", got)
	}
	if must[bool](p, visible(`[data-testid="task-failure"]`)) {
		t.Error("order-1 shows a task failure")
	}
	// Why its code does not run: it waits on its two steps.
	p.waitFor("why order-1 waits", `(document.querySelector('#run-detail [data-testid="why"]') || {dataset: {}}).dataset.reason === "waiting_on_steps"`, 10*time.Second)
	if got := p.text("#run-detail"); strings.Contains(got, "undefined") || strings.Contains(got, "NaN") || strings.Contains(got, "[object") {
		t.Errorf("order-1's page shows a missing value: %q", got)
	}
	p.screenshot("console-workflow-run.png")

	// The open page follows the run: the activity completes, the code goes
	// on waiting for the timer, and the timeline grows by those events.
	if ack := w.Complete(charge, []byte(`{"charged":2}`)); ack.GetRefused() != "" {
		t.Fatal(ack)
	}
	accepted(t, w.AnswerWorkflowTask(w.WorkflowTask()))
	p.waitFor("order-1's timeline to grow", `document.querySelectorAll("#run-detail tr[data-seq]").length === 8`, 10*time.Second)
	if got := must[[]string](p, `[...document.querySelectorAll("#run-detail tr[data-seq]")].map(r => r.dataset.seq + ":" + r.dataset.kind).slice(6)`); !slices.Equal(got,
		[]string{"7:activity_closed", "8:workflow_task_completed"}) {
		t.Errorf("order-1 timeline ends with %v", got)
	}
	if got := ev(3, "duration"); got == "pending" || got == "" {
		t.Errorf("the completed activity's scheduled row says %q, want how long it took", got)
	}
	if got := ev(7, "summary"); !strings.Contains(got, "completed · 1 attempt") || !strings.Contains(got, `{"charged":2}`) {
		t.Errorf("activity_closed summary = %q", got)
	}
	// The pending steps are drawn apart from the timeline: wait for them
	// to settle before reading them.
	p.waitFor("order-1's pending steps to update", `document.querySelectorAll("#run-detail tr[data-step]").length === 1`, 10*time.Second)
	if got := must[[]string](p, `[...document.querySelectorAll("#run-detail tr[data-step]")].map(r => r.dataset.step)`); !slices.Equal(got, []string{"2"}) {
		t.Errorf("pending steps after the activity closed = %v, want the timer alone", got)
	}

	// order-0's page: the activity step's scheduled→closed duration, the
	// close and the result.
	openRun("order-0")
	p.waitFor("order-0's timeline", `document.querySelectorAll("#run-detail tr[data-seq]").length === 6`, 10*time.Second)
	kinds := must[[]string](p, `[...document.querySelectorAll("#run-detail tr[data-seq]")].map(r => r.dataset.kind)`)
	if want := []string{"workflow_started", "workflow_task_completed", "activity_scheduled", "activity_closed", "workflow_task_completed",
		"workflow_closed"}; !slices.Equal(kinds, want) {
		t.Errorf("order-0 timeline = %v, want %v", kinds, want)
	}
	for _, seq := range []int{3, 4} {
		if got := ev(seq, "duration"); got == "" || got == "pending" || got == "—" {
			t.Errorf("order-0 event %d duration = %q, want how long the activity step took", seq, got)
		}
	}
	if got := p.text("#run-detail .io"); !strings.Contains(got, `{"ok":true}`) {
		t.Errorf("order-0 result = %q", got)
	}
	if got := p.text(`#run-detail h3 .badge`); got != "completed" {
		t.Errorf("order-0 badge = %q", got)
	}

	// refund-1's page says first that its workflow task fails, and why.
	openRun("refund-1")
	p.waitFor("the task failure", visible(`[data-testid="task-failure"]`), 10*time.Second)
	if got := p.text(`[data-testid="task-failure"]`); !strings.Contains(got, "nondeterministic") ||
		!strings.Contains(got, `the history has activity "charge"`) {
		t.Errorf("task failure shown as %q", got)
	}
	if first := must[string](p, `document.querySelector("#run-detail").children[1]?.dataset.testid || ""`); first != "task-failure" {
		t.Errorf("the task failure is not the first thing under the run's title (%q is)", first)
	}
	p.screenshot("console-workflow-task-failure.png")

	// A run started while the page is open appears without a reload, and
	// in the event feed.
	startRun(t, base, "shop", "report-2", "report", `{}`)
	p.waitFor("the new run listed", texts(`#workflows-body td[data-col="workflow_id"]`)+`[0] === "report-2"`, 10*time.Second)
	p.waitFor("its start in the feed", `[...document.querySelectorAll('#event-feed li[data-kind="run_started"]')].some(li => li.textContent.includes("shop · report-2 · report"))`, 10*time.Second)

	// A link to a run opens its page.
	p.open("/?reload#wns=shop&workflow=order-1")
	p.waitFor("order-1's page from a link", textOf("#run-detail h3")+`.includes("order-1")`+` && document.querySelectorAll("#run-detail tr[data-seq]").length === 8`, 15*time.Second)

	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
