// Package reaper deletes closed work whose namespace's retention has
// passed: closed activities with their attempts, and closed workflow runs
// with their histories. It runs in the background of a server, one pass
// every interval, in small batches so the commits of new work never wait
// behind it for more than one batch.
//
// Every server of a cluster runs its own reaper over the shared store;
// the store's deletes are idempotent and take disjoint rows, so they need
// no coordination.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/store"
)

// Kind is what a reaped row was.
type Kind string

// The kinds of reaped work.
const (
	KindActivity Kind = "activity"
	KindRun      Kind = "run"
)

// Store is what the reaper reads and deletes.
type Store interface {
	ListNamespaces(ctx context.Context) ([]store.Namespace, error)
	store.ReapStore
}

// Pass is what one pass over every namespace did.
type Pass struct {
	// Activities and Runs count the rows deleted.
	Activities, Runs int
	// Batches counts the deleting transactions.
	Batches int
	// Took is how long the pass ran, by the reaper's clock.
	Took time.Duration
	// Err is the first error that cut the pass short, nil if none.
	Err error
}

// Observer is told what the reaper deletes, for metrics. Its methods must
// be quick and must not block.
type Observer interface {
	// Reaped: n rows of kind were deleted from namespace.
	Reaped(namespace string, kind Kind, n int)
	// Passed: a pass ended.
	Passed(p Pass)
}

type noObserver struct{}

func (noObserver) Reaped(string, Kind, int) {}
func (noObserver) Passed(Pass)              {}

// The defaults of Config.
const (
	DefaultInterval    = 10 * time.Second
	DefaultBatch       = 500
	DefaultBatchTarget = 10 * time.Millisecond
)

// firstBatch is the size a reaper's first batch starts from, and
// minBatch the size batches never shrink below (both at most
// Config.Batch): past a point a smaller batch saves no stall, as each
// transaction has its own cost, and would only reap too slowly.
const (
	firstBatch = 100
	minBatch   = 50
)

// Config configures a Reaper.
type Config struct {
	Store Store
	// Clock times the passes and reads the time cutoffs are taken from;
	// nil means clock.Real().
	Clock clock.Clock
	// Interval is the time from the end of one pass to the start of the
	// next; 0 means DefaultInterval.
	Interval time.Duration
	// Batch is the most rows one transaction deletes; 0 means
	// DefaultBatch, and more than store.MaxReapBatch is cut to it.
	Batch int
	// BatchTarget is how long one batch should hold the store: a batch
	// that took longer halves the next one (down to 50 rows), one that
	// took less than half doubles it (up to Batch), so commits of new work
	// do not wait long behind a batch whatever the machine. 0 means
	// DefaultBatchTarget.
	BatchTarget time.Duration
	// Observer is told what was deleted; nil for none.
	Observer Observer
	Log      *slog.Logger
}

// Reaper deletes expired closed work in the background. Create it with
// New, start it with Start, stop it with Stop.
type Reaper struct {
	st       Store
	clk      clock.Clock
	interval time.Duration
	batch    int
	target   time.Duration
	// size is the next batch's size, adapted to target; only the loop's
	// goroutine touches it.
	size int
	obs  Observer
	log  *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a reaper over cfg; nothing runs until Start.
func New(cfg Config) *Reaper {
	r := &Reaper{st: cfg.Store, clk: cfg.Clock, interval: cfg.Interval, batch: cfg.Batch, obs: cfg.Observer, log: cfg.Log}
	if r.clk == nil {
		r.clk = clock.Real()
	}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	if r.batch <= 0 {
		r.batch = DefaultBatch
	}
	r.batch = min(r.batch, store.MaxReapBatch)
	r.target = cfg.BatchTarget
	if r.target <= 0 {
		r.target = DefaultBatchTarget
	}
	r.size = min(r.batch, firstBatch)
	if r.obs == nil {
		r.obs = noObserver{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// Start begins the passes: the first one interval from now.
func (r *Reaper) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return errors.New("reaper: started twice")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(ctx)
	return nil
}

// Stop ends the passes and returns once the one under way (cut short at
// its current batch) has ended, or when ctx ends.
func (r *Reaper) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop reaper: %w", ctx.Err())
	}
}

func (r *Reaper) run(ctx context.Context) {
	defer close(r.done)
	timer := r.clk.NewTimer(r.interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		p := r.pass(ctx)
		if p.Err != nil && ctx.Err() == nil {
			r.log.Warn("reaping closed work", "err", p.Err, "activities", p.Activities, "runs", p.Runs)
		}
		timer.Reset(r.interval)
	}
}

// pass deletes, namespace by namespace, the closed activities and runs
// closed longer ago than the namespace's retention, batch by batch until
// none is left or ctx ends. Between batches it pauses as long as the batch
// took, so under load it holds the store's writer at most half the time.
func (r *Reaper) pass(ctx context.Context) Pass {
	start := r.clk.Now()
	var p Pass
	defer func() {
		p.Took = r.clk.Now().Sub(start)
		r.obs.Passed(p)
	}()
	nss, err := r.st.ListNamespaces(ctx)
	if err != nil {
		p.Err = fmt.Errorf("reap: %w", err)
		return p
	}
	for _, ns := range nss {
		cutoff := start.Add(-time.Duration(ns.Retention.Effective()))
		for _, k := range []Kind{KindActivity, KindRun} {
			n, err := r.drain(ctx, ns.Name, k, cutoff, &p)
			if k == KindActivity {
				p.Activities += n
			} else {
				p.Runs += n
			}
			if err != nil {
				p.Err = err
				return p
			}
		}
	}
	return p
}

// drain reaps one kind of one namespace until a batch comes back short.
func (r *Reaper) drain(ctx context.Context, ns string, k Kind, cutoff time.Time, p *Pass) (int, error) {
	reap := r.st.ReapActivities
	if k == KindRun {
		reap = r.st.ReapRuns
	}
	total := 0
	for {
		began := r.clk.Now()
		size := r.size
		n, err := reap(ctx, ns, cutoff, size)
		if err != nil {
			return total, fmt.Errorf("reap: %w", err)
		}
		took := r.clk.Now().Sub(began)
		p.Batches++
		total += n
		if n > 0 {
			r.obs.Reaped(ns, k, n)
		}
		if n < size {
			return total, nil
		}
		switch {
		case took > r.target:
			r.size = max(min(minBatch, r.batch), size/2)
		case took < r.target/2:
			r.size = min(r.batch, size*2)
		}
		if err := clock.Sleep(ctx, r.clk, took); err != nil {
			return total, fmt.Errorf("reap: %w", err)
		}
	}
}
