package engine

import (
	"fmt"
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
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 3 {
		ids = append(ids, newID(at.Add(time.Duration(i)*time.Millisecond)))
	}
	if !slices.IsSorted(ids) || ids[0] == ids[1] || len(ids[0]) != 32 {
		t.Fatalf("ids = %v, want distinct 32-digit ids in time order", ids)
	}
}

// Timers of closed activities do not pile up: the heap is swept whenever it
// has doubled, and live timers survive the sweep.
func TestStaleTimersAreSweptOut(t *testing.T) {
	t.Parallel()
	e := &Engine{open: map[key]*activity{}, timerWake: make(chan struct{}, 1)}
	live := &activity{rec: store.Activity{Namespace: "ns", ID: "live", Attempt: 2}}
	e.open[live.key()] = live
	far := time.Now().Add(24 * time.Hour)
	e.armLocked(far, live.key(), 0, timerScheduleToClose)
	e.armLocked(far, live.key(), 2, timerStartToClose)
	e.armLocked(far, live.key(), 1, timerStartToClose) // an earlier attempt's: stale
	for i := range 20_000 {
		e.armLocked(far, key{"ns", fmt.Sprint("closed-", i)}, 0, timerScheduleToClose)
	}
	if n := len(e.timers); n > 2*minCompact+3 {
		t.Fatalf("%d timers held for 2 live ones", n)
	}
	e.compactTimersLocked()
	var kinds []timerKind
	for _, tm := range e.timers {
		kinds = append(kinds, tm.kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []timerKind{timerStartToClose, timerScheduleToClose}) {
		t.Fatalf("after a sweep the heap holds kinds %v, want the live activity's two", kinds)
	}
}

// After failed claims the claim loop pauses longer each time, up to a cap.
func TestClaimPauseGrowsAndIsCapped(t *testing.T) {
	t.Parallel()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for i, w := range want {
		if got := claimPause(i + 1); got != w {
			t.Errorf("pause after %d failed claims = %v, want %v", i+1, got, w)
		}
	}
}
