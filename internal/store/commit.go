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
type Committer struct {
	apply    func(context.Context, []Write) ([]bool, error)
	maxBatch int
	observe  func(batch int, took time.Duration)

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
	// Observe, when set, is told each transaction's size and duration.
	Observe func(batch int, took time.Duration)
}

// NewCommitter starts a committer over s. Close stops it.
func NewCommitter(s ActivityStore, opts CommitterOptions) *Committer {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 4096
	}
	c := &Committer{
		apply:    s.Apply,
		maxBatch: opts.MaxBatch,
		observe:  opts.Observe,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
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
		n := min(len(c.pending), c.maxBatch)
		batch := c.pending[:n:n]
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.mu.Unlock()
		c.commit(batch)
	}
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
