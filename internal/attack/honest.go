package attack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/worker"
)

// honestQueue is the honest tenant's task queue; its worker serves echo.
const honestQueue = "honest"

// Honest is what an honest client saw while the attack ran: one
// schedule-then-wait of an echo activity at a fixed rate, open loop.
type Honest struct {
	// Rate is the offered load in operations per second.
	Rate float64 `json:"rate"`
	// Offered operations were started; Completed ended with the activity
	// completed; every other one is an error, never a success.
	Offered   int `json:"offered"`
	Completed int `json:"completed"`
	Errors    int `json:"errors"`
	// ErrorKinds counts the errors by cause.
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`
	// Latencies of completed operations in milliseconds, measured from each
	// operation's intended start, so a stalled server cannot hide its
	// delay by slowing the load down.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// Slowest are the slowest completed operations, slowest first, with
	// when each was due: whether the tail is the attack's first burst or
	// spread over the run.
	Slowest []SlowOp `json:"slowest,omitempty"`
	// PID is the process the honest worker and client ran in: one of their
	// own, apart from the attack's, so the attack's goroutines do not delay
	// theirs. Zero in the child's own report; Run fills it in.
	PID int `json:"pid,omitempty"`
}

// SlowOp is one slow honest operation.
type SlowOp struct {
	// AtS is when it was due, in seconds from the start of the load.
	AtS float64 `json:"at_s"`
	// MS is its latency in milliseconds.
	MS float64 `json:"ms"`
}

// slowestKept is how many of the slowest operations a report lists.
const slowestKept = 5

// startHonestWorker runs the honest tenant's worker until ctx ends; the
// returned function waits for it to stop.
func startHonestWorker(ctx context.Context, addr, token string) (wait func(), err error) {
	w, err := worker.New(addr, worker.Options{
		Namespaces: []string{honestNS}, TaskQueue: honestQueue, Slots: 64, Identity: "honest-worker",
		Token: token, Logger: slog.New(slog.DiscardHandler), StopTimeout: 2 * time.Second,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("honest worker: %w", err)
	}
	worker.RegisterActivity(w, "echo", func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	return func() { <-done }, nil
}

// honestLoad runs the honest client's operations.
type honestLoad struct {
	c       *client.Client
	timeout time.Duration

	mu      sync.Mutex
	lat     []time.Duration
	slow    []SlowOp // the slowest slowestKept, slowest first
	offered int
	errs    map[string]int
}

// op schedules one echo activity and waits for it; it returns an error
// unless the activity completed.
func (h *honestLoad) op(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	hd, err := client.Schedule(ctx, h.c, client.ScheduleOptions{Namespace: honestNS, TaskQueue: honestQueue,
		ActivityType: "echo"}, map[string]int{"n": n})
	if err != nil {
		return fmt.Errorf("schedule: %s", outcome(err))
	}
	a, err := hd.Wait(ctx)
	if err != nil {
		return fmt.Errorf("wait: %s", outcome(err))
	}
	if a.State != client.StateCompleted {
		return fmt.Errorf("activity %s", a.State)
	}
	return nil
}

// warmUp waits until one operation completes, so the worker is connected
// and the first figures are not the server's start.
func (h *honestLoad) warmUp(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = h.op(ctx, -1); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("no honest operation completed within %v: %w", within, err)
}

// run offers rate operations a second until end, each started at its
// intended time whatever the previous ones do, then waits for them all.
func (h *honestLoad) run(ctx context.Context, rate float64, end time.Time) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * interval)
		if !due.Before(end) {
			break
		}
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		h.mu.Lock()
		h.offered++
		h.mu.Unlock()
		wg.Go(func() {
			err := h.op(ctx, k)
			took := time.Since(due)
			h.mu.Lock()
			defer h.mu.Unlock()
			if err != nil {
				h.errs[err.Error()]++
				return
			}
			h.lat = append(h.lat, took)
			h.noteSlow(SlowOp{AtS: due.Sub(start).Seconds(), MS: float64(took.Microseconds()) / 1000})
		})
	}
	wg.Wait()
}

// noteSlow keeps op if it is among the slowest; h.mu is held.
func (h *honestLoad) noteSlow(op SlowOp) {
	i, _ := slices.BinarySearchFunc(h.slow, op, func(a, b SlowOp) int { return cmp.Compare(b.MS, a.MS) })
	if i < slowestKept {
		h.slow = slices.Insert(h.slow, i, op)
		h.slow = h.slow[:min(len(h.slow), slowestKept)]
	}
}

func (h *honestLoad) report(rate float64) Honest {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Honest{Rate: rate, Offered: h.offered, Completed: len(h.lat)}
	for kind, n := range h.errs {
		r.Errors += n
		if r.ErrorKinds == nil {
			r.ErrorKinds = make(map[string]int)
		}
		r.ErrorKinds[kind] = n
	}
	r.P50MS, r.P99MS, r.MaxMS = percentiles(h.lat)
	r.Slowest = slices.Clone(h.slow)
	return r
}

// percentiles returns p50, p99 and max of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99, maxMS float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return ms(at(0.50)), ms(at(0.99)), ms(s[len(s)-1])
}

var errNoServer = errors.New("the server under attack has exited")
