package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/servertest"
)

// scheduleBody is a CreateScheduleRequest as JSON: an activity every hour.
func scheduleBody(ns, id string) string {
	return fmt.Sprintf(`{"namespace":%q,"schedule_id":%q,"spec":{"every":"3600s"},"action":{"activity_type":"report"}}`, ns, id)
}

func TestHTTPScheduleRoutesCreateReadAndChangeSchedules(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	base := "http://" + srv.HTTPAddr() + "/api/v1/schedules"

	created := apiCall(t, "POST", base, "", scheduleBody("s", "hourly"), 200)
	if sc := obj(created["schedule"]); sc["schedule_id"] != "hourly" || created["existing"] == true {
		t.Fatalf("create: %v", created)
	}
	got := obj(apiCall(t, "GET", base+"/s/hourly?upcoming=3", "", "", 200)["schedule"])
	if n := len(list(got["upcoming"])); n != 3 {
		t.Fatalf("get with upcoming=3: %d upcoming ticks in %v", n, got)
	}
	if ids := list(apiCall(t, "GET", base+"?namespace=s", "", "", 200)["schedules"]); len(ids) != 1 {
		t.Fatalf("list: %v", ids)
	}
	paused := obj(apiCall(t, "POST", base+"/s/hourly/pause", "", `{"note":"maintenance"}`, 200)["schedule"])
	if paused["paused"] != true || paused["note"] != "maintenance" {
		t.Fatalf("pause: %v", paused)
	}
	if resumed := obj(apiCall(t, "POST", base+"/s/hourly/resume", "", "", 200)["schedule"]); resumed["paused"] == true {
		t.Fatalf("resume: %v", resumed)
	}
	apiCall(t, "POST", base+"/s/hourly/trigger", "", "", 200)
	apiCall(t, "PUT", base+"/s/hourly", "", `{"spec":{"every":"1800s"},"action":{"activity_type":"report"}}`, 200)
	if every := obj(obj(apiCall(t, "GET", base+"/s/hourly", "", "", 200)["schedule"])["spec"])["every"]; every != "1800s" {
		t.Fatalf("after update, every = %v", every)
	}
	apiCall(t, "DELETE", base+"/s/hourly", "", "", 200)
	apiCall(t, "GET", base+"/s/hourly", "", "", 404)
}

func TestHTTPScheduleBadInputIsRefusedNamingTheFieldAndValue(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	base := "http://" + srv.HTTPAddr() + "/api/v1/schedules"
	apiCall(t, "POST", base, "", scheduleBody("s", "hourly"), 200)
	for _, c := range []struct {
		method, path, body string
		says               []string
	}{
		{"POST", "", `{"namespace":"s","schedule_id":"bad","spec":{"cron":"61 * * * *"},"action":{"activity_type":"r"}}`, []string{"cron", "61 * * * *"}},
		{"POST", "", `{"namespace":"s","schedule_id":"tz","spec":{"cron":"0 * * * *","time_zone":"Mars/Olympus"},"action":{"activity_type":"r"}}`, []string{"time_zone", "Mars/Olympus"}},
		{"POST", "/s/hourly/pause", `{"namespace":"other"}`, []string{"namespace", `"other"`}},
		{"POST", "/s/hourly/pause", `{"schedule_id":"daily"}`, []string{"schedule_id", `"daily"`}},
		{"GET", "/s/hourly?upcoming=-1", "", []string{"upcoming"}},
		{"POST", "/s/hourly/backfill", `{"bogus":1}`, []string{"bogus"}},
	} {
		res := apiCall(t, c.method, base+c.path, "", c.body, 400)
		msg := fmt.Sprint(res)
		for _, s := range c.says {
			if !strings.Contains(msg, s) {
				t.Errorf("%s %s %s: %s does not say %q", c.method, c.path, c.body, msg, s)
			}
		}
	}
	if n := len(list(apiCall(t, "GET", base+"?namespace=s", "", "", 200)["schedules"])); n != 1 {
		t.Fatalf("the refusals left %d schedules, want the one created", n)
	}
}

func TestHTTPScheduleRoutesKeepNamespacesApart(t *testing.T) {
	t.Parallel()
	b := setup(t, withReaderKeys)
	base := "http://" + b.srv.HTTPAddr() + "/api/v1/schedules"
	apiCall(t, "POST", base, "admin-secret", scheduleBody("tenant-b", "b-daily"), 200)
	apiCall(t, "POST", base, "admin-secret", scheduleBody("tenant-a", "a-daily"), 200)
	for _, c := range []struct {
		token, method, path, body string
		code                      int
	}{
		{"tenant-a-client-secret", "GET", "?namespace=tenant-b", "", 403},
		{"tenant-a-client-secret", "GET", "/tenant-b/b-daily", "", 403},
		{"tenant-a-client-secret", "POST", "/tenant-b/b-daily/pause", "", 403},
		{"tenant-a-client-secret", "DELETE", "/tenant-b/b-daily", "", 403},
		{"tenant-a-client-secret", "POST", "", scheduleBody("tenant-b", "b-2"), 403},
		{"tenant-a-client-secret", "POST", "/tenant-a/a-daily/trigger", "", 200},
		{"tenant-a-reader-secret", "GET", "/tenant-a/a-daily", "", 200},
		{"tenant-a-reader-secret", "POST", "/tenant-a/a-daily/pause", "", 403},
		{"tenant-a-worker-secret", "GET", "?namespace=tenant-a", "", 403},
	} {
		if code, raw := httpCall(t, c.method, base+c.path, c.token, c.body); code != c.code {
			t.Errorf("%s %s %s as %s: %d %s, want %d", c.method, c.path, c.body, c.token, code, raw, c.code)
		}
	}
}

// The waiting view over HTTP: a namespace's ready work by queue, type,
// priority and fairness key, to its own callers only.
func TestHTTPWaitingCountsWorkByPriorityAndKey(t *testing.T) {
	t.Parallel()
	b := setup(t, withReaderKeys)
	base := "http://" + b.srv.HTTPAddr() + "/api/v1"
	for i, key := range []string{"tenant-x", "tenant-x", "tenant-y", ""} {
		apiCall(t, "POST", base+"/activities", "admin-secret", fmt.Sprintf(
			`{"namespace":"tenant-a","id":"w-%d","activity_type":"render","fairness_key":%q,"priority":%d}`, i, key, 2+i%2), 200)
	}
	res := apiCall(t, "GET", base+"/waiting?namespace=tenant-a", "tenant-a-reader-secret", "", 200)
	got := map[string]string{}
	for _, g := range list(res["groups"]) {
		m := obj(g)
		got[fmt.Sprintf("%v/%v/%v/%v", m["task_queue"], m["type"], m["priority"], m["fairness_key"])] = fmt.Sprint(m["count"])
	}
	want := map[string]string{"default/render/2/tenant-x": "1", "default/render/3/tenant-x": "1", "default/render/2/tenant-y": "1",
		"default/render/3/<nil>": "1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waiting groups %v, want %v (from %v)", got, want, res)
	}
	if code, raw := httpCall(t, "GET", base+"/waiting?namespace=tenant-b", "tenant-a-reader-secret", ""); code != 403 {
		t.Fatalf("another tenant's waiting work: %d %s, want 403", code, raw)
	}
	if code, raw := httpCall(t, "GET", base+"/waiting", "admin-secret", ""); code != 400 || !strings.Contains(raw, "namespace") {
		t.Fatalf("waiting without a namespace: %d %s, want 400 naming namespace", code, raw)
	}
}
