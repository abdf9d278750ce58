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

// The activity panel lists the namespace its menu shows from the first
// render on, without the user choosing it again; and it shows a JSON payload
// as JSON and other bytes as marked base64.
func TestConsoleActivitiesFollowTheMenuAndShowPayloads(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	for _, ns := range []string{"alpha", "beta"} {
		sendJSON(t, http.MethodPost, base+"/api/v1/namespaces", fmt.Sprintf(`{"name":%q}`, ns))
	}
	schedule := func(id string, payload []byte) {
		sendJSON(t, http.MethodPost, base+"/api/v1/activities", fmt.Sprintf(
			`{"namespace":"alpha","id":%q,"activity_type":"nobody-runs-it","payload":%q}`, id, base64.StdEncoding.EncodeToString(payload)))
	}
	schedule("json-input", []byte(`{"n": 1}`))
	schedule("binary-input", []byte{0x00, 0xff})

	p := openBrowser(t, srv.HTTPAddr())
	p.open("/")
	p.waitFor("the namespace menu", `document.getElementById("act-ns").options.length === 2`, 15*time.Second)
	if got := must[string](p, `document.getElementById("act-ns").value`); got != "alpha" {
		t.Fatalf("the menu shows %q, want alpha (the first)", got)
	}
	p.waitFor("alpha's activities under the menu that shows alpha",
		exists(`#activities-body tr[data-activity-id="json-input"]`)+` && `+
			`document.getElementById("activities-empty").hidden`, 15*time.Second)

	// A link whose filter the menus cannot show (an old or hand-edited
	// one): the menus show what is applied, and the panel lists it rather
	// than asking to pick the namespace the menu already shows.
	p.open("/?reload#state=timed%20out")
	p.waitFor("the list under a link with a state the menu lacks",
		exists(`#activities-body tr[data-activity-id="json-input"]`)+
			` && document.getElementById("act-ns").value === "alpha"`+
			` && document.getElementById("act-state").value === ""`, 15*time.Second)
	if got := p.text("#activities-empty"); strings.Contains(got, "Pick a namespace") {
		t.Fatalf("the panel says %q while the menu shows alpha", got)
	}

	openRow := func(id string) {
		t.Helper()
		if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#activities-body tr[data-activity-id=%q]`, id)))); err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
	}
	openRow("json-input")
	p.waitFor("the JSON input", `(document.querySelector("#activity-detail .io") || {}).textContent?.includes('{"n":1}')`, 10*time.Second)
	// A waiting activity's page says why it waits, as aion activity why does.
	p.waitFor("why it waits", `(document.querySelector('#activity-detail [data-testid="why"]') || {dataset: {}}).dataset.reason === "no_worker"`, 10*time.Second)
	if got := p.text(`#activity-detail [data-testid="why"]`); !strings.Contains(got, `"nobody-runs-it"`) {
		t.Errorf("why box says %q, want the activity type no worker serves", got)
	}
	openRow("binary-input")
	p.waitFor("the binary input", textOf("#activity-detail h3")+`.includes("binary-input")`, 10*time.Second)
	if got := p.text("#activity-detail .io"); !strings.Contains(got, "not JSON") || !strings.Contains(got, "AP8=") {
		t.Errorf("binary input shown as %q, want it marked as base64 AP8=", got)
	}
	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
