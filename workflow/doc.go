// Package workflow is the Go SDK for aion's durable workflows: code-first
// workflow functions whose steps (activities, timers, signal waits, side
// effects, child workflows) are recorded in the run's history by the server,
// so that the run survives worker and server crashes.
//
// A workflow function is registered on a worker with worker.RegisterWorkflow
// and started with the client. It takes a Context and its input and returns
// its result:
//
//	func Order(ctx workflow.Context, o OrderInput) (Receipt, error) {
//		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
//		if _, err := workflow.ExecuteActivity[string](ctx, "reserve", o).Get(ctx); err != nil {
//			return Receipt{}, err
//		}
//		...
//	}
//
// # How a run advances
//
// The server delivers a run to a worker as a workflow task: the run's
// history (or, to the worker that keeps the run in memory, only its new
// events). The worker runs the code until every coroutine of it is blocked
// on something that has not happened yet, and sends back the steps the code
// took as commands. The server records them, and sends the next task when
// something the run waits for happens: an activity closes, a timer fires, a
// signal or a cancellation arrives. Between tasks the run costs no worker
// slot.
//
// A worker that does not keep the run replays it from the top: the code runs
// again, and every step that history records returns its recorded outcome
// instead of being taken again (a completed activity never runs twice).
// Replay is checked: each step the code takes must be the one recorded at
// that place (same kind, same step number, same activity type, timer name,
// side-effect name or child workflow type). When it is not, the workflow
// task fails with type "nondeterministic" and a message naming the step; the
// run waits (the server retries the task) until fixed code is deployed or an
// operator steps in. Deploy code that changes the steps of running workflows
// under a new build id: runs stay on the build id they started on.
//
// # Determinism: the rules for workflow code
//
// Replay works only if the code, given the same history, takes the same
// steps in the same order. So workflow code must:
//
//   - do no I/O (network, files, databases, environment): use activities;
//   - not read the clock: use Now, and Sleep or NewTimer to wait;
//   - not use math/rand or crypto/rand directly: use Random, or SideEffect;
//   - not start goroutines with the go statement, nor use channels,
//     select, mutexes or sync.WaitGroup to wait: start coroutines with Go and
//     wait with Future.Get, AwaitAny, AwaitAll, ReceiveSignal and Sleep;
//   - not depend on map iteration order (Go randomizes it): sort the keys
//     before taking steps in a loop over a map;
//   - not depend on mutable global state that another run or the process
//     could change.
//
// Coroutines (the workflow function and those started with Go) run one at a
// time, each until it blocks in a call of this package, in creation order,
// round after round: they never race, and replay interleaves them the same
// way. Workflow code must be fast: it runs on a small pool of the worker's
// goroutines, and a coroutine that blocks on anything else (a channel, a
// mutex, a long computation) holds the task until it returns.
//
// Step numbers are taken in the order the code issues ExecuteActivity,
// NewTimer (and Sleep, ReceiveSignalWithTimeout), SideEffect (and Random) and
// ExecuteChild, from 1 per run. Canceling a timer or an activity refers to
// its step.
//
// # Payloads
//
// Inputs, results, signal and query payloads and side-effect values are
// JSON, as for activities: an empty payload decodes to the zero value.
//
// # Cancellation
//
// When a run's cancellation is requested, the server cancels its running
// activities and children, and the run's Context is canceled: Err returns
// ErrCanceled, Done is ready, and blocked Get, Sleep and receives return
// ErrCanceled. The code cleans up on a Context from NewDisconnectedContext,
// whose steps are not canceled, and returns: an error wrapping ErrCanceled
// closes the run as CANCELED, a result closes it as COMPLETED. WithCancel
// gives code its own cancellation scope, for timers and activities it stops
// itself.
//
// # Queries
//
// SetQueryHandler registers a function that reads the run's state. Queries
// are answered from the state the recorded history reaches, without
// writing history; handlers must not block or take steps.
//
// # Testing
//
// An Executor runs workflow tasks without a server: a test can replay a
// history recorded by the server (WorkflowService.History) against changed
// code to learn whether the change is safe for running workflows.
package workflow
