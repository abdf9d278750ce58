// Package workerhook lets package aiontest run a worker's attempts without
// a server, through the worker SDK's own code. Package worker sets Offline
// when it is initialized; only aiontest calls it.
package workerhook

import (
	"context"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Offline starts w, a *worker.Worker with its handlers registered and on
// which Run was never called, with no connection. Every frame the worker
// would send goes to send, in order, from one goroutine; deliver applies a
// frame as if the server had sent it on the stream. Handlers get ctx's
// values; when ctx ends, or on stop, what still runs is canceled as a
// stopping worker cancels it (cause worker.ErrWorkerStopping). stop waits
// for the handlers and ends the sending; it may be called more than once.
// Heartbeats are not throttled: every one a handler records is sent.
var Offline func(ctx context.Context, w any, workerID uint64, send func(*aionv1.WorkerMessage)) (deliver func(*aionv1.ServerMessage), stop func(), err error)
