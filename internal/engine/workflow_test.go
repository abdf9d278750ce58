package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// wfConn is a workflow worker's connection: workflow tasks are kept in
// order next to the activity frames of fakeConn.
type wfConn struct {
	*fakeConn
	wf chan *aionv1.WorkflowTask
}

func (c *wfConn) SendWorkflowTask(t *aionv1.WorkflowTask) error { c.wf <- t; return nil }

// wfWorker is a registered worker that advances workflows by hand: the
// test reads each task and answers with the commands a workflow would.
type wfWorker struct {
	b    *bench
	reg  *registry.Registration
	w    *registry.Worker
	conn *wfConn
}

// joinWorkflows registers a worker for workflow types at build, with slots
// workflow slots and one activity slot for type "t", as the server does.
func (b *bench) joinWorkflows(build string, slots int, types ...string) *wfWorker {
	b.t.Helper()
	conn := &wfConn{fakeConn: newFakeConn(), wf: make(chan *aionv1.WorkflowTask, 1024)}
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1,
		WorkflowTypes: types, BuildID: build, WorkflowSlots: slots, Delivery: conn})
	if err != nil {
		b.t.Fatalf("register workflow worker: %v", err)
	}
	b.eng.WorkerJoined(r.Worker())
	return &wfWorker{b: b, reg: r, w: r.Worker(), conn: conn}
}

func (fw *wfWorker) leave() {
	fw.reg.Leave(registry.ReasonDisconnect)
	fw.b.eng.WorkerLeft(fw.w)
}

// next waits for the next workflow task sent to the worker.
func (fw *wfWorker) next() *aionv1.WorkflowTask {
	fw.b.t.Helper()
	return recv(fw.b.t, fw.conn.wf, "workflow task")
}

// answer reports a task's commands and waits for the engine's ack.
func (fw *wfWorker) answer(t *aionv1.WorkflowTask, sticky bool, cmds ...*aionv1.WorkflowCommand) (refused string) {
	fw.b.t.Helper()
	return fw.result(&aionv1.WorkflowTaskResult{Namespace: t.GetNamespace(), RunId: t.GetRunId(), Task: t.GetTask(),
		Commands: cmds, Sticky: sticky})
}

func (fw *wfWorker) result(r *aionv1.WorkflowTaskResult) string {
	fw.b.t.Helper()
	acks := make(chan string, 1)
	fw.b.eng.CompleteWorkflowTask(fw.w, r, func(refused string) { acks <- refused })
	return recv(fw.b.t, acks, "workflow task ack")
}

func (fw *wfWorker) mustAnswer(t *aionv1.WorkflowTask, sticky bool, cmds ...*aionv1.WorkflowCommand) {
	fw.b.t.Helper()
	if refused := fw.answer(t, sticky, cmds...); refused != "" {
		fw.b.t.Fatalf("task %d of run %s refused: %s", t.GetTask(), t.GetRunId(), refused)
	}
}

// activity is the worker as an activity runner: the next attempt sent.
func (fw *wfWorker) activity() Task {
	fw.b.t.Helper()
	return recv(fw.b.t, fw.conn.tasks, "activity task")
}

func (fw *wfWorker) completeActivity(t Task, result string) {
	fw.b.t.Helper()
	acks := make(chan string, 1)
	fw.b.eng.Complete(fw.w, t.Namespace, t.ActivityID, t.Attempt, Outcome{Completed: true, Result: []byte(result)},
		func(refused string) { acks <- refused })
	if refused := recv(fw.b.t, acks, "result ack"); refused != "" {
		fw.b.t.Fatalf("activity result refused: %s", refused)
	}
}

func scheduleActivity(step int64, typ, input string) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_ScheduleActivity{ScheduleActivity: &aionv1.ScheduleActivityCommand{
		Step: step, ActivityType: typ, Input: []byte(input)}}}
}

func startTimer(step int64, d time.Duration) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_StartTimer{StartTimer: &aionv1.StartTimerCommand{
		Step: step, Duration: durationpb.New(d)}}}
}

func startChild(step int64, id, typ string) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_StartChild{StartChild: &aionv1.StartChildCommand{
		Step: step, WorkflowId: id, WorkflowType: typ}}}
}

func closeRun(status aionv1.RunStatus, result string) *aionv1.WorkflowCommand {
	c := &aionv1.CloseWorkflowCommand{Status: status}
	switch status {
	case aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
		c.ContinueInput = []byte(result)
	case aionv1.RunStatus_RUN_STATUS_COMPLETED:
		c.Result = []byte(result)
	default:
		c.Failure = &aionv1.Failure{Type: "workflow_error", Message: result}
	}
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_Close{Close: c}}
}

func complete(result string) *aionv1.WorkflowCommand {
	return closeRun(aionv1.RunStatus_RUN_STATUS_COMPLETED, result)
}

// startWF starts workflow id of type typ in namespace ns.
func (b *bench) startWF(id, typ, input string) store.Run {
	b.t.Helper()
	rec, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: id, WorkflowType: typ, Input: []byte(input)})
	if err != nil {
		b.t.Fatalf("start workflow %s: %v", id, err)
	}
	return rec
}

func (b *bench) waitWF(id string) store.Run {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	rec, err := b.eng.WaitWorkflow(ctx, anyone, "ns", id, "")
	if err != nil {
		b.t.Fatalf("wait for workflow %s: %v", id, err)
	}
	return rec
}

func (b *bench) getWF(id string) RunView {
	b.t.Helper()
	v, err := b.eng.GetWorkflow(context.Background(), anyone, "ns", id, "")
	if err != nil {
		b.t.Fatalf("get workflow %s: %v", id, err)
	}
	return v
}

// history reads a run's whole history as event kinds.
func (b *bench) history(id string) []string {
	b.t.Helper()
	evs, _, err := b.eng.WorkflowHistory(context.Background(), anyone, "ns", id, "", 0, 0)
	if err != nil {
		b.t.Fatalf("history of %s: %v", id, err)
	}
	return kinds(evs)
}

// kinds names each event by its kind, with the step where it has one.
func kinds(evs []*aionv1.HistoryEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		k := fmt.Sprintf("%T", ev.GetEvent())
		k = strings.TrimPrefix(k, "*aionv1.HistoryEvent_")
		if n := stepOf(ev); n > 0 {
			k += fmt.Sprintf("#%d", n)
		}
		switch x := ev.GetEvent().(type) {
		case *aionv1.HistoryEvent_ActivityClosed:
			k += fmt.Sprintf("#%d", x.ActivityClosed.GetStep())
		case *aionv1.HistoryEvent_TimerFired:
			k += fmt.Sprintf("#%d", x.TimerFired.GetStep())
		case *aionv1.HistoryEvent_SignalReceived:
			k += ":" + x.SignalReceived.GetName()
		}
		out[i] = k
	}
	return out
}

func wantKinds(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestWorkflowStepsRunInOrderAndTheRunCloses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	run := b.startWF("o-1", "order", `{"item":1}`)

	t1 := fw.next()
	if t1.GetFirstSeq() != 1 || t1.GetRunId() != run.RunID || t1.GetWorkflowType() != "order" {
		t.Fatalf("first task: %+v", t1)
	}
	wantKinds(t, "first task", kinds(t1.GetEvents()), "WorkflowStarted")
	fw.mustAnswer(t1, true, scheduleActivity(1, "t", `"reserve"`))

	a := fw.activity()
	if a.WorkflowID != "o-1" || a.RunID != run.RunID || a.Step != 1 || string(a.Payload) != `"reserve"` {
		t.Fatalf("step activity task: %+v", a)
	}
	fw.completeActivity(a, `"reserved"`)

	t2 := fw.next()
	if t2.GetFirstSeq() != 2 {
		t.Fatalf("a sticky worker got events from %d, want 2 (after what it saw)", t2.GetFirstSeq())
	}
	wantKinds(t, "second task", kinds(t2.GetEvents()), "WorkflowTaskCompleted", "ActivityScheduled#1", "ActivityClosed#1")
	fw.mustAnswer(t2, true, complete(`"done"`))

	got := b.waitWF("o-1")
	if got.Status != store.RunCompleted || string(got.Result) != `"done"` || got.BuildID != "v1" || got.HistoryLength != 6 {
		t.Fatalf("closed run: %+v", got)
	}
	wantKinds(t, "history", b.history("o-1"), "WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled#1",
		"ActivityClosed#1", "WorkflowTaskCompleted", "WorkflowClosed")
	if info, _ := b.reg.Lookup(fw.w.ID()); info.WorkflowSlotsInUse != 0 || info.SlotsInUse != 0 {
		t.Fatalf("slots still taken after the run closed: %+v", info)
	}
}

func TestCompletedStepIsNotRunAgainAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	fw.mustAnswer(fw.next(), true, scheduleActivity(1, "t", `"charge"`))
	fw.completeActivity(fw.activity(), `"charged"`)
	fw.next() // the task that would take step 2; the server dies first

	b.restart()
	fw = b.joinWorkflows("v1", 10, "order")
	task := fw.next()
	if task.GetFirstSeq() != 1 {
		t.Fatalf("after a restart the task starts at event %d, want the whole history", task.GetFirstSeq())
	}
	wantKinds(t, "replayed history", kinds(task.GetEvents()), "WorkflowStarted", "WorkflowTaskCompleted",
		"ActivityScheduled#1", "ActivityClosed#1")
	idle(t, fw.conn.tasks, "activity task for a step that completed before the restart")
	fw.mustAnswer(task, false, scheduleActivity(2, "t", `"ship"`))
	if a := fw.activity(); a.Step != 2 {
		t.Fatalf("next activity is step %d, want 2", a.Step)
	}
}

func TestSignalWithoutWorkerIsDurableAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWF("o-1", "order", `1`)
	seq, err := b.eng.SignalWorkflow(context.Background(), anyone, "ns", "o-1", "", "ship", []byte(`"now"`))
	if err != nil || seq != 2 {
		t.Fatalf("signal: seq %d err %v, want seq 2", seq, err)
	}
	b.restart()
	fw := b.joinWorkflows("v1", 10, "order")
	task := fw.next()
	wantKinds(t, "task after the signal", kinds(task.GetEvents()), "WorkflowStarted", "SignalReceived:ship")
	fw.mustAnswer(task, true, startTimer(1, time.Hour))
	// The signal was seen: no further task until something else happens.
	idle(t, fw.conn.wf, "workflow task after the signal was handled")
	if _, err := b.eng.SignalWorkflow(context.Background(), anyone, "ns", "o-1", "", "", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("signal without a name: %v, want ErrInvalid", err)
	}
}

func TestTimerHoldsNoSlotAndFiresOnTimeAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 1, "order")
	b.startWF("o-1", "order", `1`)
	fw.mustAnswer(fw.next(), true, startTimer(1, 10*time.Minute))
	if info, _ := b.reg.Lookup(fw.w.ID()); info.WorkflowSlotsInUse != 0 {
		t.Fatalf("a sleeping run holds %d workflow slots", info.WorkflowSlotsInUse)
	}
	if p := b.getWF("o-1").Pending; len(p) != 1 || p[0].Kind != aionv1.StepKind_STEP_KIND_TIMER || !p[0].FireAt.Equal(epoch.Add(10*time.Minute)) {
		t.Fatalf("pending steps: %+v", p)
	}
	// The one slot serves another run meanwhile.
	b.startWF("o-2", "order", `2`)
	fw.mustAnswer(fw.next(), true, complete(`2`))

	b.restart()
	fw = b.joinWorkflows("v1", 1, "order")
	b.advance(10*time.Minute - time.Second)
	idle(t, fw.conn.wf, "workflow task before the timer is due")
	b.advance(time.Second)
	task := fw.next()
	wantKinds(t, "task after the timer", kinds(task.GetEvents()), "WorkflowStarted", "WorkflowTaskCompleted",
		"TimerStarted#1", "TimerFired#1")
}

func TestFailedTaskWaitsForFixedCodeAndRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	task := fw.next()
	refused := fw.result(&aionv1.WorkflowTaskResult{Namespace: "ns", RunId: task.GetRunId(), Task: task.GetTask(),
		Failure: &aionv1.Failure{Type: FailureNondeterministic, Message: "step 1: code took activity \"charge\", history has activity \"reserve\""}})
	if refused != "" {
		t.Fatalf("task failure refused: %s", refused)
	}
	if got := b.getWF("o-1").Run.TaskFailure; !strings.Contains(got, "nondeterministic") || !strings.Contains(got, "step 1") {
		t.Fatalf("run task failure = %q, want the nondeterministic error naming the step", got)
	}
	idle(t, fw.conn.wf, "workflow task before the backoff")
	b.advance(maxTaskBackoff)
	again := fw.next()
	if again.GetFirstSeq() != 1 || again.GetTask() <= task.GetTask() {
		t.Fatalf("retried task: first seq %d task %d", again.GetFirstSeq(), again.GetTask())
	}
	fw.mustAnswer(again, true, complete(`"ok"`))
	if got := b.waitWF("o-1"); got.Status != store.RunCompleted || got.TaskFailure != "" {
		t.Fatalf("run after the fixed task: %+v", got)
	}
}

func TestStaleWorkflowTaskResultIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	other := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	var task *aionv1.WorkflowTask
	var holder, idler *wfWorker
	select {
	case task = <-fw.conn.wf:
		holder, idler = fw, other
	case task = <-other.conn.wf:
		holder, idler = other, fw
	case <-time.After(patience):
		t.Fatal("no workflow task")
	}
	if refused := idler.answer(task, false, complete(`1`)); refused == "" {
		t.Fatal("a worker that was not sent the task had its result accepted")
	}
	bad := &aionv1.WorkflowTaskResult{Namespace: "ns", RunId: task.GetRunId(), Task: task.GetTask() + 5}
	if refused := holder.result(bad); refused == "" {
		t.Fatal("a result for another task token was accepted")
	}
	holder.mustAnswer(task, false, complete(`1`))
	if got := b.waitWF("o-1"); got.Status != store.RunCompleted {
		t.Fatalf("run: %+v", got)
	}
}

func TestBadCommandsFailTheTaskNamingTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cmds  []*aionv1.WorkflowCommand
		field string
	}{
		{"step out of order", []*aionv1.WorkflowCommand{scheduleActivity(2, "t", `1`)}, "commands[0]: step 2, want 1"},
		{"bad activity type", []*aionv1.WorkflowCommand{scheduleActivity(1, "bad type", `1`)}, "commands[0].activity_type"},
		{"timer under a millisecond", []*aionv1.WorkflowCommand{startTimer(1, time.Microsecond)}, "commands[0].duration"},
		{"close not last", []*aionv1.WorkflowCommand{complete(`1`), startTimer(1, time.Second)}, "close must be the last command"},
		{"terminate from code", []*aionv1.WorkflowCommand{closeRun(aionv1.RunStatus_RUN_STATUS_TERMINATED, "x")}, "commands[0].status"},
		{"empty command", []*aionv1.WorkflowCommand{{}}, "commands[0]: no command set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			fw := b.joinWorkflows("v1", 10, "order")
			b.startWF("o-1", "order", `1`)
			task := fw.next()
			fw.mustAnswer(task, true, tc.cmds...)
			v := b.getWF("o-1")
			if !strings.Contains(v.Run.TaskFailure, FailureBadCommand) || !strings.Contains(v.Run.TaskFailure, tc.field) {
				t.Fatalf("task failure %q does not name %q", v.Run.TaskFailure, tc.field)
			}
			wantKinds(t, "history after a refused task", b.history("o-1"), "WorkflowStarted")
			idle(t, fw.conn.tasks, "activity task from a refused command")
		})
	}
}

func TestNewRunsStartOnTheNewestBuildAndOpenRunsStayOnTheirs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v1 := b.joinWorkflows("v1", 10, "order")
	b.startWF("old", "order", `1`)
	v1.mustAnswer(v1.next(), false, scheduleActivity(1, "t", `1`))
	v2 := b.joinWorkflows("v2", 10, "order")

	b.startWF("new", "order", `2`)
	nt := v2.next()
	if nt.GetWorkflowId() != "new" {
		t.Fatalf("v2 got %s first, want the new run", nt.GetWorkflowId())
	}
	v2.mustAnswer(nt, false, complete(`2`))
	if got := b.waitWF("new"); got.BuildID != "v2" {
		t.Fatalf("new run's build = %q, want v2", got.BuildID)
	}
	// The old run's activity may run on either worker; its next workflow
	// task goes to v1 only.
	var a Task
	var runner *wfWorker
	select {
	case a = <-v1.conn.tasks:
		runner = v1
	case a = <-v2.conn.tasks:
		runner = v2
	case <-time.After(patience):
		t.Fatal("no activity task")
	}
	runner.completeActivity(a, `1`)
	ot := v1.next()
	if ot.GetWorkflowId() != "old" {
		t.Fatalf("v1 got %s, want the old run", ot.GetWorkflowId())
	}
	idle(t, v2.conn.wf, "workflow task of a v1 run on a v2 worker")
	v1.mustAnswer(ot, false, complete(`1`))
	if got := b.waitWF("old"); got.BuildID != "v1" || got.Status != store.RunCompleted {
		t.Fatalf("old run: %+v", got)
	}
}

func TestStartIsIdempotentOnWorkflowID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first := b.startWF("o-1", "order", `1`)
	again, existing, err := b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order", Input: []byte(`1`)})
	if err != nil || !existing || again.RunID != first.RunID {
		t.Fatalf("same start again: run %s existing %v err %v, want run %s existing", again.RunID, existing, err, first.RunID)
	}
	_, _, err = b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order", Input: []byte(`2`)})
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("different start with the same id: %v, want ErrAlreadyExists", err)
	}
	if _, err := b.eng.TerminateWorkflow(ctx, anyone, "ns", "o-1", "", "test"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	_, _, err = b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order", IDReuse: ReuseRejectDuplicate})
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("start after close under reject-duplicate: %v, want ErrAlreadyExists", err)
	}
	next, existing, err := b.eng.StartWorkflow(ctx, anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1", WorkflowType: "order", IDReuse: ReuseAllowDuplicateFailedOnly})
	if err != nil || existing || next.RunID == first.RunID {
		t.Fatalf("start after a terminated run under failed-only: %+v %v %v", next, existing, err)
	}
}

func TestCancelStopsStepsAndChildrenAndLetsTheCodeClean(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order", "child")
	b.startWF("p", "order", `1`)
	fw.mustAnswer(fw.next(), false, scheduleActivity(1, "t", `1`), startChild(2, "p-kid", "child"))
	a := fw.activity()
	kid := fw.next()
	if kid.GetWorkflowId() != "p-kid" {
		t.Fatalf("child task for %s", kid.GetWorkflowId())
	}
	fw.mustAnswer(kid, false, startTimer(1, time.Hour))

	if _, err := b.eng.CancelWorkflow(context.Background(), anyone, "ns", "p", "", "user asked"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if c := recv(t, fw.conn.cancels, "cancel of the running step"); c.id != a.ActivityID {
		t.Fatalf("cancel sent for %s, want %s", c.id, a.ActivityID)
	}
	// The worker stops the attempt and reports it, which frees its slot.
	acks := make(chan string, 1)
	b.eng.Complete(fw.w, "ns", a.ActivityID, a.Attempt, Outcome{Canceled: true}, func(r string) { acks <- r })
	recv(t, acks, "ack of the canceled attempt")
	// The child sees the cancel and acknowledges; the parent then hears
	// the child closed, and cleans up and closes canceled.
	var parentTask *aionv1.WorkflowTask
	for parentTask == nil {
		task := fw.next()
		switch task.GetWorkflowId() {
		case "p-kid":
			wantKinds(t, "child task", kinds(task.GetEvents())[len(task.GetEvents())-1:], "CancelRequested")
			fw.mustAnswer(task, false, closeRun(aionv1.RunStatus_RUN_STATUS_CANCELED, "canceled"))
		case "p":
			got := kinds(task.GetEvents())
			if slices.Contains(got, "CancelRequested") && slices.Contains(got, "ChildClosed") && slices.Contains(got, "ActivityClosed#1") {
				parentTask = task
			} else {
				fw.mustAnswer(task, false)
			}
		}
	}
	fw.mustAnswer(parentTask, false, scheduleActivity(3, "t", `"cleanup"`))
	fw.completeActivity(fw.activity(), `1`)
	fw.mustAnswer(fw.next(), false, closeRun(aionv1.RunStatus_RUN_STATUS_CANCELED, "canceled"))
	if got := b.waitWF("p"); got.Status != store.RunCanceled {
		t.Fatalf("parent: %+v", got)
	}
	if got := b.waitWF("p-kid"); got.Status != store.RunCanceled {
		t.Fatalf("child: %+v", got)
	}
}

func TestTerminateClosesWithoutRunningCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	fw.mustAnswer(fw.next(), false, scheduleActivity(1, "t", `1`))
	a := fw.activity()
	rec, err := b.eng.TerminateWorkflow(context.Background(), anyone, "ns", "o-1", "", "stuck")
	if err != nil || rec.Status != store.RunTerminated || rec.Failure == nil || !strings.Contains(rec.Failure.Message, "stuck") {
		t.Fatalf("terminate: %+v %v", rec, err)
	}
	if c := recv(t, fw.conn.cancels, "cancel of the running step"); c.id != a.ActivityID {
		t.Fatalf("cancel for %s", c.id)
	}
	idle(t, fw.conn.wf, "workflow task after terminate")
	if _, err := b.eng.SignalWorkflow(context.Background(), anyone, "ns", "o-1", "", "late", nil); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("signal to a terminated run: %v, want ErrFailedPrecondition", err)
	}
}

func TestUnansweredTaskGoesToAnotherWorkerWithTheWholeHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	first.mustAnswer(first.next(), true, startTimer(1, time.Minute))
	b.advance(time.Minute)
	stuck := first.next()
	if stuck.GetFirstSeq() == 1 {
		t.Fatal("the sticky worker was sent the whole history")
	}
	second := b.joinWorkflows("v1", 10, "order")
	first.leave()
	task := second.next()
	if task.GetFirstSeq() != 1 || task.GetTask() <= stuck.GetTask() {
		t.Fatalf("after the worker left: first seq %d task %d", task.GetFirstSeq(), task.GetTask())
	}
	// A task nobody answers times out and is given again.
	b.advance(workflowTaskTimeout)
	b.advance(maxTaskBackoff)
	again := second.next()
	if again.GetTask() <= task.GetTask() || again.GetFirstSeq() != 1 {
		t.Fatalf("after the timeout: first seq %d task %d", again.GetFirstSeq(), again.GetTask())
	}
	if got := b.getWF("o-1").Run.TaskFailure; !strings.Contains(got, FailureWorkflowTaskTimeout) {
		t.Fatalf("task failure %q does not say it timed out", got)
	}
	second.mustAnswer(again, false, complete(`1`))
	b.waitWF("o-1")
}

func TestQueryIsAnsweredWithoutWritingHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	b.startWF("o-1", "order", `1`)
	fw.mustAnswer(fw.next(), true, startTimer(1, time.Hour))
	before := b.history("o-1")
	got := make(chan []byte, 1)
	go func() {
		res, err := b.eng.QueryWorkflow(context.Background(), anyone, "ns", "o-1", "", "status", []byte(`{}`))
		if err != nil {
			t.Errorf("query: %v", err)
		}
		got <- res
	}()
	task := fw.next()
	if !task.GetQueryOnly() || len(task.GetQueries()) != 1 || task.GetQueries()[0].GetName() != "status" {
		t.Fatalf("query task: %+v", task)
	}
	if r := fw.result(&aionv1.WorkflowTaskResult{Namespace: "ns", RunId: task.GetRunId(), Task: task.GetTask(), Sticky: true,
		QueryAnswers: []*aionv1.QueryAnswer{{QueryId: task.GetQueries()[0].GetQueryId(), Result: []byte(`"waiting"`)}}}); r != "" {
		t.Fatalf("query answer refused: %s", r)
	}
	if res := recv(t, got, "query result"); string(res) != `"waiting"` {
		t.Fatalf("query result %s", res)
	}
	wantKinds(t, "history after a query", b.history("o-1"), before...)
}

func TestChildAndContinueAsNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "loop", "kid")
	first := b.startWF("agent", "loop", `0`)
	fw.mustAnswer(fw.next(), false, startChild(1, "", "kid"))
	kid := fw.next()
	if kid.GetWorkflowId() != "agent/1" {
		t.Fatalf("child id %q, want agent/1", kid.GetWorkflowId())
	}
	fw.mustAnswer(kid, false, complete(`"kid done"`))
	pt := fw.next()
	last := pt.GetEvents()[len(pt.GetEvents())-1].GetChildClosed()
	if last == nil || string(last.GetResult()) != `"kid done"` || last.GetStatus() != aionv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("parent's last event: %v", pt.GetEvents()[len(pt.GetEvents())-1])
	}
	fw.mustAnswer(pt, false, closeRun(aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW, `1`))
	next := fw.next()
	if next.GetRunId() == first.RunID || next.GetWorkflowId() != "agent" {
		t.Fatalf("continued run: %s %s", next.GetWorkflowId(), next.GetRunId())
	}
	if st := next.GetEvents()[0].GetWorkflowStarted(); st.GetContinuedFromRunId() != first.RunID || string(st.GetInput()) != `1` {
		t.Fatalf("continued run's start: %v", st)
	}
	fw.mustAnswer(next, false, complete(`"fin"`))
	got := b.waitWF("agent")
	if got.RunID != next.GetRunId() || string(got.Result) != `"fin"` {
		t.Fatalf("wait followed to %+v", got)
	}
	old, err := b.eng.GetWorkflow(context.Background(), anyone, "ns", "agent", first.RunID)
	if err != nil || old.Run.Status != store.RunContinuedAsNew || old.Run.NextRunID != next.GetRunId() {
		t.Fatalf("first run: %+v %v", old.Run, err)
	}
}

// In a cluster a run started on a server without workflow workers is held
// by the server whose workers serve it; signals and cancels sent through
// the first reach it through the run's inbox, and only the holder appends.
func TestWorkflowRunsAcrossTwoServers(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Fresh(t, 0)
	front, _ := setupCluster(t, dsn, "front")
	back, _ := setupCluster(t, dsn, "back")
	fw := back.joinWorkflows("v1", 10, "order")
	ctx := context.Background()
	// The poll of the back server claims runs and reads inboxes; no
	// notices flow between these engines, so the test polls.
	poll := func() { back.clk.Advance(time.Second) }

	run := front.startWF("o-1", "order", `1`)
	poll()
	t1 := fw.next()
	if t1.GetRunId() != run.RunID || t1.GetFirstSeq() != 1 {
		t.Fatalf("first task: %+v", t1)
	}
	fw.mustAnswer(t1, true, scheduleActivity(1, "t", `"reserve"`))
	a := fw.activity()
	if a.RunID != run.RunID || a.Step != 1 {
		t.Fatalf("step activity: %+v", a)
	}
	fw.completeActivity(a, `"reserved"`)
	poll()
	t2 := fw.next()
	if got := kinds(t2.GetEvents()); got[len(got)-1] != "ActivityClosed#1" {
		t.Fatalf("second task ends with %v, want the step's close from the inbox", got)
	}
	fw.mustAnswer(t2, true, startTimer(2, time.Hour))

	// A signal through the front server is durable at once and reaches the
	// code through the holder.
	if _, err := front.eng.SignalWorkflow(ctx, anyone, "ns", "o-1", "", "ship", []byte(`"1Z"`)); err != nil {
		t.Fatalf("signal through the front server: %v", err)
	}
	poll()
	t3 := fw.next()
	if got := kinds(t3.GetEvents()); got[len(got)-1] != "SignalReceived:ship" {
		t.Fatalf("task after the signal ends with %v", got)
	}
	fw.mustAnswer(t3, true, scheduleActivity(3, "t", `"ship"`))
	fw.completeActivity(fw.activity(), `"shipped"`)
	poll()
	fw.mustAnswer(fw.next(), true, complete(`"done"`))
	if got := back.waitWF("o-1"); got.Status != store.RunCompleted || string(got.Result) != `"done"` {
		t.Fatalf("run: %+v", got)
	}
	v, err := front.eng.GetWorkflow(ctx, anyone, "ns", "o-1", "")
	if err != nil || v.Run.Status != store.RunCompleted || v.Run.BuildID != "v1" {
		t.Fatalf("run seen from the front server: %+v %v", v.Run, err)
	}
	if _, err := front.eng.SignalWorkflow(ctx, anyone, "ns", "o-1", "", "late", nil); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("signal to the closed run: %v, want ErrFailedPrecondition", err)
	}

	// A cancel through the front server cancels the running step and
	// reaches the code.
	front.startWF("o-2", "order", `2`)
	poll()
	fw.mustAnswer(fw.next(), true, scheduleActivity(1, "t", `"block"`))
	blocked := fw.activity()
	if _, err := front.eng.CancelWorkflow(ctx, anyone, "ns", "o-2", "", "stop"); err != nil {
		t.Fatalf("cancel through the front server: %v", err)
	}
	poll()
	if c := recv(t, fw.conn.cancels, "cancel of the step"); c.id != blocked.ActivityID {
		t.Fatalf("cancel for %s, want %s", c.id, blocked.ActivityID)
	}
	acks := make(chan string, 1)
	back.eng.Complete(fw.w, "ns", blocked.ActivityID, blocked.Attempt, Outcome{Canceled: true}, func(r string) { acks <- r })
	recv(t, acks, "ack of the canceled attempt")
	var seen []string // a sticky worker gets each event once
	for {
		poll()
		task := fw.next()
		seen = append(seen, kinds(task.GetEvents())...)
		if slices.Contains(seen, "CancelRequested") && slices.Contains(seen, "ActivityClosed#1") {
			fw.mustAnswer(task, true, closeRun(aionv1.RunStatus_RUN_STATUS_CANCELED, "canceled"))
			break
		}
		fw.mustAnswer(task, true)
	}
	if got := back.waitWF("o-2"); got.Status != store.RunCanceled {
		t.Fatalf("canceled run: %+v", got)
	}
}

// A run bound to build v1 waits while only v2 workers are connected, and is
// advanced by a worker whose code is declared compatible with v1.
func TestCompatibleBuildAdvancesAnOlderBuildsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v1 := b.joinWorkflows("v1", 10, "order")
	b.startWF("old", "order", `1`)
	v1.mustAnswer(v1.next(), false, startTimer(1, time.Minute))
	v1.leave()

	v2 := b.joinWorkflows("v2", 10, "order")
	b.advance(time.Minute)
	idle(t, v2.conn.wf, "a v1 run's task on a v2 worker")

	conn := &wfConn{fakeConn: newFakeConn(), wf: make(chan *aionv1.WorkflowTask, 16)}
	r, err := b.reg.Register(registry.Spec{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1,
		WorkflowTypes: []string{"order"}, BuildID: "v2.1", CompatibleBuilds: []string{"v1"}, WorkflowSlots: 4, Delivery: conn})
	if err != nil {
		t.Fatal(err)
	}
	b.eng.WorkerJoined(r.Worker())
	compat := &wfWorker{b: b, reg: r, w: r.Worker(), conn: conn}
	task := compat.next()
	if task.GetWorkflowId() != "old" || task.GetFirstSeq() != 1 {
		t.Fatalf("compatible worker got %s from %d, want the old run's whole history", task.GetWorkflowId(), task.GetFirstSeq())
	}
	compat.mustAnswer(task, false, complete(`1`))
	if got := b.waitWF("old"); got.BuildID != "v1" || got.Status != store.RunCompleted {
		t.Fatalf("old run: %+v (it stays bound to v1)", got)
	}
	idle(t, v2.conn.wf, "a v1 run's task on a v2 worker")
}

// A server that claims a run whose step activity it already runs on a
// local worker keeps that attempt: the worker's result is accepted and the
// run hears of it.
func TestClaimingARunKeepsItsStepRunningHere(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Fresh(t, 0)
	back, st := setupCluster(t, dsn, "back")
	fw := back.joinWorkflows("v1", 10, "order")
	poll := func() { back.clk.Advance(time.Second) }
	run := back.startWF("o-1", "order", `1`)
	fw.mustAnswer(fw.next(), false, scheduleActivity(1, "t", `"work"`))
	a := fw.activity()

	// The run leaves this server's memory and the store lets it go, as
	// after a release; the step's attempt keeps running here.
	k := runKey{"ns", run.RunID}
	back.eng.mu.Lock()
	r := back.eng.runs[k]
	back.eng.dropRunLocked(r)
	back.eng.mu.Unlock()
	self := back.eng.cl.Self
	if ok, err := st.ReleaseRun(context.Background(), self, "ns", run.RunID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	poll()
	pollUntil(t, "the run claimed again", func() bool {
		back.eng.mu.Lock()
		defer back.eng.mu.Unlock()
		return back.eng.runs[k] != nil && back.eng.runs[k].creating == nil
	})
	fw.completeActivity(a, `"done"`) // fails the test if the attempt was lost
	poll()
	var seen []string
	for !slices.Contains(seen, "ActivityClosed#1") {
		task := fw.next()
		seen = append(seen, kinds(task.GetEvents())...)
		if !slices.Contains(seen, "ActivityClosed#1") {
			fw.mustAnswer(task, false)
			poll()
			continue
		}
		fw.mustAnswer(task, false, complete(`"ok"`))
	}
	if got := back.waitWF("o-1"); got.Status != store.RunCompleted {
		t.Fatalf("run: %+v", got)
	}
}

// pollUntil polls cond until it holds, failing the test after patience.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A run whose code closes it (complete, fail, continue as new) while
// signals were accepted during that very task does not close: the close is
// not applied, the task comes again with every signal in its history, and
// only a close made after seeing them is recorded. So a signal acknowledged
// to its sender always reaches the code; the next run of a continue as new
// gets none of them again.
func TestCloseMadeWithoutSeeingSignalsAcceptedMeanwhileIsNotApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status aionv1.RunStatus
		want   store.RunStatus
	}{
		{"complete", aionv1.RunStatus_RUN_STATUS_COMPLETED, store.RunCompleted},
		{"fail", aionv1.RunStatus_RUN_STATUS_FAILED, store.RunFailed},
		{"continue as new", aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW, store.RunContinuedAsNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			fw := b.joinWorkflows("v1", 10, "order")
			first := b.startWF("o-1", "order", `1`)
			task := fw.next()
			for _, name := range []string{"a", "b"} {
				if _, err := b.eng.SignalWorkflow(context.Background(), anyone, "ns", "o-1", "", name, nil); err != nil {
					t.Fatalf("signal %s: %v", name, err)
				}
			}
			fw.mustAnswer(task, true, closeRun(tc.status, `"done"`))
			if got := b.getWF("o-1").Run; got.RunID != first.RunID || got.Status != store.RunRunning {
				t.Fatalf("after a close that missed two signals the run is %s (%s), want %s still running", got.RunID, got.Status, first.RunID)
			}
			again := fw.next()
			if again.GetRunId() != first.RunID {
				t.Fatalf("the task came again for run %s, want %s", again.GetRunId(), first.RunID)
			}
			wantKinds(t, "the task again, whole history", kinds(again.GetEvents()),
				"WorkflowStarted", "SignalReceived:a", "SignalReceived:b")
			fw.mustAnswer(again, true, closeRun(tc.status, `"done"`))
			old, err := b.eng.GetWorkflow(context.Background(), anyone, "ns", "o-1", first.RunID)
			if err != nil || old.Run.Status != tc.want {
				t.Fatalf("after a close that saw the signals: %+v, %v; want %s", old.Run, err, tc.want)
			}
			if tc.status != aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW {
				return
			}
			next := fw.next()
			wantKinds(t, "the next run's first task", kinds(next.GetEvents()), "WorkflowStarted")
		})
	}
}

// heldRunInserts holds the commit of every write batch that inserts a run
// until release is closed; reached is closed when the first one arrives.
type heldRunInserts struct {
	*sqlite.Store
	reached, release chan struct{}
	once             sync.Once
}

func (h *heldRunInserts) Apply(ctx context.Context, ws []store.Write) ([]bool, error) {
	for _, w := range ws {
		if _, ok := w.(store.InsertRun); ok {
			h.once.Do(func() { close(h.reached) })
			<-h.release
			break
		}
	}
	return h.Store.Apply(ctx, ws)
}

// A run being created (its insert not yet durable: a start, or the next
// run of a continue as new) is waited for by Wait, not reported missing
// because the store does not have it yet; once it is durable the wait goes
// on to the run's close.
func TestARunBeingCreatedIsWaitedForNotReportedMissing(t *testing.T) {
	t.Parallel()
	held := &heldRunInserts{reached: make(chan struct{}), release: make(chan struct{})}
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db"),
		wrap: func(st *sqlite.Store) store.Store { held.Store = st; return held }}
	b.start()
	t.Cleanup(b.stop)
	released := false
	t.Cleanup(func() {
		if !released {
			close(held.release)
		}
	})
	fw := b.joinWorkflows("v1", 10, "order")

	started := make(chan error, 1)
	go func() {
		_, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "o-1",
			WorkflowType: "order", Input: []byte(`1`)})
		started <- err
	}()
	recv(t, held.reached, "the run's insert at the store")
	// While the insert is held, a wait waits: here until its deadline,
	// which only bounds the test; it must not answer NotFound.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := b.eng.WaitWorkflow(short, anyone, "ns", "o-1", "")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait while the run was being created: %v, want it waiting (until its deadline)", err)
	}
	ctx, cancelWait := context.WithTimeout(context.Background(), patience)
	defer cancelWait()
	type result struct {
		rec store.Run
		err error
	}
	waited := make(chan result, 1)
	go func() {
		rec, err := b.eng.WaitWorkflow(ctx, anyone, "ns", "o-1", "")
		waited <- result{rec, err}
	}()
	close(held.release)
	released = true
	if err := recv(t, started, "start"); err != nil {
		t.Fatalf("start: %v", err)
	}
	fw.mustAnswer(fw.next(), true, complete(`"done"`))
	got := recv(t, waited, "wait")
	if got.err != nil || got.rec.Status != store.RunCompleted {
		t.Fatalf("a wait begun around the run's creation: %+v, %v; want it completed", got.rec, got.err)
	}
}
