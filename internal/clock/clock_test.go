package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fired reports whether ch holds a firing, and its value.
func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

// A fake timer fires during the Advance that reaches its instant, with that
// instant, and not during one that stops short of it.
func TestFakeTimerFiresWhenTimeReachesIt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		steps   []time.Duration
		wantAt  int // the step whose Advance fires it; -1 for none
		timeout time.Duration
	}{
		{name: "short of the instant", steps: []time.Duration{time.Minute - 1}, wantAt: -1, timeout: time.Minute},
		{name: "exactly at the instant", steps: []time.Duration{time.Minute}, wantAt: 0, timeout: time.Minute},
		{name: "past the instant", steps: []time.Duration{time.Hour}, wantAt: 0, timeout: time.Minute},
		{name: "in two steps", steps: []time.Duration{30 * time.Second, 30 * time.Second}, wantAt: 1, timeout: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := NewFake(start)
			tm := f.NewTimer(tc.timeout)
			for i, d := range tc.steps {
				f.Advance(d)
				v, ok := fired(tm.C())
				if ok != (i == tc.wantAt) {
					t.Fatalf("after step %d (now %v): fired %v, want %v", i, f.Now().Sub(start), ok, i == tc.wantAt)
				}
				if ok && !v.Equal(start.Add(tc.timeout)) {
					t.Fatalf("fired with %v, want its instant %v", v, start.Add(tc.timeout))
				}
			}
			if _, ok := fired(tm.C()); ok {
				t.Fatal("the timer fired twice")
			}
		})
	}
}

// Stop and Reset drop a firing not yet received, so a reader never sees the
// old setting; ResetAt to a passed instant fires at once.
func TestFakeTimerStopAndReset(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	if v, ok := fired(f.NewTimer(0).C()); !ok || !v.Equal(start) {
		t.Fatalf("a timer of 0 did not fire at once with now (fired %v, value %v)", ok, v)
	}
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fired, not received
	if tm.Stop() {
		t.Error("Stop of a fired timer reported it pending")
	}
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a firing was received after Stop")
	}
	if tm.Reset(time.Minute) {
		t.Error("Reset of a stopped timer reported it pending")
	}
	if !tm.Reset(2 * time.Minute) {
		t.Error("Reset of a set timer did not report it pending")
	}
	f.Advance(time.Minute)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("the timer fired at its first setting after a Reset moved it")
	}
	f.Advance(time.Minute)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("the timer did not fire at its new setting")
	}
	tm.ResetAt(start) // in the past
	if v, ok := fired(tm.C()); !ok || !v.Equal(start) {
		t.Fatalf("ResetAt a passed instant: fired %v with %v, want at once with that instant", ok, v)
	}
	if f.Waiters() != 0 {
		t.Fatalf("%d waiters after every timer fired", f.Waiters())
	}
}

// One Advance fires every timer that falls due, each with its own instant,
// and leaves the later ones set.
func TestFakeAdvanceFiresEveryDueTimer(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	var timers []Timer
	for _, n := range []int{3, 1, 2, 5} {
		timers = append(timers, f.NewTimer(time.Duration(n)*time.Second))
	}
	f.Advance(4 * time.Second)
	for i, n := range []int{3, 1, 2} {
		if v, ok := fired(timers[i].C()); !ok || !v.Equal(start.Add(time.Duration(n)*time.Second)) {
			t.Errorf("timer of %ds: fired %v with %v", n, ok, v)
		}
	}
	if _, ok := fired(timers[3].C()); ok {
		t.Error("the timer of 5s fired at 4s")
	}
	if n := f.Waiters(); n != 1 {
		t.Errorf("%d waiters, want the one timer not yet due", n)
	}
}

// A ticker ticks every period of fake time and drops ticks nobody took.
func TestFakeTickerDropsMissedTicks(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	tk := f.NewTicker(10 * time.Second)
	defer tk.Stop()
	f.Advance(9 * time.Second)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticked before its period")
	}
	f.Advance(time.Second)
	if v, ok := fired(tk.C()); !ok || !v.Equal(start.Add(10*time.Second)) {
		t.Fatalf("first tick: %v %v, want at 10s", ok, v)
	}
	f.Advance(35 * time.Second) // 20s, 30s, 40s due: one is kept
	if _, ok := fired(tk.C()); !ok {
		t.Fatal("no tick after several periods")
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("missed ticks were queued instead of dropped")
	}
	f.Advance(4 * time.Second) // now 49s: next tick is at 50s
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticked off its period after dropping ticks")
	}
	f.Advance(time.Second)
	if v, ok := fired(tk.C()); !ok || !v.Equal(start.Add(50*time.Second)) {
		t.Fatalf("tick after the dropped ones: %v %v, want at 50s", ok, v)
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("ticked after Stop")
	}
}

// AfterFunc runs its function once time reaches it, not before, and never
// once stopped.
func TestFakeAfterFunc(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	ran := make(chan time.Time, 1)
	f.AfterFunc(time.Minute, func() { ran <- f.Now() })
	stopped := f.AfterFunc(time.Minute, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending AfterFunc reported it not pending")
	}
	if stopped.C() != nil {
		t.Fatal("an AfterFunc timer has a channel")
	}
	if err := f.BlockUntil(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	if at := <-ran; !at.Equal(start.Add(time.Minute)) {
		t.Fatalf("ran at %v, want at one minute", at)
	}
}

// BlockUntil returns once enough timers are set, and ends with its context.
func TestFakeBlockUntil(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	done := make(chan error, 1)
	go func() { done <- f.BlockUntil(context.Background(), 2) }()
	a := f.NewTimer(time.Second)
	b := f.NewTimer(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Stop()
	b.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.BlockUntil(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntil with no timer and an ended context: %v, want context.Canceled", err)
	}
}

// Sleep returns after its duration, or with the context's error.
func TestSleep(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), f, time.Hour) }()
	if err := f.BlockUntil(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Hour)
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, Real(), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended context: %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), Real(), time.Millisecond); err != nil {
		t.Fatalf("Sleep on the real clock: %v", err)
	}
}

// The real clock's timers are the time package's.
func TestRealTimerResetAt(t *testing.T) {
	t.Parallel()
	c := Real()
	tm := c.NewTimer(time.Hour)
	tm.ResetAt(c.Now().Add(-time.Second))
	select {
	case <-tm.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a real timer reset to a passed instant did not fire")
	}
	if tm.Stop() {
		t.Error("Stop of a fired real timer reported it pending")
	}
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
	ran := make(chan struct{})
	c.AfterFunc(0, func() { close(ran) })
	<-ran
}
