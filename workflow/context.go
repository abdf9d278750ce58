package workflow

import (
	"cmp"
	"slices"
	"time"
)

// Context is what workflow code is given instead of a context.Context. It
// carries the run (every workflow call needs it) and a cancellation scope.
//
// It is deliberately not a context.Context: workflow code must not do real
// I/O (network, files, clocks), because it is replayed from the top on
// every worker that picks the run up, and only what history records comes
// out the same on replay. I/O belongs in activities, which get a real
// context.Context. A Context is valid only inside the run that gave it;
// using it from another goroutine than the workflow's own (start those with
// Go) is a bug.
type Context interface {
	// Done returns a future that becomes ready when the context is
	// canceled. Wait for it with AwaitAny alongside other futures, or check
	// IsReady. Do not wait for it with a select: workflow code blocks only
	// through this package's calls.
	Done() Future[struct{}]
	// Err is nil while the context is not canceled and ErrCanceled after.
	Err() error

	state() *wctx
}

// CancelFunc cancels a Context made by WithCancel.
type CancelFunc func()

// wctx is the one implementation of Context.
type wctx struct {
	r     *run
	sc    *scope
	aopts *ActivityOptions // defaults for ExecuteActivity; nil for none
}

func (c *wctx) Done() Future[struct{}] { return c.sc.done }

func (c *wctx) Err() error {
	if c.sc.canceled {
		return ErrCanceled
	}
	return nil
}

func (c *wctx) state() *wctx { return c }

// ctxOf checks that ctx is a workflow Context of a live run.
func ctxOf(ctx Context) *wctx {
	if ctx == nil {
		panic("workflow: nil Context")
	}
	c := ctx.state()
	if c.r.dead {
		// A deferred call of a run being dropped: it must not take steps.
		c.r.exitCoroutine()
	}
	return c
}

// scope is a cancellation scope: the run's root, one made by WithCancel, or
// a disconnected one.
type scope struct {
	parent   *scope
	children []*scope
	canceled bool
	done     *future[struct{}]
	// pending are the timers and activities started in this scope that
	// have not resolved: an explicit cancel cancels them.
	pending map[int64]*step
}

func (r *run) newScope(parent *scope) *scope {
	s := &scope{parent: parent, done: newFuture[struct{}](r)}
	if parent != nil {
		parent.children = append(parent.children, s)
		if parent.canceled {
			s.cancelTree(nil)
		}
	}
	return s
}

// cancelTree marks the scope and its descendants canceled; the steps still
// pending in them are collected into steps when it is not nil.
func (s *scope) cancelTree(steps *[]*step) {
	if s.canceled {
		return
	}
	s.canceled = true
	s.done.settle(struct{}{}, nil)
	if steps != nil {
		for _, st := range s.pending {
			*steps = append(*steps, st)
		}
	}
	for _, ch := range s.children {
		ch.cancelTree(steps)
	}
}

// detach removes a canceled scope from its parent, so that a long run that
// makes many scopes does not keep them all.
func (s *scope) detach() {
	if p := s.parent; p != nil {
		if i := slices.Index(p.children, s); i >= 0 {
			p.children = slices.Delete(p.children, i, i+1)
		}
	}
}

// WithCancel returns a child of parent with its own CancelFunc. Calling it
// cancels the child and its descendants: their waits return ErrCanceled,
// their timers that have not fired are canceled (a CancelTimer command)
// and their activities that have not closed are asked to stop (a
// CancelActivity command; the activity's future then resolves when the
// activity closes, usually with an ActivityError of type "canceled").
// Children started in it are not affected. The child is canceled, without
// those commands, when parent is (the server then stops the run's
// activities itself). Calling the CancelFunc again does nothing.
func WithCancel(parent Context) (Context, CancelFunc) {
	p := ctxOf(parent)
	r := p.r
	sc := r.newScope(p.sc)
	child := &wctx{r: r, sc: sc, aopts: p.aopts}
	return child, func() {
		if sc.canceled || r.dead {
			return
		}
		if r.inQuery {
			panic("workflow: a query handler must not cancel a context")
		}
		var steps []*step
		sc.cancelTree(&steps)
		sc.detach()
		slices.SortFunc(steps, func(a, b *step) int { return cmp.Compare(a.n, b.n) })
		for _, st := range steps {
			r.cancelStep(st)
		}
	}
}

// NewDisconnectedContext returns a Context that is not canceled when parent
// is, with parent's activity options: the way to run cleanup steps after
// the run's cancellation was requested. Activities started on it are not
// canceled by the run's cancellation.
func NewDisconnectedContext(parent Context) Context {
	p := ctxOf(parent)
	return &wctx{r: p.r, sc: p.r.newScope(nil), aopts: p.aopts}
}

// WithActivityOptions returns a copy of parent whose ExecuteActivity calls
// use opts when they pass no options of their own.
func WithActivityOptions(parent Context, opts ActivityOptions) Context {
	p := ctxOf(parent)
	o := opts
	return &wctx{r: p.r, sc: p.sc, aopts: &o}
}

// Info describes the run the code is running in.
type Info struct {
	// Namespace, WorkflowID and RunID name the run.
	Namespace  string
	WorkflowID string
	RunID      string
	// WorkflowType is the type the run was started with.
	WorkflowType string
	// TaskQueue is the run's task queue, the default one of its activities.
	TaskQueue string
	// BuildID is the build id of this worker's workflow code.
	BuildID string
	// ParentWorkflowID and ParentRunID name the parent run of a child
	// workflow; empty otherwise.
	ParentWorkflowID string
	ParentRunID      string
	// ContinuedFromRunID is the run this one continues, when it was
	// started by continue-as-new.
	ContinuedFromRunID string
	// StartTime is when the run started (its first event).
	StartTime time.Time
	// Replaying is true while the code re-runs steps that history already
	// records, false once it takes new ones. Use it to keep logs from
	// repeating; never to change which steps the code takes.
	Replaying bool
}

// GetInfo returns the run's description.
func GetInfo(ctx Context) Info {
	c := ctxOf(ctx)
	info := c.r.info
	info.Replaying = c.r.replaying
	return info
}
