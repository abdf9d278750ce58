package bench

import (
	"context"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Hooks pace and watch a run from this package's tests: Started runs once
// the workers are connected, just before the schedule starts; Issued runs in the
// open loop's dispatcher when call k is due and counted in flight, just
// before it is sent; Answered when a call returns; Hold in a bench worker
// before it completes a task. Nil hooks do nothing.
type Hooks struct {
	Started  func()
	Issued   func(k int)
	Answered func(err error)
	Hold     func(ctx context.Context, t *aionv1.ActivityTask)
}

// WithHooks returns o with h set.
func WithHooks(o Options, h Hooks) Options {
	o.hooks = hooks{started: h.Started, issued: h.Issued, answered: h.Answered, hold: h.Hold}
	return o
}
