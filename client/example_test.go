package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
)

// Schedule an activity and wait for its typed result.
func Example() {
	addr, stop := exampleServer() // a server and a worker in this process
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	type Greeting struct {
		Name string `json:"name"`
	}
	h, err := client.Schedule(ctx, c, client.ScheduleOptions{
		Namespace:    "demo",
		TaskQueue:    "default",
		ActivityType: "greet",
	}, Greeting{Name: "Ada"})
	if err != nil {
		log.Fatal(err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	greeting, err := client.WaitResult[string](waitCtx, c, h.Namespace, h.ID)
	var failed *client.ActivityError
	switch {
	case errors.As(err, &failed):
		fmt.Println("activity failed:", failed.Type, failed.Message)
	case status.Code(err) == codes.DeadlineExceeded:
		fmt.Println("still running after a minute")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(greeting)
	}
	// Output: hello Ada
}

// A client-supplied id makes scheduling idempotent: retrying the same call
// (after a timeout, say) never schedules the work twice.
func ExampleSchedule_idempotent() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.WithToken("my-token"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	opts := client.ScheduleOptions{
		Namespace:           "billing",
		ID:                  "invoice-2026-0042",
		ActivityType:        "charge",
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &client.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumAttempts:        5,
			NonRetryableErrorTypes: []string{"card_declined"},
		},
	}
	for range 2 {
		h, err := client.Schedule(ctx, c, opts, map[string]int{"cents": 4200})
		if status.Code(err) == codes.AlreadyExists {
			log.Fatal("that id names a different request")
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Println(h.ID, "existing:", h.Existing)
	}
	// Output:
	// invoice-2026-0042 existing: false
	// invoice-2026-0042 existing: true
}

// Schedule many activities in one RPC; each item succeeds or fails alone.
func ExampleClient_ScheduleBatch() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var reqs []client.ScheduleRequest
	for _, activityType := range []string{"echo", "echo", "not a valid type name"} {
		r, err := client.NewScheduleRequest(client.ScheduleOptions{Namespace: "demo", ActivityType: activityType}, "hi")
		if err != nil {
			log.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	results, err := c.ScheduleBatch(ctx, reqs)
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range results {
		if r.Err != nil {
			fmt.Println("item", i, "refused:", status.Code(r.Err))
		} else {
			fmt.Println("item", i, "scheduled")
		}
	}
	// Output:
	// item 0 scheduled
	// item 1 scheduled
	// item 2 refused: InvalidArgument
}

// Page through a namespace's failed activities.
func ExampleClient_ListAll() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Three reports, one of them empty, which its worker refuses.
	for id, text := range map[string]string{"q1": "revenue up", "q2": " ", "q3": "costs down"} {
		h, err := client.Schedule(ctx, c, client.ScheduleOptions{Namespace: "reports", ID: id, ActivityType: "parse"}, text)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := h.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}

	for a, err := range c.ListAll(ctx, client.ListOptions{Namespace: "reports", State: client.StateFailed, PageSize: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(a.ID, a.ActivityType, a.Failure)
	}
	// Output: q2 parse error: empty report
}

// Keep a namespace's work on GPU nodes only.
func ExampleClient_SetPlacement() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, _, err := c.CreateNamespace(ctx, "vision"); err != nil {
		log.Fatal(err)
	}
	ns, err := c.SetPlacement(ctx, "vision", client.Pinned("gpu-a", "gpu-b"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ns.Name, ns.Placement)
	// Output: vision pinned{gpu-a,gpu-b}
}

// Steer a running agent activity: inject a message, pause and resume it,
// and cap its turns. Each command reaches the worker running the current
// attempt only if that worker advertised the command's primitive.
func ExampleClient_Intervene() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	h, err := client.Schedule(ctx, c, client.ScheduleOptions{Namespace: "agents", ID: "fix-ci-1234", ActivityType: "agent"}, "fix the build")
	if err != nil {
		log.Fatal(err)
	}
	for _, cmd := range []client.InterventionCommand{
		client.InjectMessage("focus on the failing test first", client.PriorityInterrupt),
		client.Pause(),
		client.Resume(),
		client.UpdateBudget(client.Budget{MaxTurns: new(uint32(1))}),
	} {
		res, err := c.Intervene(ctx, "agents", h.ID, cmd)
		for err == nil && res.Outcome == client.InterventionStaleTarget {
			// Not running yet: a worker has not started the attempt.
			time.Sleep(10 * time.Millisecond)
			res, err = c.Intervene(ctx, "agents", h.ID, cmd)
		}
		if err != nil {
			log.Fatal(err) // NotFound, InvalidArgument, PermissionDenied, ...
		}
		switch res.Outcome {
		case client.InterventionDelivered:
			fmt.Println(cmd.Kind(), "delivered to attempt", res.Attempt)
		case client.InterventionCapabilityNotSupported:
			fmt.Println(cmd.Kind(), "not sent: its worker does not support", cmd.Capability())
		}
	}
	transcript, err := client.WaitResult[[]string](ctx, c, h.Namespace, h.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(transcript)
	// Output:
	// inject_message delivered to attempt 1
	// pause delivered to attempt 1
	// resume delivered to attempt 1
	// update_budget delivered to attempt 1
	// [goal: fix the build user: focus on the failing test first]
}

// Start a durable workflow, signal it, and wait for its typed result. The
// signal is in the run's history before Signal returns, so the run gets it
// even if no worker is connected at that moment.
func ExampleStartWorkflow() {
	addr, stop := exampleServer()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	h, err := client.StartWorkflow(ctx, c, client.StartWorkflowOptions{
		Namespace:    "demo",
		WorkflowID:   "approval-7", // starting it again returns the same run
		WorkflowType: "approve",
	}, "Ada")
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Signal(ctx, "decision", "approved"); err != nil {
		log.Fatal(err)
	}
	run, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	out, err := client.WorkflowResult[string](run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Status, out)
	// Output: completed hello Ada: approved
}
