package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

// steps runs the named activities one after the other.
func steps(names ...string) func(ctx workflow.Context, _ struct{}) (int, error) {
	return func(ctx workflow.Context, _ struct{}) (int, error) {
		for _, n := range names {
			if _, err := workflow.ExecuteActivity[int](ctx, n, nil).Get(ctx); err != nil {
				return 0, err
			}
		}
		return len(names), nil
	}
}

// parallel starts the named activities at once and waits for all.
func parallel(names ...string) func(ctx workflow.Context, _ struct{}) (int, error) {
	return func(ctx workflow.Context, _ struct{}) (int, error) {
		var fs []workflow.Awaitable
		for _, n := range names {
			fs = append(fs, workflow.ExecuteActivity[int](ctx, n, nil))
		}
		return len(names), workflow.AwaitAll(ctx, fs...)
	}
}

func TestChangedCodeFailsTheTaskNamingTheStep(t *testing.T) {
	t.Parallel()
	type fn = func(ctx workflow.Context, _ struct{}) (int, error)
	sleepy := func(ctx workflow.Context, _ struct{}) (int, error) {
		if _, err := workflow.ExecuteActivity[int](ctx, "reserve", nil).Get(ctx); err != nil {
			return 0, err
		}
		return 0, workflow.Sleep(ctx, time.Minute)
	}
	effect := func(name string) fn {
		return func(ctx workflow.Context, _ struct{}) (int, error) {
			return workflow.SideEffect(ctx, name, func() (int, error) { return 1, nil })
		}
	}
	for _, tc := range []struct {
		name     string
		recorded fn // the code that wrote the history
		changed  fn // the code that replays it
		want     string
	}{
		{"changed step order", steps("reserve", "charge", "notify"), steps("charge", "reserve", "notify"),
			`step 1: the code took activity "charge", history recorded activity "reserve"`},
		{"changed activity name", steps("reserve", "charge", "notify"), steps("reserve", "charge-card", "notify"),
			`step 2: the code took activity "charge-card", history recorded activity "charge"`},
		{"missing step", steps("reserve", "charge", "notify"), steps("reserve", "notify"),
			`step 2: the code took activity "notify", history recorded activity "charge"`},
		{"a recorded step the code no longer takes", parallel("a", "b"), parallel("a"),
			`step 2: history recorded activity "b" but the code did not take it`},
		{"a step history does not record", parallel("a", "b"), parallel("a", "b", "c"),
			`step 3: the code took activity "c" where history records none`},
		{"another kind of step", steps("reserve", "charge"), sleepy,
			`step 2: the code took timer "", history recorded activity "charge"`},
		{"the code returns where history has a step", steps("reserve", "charge"), steps("reserve"),
			`step 2: the code took close "completed", history recorded activity "charge"`},
		{"a renamed side effect", effect("a"), effect("b"),
			`step 1: the code took side-effect "b", history recorded side-effect "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", tc.recorded))
			}), "wf", nil)
			// Run the recorded code until it closes, each activity
			// completing in the next task.
			for range 5 {
				res := s.step()
				for _, c := range res.GetCommands() {
					if a := c.GetScheduleActivity(); a != nil {
						s.completeActivity(a.GetStep(), 1)
					}
				}
			}
			changed := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", tc.changed))
			})
			res := s.replay(changed, s.lastSeq())
			wantFailure(t, "replay with changed code", res, "nondeterministic", tc.want)
			if changed.CachedRuns() != 0 {
				t.Fatal("the executor kept a run whose task failed")
			}
		})
	}
}

func TestAnEventForAStepTheCodeNeverTookIsNondeterministic(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", steps("a")))
	})
	s := newSim(t, e, "wf", nil)
	s.step()
	s.completeActivity(9, 1)
	wantFailure(t, "task", s.deliver(false), "nondeterministic", "step 9: history has ActivityClosed for a step the code never took")
}

func TestARecordedCommandDifferentFromWhatTheWorkerSentIsNondeterministic(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", steps("a", "b")))
	})
	s := newSim(t, e, "wf", nil)
	res := proto.Clone(s.deliver(false)).(*aionv1.WorkflowTaskResult)
	// The history says the worker's task scheduled "x": the kept run, which
	// issued "a", must not take it.
	res.Commands[0].GetScheduleActivity().ActivityType = "x"
	s.accept(res)
	s.completeActivity(1, 1)
	wantFailure(t, "sticky task", s.deliver(false), "nondeterministic", `step 1: the code took activity "a", history recorded activity "x"`)
}

func TestAPanicFailsTheTaskWithItsStack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(ctx workflow.Context, _ struct{}) (int, error)
	}{
		{"in the workflow function", func(ctx workflow.Context, _ struct{}) (int, error) {
			if _, err := workflow.ExecuteActivity[int](ctx, "a", nil).Get(ctx); err != nil {
				return 0, err
			}
			panic("boom")
		}},
		{"in a coroutine", func(ctx workflow.Context, _ struct{}) (int, error) {
			f := workflow.ExecuteActivity[int](ctx, "a", nil)
			workflow.Go(ctx, func(ctx workflow.Context) {
				_, _ = f.Get(ctx)
				panic("boom")
			})
			return 0, workflow.Sleep(ctx, time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", tc.fn))
			})
			s := newSim(t, e, "wf", nil)
			s.step()
			s.completeActivity(1, 1)
			res := s.deliver(false)
			wantFailure(t, "task after the activity", res, "panic", "workflow panicked: boom")
			var stack string
			if err := json.Unmarshal(res.GetFailure().GetDetails(), &stack); err != nil || !strings.Contains(stack, "workflow_test.") {
				t.Fatalf("details %q (%v), want the stack as a JSON string", res.GetFailure().GetDetails(), err)
			}
			if e.CachedRuns() != 0 {
				t.Fatal("the executor kept a run whose task failed")
			}
			// The server retries with the whole history: the same panic.
			s.accept(res)
			wantFailure(t, "retry", s.deliver(true), "panic", "workflow panicked: boom")
		})
	}
}

func TestNonDeterministicErrorMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  workflow.NonDeterministicError
		want string
	}{
		{workflow.NonDeterministicError{Step: 2, Kind: "activity", Name: "b", RecordedKind: "activity", RecordedName: "a"},
			`nondeterministic: step 2: the code took activity "b", history recorded activity "a"`},
		{workflow.NonDeterministicError{Step: 3, Kind: "cancel-timer", RecordedKind: "activity", RecordedName: "a", RecordedStep: 5},
			`nondeterministic: step 3: the code took cancel-timer "", history recorded activity "a" of step 5`},
		{workflow.NonDeterministicError{Kind: "close", Name: "completed"},
			`nondeterministic: after the last step: the code took close "completed" where history records none`},
		{workflow.NonDeterministicError{Step: 4, RecordedKind: "timer", RecordedName: "t"},
			`nondeterministic: step 4: history recorded timer "t" but the code did not take it`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		var nd *workflow.NonDeterministicError
		if err := error(&tc.err); !errors.As(err, &nd) {
			t.Errorf("errors.As does not find the NonDeterministicError")
		}
	}
}

func TestBadHistoriesFailTheTask(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", steps("a")))
	})
	started := &aionv1.HistoryEvent{Seq: 1, Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: &aionv1.WorkflowStarted{}}}
	signal := &aionv1.HistoryEvent{Seq: 3, Event: &aionv1.HistoryEvent_SignalReceived{SignalReceived: &aionv1.SignalReceived{Name: "s"}}}
	scheduled := &aionv1.HistoryEvent{Seq: 2, Event: &aionv1.HistoryEvent_ActivityScheduled{ActivityScheduled: &aionv1.ActivityScheduled{Step: 1, ActivityType: "a"}}}
	for _, tc := range []struct {
		name   string
		events []*aionv1.HistoryEvent
		want   string
	}{
		{"a gap in the sequence", []*aionv1.HistoryEvent{started, signal}, "events[1] has seq 3, want 2"},
		{"no WorkflowStarted first", []*aionv1.HistoryEvent{{Seq: 1, Event: signal.Event}}, "must begin with WorkflowStarted"},
		{"a command event with no marker", []*aionv1.HistoryEvent{started, scheduled}, "event 2 (ActivityScheduled) is a command's event"},
		{"no events", nil, "must begin with WorkflowStarted"},
	} {
		res := e.Run(&aionv1.WorkflowTask{Namespace: "ns", RunId: "r", WorkflowType: "wf", FirstSeq: 1, Events: tc.events})
		wantFailure(t, tc.name, res, "bad_history", tc.want)
	}
}

func TestATaskForAnUnregisteredTypeFails(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", steps("a")))
	})
	s := newSim(t, e, "other", nil)
	wantFailure(t, "task", s.deliver(false), "workflow_type_not_registered", `workflow type "other" is not registered`)
}

func TestRegisterRefusesProgrammingErrors(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(*workflow.Executor) {})
	must(t, workflow.Register(e, "wf", steps("a")))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{workflow.Register(e, "wf", steps("b")), `workflow type "wf" registered twice`},
		{workflow.Register(e, "", steps("b")), "empty workflow type"},
		{workflow.Register[struct{}, int](e, "nil", nil), `Register "nil" with a nil function`},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("Register = %v, want an error containing %q", tc.err, tc.want)
		}
	}
	if got := strings.Join(e.Types(), ","); got != "wf" {
		t.Fatalf("Types() = %q, want only wf", got)
	}
}

func TestReplayHistoryChecksChangedCodeAgainstARecordedRun(t *testing.T) {
	t.Parallel()
	recorded := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", steps("reserve", "charge", "notify")))
	})
	s := newSim(t, recorded, "wf", nil)
	for i := int64(1); i <= 3; i++ {
		s.step()
		s.completeActivity(i, 1)
	}
	s.step()
	var calls int
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "same", steps("reserve", "charge", "notify")))
		must(t, workflow.Register(e, "renamed", steps("reserve", "charge-card", "notify")))
		must(t, workflow.Register(e, "panics", func(ctx workflow.Context, _ struct{}) (int, error) {
			calls++
			panic("boom")
		}))
	})
	if err := e.ReplayHistory("same", s.events); err != nil {
		t.Fatalf("the same code: %v", err)
	}
	var nd *workflow.NonDeterministicError
	if err := e.ReplayHistory("renamed", s.events); !errors.As(err, &nd) || nd.Step != 2 || nd.Name != "charge-card" || nd.RecordedName != "charge" {
		t.Fatalf("renamed step: %v, want a NonDeterministicError at step 2", err)
	}
	var pe *workflow.PanicError
	if err := e.ReplayHistory("panics", s.events); !errors.As(err, &pe) || pe.Value != "boom" || calls != 1 {
		t.Fatalf("panicking code: %v", err)
	}
	if err := e.ReplayHistory("unknown", s.events); err == nil || !strings.Contains(err.Error(), `workflow type "unknown" is not registered`) {
		t.Fatalf("unknown type: %v", err)
	}
	if e.CachedRuns() != 0 {
		t.Fatalf("ReplayHistory kept %d runs", e.CachedRuns())
	}
}
