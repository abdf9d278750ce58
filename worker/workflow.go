package worker

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

// DefaultWorkflowSlots is Options.WorkflowSlots when left zero.
const DefaultWorkflowSlots = 100

// RegisterWorkflow registers fn as the workflow function of workflowType:
// the worker advances the runs of that type that the server sends it (see
// package workflow for how). The run's input is decoded from JSON into In
// (an empty input leaves the zero value) and the returned Out is encoded as
// JSON into the run's result.
//
// A worker that registers a workflow must set Options.BuildID. It may
// register workflows only, without any activity.
//
// Workflow code runs on a few goroutines the worker keeps for it and must
// only compute and wait through package workflow: code that blocks in any
// other way (a channel, a lock, I/O) holds its runner, and Run does not
// return while it does.
//
// RegisterWorkflow panics if workflowType is empty or already registered, fn
// is nil, or Run has been called: these are programming errors.
func RegisterWorkflow[In, Out any](w *Worker, workflowType string, fn func(ctx workflow.Context, in In) (Out, error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("worker: RegisterWorkflow " + strconv.Quote(workflowType) + " after Run")
	}
	if err := workflow.Register(w.wf, workflowType, fn); err != nil {
		panic("worker: RegisterWorkflow: " + err.Error())
	}
	w.register.WorkflowTypes = append(w.register.WorkflowTypes, workflowType)
}

// wfTask is a workflow task waiting for a runner, with the stream it came
// on: its result goes back on that stream or nowhere (a new stream's server
// sends the task again).
type wfTask struct {
	task *aionv1.WorkflowTask
	out  *outbox
}

// workflowRunners is the state of the goroutines that run workflow tasks.
type workflowRunners struct {
	queue chan wfTask // capacity: the workflow slots
	wg    sync.WaitGroup
}

// startWorkflows starts the workflow task runners, when workflows are
// registered: a few goroutines, since workflow code only computes. Callers
// hold w.mu.
func (w *Worker) startWorkflows() {
	if len(w.register.GetWorkflowTypes()) == 0 {
		return
	}
	n := min(w.opts.WorkflowSlots, max(2, runtime.GOMAXPROCS(0)))
	q := make(chan wfTask, w.opts.WorkflowSlots)
	w.wfRun.queue = q
	for range n {
		w.wfRun.wg.Add(1)
		go w.runWorkflowTasks(q)
	}
}

// stopWorkflows ends the runners once no frame can arrive any more, and
// drops every run kept in memory (ending its goroutines).
func (w *Worker) stopWorkflows() {
	w.mu.Lock()
	q := w.wfRun.queue
	w.wfRun.queue = nil // a task that still arrives is declined
	w.mu.Unlock()
	if q != nil {
		close(q)
		w.wfRun.wg.Wait()
	}
	w.wf.Close()
}

func (w *Worker) runWorkflowTasks(q <-chan wfTask) {
	defer w.wfRun.wg.Done()
	for t := range q {
		var res *aionv1.WorkflowTaskResult
		if t.out.isOpen() {
			res = w.wf.Run(t.task)
			if f := res.GetFailure(); f.GetType() == "sticky_cache_miss" {
				w.log.Debug("aion worker: workflow run not kept; the server will send its whole history",
					"namespace", t.task.GetNamespace(), "run_id", t.task.GetRunId())
			} else if f != nil {
				w.log.Warn("aion worker: workflow task failed", "namespace", t.task.GetNamespace(), "workflow_id", t.task.GetWorkflowId(),
					"run_id", t.task.GetRunId(), "task", t.task.GetTask(), "type", f.GetType(), "message", f.GetMessage())
			}
		}
		w.mu.Lock()
		w.wfInFlight--
		if res != nil {
			t.out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_WorkflowTaskResult{WorkflowTaskResult: res}})
		}
		w.mu.Unlock()
		w.notify()
	}
}

// handleWorkflowTask queues a workflow task for a runner; it takes one of
// the worker's workflow slots until its result is sent. A task that finds
// no slot free (the server sent more than it may), or that arrives while
// the worker stops, is answered at once with a retryable failure.
func (w *Worker) handleWorkflowTask(out *outbox, t *aionv1.WorkflowTask) {
	w.log.Debug("aion worker: workflow task", "namespace", t.GetNamespace(), "workflow_id", t.GetWorkflowId(),
		"run_id", t.GetRunId(), "task", t.GetTask(), "first_seq", t.GetFirstSeq(), "events", len(t.GetEvents()),
		"query_only", t.GetQueryOnly())
	decline := func(typ, msg string) {
		out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_WorkflowTaskResult{WorkflowTaskResult: &aionv1.WorkflowTaskResult{
			Namespace: t.GetNamespace(), RunId: t.GetRunId(), Task: t.GetTask(),
			Failure: &aionv1.Failure{Type: typ, Message: msg, Retryable: true},
		}}})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.wfRun.queue == nil:
		decline("workflow_type_not_registered", fmt.Sprintf("workflow type %q is not registered on this worker (it registers no workflow)", t.GetWorkflowType()))
	case w.stopping:
		decline("worker_stopping", "the worker was stopping when the workflow task arrived")
	case w.wfInFlight >= w.opts.WorkflowSlots:
		decline("worker_busy", fmt.Sprintf("all %d workflow slots of the worker are taken", w.opts.WorkflowSlots))
	default:
		w.wfInFlight++
		w.wfRun.queue <- wfTask{task: t, out: out} // never blocks: the queue holds every slot
	}
}

// handleWorkflowTaskAck applies the server's answer to a workflow task
// result: a refused one drops the run kept in memory.
func (w *Worker) handleWorkflowTaskAck(a *aionv1.WorkflowTaskAck) {
	if a.GetRefused() != "" {
		w.log.Info("aion worker: workflow task result refused by the server", "namespace", a.GetNamespace(),
			"run_id", a.GetRunId(), "task", a.GetTask(), "reason", a.GetRefused())
	}
	w.wf.Ack(a)
}

// checkWorkflows validates the workflow settings at Run and completes the
// Register frame. Callers hold w.mu.
func (w *Worker) checkWorkflowsLocked() error {
	if len(w.register.GetWorkflowTypes()) == 0 {
		return nil
	}
	if w.opts.BuildID == "" {
		return errors.New("worker: Options.BuildID is required when a workflow is registered (RegisterWorkflow " +
			strconv.Quote(w.register.GetWorkflowTypes()[0]) + ")")
	}
	w.register.BuildId = w.opts.BuildID
	w.register.CompatibleBuildIds = append([]string(nil), w.opts.CompatibleBuildIDs...)
	w.register.WorkflowSlots = uint32(w.opts.WorkflowSlots)
	return nil
}
