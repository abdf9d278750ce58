package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention is how long a namespace keeps its closed activities and closed
// workflow runs after they closed; the reaper deletes them once it has
// passed. Zero means DefaultRetention.
type Retention time.Duration

// The bounds and default of a namespace's retention.
const (
	// DefaultRetention is the retention of a namespace that set none.
	DefaultRetention = Retention(7 * 24 * time.Hour)
	// MinRetention is the shortest retention a namespace may set.
	MinRetention = Retention(time.Minute)
	// MaxRetention is the longest retention a namespace may set.
	MaxRetention = Retention(10 * 365 * 24 * time.Hour)
)

// ErrBadRetention reports a retention outside [MinRetention, MaxRetention].
var ErrBadRetention = errors.New("out of range")

// Validate reports a retention that cannot be set: zero (which reads as the
// default) and anything in [MinRetention, MaxRetention] is accepted.
func (r Retention) Validate() error {
	if r == 0 || (r >= MinRetention && r <= MaxRetention) {
		return nil
	}
	return fmt.Errorf("%s: %w, must be between %s and %s",
		time.Duration(r), ErrBadRetention, time.Duration(MinRetention), time.Duration(MaxRetention))
}

// Effective returns r, or DefaultRetention for zero.
func (r Retention) Effective() Retention {
	if r == 0 {
		return DefaultRetention
	}
	return r
}

// String renders the retention as a Go duration.
func (r Retention) String() string { return time.Duration(r).String() }

// MaxReapBatch bounds how many rows one reaping call may delete.
const MaxReapBatch = 10000

// ReapStore deletes closed work whose retention has passed. Deletion is
// idempotent and safe while other servers of a cluster reap the same
// namespace: each row is deleted once, whichever server gets it.
type ReapStore interface {
	// ReapActivities deletes at most limit (1..MaxReapBatch) activities of
	// namespace that are closed and closed before cutoff, oldest first
	// (by close, or, where the store has no index by close time, closed
	// state by closed state, each by scheduling), with their attempts, in
	// one transaction, and returns how many it deleted. Open activities
	// are never deleted, however old.
	ReapActivities(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error)
	// ReapRuns deletes at most limit (1..MaxReapBatch) workflow runs of
	// namespace that are closed and closed before cutoff, oldest close
	// first, with their histories (and inboxes), in one transaction, and
	// returns how many it deleted. Open runs are never deleted.
	ReapRuns(ctx context.Context, namespace string, cutoff time.Time, limit int) (int, error)
}

// CheckReapLimit reports a reaping limit outside 1..MaxReapBatch.
func CheckReapLimit(limit int) error {
	if limit < 1 || limit > MaxReapBatch {
		return fmt.Errorf("reap limit %d: must be between 1 and %d", limit, MaxReapBatch)
	}
	return nil
}
