package worker

import (
	"math/rand/v2"
	"time"
)

// backoff is exponential reconnect backoff with jitter: the n-th delay is
// drawn uniformly from [d/2, d] where d = min(max, min·2^n), and is never
// below min nor above max.
type backoff struct {
	min, max time.Duration
	n        int
	rand     func() float64 // [0, 1); rand.Float64 unless a test sets it
}

func newBackoff(lo, hi time.Duration) *backoff {
	return &backoff{min: lo, max: hi, rand: rand.Float64}
}

// next returns the delay before the next attempt and grows the next one.
func (b *backoff) next() time.Duration {
	d := b.max
	if b.n < 62 {
		if grown := b.min << b.n; grown > 0 && grown < b.max && grown>>b.n == b.min {
			d = grown
		}
	}
	b.n++
	j := d/2 + time.Duration(b.rand()*float64(d/2))
	return min(max(j, b.min), b.max)
}

// reset starts over from the minimum delay.
func (b *backoff) reset() { b.n = 0 }
