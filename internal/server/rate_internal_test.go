package server

import (
	"testing"
	"time"

	"github.com/aion-run/aion/internal/limit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The receive rate is a debt that drains with time: a caller past its
// burst is admitted again once enough of it has drained, and a caller's
// entry goes once it owes nothing.
func TestReceiveRateDrainsWithTime(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	r := newReceiveRate(limit.Message, func() time.Time { return now }) // a message a second
	steps := []struct {
		advance time.Duration
		charge  int
		want    codes.Code
	}{
		{0, limit.Message, codes.OK},                         // at the burst: still admitted
		{0, 1, codes.ResourceExhausted},                      // past it
		{10 * time.Millisecond, 0, codes.OK},                 // the byte over has drained
		{0, limit.Message, codes.ResourceExhausted},          // a second's worth over
		{900 * time.Millisecond, 0, codes.ResourceExhausted}, // not yet drained
		{200 * time.Millisecond, 0, codes.OK},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		r.charge("a", s.charge)
		if got := status.Code(r.admit("a")); got != s.want {
			t.Fatalf("step %d: %v, want %v", i, got, s.want)
		}
		if got := status.Code(r.admit("b")); got != codes.OK {
			t.Fatalf("step %d: another caller refused: %v", i, got)
		}
	}
	now = now.Add(time.Hour)
	if r.admit("a") != nil || len(r.owes) != 0 {
		t.Fatalf("a caller that owes nothing keeps an entry: %v", r.owes)
	}
	off := newReceiveRate(0, time.Now)
	off.charge("a", 1<<40)
	if err := off.admit("a"); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}
