package workflow

import (
	"errors"
)

// Awaitable is anything AwaitAny and AwaitAll can wait for: every Future.
type Awaitable interface {
	// IsReady reports whether the outcome is known: Get would not block.
	IsReady() bool

	// resolved reports the run the future belongs to and, once ready, its
	// place in the order the run's futures became ready.
	resolved() (*run, int64)
}

// Future is the outcome of a step that may not have happened yet.
type Future[T any] interface {
	Awaitable
	// Get blocks until the outcome is known and returns it. When ctx is
	// canceled first it returns ErrCanceled at once (the step itself goes
	// on; Get may be called again, for example with a disconnected
	// context). A ready future returns its outcome whatever ctx's state.
	Get(ctx Context) (T, error)
}

// future is the one implementation of Future.
type future[T any] struct {
	r     *run
	ready bool
	order int64
	val   T
	err   error
}

func newFuture[T any](r *run) *future[T] { return &future[T]{r: r} }

// failed returns a future that is ready with err.
func failed[T any](r *run, err error) *future[T] {
	f := newFuture[T](r)
	var zero T
	f.settle(zero, err)
	return f
}

// settle makes the future ready; later calls do nothing.
func (f *future[T]) settle(v T, err error) {
	if f.ready {
		return
	}
	f.ready, f.val, f.err = true, v, err
	f.order = f.r.nextOrder()
}

func (f *future[T]) IsReady() bool { return f.ready }

func (f *future[T]) resolved() (*run, int64) { return f.r, f.order }

func (f *future[T]) Get(ctx Context) (T, error) {
	c := ctxOf(ctx)
	if c.r != f.r {
		panic("workflow: Future.Get with a Context of another run")
	}
	if !f.ready {
		c.r.await(func() bool { return f.ready || c.sc.canceled })
	}
	if !f.ready {
		var zero T
		return zero, ErrCanceled
	}
	return f.val, f.err
}

// errNoFutures is AwaitAny's answer to an empty list: it would wait forever.
var errNoFutures = errors.New("workflow: AwaitAny with no futures")

// AwaitAny blocks until at least one of futures is ready and returns the
// index of the one that became ready first, in the order of the run's
// history (so replay picks the same one even when later events made others
// ready too). It returns -1 and ErrCanceled if ctx is canceled first, and
// -1 and an error when futures is empty.
func AwaitAny(ctx Context, futures ...Awaitable) (int, error) {
	c := ctxOf(ctx)
	if len(futures) == 0 {
		return -1, errNoFutures
	}
	checkRun(c.r, futures)
	first := func() int {
		best, bestOrder := -1, int64(0)
		for i, f := range futures {
			if !f.IsReady() {
				continue
			}
			if _, o := f.resolved(); best < 0 || o < bestOrder {
				best, bestOrder = i, o
			}
		}
		return best
	}
	c.r.await(func() bool { return first() >= 0 || c.sc.canceled })
	if i := first(); i >= 0 {
		return i, nil
	}
	return -1, ErrCanceled
}

// AwaitAll blocks until every one of futures is ready. It does not look at
// their outcomes (Get does). It returns ErrCanceled if ctx is canceled
// first.
func AwaitAll(ctx Context, futures ...Awaitable) error {
	c := ctxOf(ctx)
	checkRun(c.r, futures)
	all := func() bool {
		for _, f := range futures {
			if !f.IsReady() {
				return false
			}
		}
		return true
	}
	c.r.await(func() bool { return all() || c.sc.canceled })
	if all() {
		return nil
	}
	return ErrCanceled
}

func checkRun(r *run, futures []Awaitable) {
	for _, f := range futures {
		if f == nil {
			panic("workflow: nil future")
		}
		if fr, _ := f.resolved(); fr != r {
			panic("workflow: a future of another run")
		}
	}
}

// Await blocks until cond returns true. cond is called whenever the run's
// state may have changed (after other coroutines ran, or events arrived):
// it must only read workflow state, the variables the code changes, and
// never block or take steps. It returns ErrCanceled if ctx is canceled
// first. Use it, for example, to wait for coroutines started with Go to
// finish their work.
func Await(ctx Context, cond func() bool) error {
	c := ctxOf(ctx)
	// The scheduler calls cond between coroutines; a panic in it is
	// raised again in the coroutine, where it fails the task as any panic.
	var (
		panicked bool
		value    any
	)
	check := func() (ok bool) {
		defer func() {
			if p := recover(); p != nil {
				panicked, value, ok = true, p, true
			}
		}()
		return cond()
	}
	c.r.await(func() bool { return check() || c.sc.canceled })
	if panicked {
		panic(value)
	}
	if cond() {
		return nil
	}
	return ErrCanceled
}
