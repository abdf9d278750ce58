package workflow

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// DefaultCacheSize is how many runs an Executor keeps in memory between
// tasks unless told otherwise.
const DefaultCacheSize = 1000

// ExecutorOptions configures an Executor.
type ExecutorOptions struct {
	// BuildID is the version of the workflow code, reported in Info.
	BuildID string
	// CacheSize is the most runs kept in memory between their tasks, least
	// recently used evicted first; 0 means DefaultCacheSize, and a negative
	// value keeps none (every task then replays the whole history).
	CacheSize int
}

// Executor runs workflow tasks: it replays a run's history through the
// registered workflow function and reports the commands the code issued
// past it. It keeps runs in memory between tasks (sticky), so that a task
// carrying only the new events resumes the run without replay.
//
// Package worker drives an Executor for the workflows registered with
// worker.RegisterWorkflow; most programs never use one directly. A test may,
// to replay a run's recorded history against changed code and learn whether
// it is still deterministic. It is safe for concurrent use; tasks of
// different runs run in parallel.
type Executor struct {
	opts ExecutorOptions

	mu     sync.Mutex
	types  map[string]workflowFunc
	cache  map[string]*list.Element // of *cached
	lru    *list.List               // front: most recently used
	busy   map[string]bool          // runs a task is running on, out of the cache
	closed bool
}

type cached struct {
	key string
	r   *run
}

// NewExecutor returns an Executor with no workflow registered.
func NewExecutor(opts ExecutorOptions) *Executor {
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	return &Executor{opts: opts, types: make(map[string]workflowFunc), cache: make(map[string]*list.Element),
		lru: list.New(), busy: make(map[string]bool)}
}

// Register registers fn as the workflow function of workflowType. The
// run's input is decoded from JSON into In (an empty input leaves the zero
// value) and the returned Out is encoded as JSON into the run's result. An
// input that does not decode fails the run with type "payload_decode_error".
// Register fails if workflowType is empty or already registered, or fn is
// nil.
func Register[In, Out any](e *Executor, workflowType string, fn func(ctx Context, in In) (Out, error)) error {
	if fn == nil {
		return fmt.Errorf("workflow: Register %q with a nil function", workflowType)
	}
	return e.register(workflowType, func(ctx Context, input []byte) ([]byte, error) {
		in, err := decode[In](input)
		if err != nil {
			return nil, &typedError{typ: "payload_decode_error", msg: "workflow input: " + err.Error()}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, &typedError{typ: "result_encode_error", msg: fmt.Sprintf("encode result %T: %v", out, err)}
		}
		return b, nil
	})
}

// typedError is an error with a failure type.
type typedError struct{ typ, msg string }

func (e *typedError) Error() string     { return e.msg }
func (e *typedError) ErrorType() string { return e.typ }

func (e *Executor) register(workflowType string, fn workflowFunc) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case workflowType == "":
		return errors.New("workflow: Register with an empty workflow type")
	case e.types[workflowType] != nil:
		return fmt.Errorf("workflow: workflow type %q registered twice", workflowType)
	}
	e.types[workflowType] = fn
	return nil
}

// Types returns the registered workflow types, sorted.
func (e *Executor) Types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.types))
	for t := range e.types {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// CachedRuns returns how many runs the Executor keeps in memory.
func (e *Executor) CachedRuns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lru.Len()
}

func runKey(namespace, runID string) string { return namespace + "\x00" + runID }

// Run runs one workflow task and returns its result. It never blocks on
// anything but the workflow code, which must be fast (see the package
// documentation).
//
// A task whose first_seq is 1 replays the run from the top (dropping any
// state kept for it); a later first_seq continues the run kept in memory,
// and is answered with a failure of type "sticky_cache_miss" when the run is
// not kept. A task that fails (type "nondeterministic", "panic", …) drops
// the run's state. A query-only task answers its queries from the state the
// recorded rounds reach, without running the code any further.
func (e *Executor) Run(task *aionv1.WorkflowTask) *aionv1.WorkflowTaskResult {
	res := &aionv1.WorkflowTaskResult{Namespace: task.GetNamespace(), RunId: task.GetRunId(), Task: task.GetTask()}
	key := runKey(task.GetNamespace(), task.GetRunId())
	e.mu.Lock()
	fn := e.types[task.GetWorkflowType()]
	prev := e.takeLocked(key)
	if e.busy[key] {
		// Another task of the run is running; the server never sends two.
		e.mu.Unlock()
		res.Failure = &aionv1.Failure{Type: "task_in_progress", Retryable: true,
			Message: fmt.Sprintf("run %s already has a workflow task running on this worker", task.GetRunId())}
		return res
	}
	e.busy[key] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.busy, key)
		e.mu.Unlock()
	}()

	if fn == nil {
		if prev != nil {
			prev.drop()
		}
		res.Failure = &aionv1.Failure{Type: "workflow_type_not_registered", Retryable: true, Message: notRegistered(task.GetWorkflowType())}
		return res
	}
	r := prev
	switch {
	case task.GetFirstSeq() <= 1:
		if prev != nil {
			prev.drop()
		}
		r = newRun(task, fn, e.opts.BuildID)
	case prev == nil || prev.nextSeq != task.GetFirstSeq() || prev.info.WorkflowType != task.GetWorkflowType():
		if prev != nil {
			prev.drop()
		}
		res.Failure = stickyMiss(task)
		return res
	}

	cmds, err := r.runGuarded(task)
	if err != nil {
		r.drop()
		if errors.Is(err, errStickyMiss) {
			res.Failure = stickyMiss(task)
		} else {
			res.Failure = taskFailure(err)
		}
		return res
	}
	res.Commands = slices.Clone(cmds)
	for _, q := range task.GetQueries() {
		res.QueryAnswers = append(res.QueryAnswers, r.answer(q))
	}
	res.Sticky = e.keep(key, r)
	return res
}

// runGuarded is runTask with a last line of defence: a panic outside the
// workflow's coroutines (in this package, or in a callback it runs on the
// caller's goroutine) fails the task instead of the worker process.
func (r *run) runGuarded(task *aionv1.WorkflowTask) (cmds []*aionv1.WorkflowCommand, err error) {
	defer func() {
		if p := recover(); p != nil {
			cmds, err = nil, &PanicError{Value: p, Stack: string(debug.Stack())}
		}
	}()
	return r.runTask(task)
}

func notRegistered(workflowType string) string {
	return fmt.Sprintf("workflow type %q is not registered on this worker", workflowType)
}

// ReplayHistory replays a run's recorded history (its events from seq 1, as
// WorkflowService.History returns them) through the code registered for
// workflowType, and reports whether the code still takes the recorded
// steps: nil, a *NonDeterministicError naming the first step that differs,
// or a *PanicError. It runs the code no further than history records,
// issues nothing and keeps nothing: the check to run in a test before
// deploying changed workflow code under the same build id.
func (e *Executor) ReplayHistory(workflowType string, events []*aionv1.HistoryEvent) error {
	e.mu.Lock()
	fn := e.types[workflowType]
	e.mu.Unlock()
	if fn == nil {
		return errors.New("workflow: " + notRegistered(workflowType))
	}
	task := &aionv1.WorkflowTask{RunId: "replay", WorkflowType: workflowType, FirstSeq: 1, Events: events, QueryOnly: true}
	r := newRun(task, fn, e.opts.BuildID)
	defer r.drop()
	_, err := r.runGuarded(task)
	return err
}

func stickyMiss(task *aionv1.WorkflowTask) *aionv1.Failure {
	return &aionv1.Failure{Type: "sticky_cache_miss", Retryable: true, Message: fmt.Sprintf(
		"run %s is not kept by this worker at event %d: send the whole history", task.GetRunId(), task.GetFirstSeq())}
}

// taskFailure is how a failed task is reported; every one is retryable:
// the server retries the task (after fixed code is deployed, for a
// divergence). The message leaves the type out: the server shows the two
// together.
func taskFailure(err error) *aionv1.Failure {
	var (
		nd *NonDeterministicError
		pe *PanicError
		bh *badHistoryError
	)
	switch {
	case errors.As(err, &nd):
		return clipped(&aionv1.Failure{Type: "nondeterministic", Message: nd.what(), Retryable: true})
	case errors.As(err, &pe):
		return clipped(&aionv1.Failure{Type: "panic", Message: pe.Error(), Retryable: true, Details: stackDetails(pe.Stack)})
	case errors.As(err, &bh):
		return clipped(&aionv1.Failure{Type: "bad_history", Message: bh.msg, Retryable: true})
	}
	return clipped(&aionv1.Failure{Type: "workflow_task_failed", Message: err.Error(), Retryable: true})
}

// takeLocked removes a run from the cache and returns it (nil if absent).
func (e *Executor) takeLocked(key string) *run {
	el := e.cache[key]
	if el == nil {
		return nil
	}
	delete(e.cache, key)
	e.lru.Remove(el)
	return el.Value.(*cached).r
}

// keep puts a run in the cache, evicting the least recently used beyond
// the cache size; false when it is not kept.
func (e *Executor) keep(key string, r *run) bool {
	e.mu.Lock()
	if e.closed || e.opts.CacheSize < 0 {
		e.mu.Unlock()
		r.drop()
		return false
	}
	if old := e.takeLocked(key); old != nil {
		// A task of the same run finished meanwhile; this one is newer.
		defer old.drop()
	}
	e.cache[key] = e.lru.PushFront(&cached{key: key, r: r})
	var evict []*run
	for e.lru.Len() > e.opts.CacheSize {
		el := e.lru.Back()
		c := el.Value.(*cached)
		e.lru.Remove(el)
		delete(e.cache, c.key)
		evict = append(evict, c.r)
	}
	e.mu.Unlock()
	for _, old := range evict {
		old.drop()
	}
	return true
}

// Ack applies the server's answer to a task's result: a refused result
// drops the run's state (the server will send the whole history).
func (e *Executor) Ack(ack *aionv1.WorkflowTaskAck) {
	if ack.GetRefused() == "" {
		return
	}
	e.Forget(ack.GetNamespace(), ack.GetRunId())
}

// Forget drops a run's state, if kept.
func (e *Executor) Forget(namespace, runID string) {
	e.mu.Lock()
	r := e.takeLocked(runKey(namespace, runID))
	e.mu.Unlock()
	if r != nil {
		r.drop()
	}
}

// Close drops every run kept in memory, ending their goroutines, and keeps
// no run after. Tasks may still run (each then replays from the top).
func (e *Executor) Close() {
	e.mu.Lock()
	e.closed = true
	var all []*run
	for _, el := range e.cache {
		all = append(all, el.Value.(*cached).r)
	}
	clear(e.cache)
	e.lru.Init()
	e.mu.Unlock()
	for _, r := range all {
		r.drop()
	}
}
