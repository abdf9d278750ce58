// Package client is the Go SDK for schedulers: it schedules activities on an
// aion server, inspects them, waits for their outcome, cancels them, steers
// running ones with interventions (Intervene), and manages namespaces.
//
// A Client wraps one gRPC connection and is safe for concurrent use. Payloads
// and results are JSON: Schedule encodes its typed input with encoding/json,
// and Result / WaitResult decode an activity's result into a typed value.
//
//	c, err := client.Dial(ctx, "127.0.0.1:50051")
//	if err != nil { ... }
//	defer c.Close()
//	h, err := client.Schedule(ctx, c, client.ScheduleOptions{
//		Namespace:    "demo",
//		ActivityType: "echo",
//	}, map[string]string{"hello": "world"})
//	out, err := client.WaitResult[map[string]string](ctx, c, h.Namespace, h.ID)
//
// Errors returned by RPCs keep their gRPC status: status.Code(err) reports
// InvalidArgument, NotFound, AlreadyExists and so on, even though the error
// text adds context about the call. An activity that ended without
// completing is reported by Result as an *ActivityError.
package client
