package aiontest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aion-run/aion/aiontest"
	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/worker"
)

// countWords is an activity handler to test.
func countWords(ctx context.Context, text string) (int, error) {
	if strings.TrimSpace(text) == "" {
		return 0, worker.NewError("empty_text", "nothing to count", false, nil)
	}
	worker.RecordHeartbeat(ctx, worker.Info(ctx).Attempt)
	return len(strings.Fields(text)), nil
}

// Run a handler once and look at what the worker would report: the
// decoded result, the failure, the heartbeats.
func ExampleNewWorker() {
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.cleanup()
	ctx := context.Background()

	w := aiontest.NewWorker(t, countWords, nil)
	res, err := w.Work(ctx, "to be or not to be")
	if err != nil {
		t.Fatalf("%v", err)
	}
	fmt.Println(res.Outcome, res.Value, "heartbeats:", len(res.Heartbeats))

	res, err = w.Work(ctx, " ")
	if err != nil {
		t.Fatalf("%v", err)
	}
	fmt.Println(res.Outcome, res.Failure.Type, "retryable:", res.Failure.Retryable)
	// Output:
	// completed 6 heartbeats: 1
	// failed empty_text retryable: false
}

// assistant is an agent-style handler: it answers each injected message
// until told "bye". When paused it says so (a heartbeat) and keeps
// listening, so an operator can still talk to it.
func assistant(ctx context.Context, persona string) ([]string, error) {
	var transcript []string
	ivs := worker.Interventions(ctx)
	noted := false
	for {
		if paused := worker.Paused(ctx); paused && !noted {
			worker.RecordHeartbeat(ctx, "paused")
			noted = true
		} else if !paused {
			noted = false
		}
		select {
		case <-ctx.Done():
			return transcript, context.Cause(ctx)
		case iv := <-ivs:
			if iv.Kind != worker.InterventionInjectMessage {
				iv.Decline("only messages")
				continue
			}
			transcript = append(transcript, fmt.Sprintf("%s answers %q", persona, iv.Message.Text))
			iv.Accept()
			if iv.Message.Text == "bye" {
				return transcript, nil
			}
		}
	}
}

// Steer a running handler as an operator would, and see what it makes of
// each command.
func ExampleAttempt_Intervene() {
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.cleanup()
	ctx := context.Background()

	w := aiontest.NewWorker(t, assistant, &aiontest.Config{
		Capabilities: []worker.Capability{worker.CapabilityInjectMessage, worker.CapabilityPauseResume},
	})
	a := w.Start(ctx, "the assistant")

	ack, _ := a.Intervene(ctx, client.InjectMessage("hello", client.PriorityNormal))
	fmt.Println("hello accepted:", ack.Accepted)

	_, err := a.Intervene(ctx, client.UpdateBudget(client.Budget{MaxTurns: new(uint32(3))}))
	fmt.Println("budget not sent:", errors.Is(err, aiontest.ErrCapabilityNotSupported))

	ack, _ = a.Intervene(ctx, client.Pause())
	fmt.Println("pause accepted:", ack.Accepted)
	ack, _ = a.Intervene(ctx, client.InjectMessage("are you there?", client.PriorityNormal))
	fmt.Println("question accepted:", ack.Accepted)
	hb, _ := a.NextHeartbeat(ctx) // the handler noted the pause
	fmt.Println("heartbeat:", string(hb))
	ack, _ = a.Intervene(ctx, client.Resume())
	fmt.Println("resume accepted:", ack.Accepted)
	_, _ = a.Intervene(ctx, client.InjectMessage("bye", client.PriorityNormal))

	res, err := a.Wait(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	fmt.Println(res.Outcome)
	for _, line := range res.Value {
		fmt.Println(line)
	}
	// Output:
	// hello accepted: true
	// budget not sent: true
	// pause accepted: true
	// question accepted: true
	// heartbeat: "paused"
	// resume accepted: true
	// completed
	// the assistant answers "hello"
	// the assistant answers "are you there?"
	// the assistant answers "bye"
}
