package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/aion-run/aion/worker"
)

// sleepInput and friends are the demo activity types' payloads.
type (
	sleepInput struct {
		MS int64 `json:"ms"`
	}
	sleepOutput struct {
		SleptMS int64 `json:"slept_ms"`
	}
	failInput struct {
		Times uint32 `json:"times"`
	}
	failOutput struct {
		Attempts uint32 `json:"attempts"`
	}
)

// registerDemo registers echo, sleep, fail and agent, each logging one line
// per attempt.
func registerDemo(w *worker.Worker, log *slog.Logger) {
	worker.RegisterActivity(w, "echo", logged(log, demoEcho))
	worker.RegisterActivity(w, "sleep", logged(log, demoSleep))
	worker.RegisterActivity(w, "fail", logged(log, demoFail))
	worker.RegisterActivity(w, "agent", logged(log, demoAgent(log)))
}

// logged wraps a handler with one log line per attempt.
func logged[In, Out any](log *slog.Logger, fn func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		start := time.Now()
		out, err := fn(ctx, in)
		info := worker.Info(ctx)
		attrs := []any{"namespace", info.Namespace, "activity_id", info.ActivityID, "attempt", info.Attempt,
			"type", info.ActivityType, "duration", time.Since(start).Round(time.Microsecond)}
		if err != nil {
			log.Info("task failed", append(attrs, "err", err)...)
		} else {
			log.Info("task completed", attrs...)
		}
		return out, err
	}
}

func demoEcho(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
	if len(in) == 0 {
		return json.RawMessage("null"), nil
	}
	return in, nil
}

// demoSleep sleeps in.MS milliseconds, heartbeating its progress; a retry
// resumes from the previous attempt's last heartbeat.
func demoSleep(ctx context.Context, in sleepInput) (sleepOutput, error) {
	if in.MS < 0 {
		return sleepOutput{}, worker.NewError("invalid_input", fmt.Sprintf("ms is %d, want at least 0", in.MS), false, nil)
	}
	total := time.Duration(in.MS) * time.Millisecond
	done := time.Duration(0)
	if prev, err := worker.HeartbeatDetails[sleepOutput](ctx); err == nil && prev.SleptMS > 0 {
		done = min(time.Duration(prev.SleptMS)*time.Millisecond, total)
	}
	every := heartbeatEvery(worker.Info(ctx).HeartbeatTimeout)
	for done < total {
		step := min(every, total-done)
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return sleepOutput{}, context.Cause(ctx)
		case <-t.C:
		}
		done += step
		worker.RecordHeartbeat(ctx, sleepOutput{SleptMS: done.Milliseconds()})
	}
	return sleepOutput{SleptMS: in.MS}, nil
}

// heartbeatEvery is how often sleep heartbeats: a third of the heartbeat
// timeout, at most 1s (and at least 50ms); every second when heartbeats are
// not required.
func heartbeatEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return time.Second
	}
	return min(max(timeout/3, 50*time.Millisecond), time.Second)
}

// demoFail fails the first in.Times attempts retryably, then succeeds.
func demoFail(ctx context.Context, in failInput) (failOutput, error) {
	attempt := worker.Info(ctx).Attempt
	if attempt <= in.Times {
		return failOutput{}, worker.NewError("demo_failure",
			fmt.Sprintf("failing attempt %d on purpose (first %d attempts fail)", attempt, in.Times), true, nil)
	}
	return failOutput{Attempts: attempt}, nil
}
