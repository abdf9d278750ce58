package store

import (
	"context"
	"time"
)

// Lane names the scheduled activities that wait together for dispatch: one
// pool and activity type, node pin, priority and fairness key.
type Lane struct {
	Namespace, TaskQueue, ActivityType, Node string
	Priority                                 int
	FairnessKey                              string
}

// LaneOf is the lane an activity waits in.
func LaneOf(a *Activity) Lane {
	return Lane{Namespace: a.Namespace, TaskQueue: a.TaskQueue, ActivityType: a.ActivityType, Node: a.Node,
		Priority: EffectivePriority(a.Priority), FairnessKey: a.Flow.FairnessKey}
}

// LaneCount is how many scheduled activities wait in one lane.
type LaneCount struct {
	Lane
	Count int
	// Bytes sums their payloads' lengths when asked for, else 0.
	Bytes int64
	// OldestReady is the earliest ready time among them.
	OldestReady time.Time
}

// WaitingCursor is a position in a lane's dispatch order, or in the order
// of waiting deadlines: a time, then the store's Seq. The zero cursor is
// before everything.
type WaitingCursor struct {
	At  time.Time
	Seq int64
}

// Before reports whether c comes before (at, seq).
func (c WaitingCursor) Before(at time.Time, seq int64) bool {
	return c.At.Before(at) || (c.At.Equal(at) && c.Seq < seq)
}

// WaitingPage asks for the next scheduled activities of one lane that are
// ready at Now, in dispatch order: ready time, then Seq.
type WaitingPage struct {
	Lane
	Now time.Time
	// After is where the previous page ended; only activities past it.
	After WaitingCursor
	// Limit caps the page; 0 means 256.
	Limit int
	// Inline leaves out payloads longer than it (PayloadSize is set); a
	// negative Inline keeps them all.
	Inline int
}

// WaitingDeadline is when a scheduled activity stops waiting whether or not
// it starts: the earlier of its schedule-to-close deadline (from when it
// was scheduled) and its schedule-to-start deadline (from when it became
// ready); zero when it has neither.
func WaitingDeadline(a *Activity) time.Time {
	var d time.Time
	if t := a.Timeouts.ScheduleToClose; t > 0 {
		d = a.ScheduledAt.Add(t)
	}
	if t := a.Timeouts.ScheduleToStart; t > 0 {
		if s := a.ReadyAt.Add(t); d.IsZero() || s.Before(d) {
			d = s
		}
	}
	return d
}

// WaitingStore lets a server running alone keep only a window of its
// waiting work in memory and read the rest from the store when it is due,
// so its memory and its start time do not grow with the backlog. A store
// that offers it implements it beside Store; the engine holds all open
// work in memory over a store that does not.
type WaitingStore interface {
	// The scheduled activities below are those inserted with Spilled.
	//
	// CountWaiting counts the scheduled activities of every lane that has
	// any; withBytes sums their payload lengths too, which costs a read of
	// every row.
	CountWaiting(ctx context.Context, withBytes bool) ([]LaneCount, error)
	// WaitingBytes sums the payload lengths of the scheduled activities
	// per namespace (namespaces without any are left out); it reads every
	// such row.
	WaitingBytes(ctx context.Context) (map[string]int64, error)
	// PageWaiting returns up to p.Limit scheduled activities of p's lane
	// that are ready at p.Now and come after p.After, in dispatch order.
	// When it returns fewer than the limit, next is the earliest ready
	// time after p.Now of the lane's other scheduled activities, zero if
	// none.
	PageWaiting(ctx context.Context, p WaitingPage) (page []Activity, next time.Time, err error)
	// ExpiredWaiting returns up to limit scheduled activities whose
	// WaitingDeadline is at or before now and after the cursor (deadline,
	// Seq), in that order, without payloads, results or details.
	ExpiredWaiting(ctx context.Context, now time.Time, after WaitingCursor, limit int) ([]Activity, error)
	// NextWaitingDeadline is the earliest WaitingDeadline after now of any
	// scheduled activity; ok is false when none has one.
	NextWaitingDeadline(ctx context.Context, now time.Time) (at time.Time, ok bool, err error)
	// HeldActivities returns the open activities inserted without
	// Spilled (the work the server held in memory: a window of each lane,
	// delayed starts, workflow steps), oldest first; payloads as for
	// OpenActivities.
	HeldActivities(ctx context.Context, inline int) ([]Activity, error)
}
