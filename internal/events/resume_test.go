package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aion-run/aion/internal/events"
)

// seqsOf reads n events from sub and returns their sequence numbers.
func seqsOf(t *testing.T, sub *events.Subscription, n int) []uint64 {
	t.Helper()
	out := make([]uint64, 0, n)
	for range n {
		out = append(out, next(t, sub).Seq)
	}
	return out
}

// noMore fails when sub has an event ready.
func noMore(t *testing.T, sub *events.Subscription) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e, err := sub.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("after the missed events: seq %d (%v), want nothing more", e.Seq, err)
	}
}

// A subscriber that resumes from a position whose later events are all
// held gets exactly those events, in order, and no snapshot; from any other
// position it gets a fresh snapshot and the events after it.
func TestSubscribeAfterResumesOnlyWhatItCanReplayExactly(t *testing.T) {
	t.Parallel()
	other := events.New() // another incarnation: a restarted server's bus
	for range 8 {
		other.Publish(connected(99))
	}
	tests := []struct {
		name      string
		published int    // events published before resuming
		after     uint64 // the sequence resumed after
		epoch     func(b *events.Bus) events.Epoch
		bound     int
		resumed   bool
	}{
		{name: "within the ring: exactly the missed events", published: 10, after: 4, resumed: true},
		{name: "from the snapshot of an empty bus: every event", published: 3, after: 0, resumed: true},
		{name: "from the last event: nothing missed", published: 5, after: 5, resumed: true},
		{name: "evicted from the ring: snapshot", published: events.RingEvents + 10, after: 5},
		{name: "still held: resumed", published: events.RingEvents + 10, after: 11, resumed: true},
		{name: "just evicted: snapshot", published: events.RingEvents + 10, after: 9},
		{name: "more missed than the bound: snapshot", published: 10, after: 4, bound: 3},
		{name: "a future sequence: snapshot", published: 5, after: 6},
		{name: "another bus's epoch: snapshot", published: 10, after: 4,
			epoch: func(*events.Bus) events.Epoch { return other.Epoch() }},
		{name: "no epoch: snapshot", published: 10, after: 4, epoch: func(*events.Bus) events.Epoch { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := events.New()
			for i := range tt.published {
				b.Publish(connected(uint64(i + 1)))
			}
			epoch := b.Epoch()
			if tt.epoch != nil {
				epoch = tt.epoch(b)
			}
			bound := cmpOr(tt.bound, events.RingEvents)
			st, sub := b.SubscribeAfter(events.Position{Epoch: epoch, Seq: tt.after}, bound)
			defer sub.Close()
			if st.Resumed != tt.resumed {
				t.Fatalf("resumed = %v, want %v", st.Resumed, tt.resumed)
			}
			last := uint64(tt.published)
			from := last // a snapshot: the events after it
			if tt.resumed {
				from = tt.after
				if st.Snapshot.Seq != 0 || st.Snapshot.Workers != nil {
					t.Fatalf("resumed with a snapshot %+v", st.Snapshot)
				}
			} else if st.Snapshot.Seq != last || len(st.Snapshot.Workers) != tt.published {
				t.Fatalf("snapshot at seq %d with %d workers, want seq %d with %d", st.Snapshot.Seq, len(st.Snapshot.Workers), last, tt.published)
			}
			if st.After != (events.Position{Epoch: b.Epoch(), Seq: from}) {
				t.Fatalf("after = %v, want %v", st.After, events.Position{Epoch: b.Epoch(), Seq: from})
			}
			b.Publish(connected(1000)) // and one published after resuming
			var want []uint64
			for s := from + 1; s <= last+1; s++ {
				want = append(want, s)
			}
			if got := seqsOf(t, sub, len(want)); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			noMore(t, sub)
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Two buses never share an epoch, so positions of a restarted server's bus
// never resume on the new one even where the sequence numbers coincide.
func TestEveryBusHasItsOwnEpoch(t *testing.T) {
	t.Parallel()
	seen := map[events.Epoch]bool{}
	for range 1000 {
		e := events.New().Epoch()
		if e == 0 || seen[e] {
			t.Fatalf("epoch %v zero or seen before", e)
		}
		seen[e] = true
	}
	old := events.New()
	old.Publish(connected(1))
	old.Publish(connected(2))
	restarted := events.New()
	restarted.Publish(connected(3))
	restarted.Publish(connected(4))
	restarted.Publish(connected(5))
	st, sub := restarted.SubscribeAfter(events.Position{Epoch: old.Epoch(), Seq: 2}, 16)
	defer sub.Close()
	if st.Resumed || st.Snapshot.Seq != 3 || len(st.Snapshot.Workers) != 3 {
		t.Fatalf("resuming the old bus's seq 2 on the restarted one: %+v, want a snapshot at seq 3", st)
	}
}

// A resumed subscriber that falls too far behind is dropped like any other.
func TestResumedSubscriberIsStillBounded(t *testing.T) {
	t.Parallel()
	b := events.New()
	for i := range 4 {
		b.Publish(connected(uint64(i)))
	}
	st, sub := b.SubscribeAfter(events.Position{Epoch: b.Epoch(), Seq: 1}, 4)
	if !st.Resumed {
		t.Fatal("not resumed")
	}
	b.Publish(connected(10))
	b.Publish(connected(11))
	// Dropped when event 6 made it 5 behind: it reads up to its bound.
	if got := seqsOf(t, sub, 4); !slices.Equal(got, []uint64{2, 3, 4, 5}) {
		t.Fatalf("events before the drop %v, want 2 3 4 5", got)
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrSlow) {
		t.Fatalf("past its bound: %v, want ErrSlow", err)
	}
}

// Resuming on a closed bus delivers the held events, then ErrClosed.
func TestSubscribeAfterOnAClosedBusEndsAfterTheHeldEvents(t *testing.T) {
	t.Parallel()
	b := events.New()
	b.Publish(connected(1))
	b.Publish(connected(2))
	b.Close()
	st, sub := b.SubscribeAfter(events.Position{Epoch: b.Epoch(), Seq: 1}, 16)
	if !st.Resumed {
		t.Fatal("not resumed")
	}
	if e := next(t, sub); e.Seq != 2 {
		t.Fatalf("seq %d, want 2", e.Seq)
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Fatalf("then %v, want ErrClosed", err)
	}
}

func TestPositionsRoundTripAndMalformedOnesAreRefused(t *testing.T) {
	t.Parallel()
	p := events.Position{Epoch: 0x00ab_cdef_0123_4567, Seq: 42}
	if s := p.String(); s != "00abcdef01234567-42" {
		t.Fatalf("String = %q", s)
	}
	if got, err := events.ParsePosition(p.String()); err != nil || got != p {
		t.Fatalf("ParsePosition(%q) = %v, %v", p.String(), got, err)
	}
	for _, bad := range []string{"", "42", "-42", "00abcdef01234567", "00abcdef01234567-", "00abcdef01234567-x",
		"00abcdef01234567--1", "abcdef-42", "0000000000000000-42", "zzabcdef01234567-42", "00abcdef01234567-42-1"} {
		if _, err := events.ParsePosition(bad); !errors.Is(err, events.ErrBadPosition) {
			t.Errorf("ParsePosition(%q) = %v, want ErrBadPosition", bad, err)
		}
	}
	if _, err := events.ParseEpoch(fmt.Sprint(p.Epoch)); err != nil {
		t.Fatalf("ParseEpoch(%v): %v", p.Epoch, err)
	}
}

// A subscriber dropped for falling behind reads the events within its
// bound; resuming from the last of them gets the rest when the bus still
// holds them, so nothing is missed and nothing repeated.
func TestDroppedSubscriberResumesFromTheLastEventItRead(t *testing.T) {
	t.Parallel()
	b := events.New()
	snap, sub := b.Subscribe(4)
	for i := range 6 {
		b.Publish(connected(uint64(i)))
	}
	got := seqsOf(t, sub, 4)
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrSlow) {
		t.Fatalf("past its bound: %v, want ErrSlow", err)
	}
	last := events.Position{Epoch: b.Epoch(), Seq: got[len(got)-1]}
	st, again := b.SubscribeAfter(last, 4)
	defer again.Close()
	if !st.Resumed {
		t.Fatalf("resuming from %v after the drop: a snapshot, want resumed", last)
	}
	got = append(got, seqsOf(t, again, int(b.Seq()-last.Seq))...)
	want := []uint64{}
	for s := snap.Seq + 1; s <= b.Seq(); s++ {
		want = append(want, s)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events across the drop %v, want %v", got, want)
	}
	noMore(t, again)
}
