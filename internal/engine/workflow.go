package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
	"google.golang.org/protobuf/proto"
)

// IDReuse decides whether a workflow id whose last run closed may start again.
type IDReuse int

// The id reuse policies.
const (
	// ReuseAllowDuplicate: a new run may start whatever way the last closed.
	ReuseAllowDuplicate IDReuse = iota
	// ReuseAllowDuplicateFailedOnly: only after a run that did not complete.
	ReuseAllowDuplicateFailedOnly
	// ReuseRejectDuplicate: never a second run of the id.
	ReuseRejectDuplicate
)

// WorkflowRequest asks for a run to start.
type WorkflowRequest struct {
	Namespace string
	// WorkflowID makes Start idempotent; empty means the engine picks one.
	WorkflowID   string
	WorkflowType string
	TaskQueue    string
	Input        []byte
	IDReuse      IDReuse
	// StartDelay or StartAt (at most one) delay the run's first workflow
	// task: the run is durable at once. A StartAt in the past is now.
	StartDelay time.Duration
	StartAt    time.Time
	// Priority orders the run's workflow tasks within its pool: 1 first,
	// 5 last; 0 means 3.
	Priority int
	// Flow carries the run's fairness and concurrency keys; its steps
	// share their pools under the same keys.
	Flow store.Flow
	// Origin names the schedule tick that starts the run; only the
	// scheduler sets it.
	Origin store.ScheduleOrigin
	// Trace is the trace context the run's spans and its steps' activities
	// join; zero for none. It is no part of the fingerprint.
	Trace tracectx.Context
}

// Workflow failure types the engine itself assigns.
const (
	// FailureNondeterministic: the code diverged from its recorded history.
	FailureNondeterministic = "nondeterministic"
	// FailureStickyCacheMiss: a worker no longer holds a run it was sent a
	// partial history for; the full history is sent at once.
	FailureStickyCacheMiss = "sticky_cache_miss"
	// FailureWorkflowTaskTimeout: a workflow task was not answered in time.
	FailureWorkflowTaskTimeout = "workflow_task_timeout"
	// FailureBadCommand: a workflow task's commands broke the protocol.
	FailureBadCommand = "bad_command"
	// FailureTerminated: an operator terminated the run.
	FailureTerminated = "terminated"
	// FailureCanceled: the run or a step was canceled.
	FailureCanceled = "canceled"
)

// Defaults for workflow tasks.
const (
	// workflowTaskTimeout bounds one workflow task on a worker; a task not
	// answered by then is given to another worker with the whole history.
	workflowTaskTimeout = 10 * time.Second
	// maxTaskBackoff caps the wait before a failed workflow task is tried
	// again, so fixed code deployed meanwhile picks the run up soon.
	maxTaskBackoff = 10 * time.Second
)

// runKey identifies a run: run ids are unique per namespace.
type runKey struct{ ns, id string }

// wfKey identifies a workflow id.
type wfKey struct{ ns, id string }

// wfRun is the in-memory state of one open run. Its history is held whole:
// the durable prefix and the events decided but not yet written.
type wfRun struct {
	rec store.Run
	// events is the history, events[i].Seq == i+1.
	events []*aionv1.HistoryEvent
	// durable is how many events are in the store; writing is set while an
	// AppendEvents is in flight (writes of one run go one at a time, each
	// fenced on the length before it).
	durable int64
	writing bool
	// extra submit the writes that must commit after the pending events
	// (the activities and runs their commands start), in order; they run
	// under the engine lock right after the events' write is submitted.
	extra []func()
	// update is the record change to carry with the next append; updating
	// is set when it holds one.
	update   store.RunUpdate
	updating bool
	// flushed are called, under the engine lock, once every event up to
	// their seq is durable (or the write failed).
	flushed []flushWaiter

	// creating is closed once the run's insert is durable (or failed).
	creating chan struct{}

	// The workflow task: task is the token of the latest one handed out;
	// taskWorker runs it (nil when none is running), taskSeen is the last
	// seq it was given.
	task       uint64
	taskWorker *registry.Worker
	taskSeen   int64
	// taskSent is when the running task was sent, for its latency;
	// taskReplay says it carried a whole history to replay.
	taskSent   time.Time
	taskReplay bool
	// taskQueryOnly: the running task only answers queries.
	taskQueryOnly bool
	// seen is the last seq the code has seen in a recorded round; events
	// after it, other than those of commands, call for a task. lastNonCmd
	// is the seq of the last such event.
	seen       int64
	lastNonCmd int64
	// queued is the workflow queue the run waits in, nil when not waiting;
	// queuedAt is when it joined it.
	queued   *wfQueue
	queuedAt time.Time
	// admitted: the run counts against its workflow type's concurrency
	// limit (it was given a task); heldBy is the key whose limit keeps it
	// from its first task, nil when none does.
	admitted bool
	heldBy   *wfGroup
	// sticky holds the run in memory after its last task, up to stickySeen.
	sticky     *registry.Worker
	stickySeen int64
	// failures counts workflow tasks failed in a row; retryAt is when the
	// next may start.
	failures int
	retryAt  time.Time

	// Cluster mode: inbox events being applied (inboxSeen), to consume with
	// the next append (consume), and events to post to other runs with it.
	inboxSeen map[int64]struct{}
	consume   []int64
	post      []store.RunEvent

	steps           map[int64]*wfStep
	cancelRequested bool
	closing         bool
	waiters         []chan struct{}
	queries         []*wfQuery
}

type flushWaiter struct {
	seq  int64
	done func(err error)
}

// wfStep is a step the run waits on.
type wfStep struct {
	n    int64
	kind aionv1.StepKind
	name string
	// activity is the step's activity key; timerAt its fire time; child
	// its run.
	activity key
	timerAt  time.Time
	child    runKey
	childWF  string
}

// wfQuery is a query waiting for a worker's answer.
type wfQuery struct {
	id, name string
	input    []byte
	sent     bool
	done     chan struct{}
	result   []byte
	err      error
}

func (r *wfRun) key() runKey { return runKey{r.rec.Namespace, r.rec.RunID} }

// length is the number of events in memory, durable or not.
func (r *wfRun) length() int64 { return int64(len(r.events)) }

// WorkflowTaskSender is how the engine reaches a worker with workflow tasks;
// a worker's registry Delivery implements it next to Conn. It must not block.
type WorkflowTaskSender interface {
	SendWorkflowTask(*aionv1.WorkflowTask) error
}

// ErrRunClosed reports an operation that needs an open run.
var ErrRunClosed = errors.New("run closed")

func validateWorkflow(r WorkflowRequest, maxPayload int) error {
	checks := []error{
		name.Check("namespace", r.Namespace, name.MaxName),
		name.Check("workflow_type", r.WorkflowType, name.MaxName),
		name.CheckOptional("task_queue", r.TaskQueue, name.MaxName),
		name.CheckOptional("workflow_id", r.WorkflowID, name.MaxID),
	}
	for _, err := range checks {
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
	}
	if len(r.Input) > maxPayload {
		return fmt.Errorf("input: %d bytes, at most %d allowed: %w", len(r.Input), maxPayload, ErrResourceExhausted)
	}
	if r.IDReuse < ReuseAllowDuplicate || r.IDReuse > ReuseRejectDuplicate {
		return fmt.Errorf("id_reuse: %d is not a known policy: %w", r.IDReuse, ErrInvalid)
	}
	if r.StartDelay < 0 {
		return fmt.Errorf("start_delay: %v is negative: %w", r.StartDelay, ErrInvalid)
	}
	if r.StartDelay > 0 && !r.StartAt.IsZero() {
		return fmt.Errorf("start_delay: %v given with start_time %s; give at most one: %w", r.StartDelay, r.StartAt.Format(time.RFC3339), ErrInvalid)
	}
	if err := r.Trace.Validate("trace_context"); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	return validateFlow(r.Priority, r.Flow, r.Origin)
}

func workflowFingerprint(r WorkflowRequest) string {
	return fingerprint(Request{Namespace: r.Namespace, ID: r.WorkflowID, TaskQueue: r.TaskQueue,
		ActivityType: "workflow:" + r.WorkflowType, Payload: r.Input, StartDelay: r.StartDelay, StartAt: r.StartAt,
		Priority: r.Priority, Flow: r.Flow, Origin: r.Origin})
}

// StartWorkflow makes a new run durable and queues its first workflow task.
// It returns once the run is durable. The same workflow id and request while
// the run is open return that run (existing true); a different request is
// ErrAlreadyExists; after the run closed, r.IDReuse decides.
func (e *Engine) StartWorkflow(ctx context.Context, caller namespace.Identity, r WorkflowRequest) (store.Run, bool, error) {
	if err := validateWorkflow(r, e.maxPayload); err != nil {
		return store.Run{}, false, fmt.Errorf("start workflow: %w", err)
	}
	if err := namespace.Authorize(caller, r.Namespace); err != nil {
		return store.Run{}, false, fmt.Errorf("start workflow: %w", err)
	}
	if err := e.ensureNamespace(ctx, r.Namespace); err != nil {
		return store.Run{}, false, fmt.Errorf("start workflow: %w", err)
	}
	now := e.now().UTC()
	if r.WorkflowID == "" {
		r.WorkflowID = newID(now)
	}
	r.TaskQueue = registry.Pool(r.Namespace, r.TaskQueue).TaskQueue
	fp := workflowFingerprint(r)
	for {
		run, existing, retry, err := e.startOnce(ctx, r, fp, now)
		if !retry {
			return run, existing, err
		}
	}
}

// startOnce tries one start; retry is set when the open run it found closed
// meanwhile, so the reuse policy must be looked at again.
func (e *Engine) startOnce(ctx context.Context, r WorkflowRequest, fp string, now time.Time) (store.Run, bool, bool, error) {
	wk := wfKey{r.Namespace, r.WorkflowID}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return store.Run{}, false, false, e.errClosed("start workflow")
	}
	if open := e.openWF[wk]; open != nil {
		creating := open.creating
		e.mu.Unlock()
		if creating != nil {
			select {
			case <-creating:
			case <-ctx.Done():
				return store.Run{}, false, false, fmt.Errorf("start workflow: %w", ctx.Err())
			}
		}
		e.mu.Lock()
		rec, still := open.rec, e.openWF[wk] == open
		e.mu.Unlock()
		if !still {
			return store.Run{}, false, true, nil
		}
		if rec.Fingerprint != fp {
			return store.Run{}, false, false, fmt.Errorf("start workflow: workflow_id: %q already has an open run in namespace %q started by a different request: %w",
				r.WorkflowID, r.Namespace, ErrAlreadyExists)
		}
		return rec, true, false, nil
	}
	e.mu.Unlock()

	last, err := e.st.LatestRun(ctx, r.Namespace, r.WorkflowID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return store.Run{}, false, false, fmt.Errorf("start workflow %q: %w", r.WorkflowID, err)
	case last.Status == store.RunRunning && e.cl != nil:
		// In a cluster an open run need not be in this server's memory:
		// another server holds it, or none does until a worker's server
		// claims it. The store's record answers as memory would.
		if last.Fingerprint != fp {
			return store.Run{}, false, false, fmt.Errorf("start workflow: workflow_id: %q already has an open run in namespace %q started by a different request: %w",
				r.WorkflowID, r.Namespace, ErrAlreadyExists)
		}
		return last, true, false, nil
	case last.Status == store.RunRunning:
		// Open in the store but not in memory: a start racing this one
		// between its insert and our lookup. Look again.
		return store.Run{}, false, true, nil
	default:
		switch {
		case r.IDReuse == ReuseRejectDuplicate,
			r.IDReuse == ReuseAllowDuplicateFailedOnly && (last.Status == store.RunCompleted || last.Status == store.RunContinuedAsNew):
			return store.Run{}, false, false, fmt.Errorf("start workflow: workflow_id: %q ran already in namespace %q (run %s %s) and its id reuse policy refuses another: %w",
				r.WorkflowID, r.Namespace, last.RunID, last.Status, ErrAlreadyExists)
		}
	}

	rec := store.Run{Namespace: r.Namespace, WorkflowID: r.WorkflowID, RunID: newID(now), WorkflowType: r.WorkflowType,
		TaskQueue: r.TaskQueue, Status: store.RunRunning, Input: r.Input, Fingerprint: fp, StartedAt: now,
		Priority: store.EffectivePriority(r.Priority), Flow: effectiveFlow(r.Flow), Origin: r.Origin, Trace: r.Trace}
	started := &aionv1.WorkflowStarted{WorkflowType: r.WorkflowType, TaskQueue: r.TaskQueue, Input: r.Input}
	switch {
	case r.StartDelay > 0:
		started.ReadyTime = timestamp(now.Add(r.StartDelay))
	case r.StartAt.After(now):
		started.ReadyTime = timestamp(r.StartAt.UTC())
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return store.Run{}, false, false, e.errClosed("start workflow")
	}
	if e.openWF[wk] != nil {
		e.mu.Unlock()
		return store.Run{}, false, true, nil
	}
	done := make(chan error, 1)
	run := e.insertRunLocked(rec, started, func(err error) { done <- err })
	e.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			return store.Run{}, false, false, fmt.Errorf("start workflow %q in namespace %q: %w", r.WorkflowID, r.Namespace, err)
		}
	case <-ctx.Done():
		return store.Run{}, false, false, fmt.Errorf("start workflow: %w", ctx.Err())
	}
	e.mu.Lock()
	out := run.rec
	e.mu.Unlock()
	return out, false, false, nil
}

// insertRunLocked records a new run with its WorkflowStarted event and
// queues its first task once durable. created runs under the engine lock
// with the outcome; a run whose insert failed leaves memory.
func (e *Engine) insertRunLocked(rec store.Run, started *aionv1.WorkflowStarted, created func(error)) *wfRun {
	now := rec.StartedAt
	ev := &aionv1.HistoryEvent{Seq: 1, Time: timestamp(now), Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: started}}
	data, err := proto.Marshal(ev)
	if err != nil {
		panic(fmt.Sprintf("encode history event: %v", err)) // only invalid UTF-8 could fail, and names are checked
	}
	rec.HistoryLength = 1
	var owner store.ServerID
	held := true
	if e.cl != nil {
		// Held here when a local worker serves the type; otherwise a
		// server whose workers do claims it.
		if held = e.servesWorkflowLocked(rec.Namespace, rec.TaskQueue, rec.WorkflowType); held {
			owner = e.cl.Self
		}
	}
	run := &wfRun{rec: rec, events: []*aionv1.HistoryEvent{ev}, durable: 1, lastNonCmd: 1, creating: make(chan struct{}), steps: make(map[int64]*wfStep)}
	e.runs[run.key()] = run
	e.openWF[wfKey{rec.Namespace, rec.WorkflowID}] = run
	e.commit.Submit(store.InsertRun{Run: rec, Events: []store.Event{{Seq: 1, Data: data}}, Owner: owner}, func(ok bool, err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		creating := run.creating
		run.creating = nil
		defer close(creating)
		if err == nil && !ok {
			err = fmt.Errorf("workflow_id: %q has an open run already: %w", rec.WorkflowID, ErrAlreadyExists)
		}
		if err != nil {
			e.dropRunLocked(run)
			created(err)
			return
		}
		e.obsWF.RunStarted(rec.Namespace)
		e.runChanges(runChangeOf(rec))
		created(nil)
		if !held {
			e.dropRunLocked(run)
			return
		}
		e.delayFirstTaskLocked(run)
		e.needTaskLocked(run)
	})
	return run
}

// dropRunLocked takes a run out of memory and wakes its waiters.
func (e *Engine) dropRunLocked(r *wfRun) {
	e.runLeftLimitLocked(r)
	k := r.key()
	if e.runs[k] == r {
		delete(e.runs, k)
	}
	wk := wfKey{r.rec.Namespace, r.rec.WorkflowID}
	if e.openWF[wk] == r {
		delete(e.openWF, wk)
	}
	e.unqueueRunLocked(r)
	for _, ch := range r.waiters {
		close(ch)
	}
	r.waiters = nil
	for _, q := range r.queries {
		q.err = fmt.Errorf("query: run %s closed before a worker answered: %w", r.rec.RunID, ErrRunClosed)
		close(q.done)
	}
	r.queries = nil
}

// appendLocked adds events to the run's history in memory, numbered after
// the last; the caller then calls flushLocked to write them durably in order
// with the run's other writes (so one task's events go in one write).
func (e *Engine) appendLocked(r *wfRun, now time.Time, events ...*aionv1.HistoryEvent) int64 {
	for _, ev := range events {
		ev.Seq = r.length() + 1
		ev.Time = timestamp(now)
		r.events = append(r.events, ev)
		if !isCommandEvent(ev) {
			r.lastNonCmd = ev.Seq
		}
	}
	return r.length()
}

// flushLocked writes the run's pending events, record update and extra
// writes, unless a write of the run is in flight (its completion flushes
// again).
func (e *Engine) flushLocked(r *wfRun) {
	if r.writing || r.creating != nil {
		return
	}
	pending := r.events[r.durable:]
	if len(pending) == 0 && len(r.extra) == 0 && !r.updating && len(r.consume) == 0 && len(r.post) == 0 {
		return
	}
	evs := make([]store.Event, len(pending))
	for i, ev := range pending {
		data, err := proto.Marshal(ev)
		if err != nil {
			panic(fmt.Sprintf("encode history event: %v", err))
		}
		evs[i] = store.Event{Seq: ev.Seq, Data: data}
	}
	w := store.AppendEvents{Namespace: r.rec.Namespace, RunID: r.rec.RunID, After: r.durable, Events: evs, Update: r.update,
		Consume: r.consume, Post: r.post}
	if e.cl != nil {
		w.Owner = e.cl.Self
	}
	e.wakeOnCloseLocked(r, &w)
	extra := r.extra
	upto := r.length()
	r.writing, r.extra, r.update, r.updating, r.consume, r.post = true, nil, store.RunUpdate{}, false, nil, nil
	e.commit.Submit(w, func(ok bool, err error) {
		if err == nil && !ok {
			err = fmt.Errorf("append to run %s: the store's history is not %d events long, or the run is closed", r.rec.RunID, w.After)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		r.writing = false
		if err != nil {
			e.log.Error("durable workflow write failed", "namespace", r.rec.Namespace, "run", r.rec.RunID, "err", err)
		} else {
			r.durable = upto
			r.rec.HistoryLength = upto
		}
		var keep []flushWaiter
		for _, f := range r.flushed {
			if f.seq <= upto || err != nil {
				f.done(err)
			} else {
				keep = append(keep, f)
			}
		}
		r.flushed = keep
		if err != nil {
			e.reloadRunLocked(r)
			return
		}
		if r.closing && r.durable == r.length() && len(r.extra) == 0 {
			e.finishRunLocked(r)
			return
		}
		e.flushLocked(r)
	})
	for _, x := range extra {
		x()
	}
}

// afterFlushLocked calls done once every event up to seq is durable.
func (e *Engine) afterFlushLocked(r *wfRun, seq int64, done func(error)) {
	if r.durable >= seq {
		done(nil)
		return
	}
	r.flushed = append(r.flushed, flushWaiter{seq: seq, done: done})
}

// reloadRunLocked handles a run whose memory is ahead of the store after a
// failed write: it leaves memory and is read back from the store, which
// holds its durable state.
func (e *Engine) reloadRunLocked(r *wfRun) {
	if e.runs[r.key()] != r {
		return
	}
	e.releaseTaskLocked(r)
	e.dropRunLocked(r)
	if e.closed || e.cl != nil {
		// In a cluster the store holds the run's state and, when this
		// server lost it, another server holds it: claims bring it back.
		return
	}
	k := r.key()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		for {
			err := e.call(func(ctx context.Context) error { return e.loadRun(ctx, k) })
			if err == nil || e.bgCtx.Err() != nil {
				return
			}
			e.log.Error("reload a run after a failed write", "namespace", k.ns, "run", k.id, "err", err)
			if !e.pause(time.Second) {
				return
			}
		}
	}()
}

// finishRunLocked takes a closed run out of memory once its close is durable.
func (e *Engine) finishRunLocked(r *wfRun) {
	e.releaseTaskLocked(r)
	e.obsWF.RunClosed(r.rec.Namespace, r.rec.Status, len(r.events))
	e.runChanges(runChangeOf(r.rec))
	e.dropRunLocked(r)
}

// lookupRun finds a run: by run id, or the open (else latest) run of a
// workflow id. In memory first, then the store.
func (e *Engine) lookupRun(ctx context.Context, ns, workflowID, runID string) (store.Run, *wfRun, error) {
	for {
		e.mu.Lock()
		var r *wfRun
		if runID != "" {
			r = e.runs[runKey{ns, runID}]
		} else {
			r = e.openWF[wfKey{ns, workflowID}]
		}
		if r == nil || (workflowID != "" && r.rec.WorkflowID != workflowID) {
			e.mu.Unlock()
			break
		}
		creating, rec := r.creating, r.rec
		e.mu.Unlock()
		if creating == nil {
			return rec, r, nil
		}
		// Being created (a start, or the next run of a continue as new):
		// not in the store yet, and there once its insert is durable.
		select {
		case <-creating:
		case <-ctx.Done():
			return store.Run{}, nil, ctx.Err()
		}
	}
	var (
		rec store.Run
		err error
	)
	if runID != "" {
		rec, err = e.st.GetRun(ctx, ns, runID)
		if err == nil && workflowID != "" && rec.WorkflowID != workflowID {
			err = store.ErrNotFound
		}
	} else {
		rec, err = e.st.LatestRun(ctx, ns, workflowID)
	}
	if errors.Is(err, store.ErrNotFound) {
		if runID != "" {
			return store.Run{}, nil, fmt.Errorf("run_id: no run %q of workflow %q in namespace %q: %w", runID, workflowID, ns, ErrNotFound)
		}
		return store.Run{}, nil, fmt.Errorf("workflow_id: no workflow %q in namespace %q: %w", workflowID, ns, ErrNotFound)
	}
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("read run of workflow %q: %w", workflowID, err)
	}
	return rec, nil, nil
}

func checkRunRef(ns, workflowID, runID string) error {
	if err := name.Check("namespace", ns, name.MaxName); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if workflowID == "" && runID == "" {
		return fmt.Errorf("workflow_id: required: %w", ErrInvalid)
	}
	if err := name.CheckOptional("workflow_id", workflowID, name.MaxID); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if err := name.CheckOptional("run_id", runID, name.MaxID); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	return nil
}

// openRun finds the open run named, for an operation that changes it.
// It returns the run held in memory, or, in a cluster, a nil run and the
// record of an open run another server holds (or none does yet).
func (e *Engine) openRun(ctx context.Context, caller namespace.Identity, op, ns, workflowID, runID string) (*wfRun, store.Run, error) {
	if err := checkRunRef(ns, workflowID, runID); err != nil {
		return nil, store.Run{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return nil, store.Run{}, fmt.Errorf("%s: %w", op, err)
	}
	rec, r, err := e.lookupRun(ctx, ns, workflowID, runID)
	if err != nil {
		return nil, store.Run{}, fmt.Errorf("%s: %w", op, err)
	}
	switch {
	case rec.Status.Closed():
		return nil, store.Run{}, fmt.Errorf("%s: run %s of workflow %q is %s: %w", op, rec.RunID, rec.WorkflowID, rec.Status, ErrFailedPrecondition)
	case r == nil && e.cl == nil:
		return nil, store.Run{}, fmt.Errorf("%s: run %s of workflow %q is being read back from the store; try again: %w", op, rec.RunID, rec.WorkflowID, ErrUnavailable)
	}
	return r, rec, nil
}

// SignalWorkflow appends a named signal to the open run's history and
// returns its sequence number once it is durable.
func (e *Engine) SignalWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID, signal string, input []byte) (int64, error) {
	if err := name.Check("signal_name", signal, name.MaxName); err != nil {
		return 0, fmt.Errorf("signal: %w: %w", err, ErrInvalid)
	}
	if len(input) > e.maxPayload {
		return 0, fmt.Errorf("signal: input: %d bytes, at most %d allowed: %w", len(input), e.maxPayload, ErrResourceExhausted)
	}
	r, rec, err := e.openRun(ctx, caller, "signal", ns, workflowID, runID)
	if err != nil {
		return 0, err
	}
	sig := &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_SignalReceived{SignalReceived: &aionv1.SignalReceived{Name: signal, Input: input}}}
	if r == nil {
		// Held by another server: its inbox takes the signal durably; its
		// seq is known only once the holder appends it.
		return 0, e.postToRun(ctx, "signal", rec, sig)
	}
	done := make(chan error, 1)
	e.mu.Lock()
	if r.closing || e.runs[r.key()] != r {
		e.mu.Unlock()
		return 0, fmt.Errorf("signal: run %s of workflow %q closed: %w", r.rec.RunID, r.rec.WorkflowID, ErrFailedPrecondition)
	}
	seq := e.appendLocked(r, e.now().UTC(), sig)
	e.flushLocked(r)
	e.afterFlushLocked(r, seq, func(err error) { done <- err })
	e.needTaskLocked(r)
	e.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("signal workflow %q: %w", r.rec.WorkflowID, err)
		}
		return seq, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("signal: %w", ctx.Err())
	}
}

// CancelWorkflow records a cancel request in the open run's history, cancels
// its running activities and children, and lets the code clean up.
func (e *Engine) CancelWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID, reason string) (store.Run, error) {
	r, rec, err := e.openRun(ctx, caller, "cancel workflow", ns, workflowID, runID)
	if err != nil {
		return store.Run{}, err
	}
	if r == nil {
		ev := &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_CancelRequested{CancelRequested: &aionv1.CancelRequested{Reason: reason}}}
		return rec, e.postToRun(ctx, "cancel workflow", rec, ev)
	}
	done := make(chan error, 1)
	e.mu.Lock()
	if r.closing || e.runs[r.key()] != r {
		e.mu.Unlock()
		return store.Run{}, fmt.Errorf("cancel workflow: run %s closed: %w", r.rec.RunID, ErrFailedPrecondition)
	}
	seq := e.cancelRunLocked(r, reason)
	e.afterFlushLocked(r, seq, func(err error) { done <- err })
	e.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			return store.Run{}, fmt.Errorf("cancel workflow %q: %w", r.rec.WorkflowID, err)
		}
	case <-ctx.Done():
		return store.Run{}, fmt.Errorf("cancel workflow: %w", ctx.Err())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.rec, nil
}

// cancelRunLocked records the request once and cancels what the run waits
// on; a run a concurrency limit holds before its code ever ran is closed as
// canceled at once. It returns the seq to wait for.
func (e *Engine) cancelRunLocked(r *wfRun, reason string) int64 {
	if r.cancelRequested {
		return r.length()
	}
	r.cancelRequested = true
	now := e.now().UTC()
	seq := e.appendLocked(r, now, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_CancelRequested{
		CancelRequested: &aionv1.CancelRequested{Reason: reason}}})
	if r.heldBy != nil && r.seen == 0 {
		// A concurrency limit holds the run and its code never ran: no
		// code would answer the request until a slot frees, so it closes
		// as canceled now.
		seq = e.closeRunLocked(r, now, &aionv1.CloseWorkflowCommand{Status: aionv1.RunStatus_RUN_STATUS_CANCELED,
			Failure: &aionv1.Failure{Type: FailureCanceled, Message: reason}})
	}
	e.flushLocked(r)
	e.cancelStepsLocked(r, "workflow "+r.rec.WorkflowID+" canceled: "+reason)
	e.needTaskLocked(r)
	return seq
}

// cancelStepsLocked cancels the run's running activities and open children.
func (e *Engine) cancelStepsLocked(r *wfRun, reason string) {
	now := e.now()
	for _, s := range r.steps {
		switch s.kind {
		case aionv1.StepKind_STEP_KIND_ACTIVITY:
			if a := e.open[s.activity]; a != nil && !a.closing && a.creating == nil {
				e.unqueueLocked(a)
				e.closeLocked(a, store.StateCanceled, &store.Failure{Type: FailureCanceled, Message: reason}, now)
			} else if a == nil && e.cl != nil {
				e.cancelStepElsewhereLocked(s.activity, reason)
			}
		case aionv1.StepKind_STEP_KIND_CHILD:
			if c := e.runs[s.child]; c != nil && !c.closing && c.creating == nil {
				e.cancelRunLocked(c, reason)
			} else if c == nil && e.cl != nil {
				e.cancelChildElsewhereLocked(s.child, reason)
			}
		}
	}
}

// TerminateWorkflow closes the open run at once without running its code;
// its running activities and children are canceled.
func (e *Engine) TerminateWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID, reason string) (store.Run, error) {
	r, rec, err := e.openRun(ctx, caller, "terminate workflow", ns, workflowID, runID)
	if err != nil {
		return store.Run{}, err
	}
	f := &store.Failure{Type: FailureTerminated, Message: "terminated: " + reason}
	if r == nil {
		ev := &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowClosed{WorkflowClosed: &aionv1.WorkflowClosed{
			Status: aionv1.RunStatus_RUN_STATUS_TERMINATED, Failure: failureProto(f)}}}
		if err := e.postToRun(ctx, "terminate workflow", rec, ev); err != nil {
			return store.Run{}, err
		}
		return e.WaitWorkflow(ctx, namespace.Anyone("terminate"), ns, "", rec.RunID)
	}
	e.mu.Lock()
	if r.closing || e.runs[r.key()] != r {
		e.mu.Unlock()
		return store.Run{}, fmt.Errorf("terminate workflow: run %s closed: %w", r.rec.RunID, ErrFailedPrecondition)
	}
	ch := make(chan struct{})
	r.waiters = append(r.waiters, ch)
	e.closeRunLocked(r, e.now().UTC(), &aionv1.CloseWorkflowCommand{Status: aionv1.RunStatus_RUN_STATUS_TERMINATED, Failure: failureProto(f)})
	e.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return store.Run{}, fmt.Errorf("terminate workflow: %w", ctx.Err())
	}
	rec, _, err = e.lookupRun(ctx, ns, "", r.rec.RunID)
	if err != nil {
		return store.Run{}, fmt.Errorf("terminate workflow: %w", err)
	}
	return rec, nil
}

// RunView is a run with the steps it waits on.
type RunView struct {
	Run     store.Run
	Pending []PendingStep
}

// PendingStep is one step a run waits on.
type PendingStep struct {
	Step       int64
	Kind       aionv1.StepKind
	Name       string
	ActivityID string
	Attempt    int
	WorkerID   registry.WorkerID
	FireAt     time.Time
	ChildID    string
}

// GetWorkflow returns a run (by run id, or the open or else latest run of the
// workflow id) with its pending steps.
func (e *Engine) GetWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID string) (RunView, error) {
	if err := checkRunRef(ns, workflowID, runID); err != nil {
		return RunView{}, fmt.Errorf("get workflow: %w", err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return RunView{}, fmt.Errorf("get workflow: %w", err)
	}
	rec, r, err := e.lookupRun(ctx, ns, workflowID, runID)
	if err != nil {
		return RunView{}, fmt.Errorf("get workflow: %w", err)
	}
	v := RunView{Run: rec}
	if r != nil {
		e.mu.Lock()
		v.Pending = e.pendingStepsLocked(r)
		e.mu.Unlock()
	}
	return v, nil
}

func (e *Engine) pendingStepsLocked(r *wfRun) []PendingStep {
	out := make([]PendingStep, 0, len(r.steps))
	for _, s := range r.steps {
		p := PendingStep{Step: s.n, Kind: s.kind, Name: s.name, FireAt: s.timerAt, ChildID: s.childWF}
		if s.kind == aionv1.StepKind_STEP_KIND_ACTIVITY {
			p.ActivityID = s.activity.id
			if a := e.open[s.activity]; a != nil {
				p.Attempt = a.rec.Attempt
				if a.worker != nil {
					p.WorkerID = a.worker.ID()
				}
			}
		}
		out = append(out, p)
	}
	sortSteps(out)
	return out
}

// WaitWorkflow blocks until the run closes or ctx ends, then returns it. A
// run that continued as new is followed to its last run when runID is empty.
func (e *Engine) WaitWorkflow(ctx context.Context, caller namespace.Identity, ns, workflowID, runID string) (store.Run, error) {
	if err := checkRunRef(ns, workflowID, runID); err != nil {
		return store.Run{}, fmt.Errorf("wait workflow: %w", err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return store.Run{}, fmt.Errorf("wait workflow: %w", err)
	}
	follow := runID == ""
	pause := 10 * time.Millisecond
	for {
		rec, r, err := e.lookupRun(ctx, ns, workflowID, runID)
		if err != nil {
			return store.Run{}, fmt.Errorf("wait workflow: %w", err)
		}
		if r == nil {
			switch {
			case rec.Status == store.RunContinuedAsNew && follow && rec.NextRunID != "":
				runID = rec.NextRunID
			case rec.Status.Closed():
				return rec, nil
			default:
				// Open in the store, not in memory: held by another server
				// of a cluster, or being read back. Look again soon.
				if err := clock.Sleep(ctx, e.clock, pause); err != nil {
					return store.Run{}, fmt.Errorf("wait workflow: %w", err)
				}
				pause = min(2*pause, 500*time.Millisecond)
			}
			continue
		}
		e.mu.Lock()
		if e.waitsReleased {
			e.mu.Unlock()
			return store.Run{}, fmt.Errorf("wait workflow: the server is stopping: %w", ErrClosed)
		}
		var ch chan struct{}
		if e.runs[r.key()] == r {
			ch = make(chan struct{})
			r.waiters = append(r.waiters, ch)
		}
		e.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return store.Run{}, fmt.Errorf("wait workflow: %w", ctx.Err())
			}
		}
		runID = rec.RunID
	}
}

// RunFilter selects runs for ListWorkflows.
type RunFilter struct {
	Namespace    string
	Status       store.RunStatus
	WorkflowType string
	PageSize     int
	PageToken    string
}

// ListWorkflows returns a page of a namespace's runs, newest first, and the
// token of the next page ("" on the last).
func (e *Engine) ListWorkflows(ctx context.Context, caller namespace.Identity, f RunFilter) ([]store.Run, string, error) {
	if err := name.Check("namespace", f.Namespace, name.MaxName); err != nil {
		return nil, "", fmt.Errorf("list workflows: %w: %w", err, ErrInvalid)
	}
	if err := namespace.Authorize(caller, f.Namespace); err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", fmt.Errorf("list workflows: status: %q is not a run status: %w", f.Status, ErrInvalid)
	}
	size := f.PageSize
	if size <= 0 {
		size = 100
	}
	size = min(size, 1000)
	var before int64
	if f.PageToken != "" {
		n, err := strconv.ParseInt(f.PageToken, 10, 64)
		if err != nil || n <= 0 {
			return nil, "", fmt.Errorf("list workflows: page_token: %q is not a token this server issued: %w", f.PageToken, ErrInvalid)
		}
		before = n
	}
	runs, err := e.st.ListRuns(ctx, store.RunFilter{Namespace: f.Namespace, Status: f.Status, WorkflowType: f.WorkflowType,
		Limit: size + 1, Before: before})
	if err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	next := ""
	if len(runs) > size {
		runs = runs[:size]
		next = fmt.Sprint(runs[size-1].Seq)
	}
	// Open runs move faster than the store: show their in-memory state.
	e.mu.Lock()
	for i := range runs {
		if r := e.runs[runKey{runs[i].Namespace, runs[i].RunID}]; r != nil && r.creating == nil {
			seq := runs[i].Seq
			runs[i] = r.rec
			runs[i].Seq = seq
			runs[i].Input, runs[i].Result = nil, nil
		}
	}
	e.mu.Unlock()
	return runs, next, nil
}

// WorkflowHistory returns up to limit events of a run after seq after, in
// order, and the seq to continue from (0 when there are no more).
func (e *Engine) WorkflowHistory(ctx context.Context, caller namespace.Identity, ns, workflowID, runID string, after int64, limit int) ([]*aionv1.HistoryEvent, int64, error) {
	if err := checkRunRef(ns, workflowID, runID); err != nil {
		return nil, 0, fmt.Errorf("history: %w", err)
	}
	if err := namespace.Authorize(caller, ns); err != nil {
		return nil, 0, fmt.Errorf("history: %w", err)
	}
	if limit <= 0 {
		limit = 1000
	}
	limit = min(limit, 10000)
	rec, _, err := e.lookupRun(ctx, ns, workflowID, runID)
	if err != nil {
		return nil, 0, fmt.Errorf("history: %w", err)
	}
	evs, err := e.st.ReadHistory(ctx, ns, rec.RunID, after, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("history of run %s: %w", rec.RunID, err)
	}
	var next int64
	if len(evs) > limit {
		evs = evs[:limit]
		next = evs[limit-1].Seq
	}
	out := make([]*aionv1.HistoryEvent, 0, len(evs))
	for _, ev := range evs {
		m := new(aionv1.HistoryEvent)
		if err := proto.Unmarshal(ev.Data, m); err != nil {
			return nil, 0, fmt.Errorf("history of run %s: event %d is damaged: %w", rec.RunID, ev.Seq, err)
		}
		out = append(out, m)
	}
	return out, next, nil
}
