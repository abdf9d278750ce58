package tokenbucket_test

import (
	"testing"
	"time"

	"github.com/aion-run/aion/internal/tokenbucket"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAFullBucketGivesItsBurstThenOneTokenPerInterval(t *testing.T) {
	t.Parallel()
	l := tokenbucket.Limit{Rate: 200, Burst: 20}
	b := tokenbucket.Full(l, t0)
	if got := b.Take(l, t0, 100); got != 20 {
		t.Fatalf("a full bucket gave %d, want its burst of 20", got)
	}
	if got := b.Take(l, t0, 1); got != 0 {
		t.Fatalf("an empty bucket gave %d", got)
	}
	next := b.Next(l, t0)
	if want := t0.Add(5 * time.Millisecond); !next.Equal(want) {
		t.Fatalf("next token at %v, want %v", next, want)
	}
	if got := b.Take(l, next.Add(-time.Nanosecond), 1); got != 0 {
		t.Fatalf("a token was there a nanosecond before the instant Next named")
	}
	if got := b.Take(l, next, 1); got != 1 {
		t.Fatalf("no token at the instant Next named")
	}
}

func TestStartsOverTimeFollowTheRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rate  float64
		burst int
	}{{200, 20}, {3, 1}, {0.5, 1}, {1000, 1}, {7.3, 4}}
	for _, c := range cases {
		l := tokenbucket.Limit{Rate: c.rate, Burst: c.burst}
		b := tokenbucket.Full(l, t0)
		now := t0
		starts := 0
		end := t0.Add(10 * time.Second)
		// Start whenever a token is there, waking exactly at Next: a
		// greedy taker, like a limit with endless work waiting.
		for !now.After(end) {
			starts += b.Take(l, now, 1<<30)
			now = b.Next(l, now)
		}
		want := c.burst + int(c.rate*10)
		if starts < want-1 || starts > want {
			t.Errorf("rate %g burst %d: %d starts in 10s, want %d (the burst plus rate × 10s)", c.rate, c.burst, starts, want)
		}
	}
}

func TestRefillStopsAtTheBurstAndIgnoresAClockGoingBack(t *testing.T) {
	t.Parallel()
	l := tokenbucket.Limit{Rate: 10, Burst: 3}
	b := tokenbucket.Full(l, t0)
	b.Take(l, t0, 3)
	if got := b.Available(l, t0.Add(time.Hour)); got != 3 {
		t.Fatalf("after an hour %d tokens, want the burst 3", got)
	}
	b.Refill(l, t0.Add(time.Second)) // 10 added, capped at 3
	if b.Take(l, t0.Add(-time.Minute), 5) != 3 || b.Available(l, t0.Add(time.Second)) != 0 {
		t.Fatal("a time before the last refill gave more than the bucket held")
	}
	if got := b.FullAt(l); !got.Equal(t0.Add(time.Second + 300*time.Millisecond)) {
		t.Fatalf("full at %v, want 300ms after the last take", got)
	}
}

func TestGiveReturnsATokenUpToTheBurst(t *testing.T) {
	t.Parallel()
	l := tokenbucket.Limit{Rate: 1, Burst: 2}
	b := tokenbucket.Full(l, t0)
	b.Take(l, t0, 1)
	b.Give(l, 5)
	if got := b.Available(l, t0); got != 2 {
		t.Fatalf("after give: %d tokens, want the burst 2", got)
	}
	if !b.FullAt(l).Equal(t0) {
		t.Fatalf("a full bucket is full at %v, want now", b.FullAt(l))
	}
}
