package server

import "sync"

// asides runs deep one-off work for long-lived stream goroutines (handling
// a worker's frame, decoding a large one) on goroutines kept for reuse. A
// stream's goroutine keeps the stack its deepest call grew for its whole
// life, so that work runs elsewhere; on a fresh goroutine each time it
// would grow a fresh stack each time, copying it as it grows. A reused
// goroutine keeps the stack it grew until a collection halves it (an idle
// one uses little of it), and saves the goroutine's start.
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
type aside struct{ work chan asideJob }

// asideJob is one piece of work and the channel closed once it is done and
// its goroutine is idle again (or gone), so the caller's next piece finds
// it idle.
type asideJob struct {
	f    func()
	done chan struct{}
}

// run runs f on a kept goroutine, or a new one when none is idle, and
// returns once f has returned. Once the asides are closed it runs f on the
// caller's goroutine.
func (a *asides) run(f func()) {
	job := asideJob{f: f, done: make(chan struct{})}
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
		r := &aside{work: make(chan asideJob, 1)}
		r.work <- job
		go a.loop(r)
	}
	<-job.done
}

// loop runs r's work until the asides close or enough others are idle.
func (a *asides) loop(r *aside) {
	defer a.wg.Done()
	for job := range r.work {
		job.f()
		a.mu.Lock()
		keep := !a.closed && len(a.idle) < maxIdleAsides
		if keep {
			a.idle = append(a.idle, r)
		}
		a.mu.Unlock()
		close(job.done)
		if !keep {
			return
		}
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

// idleCount reports how many goroutines wait for work, at most
// maxIdleAsides.
func (a *asides) idleCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.idle)
}
