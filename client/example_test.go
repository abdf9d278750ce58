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
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051")
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
}

// A client-supplied id makes scheduling idempotent: retrying the same call
// (after a timeout, say) never schedules the work twice.
func ExampleSchedule_idempotent() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051", client.WithToken("my-token"))
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
		fmt.Println(h.ID, "existing:", h.Existing) // false, then true
	}
}

// Schedule many activities in one RPC; each item succeeds or fails alone.
func ExampleClient_ScheduleBatch() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var reqs []client.ScheduleRequest
	for i := range 100 {
		r, err := client.NewScheduleRequest(client.ScheduleOptions{Namespace: "demo", ActivityType: "echo"}, map[string]int{"n": i})
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
			fmt.Println("item", i, "refused:", status.Code(r.Err), r.Err)
		}
	}
}

// Page through a namespace's failed activities.
func ExampleClient_ListAll() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for a, err := range c.ListAll(ctx, client.ListOptions{Namespace: "demo", State: client.StateFailed}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(a.ID, a.ActivityType, a.Failure)
	}
}

// Keep a namespace's work on GPU nodes only.
func ExampleClient_SetPlacement() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051")
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
	fmt.Println(ns.Name, ns.Placement) // vision pinned{gpu-a,gpu-b}
}

// Steer a running agent activity: inject a message, pause and resume it,
// and cap its turns. Each command reaches the worker running the current
// attempt only if that worker advertised the command's primitive.
func ExampleClient_Intervene() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, cmd := range []client.InterventionCommand{
		client.InjectMessage("focus on the failing test first", client.PriorityInterrupt),
		client.Pause(),
		client.Resume(),
		client.UpdateBudget(client.Budget{MaxTurns: new(uint32(10))}),
	} {
		res, err := c.Intervene(ctx, "agents", "fix-ci-1234", cmd)
		if err != nil {
			log.Fatal(err) // NotFound, InvalidArgument, PermissionDenied, ...
		}
		switch res.Outcome {
		case client.InterventionDelivered:
			fmt.Println(cmd.Kind(), "delivered to attempt", res.Attempt, "as", res.InterventionID)
		case client.InterventionStaleTarget:
			fmt.Println(cmd.Kind(), "not sent: the activity is not running")
		case client.InterventionCapabilityNotSupported:
			fmt.Println(cmd.Kind(), "not sent: its worker does not support it")
		}
	}
}
