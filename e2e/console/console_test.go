package console

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

type apiWorker struct {
	ID         string   `json:"id"`
	Namespaces []string `json:"namespaces"`
	Node       string   `json:"node"`
	Identity   string   `json:"identity"`
}

// workerOnNode waits until a worker advertising node, other than those in
// except, is connected and returns its id.
func workerOnNode(t *testing.T, base, node string, except ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var res struct {
			Workers []apiWorker `json:"workers"`
		}
		getJSON(t, base+"/api/v1/workers", &res)
		for _, w := range res.Workers {
			if w.Node == node && !slices.Contains(except, w.ID) {
				return w.ID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no worker on node %s connected within 20s", node)
	return ""
}

// TestConsoleFollowsTheCluster opens the console once and, without
// reloading it, watches a worker process connect, run an activity, and
// die; and a placement change.
func TestConsoleFollowsTheCluster(t *testing.T) {
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	p := openBrowser(t, srv.HTTPAddr())

	p.open("/")
	p.waitFor("event stream live", `document.getElementById("conn").dataset.state === "live"`, 10*time.Second)
	p.waitFor("first render recorded", `typeof window.aionFirstRenderMs === "number"`, 5*time.Second)
	// A marker that a reload would wipe: checked at the end.
	must[chromedp.Void](p, `window.aionTestMarker = "same page"`)
	if got := p.text("#workers-empty"); got != "No workers connected." || !must[bool](p, visible("#workers-empty")) {
		t.Errorf("empty workers panel says %q", got)
	}
	for _, sel := range []string{"#auth", "#auth-forget", "#activity-detail"} {
		if must[bool](p, visible(sel)) {
			t.Errorf("%s shown on a server without auth, before any activity", sel)
		}
	}

	// A worker process connects: its row appears.
	worker := startProc(t, "demo worker", "worker", "demo", "--address", srv.GRPCAddr(),
		"--namespace", "demo", "--task-queue", "default", "--node", "n1", "--slots", "2", "--identity", "console-test")
	id := workerOnNode(t, base, "n1")
	row := fmt.Sprintf(`#workers-body [data-worker-id="%s"]`, id)
	p.waitFor("worker row", exists(row), 10*time.Second)
	for col, want := range map[string]string{
		"namespaces": "demo", "task_queue": "default", "node": "n1", "slots": "0 / 2", "state": "connected",
	} {
		if got := p.text(row + fmt.Sprintf(` [data-col=%q]`, col)); got != want {
			t.Errorf("worker row %s = %q, want %q", col, got, want)
		}
	}
	p.waitFor("last heartbeat shown", `(t => t !== "" && t !== "—")(`+textOf(row+` [data-col="heartbeat"]`)+`)`, 10*time.Second)
	p.waitFor("namespace row", exists(`#namespaces-body tr[data-namespace="demo"]`), 10*time.Second)
	if got := p.text(`#namespaces-body tr[data-namespace="demo"] td[data-col="origin"]`); got != "worker" {
		t.Errorf("namespace origin = %q, want worker", got)
	}
	p.waitFor("connect in the feed", fmt.Sprintf(`[...document.querySelectorAll('#event-feed li[data-kind="worker_connected"]')].some(li => li.textContent.includes("worker %s "))`, id), 5*time.Second)

	// A scheduled activity appears with its outcome, and its detail lists
	// the attempt and the worker that ran it.
	payload := base64.StdEncoding.EncodeToString([]byte(`{"hello":"console"}`))
	sendJSON(t, http.MethodPost, base+"/api/v1/activities",
		fmt.Sprintf(`{"namespace":"demo","id":"console-echo-1","activity_type":"echo","payload":%q}`, payload))
	must[chromedp.Void](p, `(() => {
		const f = document.getElementById("activity-filter");
		f.querySelector("#act-ns").value = "demo";
		f.querySelector("#act-state").value = "completed";
		f.querySelector("#act-type").value = "echo";
		f.requestSubmit();
	})()`)
	act := `#activities-body tr[data-activity-id="console-echo-1"]`
	p.waitFor("completed activity row", exists(act)+` && `+textOf(act+` td[data-col="state"]`)+` === "completed"`, 15*time.Second)
	if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(act))); err != nil {
		t.Fatalf("open activity detail: %v", err)
	}
	attempt := `#activity-detail tr[data-attempt="1"]`
	p.waitFor("attempt in detail", exists(attempt), 10*time.Second)
	for col, want := range map[string]string{"number": "1", "worker": id, "node": "n1", "outcome": "completed", "failure": ""} {
		if got := p.text(attempt + fmt.Sprintf(` td[data-col=%q]`, col)); got != want {
			t.Errorf("attempt 1 %s = %q, want %q", col, got, want)
		}
	}
	if n := p.count(`#activity-detail tr[data-attempt]`); n != 1 {
		t.Errorf("detail lists %d attempts, want 1", n)
	}
	if got := p.text("#activity-detail .io"); !strings.Contains(got, `{"hello":"console"}`) {
		t.Errorf("detail input/result = %q, want the echoed payload", got)
	}

	// A retried activity: the detail lists every attempt with its failure.
	sendJSON(t, http.MethodPost, base+"/api/v1/activities",
		fmt.Sprintf(`{"namespace":"demo","id":"console-flaky","activity_type":"fail","payload":%q,
			"retry_policy":{"initial_interval":"0.05s","maximum_attempts":5}}`, base64.StdEncoding.EncodeToString([]byte(`{"times":2}`))))
	must[chromedp.Void](p, `(() => {
		const f = document.getElementById("activity-filter");
		f.querySelector("#act-state").value = "";
		f.querySelector("#act-type").value = "";
		f.requestSubmit();
	})()`)
	flaky := `#activities-body tr[data-activity-id="console-flaky"]`
	p.waitFor("retried activity completed", exists(flaky)+` && `+textOf(flaky+` td[data-col="state"]`)+` === "completed"`, 15*time.Second)
	if got := p.text(flaky + ` td[data-col="attempt"]`); got != "3" {
		t.Errorf("console-flaky attempt = %q, want 3", got)
	}
	if n := p.count(`#activities-body tr[data-activity-id]`); n != 2 {
		t.Errorf("activities listed = %d, want 2 (filter cleared)", n)
	}
	if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(flaky))); err != nil {
		t.Fatalf("open activity detail: %v", err)
	}
	p.waitFor("three attempts", `document.querySelectorAll("#activity-detail tr[data-attempt]").length === 3`, 10*time.Second)
	for n, want := range []string{"failed", "failed", "completed"} {
		a := fmt.Sprintf(`#activity-detail tr[data-attempt="%d"]`, n+1)
		if got := p.text(a + ` td[data-col="outcome"]`); got != want {
			t.Errorf("attempt %d outcome = %q, want %q", n+1, got, want)
		}
		failure := p.text(a + ` td[data-col="failure"]`)
		if (want == "failed") != strings.HasPrefix(failure, "demo_failure") {
			t.Errorf("attempt %d failure = %q", n+1, failure)
		}
		if got := p.text(a + ` td[data-col="worker"]`); got != id {
			t.Errorf("attempt %d worker = %q, want %s", n+1, got, id)
		}
	}

	// A placement change shows in the namespaces panel.
	sendJSON(t, http.MethodPut, base+"/api/v1/namespaces/demo/placement", `{"mode":"PLACEMENT_MODE_PINNED","nodes":["n1"]}`)
	placement := `#namespaces-body tr[data-namespace="demo"] td[data-col="placement"]`
	p.waitFor("pinned placement", textOf(placement)+` === "pinned n1"`, 10*time.Second)
	p.waitFor("placement in the feed", exists(`#event-feed li[data-kind="placement_changed"]`), 5*time.Second)

	// Work nobody serves shows as backlog, from the pool stats.
	sendJSON(t, http.MethodPost, base+"/api/v1/activities",
		`{"namespace":"demo","id":"console-waiting","task_queue":"gpu","activity_type":"render"}`)
	ns := `#namespaces-body tr[data-namespace="demo"]`
	p.waitFor("backlog from pool stats", textOf(ns+` td[data-col="backlog"]`)+` === "1"`, 10*time.Second)
	if got := p.text(ns + ` td[data-col="pools"]`); !strings.Contains(got, "gpu") || !strings.Contains(got, "1 waiting") ||
		!strings.Contains(got, "default") {
		t.Errorf("demo pools = %q, want default and gpu with 1 waiting", got)
	}
	p.waitFor("oldest age", `/^\d/.test(`+textOf(ns+` td[data-col="oldest"]`)+`)`, 5*time.Second)
	if got := p.text("#total-backlog"); got != "1" {
		t.Errorf("total backlog = %q, want 1", got)
	}

	p.screenshot("console.png")

	// The drain button: a second worker, which exits when drained, drains
	// and leaves.
	startProc(t, "draining worker", "worker", "demo", "--address", srv.GRPCAddr(),
		"--namespace", "demo", "--node", "n1", "--exit-on-drain")
	second := workerOnNode(t, base, "n1", id)
	secondRow := fmt.Sprintf(`#workers-body [data-worker-id="%s"]`, second)
	p.waitFor("second worker row", exists(secondRow), 10*time.Second)
	must[chromedp.Void](p, `window.confirm = () => true`) // the drain button asks first
	if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(secondRow+` button[data-drain]`))); err != nil {
		t.Fatalf("click drain: %v", err)
	}
	p.waitFor("drain in the feed", fmt.Sprintf(`[...document.querySelectorAll('#event-feed li[data-kind="worker_draining"]')].some(li => li.textContent.includes("worker %s"))`, second), 10*time.Second)
	p.waitFor("drained worker gone", `!(`+exists(secondRow)+`)`, 15*time.Second)
	p.waitFor("drained in the feed", fmt.Sprintf(`[...document.querySelectorAll('#event-feed li[data-kind="worker_disconnected"]')].some(li => li.textContent.includes("worker %s · drained"))`, second), 5*time.Second)

	// The worker process dies: its row goes.
	worker.kill()
	p.waitFor("worker row removed", `!(`+exists(row)+`)`, 15*time.Second)
	p.waitFor("disconnect in the feed", fmt.Sprintf(`[...document.querySelectorAll('#event-feed li[data-kind="worker_disconnected"]')].some(li => li.textContent.includes("worker %s · disconnect"))`, id), 5*time.Second)
	p.waitFor("empty workers panel", visible("#workers-empty"), 5*time.Second)

	if marker := must[string](p, `window.aionTestMarker || ""`); marker != "same page" {
		t.Error("the page was reloaded during the test")
	}
	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
