package worker

// Workflow tasks against the scripted server of misbehaving_server_test.go:
// the server side of workflows is not in this package's real server yet, so
// these tests script its frames, as it sends them (docs: the WorkflowTask,
// WorkflowTaskResult and WorkflowTaskAck messages of worker.proto).

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/workflow"
)

// greetFlow runs the "greet" activity on its input and returns its result.
func greetFlow(w *Worker) {
	RegisterWorkflow(w, "greeting", func(ctx workflow.Context, name string) (string, error) {
		return workflow.ExecuteActivity[string](ctx, "greet", name, workflow.ActivityOptions{StartToCloseTimeout: time.Minute}).Get(ctx)
	})
}

// ev numbers an event of a synthetic history.
func ev(seq int64, e *aionv1.HistoryEvent) *aionv1.HistoryEvent {
	e.Seq = seq
	e.Time = timestamppb.New(time.Date(2026, 1, 1, 0, 0, int(seq), 0, time.UTC))
	return e
}

func started(input string) *aionv1.HistoryEvent {
	return ev(1, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: &aionv1.WorkflowStarted{
		WorkflowType: "greeting", TaskQueue: "default", Input: []byte(input)}}})
}

func (c *fakeConn) workflowTask(t *aionv1.WorkflowTask) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_WorkflowTask{WorkflowTask: t}})
}

func (c *fakeConn) workflowResult() *aionv1.WorkflowTaskResult {
	c.t.Helper()
	m := c.next()
	if m.GetWorkflowTaskResult() == nil {
		c.t.Fatalf("got frame %v, want WorkflowTaskResult", m)
	}
	return m.GetWorkflowTaskResult()
}

func (c *fakeConn) workflowAck(r *aionv1.WorkflowTaskResult, refused string) {
	c.send(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_WorkflowTaskAck{WorkflowTaskAck: &aionv1.WorkflowTaskAck{
		Namespace: r.GetNamespace(), RunId: r.GetRunId(), Task: r.GetTask(), Refused: refused}}})
}

func greetingTask(runID string, task uint64, firstSeq int64, events ...*aionv1.HistoryEvent) *aionv1.WorkflowTask {
	return &aionv1.WorkflowTask{Namespace: "ns", WorkflowId: "wf-" + runID, RunId: runID, WorkflowType: "greeting",
		TaskQueue: "default", Task: task, FirstSeq: firstSeq, Events: events}
}

func TestRegisterCarriesWorkflowTypesBuildIDAndWorkflowSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		opts          Options
		register      func(*Worker)
		activities    string
		workflows     string
		workflowSlots uint32
	}{
		{"activities and workflows", Options{BuildID: "b-1", WorkflowSlots: 7}, func(w *Worker) { echo(w); greetFlow(w) },
			"echo", "greeting", 7},
		{"workflows only, default slots", Options{BuildID: "b-1"}, greetFlow, "", "greeting", DefaultWorkflowSlots},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFakeSetup(t, tc.opts, tc.register)
			c := s.accepted(t)
			reg := c.reg
			if got := strings.Join(reg.GetActivityTypes(), ","); got != tc.activities {
				t.Errorf("activity_types %q, want %q", got, tc.activities)
			}
			if got := strings.Join(reg.GetWorkflowTypes(), ","); got != tc.workflows {
				t.Errorf("workflow_types %q, want %q", got, tc.workflows)
			}
			if reg.GetBuildId() != "b-1" || reg.GetWorkflowSlots() != tc.workflowSlots {
				t.Errorf("build_id %q, workflow_slots %d; want b-1, %d", reg.GetBuildId(), reg.GetWorkflowSlots(), tc.workflowSlots)
			}
			s.stop()
			c.closeCleanly()
			if err := s.wait(t); err != nil {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

func TestAnActivityWorkerRegistersNoWorkflowFields(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{BuildID: "b-1"}, echo)
	c := s.accepted(t)
	if reg := c.reg; len(reg.GetWorkflowTypes()) != 0 || reg.GetBuildId() != "" || reg.GetWorkflowSlots() != 0 {
		t.Fatalf("Register = %v, want no workflow fields", reg)
	}
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestWorkflowOptionsAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Namespaces: []string{"a"}, WorkflowSlots: -1}, "worker: Options.WorkflowSlots is -1, want at least 0"},
		{Options{Namespaces: []string{"a"}, BuildID: "v 1"}, `worker: Options.BuildID: "v 1" has ' ' at byte 1`},
	} {
		if _, err := New("x:1", tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	// A registered workflow needs a build id: Run refuses before dialing.
	w, err := New("x:1", Options{Namespaces: []string{"a"}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	greetFlow(w)
	err = w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `worker: Options.BuildID is required when a workflow is registered (RegisterWorkflow "greeting")`) {
		t.Fatalf("Run = %v, want the missing BuildID named", err)
	}
	// And a worker with nothing registered at all is refused too.
	w, _ = New("x:1", Options{Namespaces: []string{"a"}, Logger: testLogger()})
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no activity or workflow registered") {
		t.Fatalf("Run with nothing registered = %v", err)
	}
}

func TestRegisterWorkflowPanicsOnMisuse(t *testing.T) {
	t.Parallel()
	w, _ := New("x:1", Options{Namespaces: []string{"a"}})
	greetFlow(w)
	fn := func(workflow.Context, int) (int, error) { return 0, nil }
	for name, f := range map[string]func(){
		"duplicate": func() { RegisterWorkflow(w, "greeting", fn) },
		"empty":     func() { RegisterWorkflow(w, "", fn) },
		"nil":       func() { RegisterWorkflow[int, int](w, "n", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	if got := strings.Join(w.register.GetWorkflowTypes(), ","); got != "greeting" {
		t.Fatalf("workflow_types after misuse: %q", got)
	}
}

func TestAWorkflowTaskIsAnsweredWithItsCommands(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{BuildID: "b-1"}, greetFlow)
	c := s.accepted(t)

	// A new run: the whole history, which is its first event.
	c.workflowTask(greetingTask("r1", 1, 1, started(`"Ada"`)))
	res := c.workflowResult()
	if res.GetNamespace() != "ns" || res.GetRunId() != "r1" || res.GetTask() != 1 || res.GetFailure() != nil || !res.GetSticky() {
		t.Fatalf("result = %v", res)
	}
	if len(res.GetCommands()) != 1 {
		t.Fatalf("commands = %v, want one", res.GetCommands())
	}
	sa := res.GetCommands()[0].GetScheduleActivity()
	if sa.GetStep() != 1 || sa.GetActivityType() != "greet" || string(sa.GetInput()) != `"Ada"` ||
		sa.GetOptions().GetStartToCloseTimeout().AsDuration() != time.Minute {
		t.Fatalf("command = %v, want step 1 greet \"Ada\" with a 1m start-to-close timeout", sa)
	}
	c.workflowAck(res, "")

	// The worker keeps the run: the next task carries only the new events.
	c.workflowTask(&aionv1.WorkflowTask{Namespace: "ns", WorkflowId: "wf-r1", RunId: "r1", WorkflowType: "greeting",
		Task: 2, FirstSeq: 2, Events: []*aionv1.HistoryEvent{
			ev(2, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowTaskCompleted{WorkflowTaskCompleted: &aionv1.WorkflowTaskCompleted{SeenSeq: 1}}}),
			ev(3, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityScheduled{ActivityScheduled: &aionv1.ActivityScheduled{
				Step: 1, ActivityType: "greet", Input: []byte(`"Ada"`), ActivityId: "a1"}}}),
			ev(4, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: &aionv1.ActivityClosed{
				Step: 1, Result: []byte(`"hello Ada"`)}}}),
		}})
	res = c.workflowResult()
	if res.GetTask() != 2 || res.GetFailure() != nil || len(res.GetCommands()) != 1 {
		t.Fatalf("result = %v", res)
	}
	if cl := res.GetCommands()[0].GetClose(); cl.GetStatus() != aionv1.RunStatus_RUN_STATUS_COMPLETED || string(cl.GetResult()) != `"hello Ada"` {
		t.Fatalf("close = %v, want completed \"hello Ada\"", cl)
	}
	c.workflowAck(res, "")
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestARefusedResultDropsTheKeptRun(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{BuildID: "b-1"}, greetFlow)
	c := s.accepted(t)
	c.workflowTask(greetingTask("r1", 1, 1, started(`"Ada"`)))
	res := c.workflowResult()
	if !res.GetSticky() || s.w.wf.CachedRuns() != 1 {
		t.Fatalf("result %v, %d runs kept; want the run kept", res, s.w.wf.CachedRuns())
	}
	c.workflowAck(res, "the task timed out")
	servertest.Eventually(t, "the run dropped", func() bool { return s.w.wf.CachedRuns() == 0 })
	c.workflowTask(greetingTask("r1", 2, 2,
		ev(2, &aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_SignalReceived{SignalReceived: &aionv1.SignalReceived{Name: "x"}}})))
	if f := c.workflowResult().GetFailure(); f.GetType() != "sticky_cache_miss" || !f.GetRetryable() {
		t.Fatalf("failure = %v, want a retryable sticky_cache_miss", f)
	}
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestWorkflowTasksDoNotTakeActivitySlots(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var running atomic.Bool
	s := newFakeSetup(t, Options{Slots: 1, BuildID: "b-1"}, func(w *Worker) {
		greetFlow(w)
		RegisterActivity(w, "hold", func(ctx context.Context, _ struct{}) (struct{}, error) {
			running.Store(true)
			<-release
			return struct{}{}, nil
		})
	})
	c := s.accepted(t)
	c.task(fakeTask("a1", 1, "hold"))
	servertest.Eventually(t, "the activity to hold the only slot", running.Load)
	c.workflowTask(greetingTask("r1", 1, 1, started(`"Ada"`)))
	if res := c.workflowResult(); res.GetFailure() != nil || len(res.GetCommands()) != 1 {
		t.Fatalf("workflow task answered %v while the activity slot was busy", res)
	}
	close(release)
	r := c.result()
	c.resultAck(r)
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestWorkflowSlotsBoundTasksEvenIfTheServerOversends(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var entered atomic.Int32
	s := newFakeSetup(t, Options{BuildID: "b-1", WorkflowSlots: 1}, func(w *Worker) {
		RegisterWorkflow(w, "greeting", func(ctx workflow.Context, _ string) (string, error) {
			// Workflow code must never wait like this; here it holds the
			// task's slot so that the test can send another.
			entered.Add(1)
			<-release
			return "done", nil
		})
	})
	c := s.accepted(t)
	c.workflowTask(greetingTask("r1", 1, 1, started(`""`)))
	servertest.Eventually(t, "the first task to run", func() bool { return entered.Load() == 1 })
	c.workflowTask(greetingTask("r2", 1, 1, started(`""`)))
	busy := c.workflowResult()
	if busy.GetRunId() != "r2" || busy.GetFailure().GetType() != "worker_busy" || !busy.GetFailure().GetRetryable() ||
		!strings.Contains(busy.GetFailure().GetMessage(), "all 1 workflow slots") {
		t.Fatalf("second task answered %v, want a retryable worker_busy failure", busy)
	}
	close(release)
	if res := c.workflowResult(); res.GetRunId() != "r1" || res.GetFailure() != nil {
		t.Fatalf("first task answered %v", res)
	}
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestAWorkflowTaskWhileStoppingIsDeclined(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var running atomic.Bool
	s := newFakeSetup(t, Options{BuildID: "b-1"}, func(w *Worker) {
		greetFlow(w)
		RegisterActivity(w, "hold", func(ctx context.Context, _ struct{}) (struct{}, error) {
			running.Store(true)
			<-release
			return struct{}{}, nil
		})
	})
	c := s.accepted(t)
	// An attempt in flight keeps the stopping worker's stream open.
	c.task(fakeTask("a1", 1, "hold"))
	servertest.Eventually(t, "the activity to run", running.Load)
	s.stop()
	if m := c.next(); m.GetDrain() == nil {
		t.Fatalf("got %v, want Drain", m)
	}
	c.workflowTask(greetingTask("r1", 1, 1, started(`"Ada"`)))
	res := c.workflowResult()
	if f := res.GetFailure(); f.GetType() != "worker_stopping" || !f.GetRetryable() || len(res.GetCommands()) != 0 {
		t.Fatalf("result = %v, want a retryable worker_stopping failure", res)
	}
	close(release)
	c.resultAck(c.result())
	if m := c.next(); m != nil {
		t.Fatalf("got %v, want CloseSend", m)
	}
	c.finish(nil)
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestAWorkflowTaskForAnActivityOnlyWorkerIsDeclined(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{}, echo)
	c := s.accepted(t)
	c.workflowTask(greetingTask("r1", 1, 1, started(`"Ada"`)))
	if f := c.workflowResult().GetFailure(); f.GetType() != "workflow_type_not_registered" || !f.GetRetryable() {
		t.Fatalf("failure = %v", f)
	}
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestAnActivityOfAWorkflowKnowsItsStep(t *testing.T) {
	t.Parallel()
	s := newFakeSetup(t, Options{}, func(w *Worker) {
		RegisterActivity(w, "whoami", func(ctx context.Context, _ struct{}) ([]any, error) {
			i := Info(ctx)
			return []any{i.WorkflowID, i.RunID, i.Step}, nil
		})
	})
	c := s.accepted(t)
	task := fakeTask("a1", 1, "whoami")
	task.WorkflowId, task.RunId, task.Step = "wf-1", "r1", 3
	task.StartToCloseTimeout = durationpb.New(time.Minute)
	c.task(task)
	r := c.result()
	if got := string(r.GetCompleted().GetResult()); got != `["wf-1","r1",3]` {
		t.Fatalf("result %q", got)
	}
	c.resultAck(r)
	s.stop()
	c.closeCleanly()
	if err := s.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
