package workflow_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newExecutor returns an executor with the given workflows registered; it
// is closed when the test ends, so no run's goroutine outlives the test.
func newExecutor(t testing.TB, opts workflow.ExecutorOptions, register func(e *workflow.Executor)) *workflow.Executor {
	t.Helper()
	if opts.BuildID == "" {
		opts.BuildID = "build-1"
	}
	e := workflow.NewExecutor(opts)
	register(e)
	t.Cleanup(e.Close)
	return e
}

// tb is what the helpers need of a test: a *testing.T, *testing.B or
// *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// must registers a workflow or fails the test.
func must(t tb, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// epoch is the time of a history's first event; each later event is one
// second after the one before it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim is the server's side of one run, as the server behaves: it keeps the
// history, delivers workflow tasks (only the new events to a worker that
// kept the run), and records an accepted result as a WorkflowTaskCompleted
// marker followed by one event per command. Events the test adds between
// deliver and accept arrived while the task ran.
type sim struct {
	t      tb
	e      *workflow.Executor
	wfType string
	runID  string
	events []*aionv1.HistoryEvent
	task   uint64
	sticky bool  // the last accepted result said the worker keeps the run
	sent   int64 // the last seq delivered
	// tasks records every task delivered with the result it got, in order.
	tasks []delivered
}

type delivered struct {
	seen   int64 // last seq of the history when delivered
	result *aionv1.WorkflowTaskResult
}

func newSim(t tb, e *workflow.Executor, wfType string, input any) *sim {
	s := &sim{t: t, e: e, wfType: wfType, runID: "run-" + wfType}
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: &aionv1.WorkflowStarted{
		WorkflowType: wfType, TaskQueue: "default", Input: jsonOf(t, input),
	}}})
	return s
}

func jsonOf(t tb, v any) []byte {
	t.Helper()
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// add appends an event, numbering and timing it.
func (s *sim) add(ev *aionv1.HistoryEvent) int64 {
	ev.Seq = int64(len(s.events)) + 1
	ev.Time = timestamppb.New(epoch.Add(time.Duration(len(s.events)) * time.Second))
	s.events = append(s.events, ev)
	return ev.Seq
}

func (s *sim) lastSeq() int64 { return int64(len(s.events)) }

// newTask builds the task the server would send now.
func (s *sim) newTask(full bool, queries ...*aionv1.WorkflowQuery) *aionv1.WorkflowTask {
	s.task++
	first := int64(1)
	if s.sticky && !full {
		first = s.sent + 1
	}
	return &aionv1.WorkflowTask{
		Namespace: "ns", WorkflowId: "wf-" + s.wfType, RunId: s.runID, WorkflowType: s.wfType, TaskQueue: "default",
		Task: s.task, FirstSeq: first, Events: cloneEvents(s.events[first-1:]), Queries: queries,
	}
}

func cloneEvents(evs []*aionv1.HistoryEvent) []*aionv1.HistoryEvent {
	out := make([]*aionv1.HistoryEvent, len(evs))
	for i, ev := range evs {
		out[i] = proto.Clone(ev).(*aionv1.HistoryEvent)
	}
	return out
}

// deliver sends a task (the new events only when the worker keeps the
// run, unless full) and returns its result without recording it.
func (s *sim) deliver(full bool, queries ...*aionv1.WorkflowQuery) *aionv1.WorkflowTaskResult {
	s.t.Helper()
	task := s.newTask(full, queries...)
	res := s.e.Run(task)
	if res.GetNamespace() != "ns" || res.GetRunId() != s.runID || res.GetTask() != task.GetTask() {
		s.t.Fatalf("result names %s/%s task %d, want ns/%s task %d", res.GetNamespace(), res.GetRunId(), res.GetTask(),
			s.runID, task.GetTask())
	}
	s.sent = s.lastSeq()
	s.tasks = append(s.tasks, delivered{seen: s.sent, result: res})
	return res
}

// accept records a result as the server does when it accepts it: the
// marker, then one event per command. A failed result is recorded as
// nothing, and the worker is no longer taken to keep the run.
// The marker's seen_seq is the last seq the task carried; a worker that
// keeps the run is next sent everything after that.
func (s *sim) accept(res *aionv1.WorkflowTaskResult) {
	s.t.Helper()
	if res.GetFailure() != nil {
		s.sticky = false
		return
	}
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowTaskCompleted{WorkflowTaskCompleted: &aionv1.WorkflowTaskCompleted{
		SeenSeq: s.sent, BuildId: "build-1", WorkerId: 7,
	}}})
	for _, c := range res.GetCommands() {
		s.add(commandEvent(s, c))
	}
	s.sticky = res.GetSticky()
}

// step delivers a task and accepts its result; it fails the test if the
// task failed.
func (s *sim) step() *aionv1.WorkflowTaskResult {
	s.t.Helper()
	res := s.deliver(false)
	if res.GetFailure() != nil {
		s.t.Fatalf("task %d failed: %v", s.task, res.GetFailure())
	}
	s.accept(res)
	return res
}

func commandEvent(s *sim, c *aionv1.WorkflowCommand) *aionv1.HistoryEvent {
	ev := &aionv1.HistoryEvent{}
	switch x := c.GetCommand().(type) {
	case *aionv1.WorkflowCommand_ScheduleActivity:
		a := x.ScheduleActivity
		ev.Event = &aionv1.HistoryEvent_ActivityScheduled{ActivityScheduled: &aionv1.ActivityScheduled{
			Step: a.GetStep(), ActivityType: a.GetActivityType(), Input: a.GetInput(), Options: a.GetOptions(),
			ActivityId: fmt.Sprintf("%s/%d", s.runID, a.GetStep()),
		}}
	case *aionv1.WorkflowCommand_StartTimer:
		ev.Event = &aionv1.HistoryEvent_TimerStarted{TimerStarted: &aionv1.TimerStarted{
			Step: x.StartTimer.GetStep(), Name: x.StartTimer.GetName(),
			FireTime: timestamppb.New(epoch.Add(x.StartTimer.GetDuration().AsDuration())),
		}}
	case *aionv1.WorkflowCommand_CancelTimer:
		ev.Event = &aionv1.HistoryEvent_TimerCanceled{TimerCanceled: &aionv1.TimerCanceled{Step: x.CancelTimer.GetStep()}}
	case *aionv1.WorkflowCommand_RecordSideEffect:
		ev.Event = &aionv1.HistoryEvent_SideEffectRecorded{SideEffectRecorded: &aionv1.SideEffectRecorded{
			Step: x.RecordSideEffect.GetStep(), Name: x.RecordSideEffect.GetName(), Value: x.RecordSideEffect.GetValue(),
		}}
	case *aionv1.WorkflowCommand_StartChild:
		sc := x.StartChild
		id := sc.GetWorkflowId()
		if id == "" {
			id = fmt.Sprintf("wf-%s/%d", s.wfType, sc.GetStep())
		}
		ev.Event = &aionv1.HistoryEvent_ChildStarted{ChildStarted: &aionv1.ChildStarted{
			Step: sc.GetStep(), WorkflowId: id, WorkflowType: sc.GetWorkflowType(), TaskQueue: sc.GetTaskQueue(),
			Input: sc.GetInput(), RunId: "child-run",
		}}
	case *aionv1.WorkflowCommand_CancelActivity:
		ev.Event = &aionv1.HistoryEvent_ActivityCancelRequested{ActivityCancelRequested: &aionv1.ActivityCancelRequested{
			Step: x.CancelActivity.GetStep()}}
	case *aionv1.WorkflowCommand_Close:
		cl := x.Close
		ev.Event = &aionv1.HistoryEvent_WorkflowClosed{WorkflowClosed: &aionv1.WorkflowClosed{
			Status: cl.GetStatus(), Result: cl.GetResult(), Failure: cl.GetFailure(), ContinueInput: cl.GetContinueInput(),
		}}
	default:
		panic(fmt.Sprintf("unknown command %v", c))
	}
	return ev
}

// The events the world adds to a run.

func (s *sim) completeActivity(step int64, result any) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: &aionv1.ActivityClosed{
		Step: step, Result: jsonOf(s.t, result), Attempts: 1,
	}}})
}

func (s *sim) failActivity(step int64, f *aionv1.Failure) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: &aionv1.ActivityClosed{
		Step: step, Failure: f, Attempts: 3,
	}}})
}

func (s *sim) fireTimer(step int64) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_TimerFired{TimerFired: &aionv1.TimerFired{Step: step}}})
}

func (s *sim) signal(name string, input any) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_SignalReceived{SignalReceived: &aionv1.SignalReceived{
		Name: name, Input: jsonOf(s.t, input),
	}}})
}

func (s *sim) childClosed(step int64, status aionv1.RunStatus, result any, f *aionv1.Failure) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ChildClosed{ChildClosed: &aionv1.ChildClosed{
		Step: step, Status: status, Result: jsonOf(s.t, result), Failure: f,
	}}})
}

func (s *sim) cancel(reason string) int64 {
	return s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_CancelRequested{CancelRequested: &aionv1.CancelRequested{Reason: reason}}})
}

// replay runs the first n events of the history as a full-history task on
// a fresh executor and returns the result.
func (s *sim) replay(e *workflow.Executor, n int64, queries ...*aionv1.WorkflowQuery) *aionv1.WorkflowTaskResult {
	task := &aionv1.WorkflowTask{Namespace: "ns", WorkflowId: "wf-" + s.wfType, RunId: s.runID, WorkflowType: s.wfType,
		TaskQueue: "default", Task: 1000 + uint64(n), FirstSeq: 1, Events: cloneEvents(s.events[:n]), Queries: queries}
	return e.Run(task)
}

// cmds renders commands compactly: "activity 1 reserve {json}", "timer 2 name 1h0m0s",
// "cancel-timer 2", "side-effect 3 name {json}", "child 4 type", "cancel-activity 1",
// "close completed {json}" / "close failed type: message".
func cmds(res *aionv1.WorkflowTaskResult) []string {
	out := []string{}
	for _, c := range res.GetCommands() {
		out = append(out, cmdString(c))
	}
	return out
}

func cmdString(c *aionv1.WorkflowCommand) string {
	switch x := c.GetCommand().(type) {
	case *aionv1.WorkflowCommand_ScheduleActivity:
		return fmt.Sprintf("activity %d %s %s", x.ScheduleActivity.GetStep(), x.ScheduleActivity.GetActivityType(), x.ScheduleActivity.GetInput())
	case *aionv1.WorkflowCommand_StartTimer:
		return strings.TrimSpace(fmt.Sprintf("timer %d %s %s", x.StartTimer.GetStep(), x.StartTimer.GetDuration().AsDuration(), x.StartTimer.GetName()))
	case *aionv1.WorkflowCommand_CancelTimer:
		return fmt.Sprintf("cancel-timer %d", x.CancelTimer.GetStep())
	case *aionv1.WorkflowCommand_RecordSideEffect:
		return fmt.Sprintf("side-effect %d %s", x.RecordSideEffect.GetStep(), x.RecordSideEffect.GetName())
	case *aionv1.WorkflowCommand_StartChild:
		return fmt.Sprintf("child %d %s %s", x.StartChild.GetStep(), x.StartChild.GetWorkflowType(), x.StartChild.GetInput())
	case *aionv1.WorkflowCommand_CancelActivity:
		return fmt.Sprintf("cancel-activity %d", x.CancelActivity.GetStep())
	case *aionv1.WorkflowCommand_Close:
		cl := x.Close
		switch cl.GetStatus() {
		case aionv1.RunStatus_RUN_STATUS_COMPLETED:
			return "close completed " + string(cl.GetResult())
		case aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
			return "close continued_as_new " + string(cl.GetContinueInput())
		default:
			return fmt.Sprintf("close %s %s: %s", strings.ToLower(strings.TrimPrefix(cl.GetStatus().String(), "RUN_STATUS_")),
				cl.GetFailure().GetType(), cl.GetFailure().GetMessage())
		}
	}
	return fmt.Sprintf("unknown %v", c)
}

// wantCmds fails the test unless the result succeeded with exactly want.
func wantCmds(t tb, what string, res *aionv1.WorkflowTaskResult, want ...string) {
	t.Helper()
	if res.GetFailure() != nil {
		t.Fatalf("%s: task failed: %v", what, res.GetFailure())
	}
	if got := cmds(res); !slices.Equal(got, want) {
		t.Fatalf("%s: commands\n  %q\nwant\n  %q", what, got, want)
	}
}

// wantFailure fails the test unless the result failed with typ and a
// message containing each of parts.
func wantFailure(t tb, what string, res *aionv1.WorkflowTaskResult, typ string, parts ...string) {
	t.Helper()
	f := res.GetFailure()
	if f == nil {
		t.Fatalf("%s: task succeeded with %q, want a %s failure", what, cmds(res), typ)
	}
	if f.GetType() != typ || !f.GetRetryable() {
		t.Fatalf("%s: failure %v, want retryable type %s", what, f, typ)
	}
	if strings.HasPrefix(f.GetMessage(), typ+":") {
		t.Fatalf("%s: failure message %q repeats its type (the server shows type and message together)", what, f.GetMessage())
	}
	for _, p := range parts {
		if !strings.Contains(f.GetMessage(), p) {
			t.Fatalf("%s: failure message %q does not contain %q", what, f.GetMessage(), p)
		}
	}
	if len(res.GetCommands()) != 0 || res.GetSticky() {
		t.Fatalf("%s: a failed task sent commands %q, sticky %v", what, cmds(res), res.GetSticky())
	}
}
