// Package worker is the Go SDK for aion workers: a process that dials an
// aion server, registers the activity types it can run (and the workflow
// types it can advance), and runs the attempts (and workflow tasks) the
// server pushes to it over one long-lived gRPC stream (see
// docs/protocol.md for the stream contract).
//
//	w, err := worker.New("127.0.0.1:50051", worker.Options{
//		Namespaces: []string{"demo"},
//		TaskQueue:  "default",
//		Slots:      8,
//	})
//	if err != nil { ... }
//	worker.RegisterActivity(w, "greet", func(ctx context.Context, name string) (string, error) {
//		return "hello " + name, nil
//	})
//	err = w.Run(ctx) // until ctx is canceled; then drains gracefully
//
// # Many workers in one process
//
// Each Worker dials a connection of its own. Workers of one process can
// instead share one: dial it once with Dial and give it to each as
// Options.Conn (New's address then empty). Each worker keeps its own
// stream, registration and token; on the server a shared connection costs
// a small part of what a connection a worker does (docs/benchmarks.md,
// "Memory per connected worker"). A server takes at most
// --grpc-max-streams (1,000 by default) streams on one connection.
//
//	cc, err := worker.Dial("127.0.0.1:50051")
//	if err != nil { ... }
//	defer cc.Close() // after every Run returned
//	for _, q := range queues {
//		w, err := worker.New("", worker.Options{Namespaces: []string{"demo"}, TaskQueue: q, Conn: cc})
//		...
//	}
//
// # Payloads
//
// Inputs and results are JSON: RegisterActivity decodes the payload into the
// handler's input type and encodes its output. Use json.RawMessage to take
// or return raw JSON.
//
// # Failures
//
// A handler's error fails the attempt. How it is reported:
//
//   - an *Error anywhere in the chain (NewError, NonRetryable) gives the
//     failure's type, retryability and JSON details;
//   - context.DeadlineExceeded and context.Canceled give the types
//     "deadline_exceeded" and "context_canceled", retryable;
//   - any other error is retryable, with type "pkg.Type" when its concrete
//     type is an exported named type (for example "fs.PathError"), and
//     "error" otherwise (errors.New, fmt.Errorf);
//   - a panic is recovered and reported as a retryable failure of type
//     "panic" whose details hold the stack.
//
// A handler whose context was canceled because the activity was canceled
// (context.Cause is ErrActivityCanceled) and that returns an error is
// reported as canceled. One canceled because the worker is stopping
// (ErrWorkerStopping) is reported as a retryable "worker_stopping" failure.
//
// # Interventions
//
// An intervention is a command for a running attempt, sent by an operator or
// a program through ActivityService.Intervene (client.Intervene, `aion
// activity intervene`). The server sends one only to a worker that
// advertised its primitive in Options.Capabilities, so advertise exactly
// what the worker's handlers honour. The SDK answers every intervention
// with exactly one acknowledgement (accepted or not, with a message), which
// the server logs.
//
// Two kinds are control, applied by the SDK much as context cancellation
// is: cancel cancels the handler's context (cause ErrActivityCanceled), and
// pause / resume switch the attempt's pause state, which a handler honours
// by calling WaitWhilePaused where it can safely stop (Paused reports the
// state). The SDK acknowledges these itself, as accepted.
//
// The others are data for the handler: inject-message, update-budget and
// respond-to-approval arrive on the channel Interventions(ctx) returns, as
// Intervention values. The handler acknowledges each with Accept or
// Decline; one it never takes, or takes and does not acknowledge, is
// declined by the SDK when the handler returns.
//
//	ivs := worker.Interventions(ctx)
//	for turn := 0; turn < maxTurns; turn++ {
//		if _, err := worker.WaitWhilePaused(ctx); err != nil {
//			return nil, err
//		}
//		select {
//		case iv := <-ivs:
//			if iv.Kind == worker.InterventionInjectMessage {
//				transcript = append(transcript, iv.Message.Text)
//				iv.Accept()
//			} else {
//				iv.Decline("not supported by this agent")
//			}
//		default:
//		}
//		// ... one turn ...
//	}
//
// A command for an attempt the worker no longer runs, or for a primitive it
// did not advertise, is declined with a message saying so.
//
// # Workflows
//
// A worker also advances durable workflows (see package workflow):
// RegisterWorkflow registers a workflow function under a workflow type, and
// Options.BuildID, required then, names the version of the workflow code.
// The server sends the worker workflow tasks, up to Options.WorkflowSlots at
// once and apart from its activity slots; the worker runs each on a few
// goroutines of its own and answers with the steps the code took. It keeps
// up to Options.WorkflowCacheSize runs in memory between their tasks, so
// that a run resumes without replaying its history. A worker may register
// workflows only, activities only, or both.
//
//	w, err := worker.New(addr, worker.Options{Namespaces: []string{"shop"}, BuildID: "orders-v3"})
//	worker.RegisterWorkflow(w, "order", OrderWorkflow)
//	worker.RegisterActivity(w, "charge", Charge)
//
// An activity a workflow started sees its workflow's id, run id and step
// number in Info.
//
// # Testing handlers
//
// Package aiontest runs a handler the way this package runs an attempt,
// without a server: it returns the result or the failure as it would be
// reported, records each heartbeat, and lets a test send interventions,
// pause, resume and cancel while the handler runs.
//
// # Delivery
//
// Every result is kept until the server acknowledges it (ResultAck) and is
// sent again after a reconnect, so a result survives a server restart.
// Delivery is at-least-once: an attempt may run more than once, so handlers
// should be idempotent.
package worker
