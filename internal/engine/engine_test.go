package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	t.Parallel()
	p := store.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(p, i+1); got != w {
			t.Errorf("backoff after attempt %d = %v, want %v", i+1, got, w)
		}
	}
	huge := store.RetryPolicy{InitialInterval: time.Hour, BackoffCoefficient: 100}
	if got := backoff(huge, 60); got <= 0 {
		t.Fatalf("backoff overflowed to %v", got)
	}
}

func TestDefaultsFillOnlyWhatIsUnset(t *testing.T) {
	t.Parallel()
	e := &Engine{defaults: DefaultDefaults()}
	got := e.timeouts(store.Timeouts{ScheduleToClose: time.Minute, Heartbeat: 5 * time.Second})
	want := store.Timeouts{ScheduleToStart: time.Minute, StartToClose: time.Minute, ScheduleToClose: time.Minute, Heartbeat: 5 * time.Second}
	if got != want {
		t.Fatalf("timeouts = %+v, want %+v (defaults capped by schedule-to-close)", got, want)
	}
	if got := e.timeouts(store.Timeouts{}); got != DefaultDefaults().Timeouts {
		t.Fatalf("empty timeouts = %+v, want the defaults", got)
	}
	r := e.retry(store.RetryPolicy{InitialInterval: 5 * time.Minute, MaximumAttempts: 3})
	if r.BackoffCoefficient != 2 || r.MaximumInterval != 5*time.Minute || r.MaximumAttempts != 3 {
		t.Fatalf("retry = %+v", r)
	}
}

func TestFingerprintSeesEveryField(t *testing.T) {
	t.Parallel()
	base := Request{Namespace: "ns", ID: "a", ActivityType: "t", Payload: []byte("p")}
	variants := []func(*Request){
		func(r *Request) { r.Namespace = "other" },
		func(r *Request) { r.TaskQueue = "q" },
		func(r *Request) { r.ActivityType = "u" },
		func(r *Request) { r.Node = "n" },
		func(r *Request) { r.Payload = []byte("q") },
		func(r *Request) { r.Timeouts.Heartbeat = time.Second },
		func(r *Request) { r.Retry.MaximumAttempts = 2 },
		func(r *Request) { r.Retry.NonRetryableErrorTypes = []string{"x"} },
	}
	seen := map[string]bool{fingerprint(base): true}
	for i, v := range variants {
		r := base
		v(&r)
		fp := fingerprint(r)
		if seen[fp] {
			t.Errorf("variant %d has the fingerprint of an earlier request", i)
		}
		seen[fp] = true
	}
	same := base
	same.TaskQueue = "default" // empty means default: the same request
	if fingerprint(same) != fingerprint(base) {
		t.Error("an explicit default task queue changed the fingerprint")
	}
}

func TestGeneratedIDsSortByTime(t *testing.T) {
	t.Parallel()
	var ids []string
	for range 3 {
		ids = append(ids, newID())
		time.Sleep(2 * time.Millisecond)
	}
	if !slices.IsSorted(ids) || ids[0] == ids[1] || len(ids[0]) != 32 {
		t.Fatalf("ids = %v, want distinct 32-digit ids in time order", ids)
	}
}
