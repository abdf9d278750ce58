package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// exampleApproval greets, then waits durably for the "decision" signal.
func exampleApproval(ctx workflow.Context, name string) (string, error) {
	hello, err := workflow.ExecuteActivity[string](ctx, "greet", map[string]string{"name": name},
		workflow.ActivityOptions{StartToCloseTimeout: time.Minute}).Get(ctx)
	if err != nil {
		return "", err
	}
	decision, err := workflow.ReceiveSignal[string](ctx, "decision")
	if err != nil {
		return "", err
	}
	return hello + ": " + decision, nil
}

// exampleServer starts, in this process, what the examples talk to: an
// aion server on a loopback port with the embedded SQLite store in a
// temporary directory, and a worker running the activity types the
// examples schedule. stop shuts both down.
func exampleServer() (addr string, stop func()) {
	addr, stopServer := servertest.Background()
	w, err := worker.New(addr, worker.Options{
		Namespaces: []string{"demo", "billing", "reports", "agents"},
		Slots:      8,
		Capabilities: []worker.Capability{worker.CapabilityInjectMessage, worker.CapabilityPauseResume,
			worker.CapabilityUpdateBudget, worker.CapabilityCancel},
		Logger:  slog.New(slog.DiscardHandler),
		BuildID: "example-1",
	})
	if err != nil {
		panic(err)
	}
	type greeting struct {
		Name string `json:"name"`
	}
	worker.RegisterActivity(w, "greet", func(_ context.Context, in greeting) (string, error) { return "hello " + in.Name, nil })
	worker.RegisterActivity(w, "echo", func(_ context.Context, in any) (any, error) { return in, nil })
	worker.RegisterActivity(w, "parse", func(_ context.Context, in string) (int, error) {
		if strings.TrimSpace(in) == "" {
			return 0, worker.NonRetryable(errors.New("empty report"))
		}
		return len(strings.Fields(in)), nil
	})
	worker.RegisterActivity(w, "agent", exampleAgent)
	worker.RegisterWorkflow(w, "approve", exampleApproval)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return addr, func() {
		cancel()
		if err := <-done; err != nil {
			panic(err)
		}
		stopServer()
	}
}

// exampleAgent records the messages injected into it, honours pause, and
// ends once it has handled as many messages as its turn budget allows.
func exampleAgent(ctx context.Context, goal string) ([]string, error) {
	transcript := []string{"goal: " + goal}
	maxTurns := uint32(100)
	ivs := worker.Interventions(ctx)
	for uint32(len(transcript)-1) < maxTurns {
		if _, err := worker.WaitWhilePaused(ctx); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case iv := <-ivs:
			switch iv.Kind {
			case worker.InterventionInjectMessage:
				transcript = append(transcript, "user: "+iv.Message.Text)
			case worker.InterventionUpdateBudget:
				if iv.Budget.MaxTurns != nil {
					maxTurns = *iv.Budget.MaxTurns
				}
			}
			iv.Accept()
		}
	}
	return transcript, nil
}
