package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrClosed reports a write submitted after the committer closed.
var ErrClosed = errors.New("committer closed")

// Committer group-commits writes: one transaction carries every write that
// arrived while the previous transaction was committing, so the cost of a
// durable commit (an fsync) is shared by all of them.
//
// Bulky writes (a large payload, result or failure) take turns with the
// others: a transaction holds either small writes only or bulky ones up to
// a byte budget, so a namespace that writes megabytes delays another's small
// write by at most one bulky transaction instead of riding every fsync with
// it. Writes of one namespace commit in the order they were submitted.
type Committer struct {
	apply      func(context.Context, []Write) ([]bool, error)
	maxBatch   int
	bulky      int
	bulkyBatch int
	observe    func(batch int, took time.Duration)

	mu      sync.Mutex
	pending []request
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

// Done is called once a write is durable (err nil) or has failed; changed is
// what the backend reported for the write. It runs on the committer's
// goroutine and must not block.
type Done func(changed bool, err error)

// request is one submitted write, or a flush mark (w nil) whose done runs
// once every write submitted before it is done.
type request struct {
	w    Write
	done Done
}

// CommitterOptions tune a Committer.
type CommitterOptions struct {
	// MaxBatch caps writes per transaction; 0 means 4096.
	MaxBatch int
	// BulkyWrite is the size from which a write is bulky; 0 means 64 KiB.
	BulkyWrite int
	// BulkyBatch caps the bytes of a transaction of bulky writes, which
	// holds at least one; 0 means 1 MiB.
	BulkyBatch int
	// Observe, when set, is told each transaction's size and duration.
	Observe func(batch int, took time.Duration)
}

// NewCommitter starts a committer over s. Close stops it.
func NewCommitter(s ActivityStore, opts CommitterOptions) *Committer {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 4096
	}
	if opts.BulkyWrite <= 0 {
		opts.BulkyWrite = 64 << 10
	}
	if opts.BulkyBatch <= 0 {
		opts.BulkyBatch = 1 << 20
	}
	c := &Committer{
		apply:      s.Apply,
		maxBatch:   opts.MaxBatch,
		bulky:      opts.BulkyWrite,
		bulkyBatch: opts.BulkyBatch,
		observe:    opts.Observe,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	go c.run()
	return c
}

// Submit queues w and calls done when it is durable or has failed.
func (c *Committer) Submit(w Write, done Done) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if done != nil {
			done(false, ErrClosed)
		}
		return
	}
	c.pending = append(c.pending, request{w: w, done: done})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Commit submits w and waits until it is durable, failed, or ctx ends. A
// write whose wait ended with ctx may still commit.
func (c *Committer) Commit(ctx context.Context, w Write) (bool, error) {
	type result struct {
		changed bool
		err     error
	}
	ch := make(chan result, 1)
	c.Submit(w, func(changed bool, err error) { ch <- result{changed, err} })
	select {
	case r := <-ch:
		return r.changed, r.err
	case <-ctx.Done():
		return false, fmt.Errorf("commit: %w", ctx.Err())
	}
}

// Flush waits until every write submitted before it is durable or has
// failed (whatever its outcome), or until ctx ends. It writes nothing.
func (c *Committer) Flush(ctx context.Context) error {
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.pending = append(c.pending, request{done: func(_ bool, err error) { ch <- err }})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("flush: %w", ctx.Err())
	}
}

// Close commits what is queued, then stops. Later submissions fail with
// ErrClosed.
func (c *Committer) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
}

func (c *Committer) run() {
	defer close(c.done)
	bulkyTurn := false
	for {
		c.mu.Lock()
		for len(c.pending) == 0 {
			if c.closed {
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		var batch []request
		if !bulkyTurn {
			batch, c.pending = c.take(c.pending, false)
		}
		if len(batch) == 0 {
			batch, c.pending = c.take(c.pending, true)
		}
		bulkyTurn = !bulkyTurn
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.mu.Unlock()
		c.commit(batch)
	}
}

// take splits pending, in order, into the next transaction's writes and the
// rest. Without bulky it takes small writes only, stopping each namespace at
// its first bulky one; with bulky it takes writes of any size up to the
// bulky byte budget, at least one. Once a namespace has a write left
// behind, none of its later writes is taken, so its order holds.
func (c *Committer) take(pending []request, bulky bool) (batch, rest []request) {
	var held map[string]bool
	bytes := 0
	for i, r := range pending {
		if r.w == nil {
			// A flush mark waits for every write before it, so it is
			// taken only when none of them was left behind.
			if held != nil || len(rest) > 0 {
				rest = append(rest, r)
			} else {
				batch = append(batch, r)
			}
			continue
		}
		key := writeKey(r.w)
		if held[key] {
			rest = append(rest, r)
			continue
		}
		size := writeBytes(r.w)
		full := len(batch) >= c.maxBatch || (bulky && len(batch) > 0 && bytes+size > c.bulkyBatch)
		if full || (!bulky && size >= c.bulky) {
			if full && !bulky && held == nil && len(rest) == 0 {
				// Nothing held back yet: the rest keeps its order as is.
				return batch, pending[i:]
			}
			if held == nil {
				held = make(map[string]bool)
			}
			held[key] = true
			rest = append(rest, r)
			continue
		}
		batch = append(batch, r)
		bytes += size
	}
	return batch, rest
}

func (c *Committer) commit(batch []request) {
	writes := make([]Write, 0, len(batch))
	for _, r := range batch {
		if r.w != nil {
			writes = append(writes, r.w)
		}
	}
	var (
		changed []bool
		err     error
	)
	if len(writes) > 0 {
		start := time.Now()
		// The batch is not tied to any one caller's context: callers that
		// gave up still have their writes committed, in order, like
		// everyone else's.
		changed, err = c.apply(context.Background(), writes)
		if c.observe != nil {
			c.observe(len(writes), time.Since(start))
		}
	}
	i := 0
	for _, r := range batch {
		if r.w == nil {
			r.done(false, nil) // a flush mark: what came before it is done
			continue
		}
		ch := err == nil && changed[i]
		i++
		if r.done != nil {
			r.done(ch, err)
		}
	}
}
