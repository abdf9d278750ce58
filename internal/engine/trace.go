package engine

import (
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

// Tracer is told of the moments of an activity's life that tracing makes
// spans of, each with the activity, whose Trace is the context its spans
// join. Its methods run under the engine lock: they must be quick, must
// not block and must not call back into the engine. Config.Tracer nil
// (tracing off) costs the engine one nil check at each of them.
type Tracer interface {
	// Started: attempt a.Attempt was handed to worker w at startedAt
	// after waiting since readyAt, when the activity became ready.
	Started(a *store.Activity, w registry.WorkerID, readyAt, startedAt time.Time)
	// Completing: worker w's result out for the running attempt arrived
	// at now. The returned func is called once, under the engine lock, at
	// when the outcome is durable (err nil, the activity then in state) or
	// could not be made so.
	Completing(a *store.Activity, w registry.WorkerID, out Outcome, now time.Time) (done func(at time.Time, state store.ActivityState, err error))
}

// TraceContextProto is the wire form of c; nil for none.
func TraceContextProto(c tracectx.Context) *aionv1.TraceContext {
	if c.IsZero() {
		return nil
	}
	return &aionv1.TraceContext{Traceparent: c.Parent, Tracestate: c.State}
}
