package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// Recorded reports whether a result that Complete refused is one the store
// already holds: the attempt ended durably with this same outcome (the same
// kind, and the same result bytes, or for a failure the same type and
// message), so the worker is
// re-sending a result whose ResultAck it lost, after a reconnect or a server
// restart. It first waits until every write this server submitted earlier
// is done, so a first copy still being written counts. A worker that does
// not serve ns learns nothing: the answer is false.
func (e *Engine) Recorded(ctx context.Context, w *registry.Worker, ns, id string, attempt int, out Outcome) (bool, error) {
	if !w.Serves(ns) {
		return false, nil
	}
	if err := e.commit.Flush(ctx); err != nil {
		return false, fmt.Errorf("look up attempt %d of activity %q in namespace %q: %w", attempt, id, ns, err)
	}
	attempts, err := e.st.ListAttempts(ctx, ns, id)
	if err != nil {
		return false, fmt.Errorf("look up attempt %d of activity %q in namespace %q: %w", attempt, id, ns, err)
	}
	for _, at := range attempts {
		if at.Number != attempt || !sameOutcome(at, out) {
			continue
		}
		if !out.Completed {
			return true, nil
		}
		// A completed attempt is the activity's last: its result is the
		// activity's.
		rec, err := e.st.GetActivity(ctx, ns, id)
		if err != nil {
			return false, fmt.Errorf("look up the result of activity %q in namespace %q: %w", id, ns, err)
		}
		return bytes.Equal(rec.Result, out.Result), nil
	}
	return false, nil
}

// sameOutcome reports whether at is the record Complete makes of out.
func sameOutcome(at store.Attempt, out Outcome) bool {
	switch {
	case out.Completed:
		return at.Outcome == store.OutcomeCompleted
	case out.Canceled:
		// The server's own cancellation records a failure; a worker's does not.
		return at.Outcome == store.OutcomeCanceled && at.Failure == nil
	}
	f, rec := out.failure(), at.Failure
	if rec == nil {
		return false
	}
	switch at.Outcome {
	case store.OutcomeFailed:
		return rec.Type == f.Type && rec.Message == f.Message
	case store.OutcomeTimedOut:
		// A failure reported at or past a deadline is recorded as that
		// timeout, with the worker's message at the end (see Complete).
		return strings.HasSuffix(rec.Message, " (worker: "+f.Message+")")
	}
	return false
}

// failure is the failure of a failed outcome: the worker's, or the one
// recorded when it gave none.
func (o Outcome) failure() *store.Failure {
	if o.Failure != nil {
		return o.Failure
	}
	return &store.Failure{Type: "error", Message: "the worker reported a failure without details", Retryable: true}
}
