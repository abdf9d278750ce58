package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/worker"
)

// A worker that serves one activity type until its context ends, then
// stops gracefully: it finishes the attempts it has, waits for their
// acknowledgements, and Run returns nil.
func Example() {
	addr, stop := exampleServer() // an aion server in this process
	defer stop()

	// In a program: signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM),
	// so that SIGINT or SIGTERM stops the worker gracefully.
	ctx, cancel := context.WithCancel(context.Background())

	w, err := worker.New(addr, worker.Options{
		Namespaces: []string{"demo"},
		TaskQueue:  "default",
		Slots:      8,
	})
	if err != nil {
		log.Fatal(err)
	}
	type Greeting struct {
		Name string `json:"name"`
	}
	worker.RegisterActivity(w, "greet", func(ctx context.Context, in Greeting) (string, error) {
		return "hello " + in.Name, nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	a := run(addr, client.ScheduleOptions{Namespace: "demo", ActivityType: "greet"}, Greeting{Name: "Ada"})
	fmt.Println(a.State, string(a.Result))

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: completed "hello Ada"
}

// A long activity reports progress with heartbeats and resumes from the
// last reported progress when it is retried.
func ExampleRecordHeartbeat() {
	addr, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())

	w, err := worker.New(addr, worker.Options{Namespaces: []string{"demo"}})
	if err != nil {
		log.Fatal(err)
	}
	type Progress struct {
		Next int `json:"next"`
	}
	worker.RegisterActivity(w, "process", func(ctx context.Context, items []string) (int, error) {
		start := 0
		if p, err := worker.HeartbeatDetails[Progress](ctx); err == nil {
			start = p.Next // a previous attempt got this far
		}
		attempt := worker.Info(ctx).Attempt
		fmt.Println("attempt", attempt, "starts at item", start)
		for i := start; i < len(items); i++ {
			if attempt == 1 && i == 1 {
				return 0, errors.New("connection reset") // the first attempt fails midway
			}
			select {
			case <-ctx.Done(): // canceled, timed out, or the worker is stopping
				return 0, ctx.Err()
			case <-time.After(time.Millisecond): // the real work
			}
			worker.RecordHeartbeat(ctx, Progress{Next: i + 1})
		}
		return len(items), nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	a := run(addr, client.ScheduleOptions{
		Namespace: "demo", ActivityType: "process",
		RetryPolicy: &client.RetryPolicy{InitialInterval: 10 * time.Millisecond},
	}, []string{"a", "b", "c"})
	fmt.Println(a.State, "after", a.Attempt, "attempts:", string(a.Result), "items")

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 starts at item 0
	// attempt 2 starts at item 1
	// completed after 2 attempts: 3 items
}

// Handlers choose how a failure is retried.
func ExampleNewError() {
	addr, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())

	w, err := worker.New(addr, worker.Options{Namespaces: []string{"billing"}})
	if err != nil {
		log.Fatal(err)
	}
	errDeclined := errors.New("card declined")
	worker.RegisterActivity(w, "charge", func(ctx context.Context, in json.RawMessage) (string, error) {
		info := worker.Info(ctx)
		switch {
		case string(in) == "{}":
			// Bad input never gets better: fail without retrying.
			return "", worker.NonRetryable(errors.New("empty charge request"))
		case info.Attempt >= 3:
			// A typed failure; its type can also be listed in the retry
			// policy's non-retryable types.
			return "", worker.NewError("card_declined", errDeclined.Error(), false, map[string]uint32{"attempts": info.Attempt})
		}
		// Any other error is retried under the activity's retry policy.
		return "", fmt.Errorf("payment gateway: %w", errDeclined)
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	opts := client.ScheduleOptions{Namespace: "billing", ActivityType: "charge",
		RetryPolicy: &client.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5}}
	for _, input := range []map[string]int{{}, {"cents": 4200}} {
		a := run(addr, opts, input)
		fmt.Printf("%s after %d attempt(s): %v\n", a.State, a.Attempt, a.Failure)
	}

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// failed after 1 attempt(s): error: empty charge request
	// failed after 3 attempt(s): card_declined: card declined
}

// An agent-style activity that operators can steer while it runs: it takes
// injected messages and budget changes between turns (an interrupt-priority
// message cuts the current turn short), stops advancing while paused, and
// stops when canceled. The worker advertises exactly what the handler
// honours; the server sends nothing else.
func ExampleInterventions() {
	addr, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())

	w, err := worker.New(addr, worker.Options{
		Namespaces: []string{"agents"},
		Capabilities: []worker.Capability{
			worker.CapabilityInjectMessage,
			worker.CapabilityUpdateBudget,
			worker.CapabilityPauseResume, // applied by the SDK; see WaitWhilePaused
			worker.CapabilityCancel,      // applied by the SDK: ctx is canceled
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	type Task struct {
		Goal     string `json:"goal"`
		MaxTurns int    `json:"max_turns"`
	}
	worker.RegisterActivity(w, "agent", func(ctx context.Context, task Task) ([]string, error) {
		transcript := []string{"goal: " + task.Goal}
		ivs := worker.Interventions(ctx)
		apply := func(iv worker.Intervention) {
			switch iv.Kind {
			case worker.InterventionInjectMessage:
				transcript = append(transcript, "user: "+iv.Message.Text)
				iv.Accept()
			case worker.InterventionUpdateBudget:
				if iv.Budget.MaxTurns == nil {
					iv.Decline("this agent has no token budget")
					return
				}
				task.MaxTurns = int(*iv.Budget.MaxTurns)
				iv.Accept()
			default:
				iv.Decline("not supported by this agent")
			}
		}
		for turn := 0; turn < task.MaxTurns; turn++ {
			// A safe point: wait here while an operator has paused us.
			if _, err := worker.WaitWhilePaused(ctx); err != nil {
				return nil, err
			}
			step := time.NewTimer(time.Minute) // one model round trip
		turnLoop:
			for {
				select {
				case <-ctx.Done(): // canceled, timed out, or the worker is stopping
					step.Stop()
					return nil, ctx.Err()
				case iv := <-ivs:
					apply(iv)
					if iv.Kind == worker.InterventionInjectMessage && iv.Message.Priority == worker.PriorityInterrupt {
						step.Stop()
						break turnLoop // answer the interruption in the next turn
					}
				case <-step.C:
					transcript = append(transcript, fmt.Sprintf("assistant: turn %d", turn+1))
					break turnLoop
				}
			}
			worker.RecordHeartbeat(ctx, len(transcript))
		}
		return transcript, nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// An operator steers the running agent (see client.Client.Intervene):
	// a note for later, a budget of one turn, then an interruption that
	// ends the current turn, and with it the agent's budget.
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	h, err := client.Schedule(ctx, c, client.ScheduleOptions{Namespace: "agents", ActivityType: "agent"}, Task{Goal: "fix the build", MaxTurns: 10})
	if err != nil {
		log.Fatal(err)
	}
	waitRunning(ctx, c, h.Namespace, h.ID)
	for _, cmd := range []client.InterventionCommand{
		client.InjectMessage("use the staging database", client.PriorityNormal),
		client.UpdateBudget(client.Budget{MaxTurns: new(uint32(1))}),
		client.InjectMessage("wrap up", client.PriorityInterrupt),
	} {
		if _, err := c.Intervene(ctx, h.Namespace, h.ID, cmd); err != nil {
			log.Fatal(err)
		}
	}
	transcript, err := client.WaitResult[[]string](ctx, c, h.Namespace, h.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range transcript {
		fmt.Println(line)
	}

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// goal: fix the build
	// user: use the staging database
	// user: wrap up
}
