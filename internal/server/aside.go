package server

import "sync"

// asides runs deep one-off work for long-lived stream goroutines (handling
// a worker's frame, decoding a large one) on goroutines kept for reuse. A
// stream's goroutine keeps the stack its deepest call grew for its whole
// life, so that work runs elsewhere; on a fresh goroutine each time it
// would grow a fresh stack each time, copying it as it grows. A reused
// goroutine has grown its stack already.
type asides struct {
	mu     sync.Mutex
	idle   []*aside // most recently used last
	closed bool
	wg     sync.WaitGroup
}

// maxIdleAsides bounds the goroutines kept waiting for work. More run at
// once when more work comes at once; those beyond the bound end after
// their work.
const maxIdleAsides = 128

// aside is one reusable goroutine; work hands it its next piece.
type aside struct{ work chan func() }

// run runs f on a kept goroutine, or a new one when none is idle, and
// returns once f has returned. Once the asides are closed it runs f on the
// caller's goroutine.
func (a *asides) run(f func()) {
	done := make(chan struct{})
	job := func() { f(); close(done) }
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		f()
		return
	}
	if n := len(a.idle); n > 0 {
		r := a.idle[n-1]
		a.idle = a.idle[:n-1]
		a.mu.Unlock()
		r.work <- job // buffered: an idle goroutine is waiting for it
	} else {
		a.wg.Add(1)
		a.mu.Unlock()
		r := &aside{work: make(chan func(), 1)}
		r.work <- job
		go a.loop(r)
	}
	<-done
}

// loop runs r's work until the asides close or enough others are idle.
func (a *asides) loop(r *aside) {
	defer a.wg.Done()
	for job := range r.work {
		job()
		a.mu.Lock()
		if a.closed || len(a.idle) >= maxIdleAsides {
			a.mu.Unlock()
			return
		}
		a.idle = append(a.idle, r)
		a.mu.Unlock()
	}
}

// close ends the idle goroutines and waits for every goroutine to end;
// work running meanwhile finishes first.
func (a *asides) close() {
	a.mu.Lock()
	a.closed = true
	idle := a.idle
	a.idle = nil
	a.mu.Unlock()
	for _, r := range idle {
		close(r.work)
	}
	a.wg.Wait()
}

// idleCount reports how many goroutines wait for work.
func (a *asides) idleCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.idle)
}
