package console

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// apiSchedule is the part of a schedule the tests compare with the page.
type apiSchedule struct {
	Upcoming []struct {
		NominalTime string `json:"nominal_time"`
		FireTime    string `json:"fire_time"`
	} `json:"upcoming"`
}

// upcomingFires reads a schedule's next n fire times through the JSON API.
func upcomingFires(t *testing.T, base, ns, id string, n int) []string {
	t.Helper()
	var res struct {
		Schedule apiSchedule `json:"schedule"`
	}
	getJSON(t, fmt.Sprintf("%s/api/v1/schedules/%s/%s?upcoming=%d", base, url.PathEscape(ns), url.PathEscape(id), n), &res)
	var out []string
	for _, u := range res.Schedule.Upcoming {
		out = append(out, u.FireTime)
	}
	return out
}

// noMissingValues fails the test when the selected element shows a value
// the page failed to compute.
func noMissingValues(t *testing.T, p *page, selector string) {
	t.Helper()
	if got := p.text(selector); strings.Contains(got, "undefined") || strings.Contains(got, "NaN") || strings.Contains(got, "[object") {
		t.Errorf("%s shows a missing value: %q", selector, got)
	}
}

// TestConsoleSchedulesListShowAndPauseResumeTrigger creates two schedules
// through the JSON API (a cron one in a time zone, and a paused interval
// one with a note) and works them in the console: the list, a schedule's
// page with its spec and next ten fire times, Trigger (the recent action
// appears and links to the run or activity it started), Pause with a note
// and Resume, a refused call shown as an error, and a link to a schedule.
func TestConsoleSchedulesListShowAndPauseResumeTrigger(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	input := base64.StdEncoding.EncodeToString([]byte(`{"scope":"daily"}`))
	sendJSON(t, http.MethodPost, base+"/api/v1/schedules", fmt.Sprintf(`{"namespace":"ops","schedule_id":"nightly-report",
		"spec":{"cron":"0 3 * * *","time_zone":"Europe/Berlin","jitter":"30s"},
		"action":{"workflow_type":"report","task_queue":"reports","input":%q},
		"policy":{"overlap":"SCHEDULE_OVERLAP_BUFFER_ONE","catch_up":"SCHEDULE_CATCH_UP_ALL","catch_up_window":"300s"}}`, input))
	sendJSON(t, http.MethodPost, base+"/api/v1/schedules", `{"namespace":"ops","schedule_id":"hourly-sync",
		"spec":{"every":"3600s","offset":"900s"},"action":{"activity_type":"sync"},
		"paused":true,"note":"waiting for the vendor fix"}`)

	p := openBrowser(t, srv.HTTPAddr())
	p.open("/")
	p.waitFor("the schedules, by id", texts(`#schedules-body td[data-col="id"]`)+`.join() === "hourly-sync,nightly-report"`, 15*time.Second)
	if got := must[string](p, `document.getElementById("sch-ns").value`); got != "ops" {
		t.Errorf("the schedule menu shows %q, want ops", got)
	}
	row := func(id string) string { return fmt.Sprintf(`#schedules-body tr[data-schedule-id=%q]`, id) }
	cell := func(id, col string) string { return p.text(row(id) + fmt.Sprintf(` td[data-col=%q]`, col)) }
	for _, c := range []struct{ id, col, want string }{
		{"nightly-report", "trigger", "0 3 * * * (Europe/Berlin)"},
		{"nightly-report", "action", "workflow report · queue reports"},
		{"nightly-report", "state", "active"},
		{"nightly-report", "last", "—"},
		{"nightly-report", "fired", "0"},
		{"nightly-report", "skipped", "0"},
		{"nightly-report", "missed", "0"},
		{"hourly-sync", "trigger", "every 1h (offset 15m)"},
		{"hourly-sync", "action", "activity sync · queue default"},
		{"hourly-sync", "state", "pausedwaiting for the vendor fix"},
		{"hourly-sync", "next", "paused"},
	} {
		if got := cell(c.id, c.col); got != c.want {
			t.Errorf("%s %s = %q, want %q", c.id, c.col, got, c.want)
		}
	}
	// The next fire time is the schedule's first upcoming tick.
	next := upcomingFires(t, base, "ops", "nightly-report", 1)
	if len(next) != 1 {
		t.Fatalf("nightly-report's upcoming ticks: %v", next)
	}
	nextCell := row("nightly-report") + ` td[data-col="next"]`
	p.waitFor("nightly-report's next fire time", fmt.Sprintf(`(document.querySelector(%s)?.title || "").includes(%s)`, jsString(nextCell), jsString(next[0])), 10*time.Second)
	if got := p.text(nextCell); !strings.Contains(got, "in ") {
		t.Errorf("next fire cell = %q, want the time and how long until it", got)
	}
	noMissingValues(t, p, "#schedules-panel")

	click := func(what, selector string) {
		t.Helper()
		if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS(selector))); err != nil {
			t.Fatalf("click %s (%s): %v", what, selector, err)
		}
	}
	badge := `#schedule-detail h3 .badge`
	ticks := `#schedule-detail tr[data-tick]`

	// nightly-report's page: its spec, action and policy, and its next ten
	// fire times, read in its zone.
	click("nightly-report", row("nightly-report"))
	p.waitFor("nightly-report's page", textOf("#schedule-detail h3")+`.includes("nightly-report")`+` && `+textOf(badge)+` === "active"`, 10*time.Second)
	p.waitFor("ten next fire times", fmt.Sprintf(`document.querySelectorAll(%s).length === 10`, jsString(ticks)), 10*time.Second)
	want := upcomingFires(t, base, "ops", "nightly-report", 10)
	if got := must[[]string](p, `[...document.querySelectorAll("#schedule-detail tr[data-tick] td[data-col=fires]")].map(td => td.title)`); !slices.Equal(got, want) {
		t.Errorf("fire times shown = %v, want %v", got, want)
	}
	for i, nominal := range must[[]string](p, texts(`#schedule-detail tr[data-tick] td[data-col="nominal"]`)) {
		if !strings.Contains(nominal, " 03:00:00 GMT+") {
			t.Errorf("tick %d's nominal time = %q, want 03:00:00 Berlin time", i+1, nominal)
		}
	}
	summary := p.text(`#schedule-detail [data-section="summary"]`)
	for _, part := range []string{"0 3 * * *", "Europe/Berlin", "up to 30s", "workflowreport", "task queuereports", `{"scope":"daily"}`,
		"overlapbuffer one", "catch-upall", "catch-up window5m"} {
		if !strings.Contains(summary, part) {
			t.Errorf("the page's spec, action and policy lack %q: %q", part, summary)
		}
	}
	if h := must[string](p, `location.hash`); !strings.Contains(h, "sns=ops") || !strings.Contains(h, "schedule=nightly-report") {
		t.Errorf("the URL does not keep the open schedule: %q", h)
	}

	// Trigger now: the fire appears among the recent actions, with a link
	// to the run it started, and in the list's counts.
	click("Trigger now", `[data-testid="schedule-trigger"]`)
	recent := `#schedule-detail tr[data-outcome="started"][data-origin="trigger"]`
	p.waitFor("the triggered fire", exists(recent), 10*time.Second)
	runID := must[string](p, fmt.Sprintf(`document.querySelector(%s).dataset.actionId`, jsString(recent)))
	if !strings.HasPrefix(runID, "nightly-report@") {
		t.Errorf("triggered action id = %q, want nightly-report@<time>", runID)
	}
	if got := p.text(`[data-testid="schedule-msg"]`); !strings.HasPrefix(got, "trigger: done") {
		t.Errorf("after Trigger the page says %q", got)
	}
	p.waitFor("the last tick in the list", textOf(row("nightly-report")+` td[data-col="last"]`)+`.includes("started")`, 10*time.Second)
	var counts struct {
		Schedule struct {
			Fired string `json:"fired"`
		} `json:"schedule"`
	}
	getJSON(t, base+"/api/v1/schedules/ops/nightly-report", &counts)
	fired := counts.Schedule.Fired
	if fired == "" {
		fired = "0"
	}
	p.waitFor("the fire count in the list", textOf(row("nightly-report")+` td[data-col="fired"]`)+` === `+jsString(fired), 10*time.Second)
	noMissingValues(t, p, "#schedules-panel")
	p.screenshot("console-schedule.png")
	click("the started run", recent+` a[data-open-workflow]`)
	p.waitFor("the run's page", textOf("#run-detail h3")+fmt.Sprintf(`.includes(%s)`, jsString(runID)), 10*time.Second)
	if got := must[string](p, `document.getElementById("wf-ns").value`); got != "ops" {
		t.Errorf("the workflow menu shows %q after following the link, want ops", got)
	}

	// Pause with a note, then Resume.
	click("Pause…", `[data-testid="schedule-pause"]`)
	p.waitFor("the note field", visible(`[data-testid="schedule-pause-note"]`), 5*time.Second)
	if err := p.do(5*time.Second, chromedp.SendKeys(chromedp.CSS(`[data-testid="schedule-pause-note"]`), "maintenance window")); err != nil {
		t.Fatalf("type the note: %v", err)
	}
	click("Pause", `[data-testid="schedule-pause-confirm"]`)
	p.waitFor("paused", textOf(badge)+` === "paused" && `+visible(`[data-testid="no-upcoming"]`), 10*time.Second)
	if got := p.text(`#schedule-detail [data-section="summary"]`); !strings.Contains(got, "notemaintenance window") {
		t.Errorf("the page does not show the pause's note: %q", got)
	}
	if must[bool](p, visible(`[data-testid="schedule-pause"]`)) || !must[bool](p, visible(`[data-testid="schedule-resume"]`)) {
		t.Error("a paused schedule offers Pause, or not Resume")
	}
	p.waitFor("paused in the list", textOf(row("nightly-report")+` td[data-col="state"]`)+` === "pausedmaintenance window"`+
		` && `+textOf(row("nightly-report")+` td[data-col="next"]`)+` === "paused"`, 10*time.Second)
	click("Resume", `[data-testid="schedule-resume"]`)
	p.waitFor("active again", textOf(badge)+` === "active" && `+fmt.Sprintf(`document.querySelectorAll(%s).length === 10`, jsString(ticks)), 10*time.Second)
	p.waitFor("active in the list", textOf(row("nightly-report")+` td[data-col="state"]`)+` === "active"`, 10*time.Second)

	// hourly-sync, paused, fires an activity when triggered; its link opens
	// the activity.
	click("hourly-sync", row("hourly-sync"))
	p.waitFor("hourly-sync's page", textOf("#schedule-detail h3")+`.includes("hourly-sync")`+` && `+textOf(badge)+` === "paused"`, 10*time.Second)
	if got := p.text(`[data-testid="no-upcoming"]`); !strings.Contains(got, "paused") {
		t.Errorf("a paused schedule's next fire times say %q", got)
	}
	if got := p.text(`#schedule-detail [data-section="summary"]`); !strings.Contains(got, "every1h") || !strings.Contains(got, "offset15m") ||
		!strings.Contains(got, "waiting for the vendor fix") {
		t.Errorf("hourly-sync's spec shown as %q", got)
	}
	click("Trigger now", `[data-testid="schedule-trigger"]`)
	p.waitFor("the triggered activity", exists(recent+` a[data-open-activity]`), 10*time.Second)
	actID := must[string](p, fmt.Sprintf(`document.querySelector(%s).dataset.actionId`, jsString(recent)))
	click("the started activity", recent+` a[data-open-activity]`)
	p.waitFor("the activity's page", textOf("#activity-detail h3")+fmt.Sprintf(`.includes(%s)`, jsString(actID)), 10*time.Second)
	noMissingValues(t, p, "#schedules-panel")
	// Back to the schedule: the activity's page, above it and redrawn as
	// the activity's state changes, would move the schedule's buttons
	// under a click.
	click("close the activity", `[data-testid="detail-close"]`)
	p.waitFor("the activity's page closed", `document.getElementById("activity-detail").hidden`, 5*time.Second)

	// A refused call says so where the button is.
	sendJSON(t, http.MethodDelete, base+"/api/v1/schedules/ops/hourly-sync", "")
	click("Resume", `[data-testid="schedule-resume"]`)
	p.waitFor("the refusal", textOf(`[data-testid="schedule-msg"]`)+`.includes("NotFound")`, 10*time.Second)
	if got := p.text(`[data-testid="schedule-msg"]`); !strings.Contains(got, "Could not resume hourly-sync") {
		t.Errorf("the refusal reads %q", got)
	}
	if role := must[string](p, `document.querySelector('[data-testid="schedule-msg"]').getAttribute("role")`); role != "alert" {
		t.Errorf("the refusal's role = %q, want alert", role)
	}
	p.waitFor("the deleted schedule gone from the list", `!(`+exists(row("hourly-sync"))+`)`, 10*time.Second)

	// A link opens a schedule's page.
	p.open("/?reload#sns=ops&schedule=nightly-report")
	p.waitFor("nightly-report's page from a link", textOf("#schedule-detail h3")+`.includes("nightly-report")`+
		` && `+fmt.Sprintf(`document.querySelectorAll(%s).length === 10`, jsString(ticks)), 15*time.Second)
	p.waitFor("its recent action", exists(recent), 5*time.Second)
	if got := must[string](p, fmt.Sprintf(`document.querySelector(%s).className`, jsString(row("nightly-report")))); !strings.Contains(got, "selected") {
		t.Errorf("the open schedule's row is not marked: class %q", got)
	}
	noMissingValues(t, p, "#schedules-panel")

	// The only page errors are the refused calls on the deleted schedule.
	for _, e := range p.pageErrors() {
		if !strings.Contains(e, "404") {
			t.Errorf("page error: %s", e)
		}
	}
}

// TestConsoleSchedulesPage pages through a namespace's schedules fifty at
// a time, in id order, as the API pages them.
func TestConsoleSchedulesPage(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	for i := range 52 {
		sendJSON(t, http.MethodPost, base+"/api/v1/schedules", fmt.Sprintf(`{"namespace":"many","schedule_id":"s-%02d",
			"spec":{"every":"60s"},"action":{"activity_type":"noop"},"paused":true}`, i))
	}
	p := openBrowser(t, srv.HTTPAddr())
	p.open("/#sns=many")
	ids := texts(`#schedules-body td[data-col="id"]`)
	p.waitFor("the first page", ids+`.length === 50 && `+ids+`[0] === "s-00" && !document.getElementById("sch-next").disabled`, 15*time.Second)
	if !must[bool](p, `document.getElementById("sch-prev").disabled`) {
		t.Error("previous page offered on the first")
	}
	if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS("#sch-next"))); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the second page", ids+`.join() === "s-50,s-51" && document.getElementById("sch-page").textContent === "page 2"`, 10*time.Second)
	if !must[bool](p, `document.getElementById("sch-next").disabled`) {
		t.Error("next page offered on the last")
	}
	if err := p.do(5*time.Second, chromedp.Click(chromedp.CSS("#sch-prev"))); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the first page again", ids+`.length === 50 && `+ids+`[49] === "s-49"`, 10*time.Second)
	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
