// Package clock is the time source of code whose timers tests must control:
// production passes Real, tests pass a Fake and move its time with Advance,
// so a timeout of a day is tested in no time and without sleeping.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers that fire by it.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer returns a timer whose channel receives once d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker whose channel receives every d (d > 0);
	// ticks a slow reader misses are dropped, as with time.Ticker.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine d from now, unless the
	// returned timer is stopped first. Its timer has no channel.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer fires once, at the instant it was last set to.
type Timer interface {
	// C receives the firing; nil for a timer made by AfterFunc.
	C() <-chan time.Time
	// Reset sets the timer to fire d from now. It reports whether the
	// timer was pending. No firing of the old setting is received after it
	// returns.
	Reset(d time.Duration) bool
	// ResetAt sets the timer to fire at t, at once if t is not after now.
	// Unlike Reset(t.Sub(now)), it cannot fire late when the clock moves
	// between reading now and re-arming the timer.
	ResetAt(t time.Time) bool
	// Stop cancels the timer and reports whether it was pending. No firing
	// is received after it returns.
	Stop() bool
}

// Ticker fires every period until stopped.
type Ticker interface {
	// C receives the ticks.
	C() <-chan time.Time
	// Stop ends the ticks; no tick is received after it returns.
	Stop()
}

// Sleep waits d on c, or until ctx ends; it reports ctx's error then.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Real is the clock of the time package.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
func (r realTimer) ResetAt(at time.Time) bool  { return r.t.Reset(time.Until(at)) }
func (r realTimer) Stop() bool                 { return r.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
