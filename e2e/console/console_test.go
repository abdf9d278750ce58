package console

import (
	"encoding/base64"
	"fmt"
	"net/http"
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

// workerOnNode waits until a worker advertising node is connected and
// returns its id.
func workerOnNode(t *testing.T, base, node string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var res struct {
			Workers []apiWorker `json:"workers"`
		}
		getJSON(t, base+"/api/v1/workers", &res)
		for _, w := range res.Workers {
			if w.Node == node {
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
	if got := p.text("#workers-empty"); got != "No workers connected." {
		t.Errorf("empty workers panel says %q", got)
	}

	// A worker process connects: its row appears.
	worker := startProc(t, "demo worker", "worker", "demo", "--address", srv.GRPCAddr(),
		"--namespace", "demo", "--task-queue", "default", "--node", "n1", "--slots", "2", "--identity", "console-test")
	id := workerOnNode(t, base, "n1")
	row := fmt.Sprintf(`#workers-body tr[data-worker-id="%s"]`, id)
	p.waitFor("worker row", exists(row), 10*time.Second)
	for col, want := range map[string]string{
		"namespaces": "demo", "task_queue": "default", "node": "n1", "slots": "0 / 2", "state": "connected",
	} {
		if got := p.text(row + fmt.Sprintf(` td[data-col=%q]`, col)); got != want {
			t.Errorf("worker row %s = %q, want %q", col, got, want)
		}
	}
	p.waitFor("last heartbeat shown", `(t => t !== "" && t !== "—")(`+textOf(row+` td[data-col="heartbeat"]`)+`)`, 10*time.Second)
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

	// A placement change shows in the namespaces panel.
	sendJSON(t, http.MethodPut, base+"/api/v1/namespaces/demo/placement", `{"mode":"PLACEMENT_MODE_PINNED","nodes":["n1"]}`)
	placement := `#namespaces-body tr[data-namespace="demo"] td[data-col="placement"]`
	p.waitFor("pinned placement", textOf(placement)+` === "pinned n1"`, 10*time.Second)
	p.waitFor("placement in the feed", exists(`#event-feed li[data-kind="placement_changed"]`), 5*time.Second)

	p.screenshot("console.png")

	// The worker process dies: its row goes.
	worker.kill()
	p.waitFor("worker row removed", `!(`+exists(row)+`)`, 15*time.Second)
	p.waitFor("disconnect in the feed", fmt.Sprintf(`[...document.querySelectorAll('#event-feed li[data-kind="worker_disconnected"]')].some(li => li.textContent.includes("worker %s · disconnect"))`, id), 5*time.Second)
	p.waitFor("empty workers panel", `!document.getElementById("workers-empty").hidden`, 5*time.Second)

	if marker := must[string](p, `window.aionTestMarker || ""`); marker != "same page" {
		t.Error("the page was reloaded during the test")
	}
	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
