// Package tokenbucket is the arithmetic of a rate limit: a bucket holds up
// to Burst tokens, refills at Rate tokens a second, and each start takes
// one. It is pure (time is passed in), so the engine, which keeps buckets in
// memory, and the PostgreSQL store, which keeps them in rows a claim
// transaction updates, count the same way.
package tokenbucket

import (
	"math"
	"time"
)

// Limit is a rate: Rate tokens a second, at most Burst held at once.
type Limit struct {
	Rate  float64
	Burst int
}

// slack absorbs floating-point error: a bucket this close to a whole token
// holds it, so a wake-up at the instant Next names always finds it.
const slack = 1e-9

// Bucket is one bucket's state: Tokens as of At. The zero Bucket is not
// valid; start one with Full.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// Full is a bucket holding its whole burst at now.
func Full(l Limit, now time.Time) Bucket {
	return Bucket{Tokens: float64(l.Burst), At: now}
}

// Refill brings b up to now: what the rate added since b.At, capped at the
// burst. A now before b.At (a clock that went back, or another server's
// clock behind this one's) adds nothing and leaves b.At where it was.
func (b *Bucket) Refill(l Limit, now time.Time) {
	if now.After(b.At) {
		b.Tokens += now.Sub(b.At).Seconds() * l.Rate
		b.At = now
	}
	b.Tokens = min(b.Tokens, float64(l.Burst))
}

// Available is how many whole tokens b holds at now.
func (b Bucket) Available(l Limit, now time.Time) int {
	b.Refill(l, now)
	return int(math.Floor(b.Tokens + slack))
}

// Take takes up to n tokens at now and returns how many it took.
func (b *Bucket) Take(l Limit, now time.Time, n int) int {
	b.Refill(l, now)
	got := min(n, int(math.Floor(b.Tokens+slack)))
	if got <= 0 {
		return 0
	}
	b.Tokens = max(b.Tokens-float64(got), 0)
	return got
}

// Give puts n tokens back (a start that did not happen), up to the burst.
func (b *Bucket) Give(l Limit, n int) {
	b.Tokens = min(b.Tokens+float64(n), float64(l.Burst))
}

// Next is the earliest instant at or after now at which b holds a whole
// token: now when it holds one already. It is rounded up to the
// nanosecond, so at that instant Take succeeds.
func (b Bucket) Next(l Limit, now time.Time) time.Time {
	b.Refill(l, now)
	if b.Tokens+slack >= 1 {
		return now
	}
	return b.At.Add(durationFor(1-b.Tokens, l.Rate))
}

// FullAt is the instant b holds its whole burst again, with no more taken:
// from then on it is the same as a new Full bucket and need not be kept.
func (b Bucket) FullAt(l Limit) time.Time {
	missing := float64(l.Burst) - b.Tokens
	if missing <= 0 {
		return b.At
	}
	return b.At.Add(durationFor(missing, l.Rate))
}

// durationFor is how long rate takes to add tokens, rounded up to the
// nanosecond and at least one.
func durationFor(tokens, rate float64) time.Duration {
	if rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	ns := math.Ceil(tokens / rate * 1e9)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration(ns), 1)
}
