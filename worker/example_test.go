package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aion-run/aion/worker"
)

// A worker that serves one activity type and stops gracefully on SIGINT or
// SIGTERM: it finishes the attempts it has, waits for their
// acknowledgements, then Run returns nil.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	w, err := worker.New("127.0.0.1:50051", worker.Options{
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
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A long activity reports progress with heartbeats and resumes from the
// last reported progress when it is retried.
func ExampleRecordHeartbeat() {
	w, err := worker.New("127.0.0.1:50051", worker.Options{Namespaces: []string{"demo"}})
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
		for i := start; i < len(items); i++ {
			select {
			case <-ctx.Done(): // canceled, timed out, or the worker is stopping
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond): // the real work
			}
			worker.RecordHeartbeat(ctx, Progress{Next: i + 1})
		}
		return len(items), nil
	})
	_ = w.Run(context.Background())
}

// Handlers choose how a failure is retried.
func ExampleNewError() {
	w, err := worker.New("127.0.0.1:50051", worker.Options{Namespaces: []string{"billing"}})
	if err != nil {
		log.Fatal(err)
	}
	errDeclined := errors.New("card declined")
	worker.RegisterActivity(w, "charge", func(ctx context.Context, in json.RawMessage) (string, error) {
		info := worker.Info(ctx)
		switch {
		case len(in) == 0:
			// Bad input never gets better: fail without retrying.
			return "", worker.NonRetryable(errors.New("empty charge request"))
		case info.Attempt > 3:
			// A typed failure; its type can also be listed in the retry
			// policy's non-retryable types.
			return "", worker.NewError("card_declined", errDeclined.Error(), false, map[string]uint32{"attempts": info.Attempt})
		}
		// Any other error is retried under the activity's retry policy.
		return "", fmt.Errorf("payment gateway: %w", errDeclined)
	})
	_ = w.Run(context.Background())
}

// An agent-style activity that operators can steer while it runs: it takes
// injected messages and budget changes between turns (an interrupt-priority
// message cuts the current turn short), stops advancing while paused, and
// stops when canceled. The worker advertises exactly what the handler
// honours; the server sends nothing else.
func ExampleInterventions() {
	w, err := worker.New("127.0.0.1:50051", worker.Options{
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
			step := time.NewTimer(time.Second) // one model round trip
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
	_ = w.Run(context.Background())
}
