package cli

import (
	"strings"
	"testing"
	"time"
)

// scheduleJSON is what `aion schedule get -o json` prints, in part.
type scheduleJSON struct {
	ID   string `json:"schedule_id"`
	Spec struct {
		Cron     string `json:"cron"`
		TimeZone string `json:"time_zone"`
		Every    string `json:"every"`
		Offset   string `json:"offset"`
		Jitter   string `json:"jitter"`
	} `json:"spec"`
	Action struct {
		WorkflowType   string `json:"workflow_type"`
		ActivityType   string `json:"activity_type"`
		TaskQueue      string `json:"task_queue"`
		Node           string `json:"node"`
		StartToClose   string `json:"start_to_close_timeout"`
		Priority       int    `json:"priority"`
		ConcurrencyKey string `json:"concurrency_key"`
		RetryPolicy    *struct {
			MaximumAttempts int `json:"maximum_attempts"`
		} `json:"retry_policy"`
	} `json:"action"`
	Policy struct {
		Overlap       string `json:"overlap"`
		CatchUp       string `json:"catch_up"`
		CatchUpWindow string `json:"catch_up_window"`
	} `json:"policy"`
	Paused   bool   `json:"paused"`
	Note     string `json:"note"`
	Upcoming []struct {
		Nominal time.Time `json:"nominal_time"`
	} `json:"upcoming"`
	Recent []struct {
		Outcome  string `json:"outcome"`
		Origin   string `json:"origin"`
		ActionID string `json:"action_id"`
	} `json:"recent_actions"`
	BackfillsWaiting int `json:"backfills_waiting"`
}

func TestScheduleCommandsReachTheServer(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	out := r.ok(t, "schedule", "create", "nightly", "-n", "ns", "--cron", "30 2 * * *", "--tz", "Europe/Berlin",
		"--activity-type", "report", "-q", "cpu", "--node", "n1", "--input", `{"day":"today"}`, "--start-to-close", "2m",
		"--max-attempts", "3", "--priority", "2", "--concurrency-key", "reports", "--overlap", "buffer_one",
		"--catchup", "all", "--catchup-window", "10m", "--jitter", "30s")
	if !strings.HasPrefix(out, "created schedule nightly in namespace ns\nnext tick: ") {
		t.Fatalf("create printed %q", out)
	}
	s := decode[scheduleJSON](t, r.ok(t, "schedule", "get", "nightly", "-n", "ns", "-o", "json", "--upcoming", "3"))
	a := s.Action
	if s.Spec.Cron != "30 2 * * *" || s.Spec.TimeZone != "Europe/Berlin" || s.Spec.Jitter != "30s" || a.ActivityType != "report" ||
		a.TaskQueue != "cpu" || a.Node != "n1" || a.StartToClose != "2m0s" || a.RetryPolicy == nil || a.RetryPolicy.MaximumAttempts != 3 ||
		a.Priority != 2 || a.ConcurrencyKey != "reports" || s.Policy.Overlap != "buffer_one" || s.Policy.CatchUp != "all" ||
		s.Policy.CatchUpWindow != "10m0s" || len(s.Upcoming) != 3 {
		t.Fatalf("the server recorded %+v", s)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if local := s.Upcoming[0].Nominal.In(berlin); local.Hour() != 2 || local.Minute() != 30 {
		t.Fatalf("next tick %v, want 02:30 Berlin time", local)
	}

	// Update changes what its flags name and keeps the rest.
	r.ok(t, "schedule", "update", "nightly", "-n", "ns", "--every", "1h", "--offset", "15m", "--overlap", "skip")
	s = decode[scheduleJSON](t, r.ok(t, "schedule", "get", "nightly", "-n", "ns", "-o", "json"))
	if s.Spec.Cron != "" || s.Spec.TimeZone != "" || s.Spec.Every != "1h0m0s" || s.Spec.Offset != "15m0s" || s.Policy.Overlap != "skip" ||
		s.Action.ActivityType != "report" || s.Policy.CatchUp != "all" || s.Upcoming[0].Nominal.Minute() != 15 {
		t.Fatalf("after update %+v", s)
	}

	if out := r.ok(t, "schedule", "pause", "nightly", "-n", "ns", "--note", "quarter close"); out != "paused schedule nightly in namespace ns\npaused: quarter close\n" {
		t.Fatalf("pause printed %q", out)
	}
	out = r.ok(t, "schedule", "trigger", "nightly", "-n", "ns")
	if !strings.HasPrefix(out, "triggered schedule nightly: started nightly@") {
		t.Fatalf("trigger printed %q", out)
	}
	id := strings.TrimSpace(strings.TrimPrefix(out, "triggered schedule nightly: started "))
	act := decode[activityJSON](t, r.ok(t, "activity", "get", id, "-n", "ns", "-o", "json"))
	if act.ActivityType != "report" || compact(act.Payload) != `{"day":"today"}` {
		t.Fatalf("the triggered activity %+v", act)
	}
	r.ok(t, "schedule", "resume", "nightly", "-n", "ns")
	out = r.ok(t, "schedule", "backfill", "nightly", "-n", "ns", "--start-at", "2026-01-01T00:00:00Z", "--end-at", "2026-01-01T03:00:00Z")
	if out != "backfill of schedule nightly from 2026-01-01T00:00:00Z to 2026-01-01T03:00:00Z accepted (1 waiting)\n" &&
		out != "backfill of schedule nightly from 2026-01-01T00:00:00Z to 2026-01-01T03:00:00Z accepted (0 waiting)\n" {
		t.Fatalf("backfill printed %q", out)
	}
	if out := r.ok(t, "schedule", "list", "-n", "ns"); !strings.Contains(out, "nightly") || !strings.Contains(out, "every 1h0m0s +15m0s") ||
		!strings.Contains(out, "NEXT TICK") || !strings.Contains(out, ":15:00") {
		t.Fatalf("list printed %q", out)
	}
	if out := r.ok(t, "schedule", "get", "nightly", "-n", "ns"); !strings.Contains(out, "every 1h0m0s +15m0s jitter 30s") ||
		!strings.Contains(out, "recent:") {
		t.Fatalf("get printed %q", out)
	}
	r.ok(t, "schedule", "delete", "nightly", "-n", "ns")
	if code, _, errOut := r.run(t, "", "schedule", "get", "nightly", "-n", "ns"); code != exitError || !strings.Contains(errOut, "(NotFound)") {
		t.Fatalf("get after delete: exit %d, %s", code, errOut)
	}
}

func TestScheduleCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cron", "0 * * * *", "--every", "1m", "--activity-type", "a"}, "--cron and --every: give one"},
		{[]string{"--activity-type", "a"}, "--cron or --every: required"},
		{[]string{"--every", "1m"}, "--workflow-type or --activity-type: required"},
		{[]string{"--every", "1m", "--activity-type", "a", "--overlap", "sometimes"}, `--overlap: overlap policy "sometimes"`},
		{[]string{"--every", "1m", "--activity-type", "a", "--catchup", "most"}, `--catchup: catch-up policy "most"`},
		{[]string{"--cron", "0 * * * *", "--tz", "Mars/Olympus", "--activity-type", "a"}, `time_zone: "Mars/Olympus"`},
		{[]string{"--cron", "99 * * * *", "--activity-type", "a"}, `cron: "99 * * * *"`},
		{[]string{"--every", "1m", "--offset", "2m", "--activity-type", "a"}, "offset: 2m0s"},
		{[]string{"--every", "1m", "--activity-type", "a", "--start-at", "yesterday"}, `--start-at "yesterday"`},
	} {
		args := append([]string{"schedule", "create", "bad", "-n", "ns"}, c.args...)
		code, _, errOut := r.run(t, "", args...)
		if code != exitError || !strings.Contains(errOut, c.want) {
			t.Errorf("aion %s: exit %d, stderr %q; want it to say %q", strings.Join(args, " "), code, errOut, c.want)
		}
	}
	if code, _, errOut := r.run(t, "", "schedule", "get", "bad", "-n", "ns"); code != exitError || !strings.Contains(errOut, "(NotFound)") {
		t.Fatalf("a refused create left a schedule: exit %d, %s", code, errOut)
	}
}
