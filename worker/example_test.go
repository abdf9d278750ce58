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
