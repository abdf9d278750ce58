package clock

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Fake is a clock whose time moves only when Advance or AdvanceTo is called.
// Its timers fire during the call that moves time to or past their instant,
// in the order of their instants; a timer set to an instant already passed
// fires at once. Create one with NewFake; it is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	pending map[*fakeTimer]struct{}
	seq     uint64
	// changed is closed and replaced whenever a timer is set, so
	// BlockUntil can wait for one.
	changed chan struct{}
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, pending: make(map[*fakeTimer]struct{}), changed: make(chan struct{})}
}

// Now is the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves time forward by d (d < 0 is treated as 0) and fires every
// timer and tick that falls due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveLocked(f.now.Add(max(d, 0)))
}

// AdvanceTo moves time forward to t, if t is later than now, and fires every
// timer and tick that falls due.
func (f *Fake) AdvanceTo(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.moveLocked(t)
	}
}

// Waiters is how many timers and tickers are set and not yet fired or
// stopped.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// BlockUntil waits until at least n timers and tickers are set, or ctx
// ends: a test calls it before Advance when the code under test arms its
// timer in a goroutine the test cannot otherwise observe.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.pending) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewTimer returns a timer firing d from the fake's now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker returns a ticker firing every d of fake time; it panics if
// d <= 0, as time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return fakeTicker{t}
}

// fakeTicker is a fakeTimer with a period, seen through Ticker.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }
func (k fakeTicker) Stop()               { k.t.Stop() }

// AfterFunc calls fn in its own goroutine once the fake's time reaches d
// from now.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// moveLocked sets now to to and fires what fell due, earliest first.
func (f *Fake) moveLocked(to time.Time) {
	f.now = to
	var due []*fakeTimer
	for t := range f.pending {
		if !t.at.After(to) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *fakeTimer) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.seq, b.seq))
	})
	for _, t := range due {
		f.fireLocked(t)
	}
}

// armLocked sets t to fire at at, at once if that is not after now.
func (f *Fake) armLocked(t *fakeTimer, at time.Time) {
	f.seq++
	t.at, t.seq = at, f.seq
	f.pending[t] = struct{}{}
	close(f.changed)
	f.changed = make(chan struct{})
	if !at.After(f.now) {
		f.fireLocked(t)
	}
}

func (f *Fake) fireLocked(t *fakeTimer) {
	at := t.at
	if t.period > 0 {
		// The next tick is the first multiple of the period after now;
		// the ones in between are dropped, as a slow reader's would be.
		next := at.Add(t.period)
		if !next.After(f.now) {
			next = next.Add(f.now.Sub(next)/t.period*t.period + t.period)
		}
		t.at = next
	} else {
		delete(f.pending, t)
	}
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- at:
	default: // a tick the reader has not taken yet: this one is dropped
	}
}

// fakeTimer is a Fake's timer or ticker (period > 0).
type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	fn     func()
	period time.Duration
	// at and seq are guarded by f.mu.
	at  time.Time
	seq uint64
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.resetLocked(t.f.now.Add(d))
}

func (t *fakeTimer) ResetAt(at time.Time) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.resetLocked(at)
}

func (t *fakeTimer) resetLocked(at time.Time) bool {
	was := t.stopLocked()
	t.f.armLocked(t, at)
	return was
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.stopLocked()
}

// stopLocked disarms t and drops a firing not yet received, so none of
// the old setting is seen after Stop or Reset (as with time.Timer).
func (t *fakeTimer) stopLocked() bool {
	_, was := t.f.pending[t]
	delete(t.f.pending, t)
	if t.c != nil {
		select {
		case <-t.c:
		default:
		}
	}
	return was
}
