package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// long is a timeout that never fires in these tests.
const long = 100 * time.Hour

// outcomes lists the outcomes of a view's attempts, in order.
func outcomes(v View) []store.AttemptOutcome {
	var out []store.AttemptOutcome
	for _, a := range v.Attempts {
		out = append(out, a.Outcome)
	}
	return out
}

// Each timeout kind closes the activity exactly at its deadline, and a
// running attempt it ends is cancelled on its worker, which keeps the slot
// until it reports the attempt.
func TestEachTimeoutClosesTheActivityAtItsDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		timeouts store.Timeouts
		// running: a worker takes the attempt before the deadline.
		running bool
		// heartbeatAfter, when set, is when the worker heartbeats.
		heartbeatAfter time.Duration
		// deadline is when the timeout fires, from scheduling.
		deadline time.Duration
		failure  string
	}{
		{name: "schedule-to-start with no worker",
			timeouts: store.Timeouts{ScheduleToStart: time.Minute, StartToClose: long, ScheduleToClose: long},
			deadline: time.Minute, failure: FailureScheduleToStart},
		{name: "start-to-close of a running attempt",
			timeouts: store.Timeouts{ScheduleToStart: long, StartToClose: time.Minute, ScheduleToClose: long},
			running:  true, deadline: time.Minute, failure: FailureStartToClose},
		{name: "heartbeat, counted from the last heartbeat",
			timeouts: store.Timeouts{ScheduleToStart: long, StartToClose: long, ScheduleToClose: long, Heartbeat: 10 * time.Second},
			running:  true, heartbeatAfter: 6 * time.Second, deadline: 16 * time.Second, failure: FailureHeartbeat},
		{name: "schedule-to-close of waiting work",
			timeouts: store.Timeouts{ScheduleToStart: long, StartToClose: long, ScheduleToClose: time.Hour},
			deadline: time.Hour, failure: FailureScheduleToClose},
		{name: "schedule-to-close of a running attempt",
			timeouts: store.Timeouts{ScheduleToStart: long, StartToClose: long, ScheduleToClose: time.Hour},
			running:  true, deadline: time.Hour, failure: FailureScheduleToClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", tc.timeouts, store.RetryPolicy{MaximumAttempts: 1}))
			var fw *fakeWorker
			if tc.running {
				fw = b.join(1)
				if task := fw.task(); task.Attempt != 1 || !task.StartedAt.Equal(epoch) {
					t.Fatalf("task: attempt %d started %v, want attempt 1 at %v", task.Attempt, task.StartedAt, epoch)
				}
			}
			if tc.heartbeatAfter > 0 {
				b.advanceTo(epoch.Add(tc.heartbeatAfter))
				if refused := b.eng.Heartbeat(fw.w, "ns", "a", 1, []byte("progress")); refused != "" {
					t.Fatalf("heartbeat refused: %s", refused)
				}
			}
			deadline := epoch.Add(tc.deadline)
			b.advanceTo(deadline.Add(-time.Millisecond))
			if a := b.get("a").Activity; a.State.Terminal() {
				t.Fatalf("a millisecond before its deadline the activity is already %s (%+v)", a.State, a.Failure)
			}
			if fw != nil {
				idle(t, fw.conn.cancels, "cancel before the deadline")
			}
			b.advanceTo(deadline)

			if fw != nil {
				if c := fw.cancel(); c != (attemptRef{key{"ns", "a"}, 1}) {
					t.Fatalf("worker asked to cancel %+v, want a#1", c)
				}
			}
			v := b.wait("a")
			a := v.Activity
			if a.State != store.StateTimedOut || a.Failure == nil || a.Failure.Type != tc.failure || !a.ClosedAt.Equal(deadline) {
				t.Fatalf("closed %s (%+v) at %v, want timed_out with %s at %v", a.State, a.Failure, a.ClosedAt, tc.failure, deadline)
			}
			if fw == nil {
				if len(v.Attempts) != 0 {
					t.Fatalf("attempts %+v, want none: no worker ever ran it", v.Attempts)
				}
				return
			}
			if got := outcomes(v); !slices.Equal(got, []store.AttemptOutcome{store.OutcomeTimedOut}) ||
				!v.Attempts[0].EndedAt.Equal(deadline) || v.Attempts[0].Failure.Type != tc.failure {
				t.Fatalf("attempts %+v, want one timed out with %s at %v", v.Attempts, tc.failure, deadline)
			}
			if tc.heartbeatAfter > 0 && string(a.HeartbeatDetails) != "progress" {
				t.Errorf("heartbeat details %q, want the last heartbeat's", a.HeartbeatDetails)
			}
			// The worker learns of the timeout by the cancel; its report is
			// refused and frees the slot it held meanwhile.
			if refused := fw.report("a", 1, Outcome{Canceled: true}); refused == "" {
				t.Fatal("the worker's report of the timed-out attempt was accepted")
			}
			b.schedule(request("next", store.Timeouts{}, store.RetryPolicy{}))
			if task := fw.task(); task.ActivityID != "next" {
				t.Fatalf("the worker got %s, want next on its freed slot", task.ActivityID)
			}
		})
	}
}

// A failed attempt is retried after its backoff, which grows by the
// coefficient up to the maximum interval, until an attempt cap, a
// non-retryable failure or the schedule-to-close deadline ends it.
func TestRetriesBackOffUntilTheyRunOut(t *testing.T) {
	t.Parallel()
	retryable := store.Failure{Type: "flaky", Message: "try again", Retryable: true}
	tests := []struct {
		name     string
		retry    store.RetryPolicy
		timeouts store.Timeouts
		// failures are the worker's reports, one per attempt made.
		failures []store.Failure
		// backoffs are the waits before attempts 2, 3, …
		backoffs []time.Duration
	}{
		{name: "backoff grows and is capped; the attempt cap closes it",
			retry:    store.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 3 * time.Second, MaximumAttempts: 4},
			failures: []store.Failure{retryable, retryable, retryable, retryable},
			backoffs: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{name: "a non-retryable failure closes it at once",
			retry:    store.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 4},
			failures: []store.Failure{{Type: "bad_input", Message: "no", Retryable: false}}},
		{name: "a failure type listed as non-retryable closes it at once",
			retry:    store.RetryPolicy{InitialInterval: time.Second, NonRetryableErrorTypes: []string{"flaky"}},
			failures: []store.Failure{retryable}},
		{name: "no retry that could not start before schedule-to-close",
			retry:    store.RetryPolicy{InitialInterval: time.Minute, BackoffCoefficient: 2},
			timeouts: store.Timeouts{ScheduleToClose: 90 * time.Second},
			failures: []store.Failure{retryable, retryable},
			backoffs: []time.Duration{time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", tc.timeouts, tc.retry))
			fw := b.join(1)
			start := epoch
			for n := 1; n <= len(tc.failures); n++ {
				task := fw.task()
				if task.ActivityID != "a" || task.Attempt != n || !task.StartedAt.Equal(start) {
					t.Fatalf("task %s#%d started at %v, want a#%d at %v", task.ActivityID, task.Attempt, task.StartedAt, n, start)
				}
				fw.fail("a", n, tc.failures[n-1])
				if n == len(tc.failures) {
					break
				}
				start = start.Add(tc.backoffs[n-1])
				if a := b.get("a").Activity; a.State != store.StateScheduled || !a.ReadyAt.Equal(start) {
					t.Fatalf("after attempt %d: %s, ready at %v; want scheduled, ready at %v", n, a.State, a.ReadyAt, start)
				}
				b.advanceTo(start.Add(-time.Millisecond))
				idle(t, fw.conn.tasks, "task before the backoff passed")
				b.advanceTo(start)
			}
			v := b.wait("a")
			last := tc.failures[len(tc.failures)-1]
			if a := v.Activity; a.State != store.StateFailed || a.Failure == nil || a.Failure.Type != last.Type {
				t.Fatalf("closed %s with %+v, want failed with the last failure %s", a.State, a.Failure, last.Type)
			}
			if got := outcomes(v); len(got) != len(tc.failures) || slices.ContainsFunc(got, func(o store.AttemptOutcome) bool { return o != store.OutcomeFailed }) {
				t.Fatalf("attempt outcomes %v, want %d failed", got, len(tc.failures))
			}
		})
	}
}

// Cancel closes the activity as canceled wherever it is in its life; a
// running attempt's worker is asked to stop, and what it sends later is
// refused.
func TestCancelClosesTheActivityWhereverItIs(t *testing.T) {
	t.Parallel()
	retry := store.RetryPolicy{InitialInterval: time.Minute}
	tests := []struct {
		name string
		// before brings activity a to where it is canceled and returns
		// its worker, if one ran it.
		before       func(b *bench) *fakeWorker
		wantAttempts []store.AttemptOutcome
		// running: its worker runs the attempt and is asked to stop.
		running bool
	}{
		{name: "waiting for a worker", before: func(*bench) *fakeWorker { return nil }},
		{name: "running on a worker", running: true, wantAttempts: []store.AttemptOutcome{store.OutcomeCanceled},
			before: func(b *bench) *fakeWorker {
				fw := b.join(1)
				fw.task()
				return fw
			}},
		{name: "between attempts", wantAttempts: []store.AttemptOutcome{store.OutcomeFailed},
			before: func(b *bench) *fakeWorker {
				fw := b.join(1)
				fw.task()
				fw.fail("a", 1, store.Failure{Type: "flaky", Retryable: true})
				return fw
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", store.Timeouts{}, retry))
			fw := tc.before(b)
			b.advance(time.Second)
			v, err := b.eng.Cancel(context.Background(), anyone, "ns", "a", "stop it")
			if err != nil {
				t.Fatalf("cancel: %v", err)
			}
			a := v.Activity
			if a.State != store.StateCanceled || a.Failure == nil || a.Failure.Message != "stop it" || !a.ClosedAt.Equal(b.clk.Now()) {
				t.Fatalf("after cancel: %s (%+v) closed at %v, want canceled with the reason, now", a.State, a.Failure, a.ClosedAt)
			}
			if got := outcomes(v); !slices.Equal(got, tc.wantAttempts) {
				t.Fatalf("attempt outcomes %v, want %v", got, tc.wantAttempts)
			}
			again, err := b.eng.Cancel(context.Background(), anyone, "ns", "a", "again")
			if err != nil || again.Activity.State != store.StateCanceled || again.Activity.Failure.Message != "stop it" {
				t.Fatalf("second cancel: %v, %+v; want the first cancel's record, no error", err, again.Activity.Failure)
			}
			if fw == nil {
				return
			}
			if tc.running {
				if c := fw.cancel(); c != (attemptRef{key{"ns", "a"}, 1}) {
					t.Fatalf("worker asked to cancel %+v, want a#1", c)
				}
				if refused := fw.report("a", 1, Outcome{Completed: true}); refused == "" {
					t.Fatal("a result after the cancel was accepted")
				}
			}
			idle(t, fw.conn.cancels, "cancel of an attempt that was not running")
			// A canceled retry never starts: past its backoff the worker's
			// free slot takes the next activity instead.
			b.advance(time.Hour)
			b.schedule(request("next", store.Timeouts{}, store.RetryPolicy{}))
			if task := fw.task(); task.ActivityID != "next" {
				t.Fatalf("the worker got %s#%d, want next", task.ActivityID, task.Attempt)
			}
		})
	}
}

// Cancelling an activity that closed otherwise changes nothing and says so.
func TestCancelOfACompletedActivityIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{}))
	fw := b.join(1)
	fw.task()
	fw.complete("a", 1, "done")
	v, err := b.eng.Cancel(context.Background(), anyone, "ns", "a", "too late")
	if !errors.Is(err, ErrFailedPrecondition) || v.Activity.State != store.StateCompleted {
		t.Fatalf("cancel of a completed activity: %v, state %s; want ErrFailedPrecondition and completed", err, v.Activity.State)
	}
}

// A worker that leaves fails its running attempts as retryable worker_lost:
// each is retried after its backoff on another worker, or closes the
// activity when no attempt is left.
func TestWorkerLossFailsItsAttemptsAsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason registry.Reason
		// maxAttempts caps the attempts; 1 leaves none for a retry.
		maxAttempts int
	}{
		{name: "disconnected worker, retried elsewhere", reason: registry.ReasonDisconnect},
		{name: "worker missing its heartbeat window, retried elsewhere", reason: registry.ReasonTimeout},
		{name: "lost on the last allowed attempt", reason: registry.ReasonDisconnect, maxAttempts: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", store.Timeouts{}, store.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: tc.maxAttempts}))
			lost := b.join(1)
			lost.task()
			b.advance(time.Second)
			lostAt := b.clk.Now()
			lost.leave(tc.reason)
			if n := b.eng.InFlight(); n != 0 {
				t.Fatalf("%d attempts in flight after their worker left", n)
			}
			if tc.maxAttempts == 1 {
				v := b.wait("a")
				if a := v.Activity; a.State != store.StateFailed || a.Failure.Type != FailureWorkerLost {
					t.Fatalf("closed %s with %+v, want failed with %s", a.State, a.Failure, FailureWorkerLost)
				}
				return
			}
			next := b.join(1)
			readyAt := lostAt.Add(5 * time.Second)
			b.advanceTo(readyAt.Add(-time.Millisecond))
			idle(t, next.conn.tasks, "task before the backoff passed")
			b.advanceTo(readyAt)
			task := next.task()
			if task.Attempt != 2 || !task.StartedAt.Equal(readyAt) {
				t.Fatalf("retry: attempt %d at %v, want attempt 2 at %v", task.Attempt, task.StartedAt, readyAt)
			}
			if refused := lost.report("a", 1, Outcome{Completed: true}); refused == "" {
				t.Fatal("the departed worker's result was accepted")
			}
			next.complete("a", 2, "done")
			v := b.wait("a")
			if v.Activity.State != store.StateCompleted || string(v.Activity.Result) != "done" {
				t.Fatalf("closed %s with result %q, want completed with the retry's result", v.Activity.State, v.Activity.Result)
			}
			if v.Attempts[0].Failure == nil || v.Attempts[0].Failure.Type != FailureWorkerLost || !v.Attempts[0].EndedAt.Equal(lostAt) {
				t.Fatalf("first attempt %+v, want failed with %s at %v", v.Attempts[0], FailureWorkerLost, lostAt)
			}
		})
	}
}

// A draining worker gets no new work, is asked to finish, and the attempts
// it runs still complete; waiting work goes to another worker.
func TestDrainingWorkerFinishesButTakesNothingNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.schedule(request("first", store.Timeouts{}, store.RetryPolicy{}))
	draining := b.join(2)
	draining.task()
	if !b.reg.Drain(draining.w.ID()) {
		t.Fatal("drain: worker not registered")
	}
	recv(t, draining.conn.drains, "drain request")

	b.schedule(request("second", store.Timeouts{}, store.RetryPolicy{}))
	idle(t, draining.conn.tasks, "task to a draining worker")
	if n := b.eng.InFlight(); n != 1 {
		t.Fatalf("%d attempts in flight, want the draining worker's one", n)
	}
	draining.complete("first", 1, "done")
	if n := b.eng.InFlight(); n != 0 {
		t.Fatalf("%d attempts in flight after the draining worker finished", n)
	}
	draining.leave(registry.ReasonDrained)

	other := b.join(1)
	if task := other.task(); task.ActivityID != "second" {
		t.Fatalf("the other worker got %s, want second", task.ActivityID)
	}
	if v := b.wait("first"); v.Activity.State != store.StateCompleted {
		t.Fatalf("the draining worker's attempt closed %s, want completed", v.Activity.State)
	}
}

// A result or heartbeat for an attempt that is not current on that worker
// is refused and changes nothing: the current attempt's result is the one
// recorded.
func TestStaleResultsAreRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// stale sends what must be refused, after a#1 started on fw, and
		// returns the attempt that is current afterwards.
		stale func(t *testing.T, b *bench, fw *fakeWorker) (current int)
	}{
		{name: "result for an attempt that timed out and was retried",
			stale: func(t *testing.T, b *bench, fw *fakeWorker) int {
				b.advance(time.Minute) // start-to-close
				fw.cancel()
				b.advance(time.Second) // backoff
				if task := fw.task(); task.Attempt != 2 {
					t.Fatalf("retry is attempt %d, want 2", task.Attempt)
				}
				if refused := fw.report("a", 1, Outcome{Completed: true, Result: []byte("stale")}); refused == "" {
					t.Error("result for attempt 1 accepted while attempt 2 runs")
				}
				if refused := b.eng.Heartbeat(fw.w, "ns", "a", 1, nil); refused == "" {
					t.Error("heartbeat for attempt 1 accepted while attempt 2 runs")
				}
				return 2
			}},
		{name: "result from a worker that does not run the attempt",
			stale: func(t *testing.T, b *bench, _ *fakeWorker) int {
				other := b.join(1)
				if refused := other.report("a", 1, Outcome{Completed: true, Result: []byte("stale")}); refused == "" {
					t.Error("another worker's result accepted")
				}
				if refused := b.eng.Heartbeat(other.w, "ns", "a", 1, nil); refused == "" {
					t.Error("another worker's heartbeat accepted")
				}
				return 1
			}},
		{name: "result for an attempt not started",
			stale: func(t *testing.T, _ *bench, fw *fakeWorker) int {
				if refused := fw.report("a", 2, Outcome{Completed: true, Result: []byte("stale")}); refused == "" {
					t.Error("result for attempt 2 accepted while attempt 1 runs")
				}
				return 1
			}},
		{name: "failure for an unknown activity",
			stale: func(t *testing.T, _ *bench, fw *fakeWorker) int {
				if refused := fw.report("nope", 1, Outcome{Failure: &store.Failure{Type: "x"}}); refused == "" {
					t.Error("failure for an unknown activity accepted")
				}
				return 1
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", store.Timeouts{StartToClose: time.Minute}, store.RetryPolicy{InitialInterval: time.Second}))
			fw := b.join(2)
			fw.task()
			current := tc.stale(t, b, fw)
			if a := b.get("a").Activity; a.State != store.StateRunning || a.Attempt != current {
				t.Fatalf("after the stale report: %s, attempt %d; want running attempt %d", a.State, a.Attempt, current)
			}
			fw.complete("a", current, "fresh")
			if refused := fw.report("a", current, Outcome{Completed: true, Result: []byte("again")}); refused == "" {
				t.Error("a second result for the recorded attempt was accepted")
			}
			v := b.wait("a")
			if v.Activity.State != store.StateCompleted || string(v.Activity.Result) != "fresh" || len(v.Attempts) != current {
				t.Fatalf("closed %s with %q after %d attempts, want completed with the current attempt's result after %d",
					v.Activity.State, v.Activity.Result, len(v.Attempts), current)
			}
		})
	}
}

// After a restart over the same store, every activity resumes where its
// durable record left it.
func TestRecoveryAfterReopenResumesEachActivity(t *testing.T) {
	t.Parallel()
	retry := store.RetryPolicy{InitialInterval: time.Minute}
	tests := []struct {
		name string
		// before runs on the first engine, after on the one reopened.
		before func(t *testing.T, b *bench)
		after  func(t *testing.T, b *bench)
	}{
		{name: "a completed activity keeps its result and attempts",
			before: func(t *testing.T, b *bench) {
				fw := b.join(1)
				fw.task()
				fw.complete("a", 1, "done")
			},
			after: func(t *testing.T, b *bench) {
				v := b.get("a")
				if v.Activity.State != store.StateCompleted || string(v.Activity.Result) != "done" || len(v.Attempts) != 1 {
					t.Fatalf("after reopen: %s, result %q, %d attempts; want completed, done, 1", v.Activity.State, v.Activity.Result, len(v.Attempts))
				}
				fw := b.join(1)
				idle(t, fw.conn.tasks, "task of a completed activity")
			}},
		{name: "waiting work goes to a worker that joins after",
			before: func(*testing.T, *bench) {},
			after: func(t *testing.T, b *bench) {
				if task := b.join(1).task(); task.ActivityID != "a" || task.Attempt != 1 {
					t.Fatalf("task %s#%d, want a#1", task.ActivityID, task.Attempt)
				}
			}},
		{name: "an attempt running at the stop runs again",
			before: func(t *testing.T, b *bench) { b.join(1).task() },
			after: func(t *testing.T, b *bench) {
				fw := b.join(1)
				// Starts are not written, so the cut attempt runs again
				// under its own number.
				if task := fw.task(); task.ActivityID != "a" || task.Attempt != 1 {
					t.Fatalf("task %s#%d, want a#1 again", task.ActivityID, task.Attempt)
				}
				fw.complete("a", 1, "done")
				if v := b.wait("a"); v.Activity.State != store.StateCompleted {
					t.Fatalf("closed %s, want completed", v.Activity.State)
				}
			}},
		{name: "a retry waits out its backoff",
			before: func(t *testing.T, b *bench) {
				fw := b.join(1)
				fw.task()
				fw.fail("a", 1, store.Failure{Type: "flaky", Retryable: true})
			},
			after: func(t *testing.T, b *bench) {
				readyAt := epoch.Add(time.Minute)
				fw := b.join(1)
				b.advanceTo(readyAt.Add(-time.Millisecond))
				idle(t, fw.conn.tasks, "task before the backoff passed")
				b.advanceTo(readyAt)
				if task := fw.task(); task.Attempt != 2 || !task.StartedAt.Equal(readyAt) {
					t.Fatalf("retry: attempt %d at %v, want attempt 2 at %v", task.Attempt, task.StartedAt, readyAt)
				}
			}},
		{name: "schedule-to-close still bounds it",
			before: func(*testing.T, *bench) {},
			after: func(t *testing.T, b *bench) {
				deadline := epoch.Add(long / 2)
				b.advanceTo(deadline.Add(-time.Millisecond))
				if a := b.get("a").Activity; a.State != store.StateScheduled {
					t.Fatalf("a millisecond before its deadline the activity is %s", a.State)
				}
				b.advanceTo(deadline)
				v := b.wait("a")
				if a := v.Activity; a.State != store.StateTimedOut || a.Failure.Type != FailureScheduleToClose || !a.ClosedAt.Equal(deadline) {
					t.Fatalf("closed %s (%+v) at %v, want timed out by schedule-to-close at %v", a.State, a.Failure, a.ClosedAt, deadline)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.schedule(request("a", store.Timeouts{ScheduleToStart: long, StartToClose: long, ScheduleToClose: long / 2}, retry))
			tc.before(t, b)
			b.restart()
			tc.after(t, b)
		})
	}
}
