package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/aion-run/aion/internal/tokenbucket"
)

// FlowKind says what a flow limit counts: activities or workflow runs.
type FlowKind string

// The flow kinds.
const (
	// FlowActivity: attempts of activities of one activity type.
	FlowActivity FlowKind = "activity"
	// FlowWorkflow: runs of one workflow type, admitted at their first
	// workflow task (the engine accepts only a concurrency limit; a
	// cluster's servers count admissions in the store, AdmitRun).
	FlowWorkflow FlowKind = "workflow"
)

// Valid reports whether k is a known kind.
func (k FlowKind) Valid() bool { return k == FlowActivity || k == FlowWorkflow }

// Bounds of a flow limit's figures.
const (
	// MaxConcurrency bounds a concurrency limit.
	MaxConcurrency = 1_000_000
	// MaxRate bounds a rate, in starts a second.
	MaxRate = 1_000_000
	// MaxBurst bounds a burst.
	MaxBurst = 1_000_000
)

// FlowLimit is a namespace's flow control for one activity or workflow
// type: at most Concurrency running at once per concurrency key, and at
// most Rate starts a second with bursts of Burst, counted for the whole
// type or, with PerKey, per concurrency key. A zero Concurrency or Rate
// means that part is not limited; at least one is set.
//
// Work without a concurrency key is in no key's group: the concurrency
// limit and a per-key rate do not hold it, a rate for the whole type does.
type FlowLimit struct {
	Namespace string
	Kind      FlowKind
	Type      string
	// Concurrency is how many may run at once per concurrency key; 0 for
	// no concurrency limit.
	Concurrency int
	// Rate is how many may start a second; 0 for no rate limit.
	Rate float64
	// Burst is how many may start at once after a quiet spell; only with
	// a Rate, 0 there meaning the rate rounded up (one second's worth).
	Burst int
	// PerKey counts the rate per concurrency key instead of for the type.
	PerKey bool
	// UpdatedAt is when the limit was last set; the store stamps it.
	UpdatedAt time.Time
}

// Normalize fills a Rate's default Burst.
func (l FlowLimit) Normalize() FlowLimit {
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	return l
}

// Validate reports a limit that cannot be applied, naming the field and
// its value: an unknown kind, an empty type, a concurrency, rate or burst
// out of range, a burst or per-key without a rate, or nothing limited.
func (l FlowLimit) Validate() error {
	switch {
	case !l.Kind.Valid():
		return fmt.Errorf("kind: %q is not one of %s, %s", l.Kind, FlowActivity, FlowWorkflow)
	case l.Type == "":
		return fmt.Errorf("type: must name the %s type the limit is for", l.Kind)
	case l.Concurrency < 0 || l.Concurrency > MaxConcurrency:
		return fmt.Errorf("concurrency: %d is not between 1 and %d", l.Concurrency, MaxConcurrency)
	case math.IsNaN(l.Rate) || l.Rate < 0 || l.Rate > MaxRate:
		return fmt.Errorf("rate: %g is not a number of starts a second above 0 and at most %d", l.Rate, MaxRate)
	case l.Burst < 0 || l.Burst > MaxBurst:
		return fmt.Errorf("burst: %d is not between 1 and %d", l.Burst, MaxBurst)
	case l.Burst > 0 && l.Rate == 0:
		return fmt.Errorf("burst: %d given without a rate", l.Burst)
	case l.PerKey && l.Rate == 0:
		return fmt.Errorf("per_key: set without a rate (a concurrency limit always counts per key)")
	case l.Concurrency == 0 && l.Rate == 0:
		return fmt.Errorf("concurrency and rate: neither is set; a limit needs at least one (clear it to lift it)")
	}
	return nil
}

// Bucket is the token-bucket limit of the rate; the zero Limit when l has
// no rate.
func (l FlowLimit) Bucket() tokenbucket.Limit {
	return tokenbucket.Limit{Rate: l.Rate, Burst: l.Burst}
}

// String renders the limit's figures, e.g. "concurrency 2 per key, rate
// 200/s burst 20".
func (l FlowLimit) String() string {
	var s string
	if l.Concurrency > 0 {
		s = fmt.Sprintf("concurrency %d per key", l.Concurrency)
	}
	if l.Rate > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("rate %g/s burst %d", l.Rate, l.Burst)
		if l.PerKey {
			s += " per key"
		}
	}
	return s
}

// FlowStore keeps the namespaces' flow limits. All methods are safe for
// concurrent use.
type FlowStore interface {
	// PutFlowLimit records l (normalized, stamped with the store's time),
	// replacing any limit of its namespace, kind and type, and returns it.
	// An invalid limit is refused; a missing namespace is an error wrapping
	// ErrNotFound.
	PutFlowLimit(ctx context.Context, l FlowLimit) (FlowLimit, error)
	// DeleteFlowLimit removes the limit of a namespace's kind and type and
	// reports whether there was one.
	DeleteFlowLimit(ctx context.Context, namespace string, kind FlowKind, typ string) (bool, error)
	// ListFlowLimits returns the limits of namespace (of every namespace
	// when it is empty), ordered by namespace, kind and type.
	ListFlowLimits(ctx context.Context, namespace string) ([]FlowLimit, error)
}
