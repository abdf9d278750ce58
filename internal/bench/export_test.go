package bench

import (
	"context"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/worker"
)

// Hooks pace and watch a run from this package's tests: Started runs once
// the workers are connected, just before the schedule starts; Issued runs in the
// open loop's dispatcher when call k is due and counted in flight, just
// before it is sent; Answered when a call returns; Hold in a bench worker
// before it completes a task. Step runs in a workflow mode's step activity
// before it returns, and an error from it fails the attempt; WorkflowType,
// when set, is the type the workflow modes start instead of the bench's
// own. Nil hooks do nothing.
type Hooks struct {
	Started      func()
	Issued       func(k int)
	Answered     func(err error)
	Hold         func(ctx context.Context, t *aionv1.ActivityTask)
	Step         func(ctx context.Context, info worker.ActivityInfo) error
	WorkflowType string
}

// WithHooks returns o with h set.
func WithHooks(o Options, h Hooks) Options {
	o.hooks = hooks{started: h.Started, issued: h.Issued, answered: h.Answered, hold: h.Hold, step: h.Step, workflowType: h.WorkflowType}
	return o
}
