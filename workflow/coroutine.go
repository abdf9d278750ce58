package workflow

import (
	"runtime"
	"runtime/debug"
)

// coroutine is one thread of workflow code: the workflow function or a
// function started with Go. Each runs on its own goroutine, but only while
// the scheduler has handed it control: exactly one coroutine (or the
// scheduler) runs at any time, so workflow code never races and runs in the
// same order on every replay.
type coroutine struct {
	r       *run
	fn      func()
	wake    chan bool     // scheduler → coroutine: true runs it, false kills it
	back    chan struct{} // coroutine → scheduler: it blocked or ended
	cond    func() bool   // what a blocked coroutine waits for
	started bool
	done    bool
	killed  bool
}

// newCoroutine queues fn to run after the coroutines created before it.
func (r *run) newCoroutine(fn func()) {
	r.coros = append(r.coros, &coroutine{r: r, fn: fn})
}

// main is the body of a coroutine's goroutine.
func (c *coroutine) main() {
	defer func() {
		p := recover()
		if p != nil && !c.killed && c.r.failure == nil {
			c.r.failure = &PanicError{Value: p, Stack: string(debug.Stack())}
		}
		c.done = true
		c.back <- struct{}{}
	}()
	if !<-c.wake {
		c.killed = true
		return
	}
	c.fn()
}

// step runs c until it blocks or ends. Called by the scheduler only.
func (c *coroutine) step() {
	if !c.started {
		c.started = true
		c.wake = make(chan bool)
		c.back = make(chan struct{})
		go c.main()
	}
	c.cond = nil
	c.wake <- true
	<-c.back
}

// kill ends a blocked coroutine: its goroutine exits (running its deferred
// calls) without running any more workflow steps.
func (c *coroutine) kill() {
	if c.done {
		return
	}
	if !c.started {
		c.done = true
		return
	}
	c.wake <- false
	<-c.back
}

// await blocks the calling coroutine until cond holds. It returns at once,
// without a switch, when cond already holds. Called by workflow code only.
func (r *run) await(cond func() bool) {
	c := r.current
	if c != nil && c.killed {
		// A deferred call of a coroutine being killed: it must not block.
		runtime.Goexit()
	}
	if cond() {
		return
	}
	if r.inQuery {
		panic("workflow: a query handler must not block")
	}
	if c == nil {
		panic("workflow: a blocking call outside workflow code (or from a goroutine not started with workflow.Go)")
	}
	for !cond() {
		c.cond = cond
		c.back <- struct{}{}
		if !<-c.wake {
			c.killed = true
			runtime.Goexit()
		}
	}
}

// park blocks the calling coroutine for good: the task has failed and the
// run is dropped, which kills it.
func (r *run) park() {
	r.await(func() bool { return false })
}

// schedule runs the coroutines, one at a time in creation order, round
// after round, until none can proceed: each is blocked, or done, or the
// task has failed, or the workflow function returned.
func (r *run) schedule() {
	for {
		progressed := false
		for i := 0; i < len(r.coros); i++ {
			c := r.coros[i]
			if c.done || (c.started && c.cond != nil && !c.cond()) {
				continue
			}
			r.current = c
			c.step()
			r.current = nil
			progressed = true
			if r.failure != nil || r.finished {
				r.compact()
				return
			}
		}
		r.compact()
		if !progressed {
			return
		}
	}
}

// compact forgets the coroutines that ended.
func (r *run) compact() {
	live := r.coros[:0]
	for _, c := range r.coros {
		if !c.done {
			live = append(live, c)
		}
	}
	clear(r.coros[len(live):])
	r.coros = live
}

// drop ends the run for good: its coroutines are killed, so that no
// goroutine outlives it, and its code can take no step any more.
func (r *run) drop() {
	r.dead = true
	r.killCoroutines()
}

// killCoroutines ends every coroutine. A run whose workflow function
// returned keeps its state for queries, without goroutines.
func (r *run) killCoroutines() {
	for _, c := range r.coros {
		r.current = c
		c.kill()
		r.current = nil
	}
	r.coros = nil
}
