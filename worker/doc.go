// Package worker is the Go SDK for aion workers: a process that dials an
// aion server, registers the activity types it can run, and runs the
// attempts the server pushes to it over one long-lived gRPC stream (see
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
// # Delivery
//
// Every result is kept until the server acknowledges it (ResultAck) and is
// sent again after a reconnect, so a result survives a server restart.
// Delivery is at-least-once: an attempt may run more than once, so handlers
// should be idempotent.
package worker
