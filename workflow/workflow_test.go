package workflow_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

// sequential runs n activities "step" one after the other and returns the
// sum of their results.
func sequential(n int) func(ctx workflow.Context, _ struct{}) (int, error) {
	return func(ctx workflow.Context, _ struct{}) (int, error) {
		sum := 0
		for i := 1; i <= n; i++ {
			v, err := workflow.ExecuteActivity[int](ctx, "step", i).Get(ctx)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
}

type typedErr struct{}

func (typedErr) Error() string     { return "out of stock" }
func (typedErr) ErrorType() string { return "out_of_stock" }

func TestFirstTaskOfANewRunIssuesTheCodesFirstSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		input any
		fn    func(ctx workflow.Context, in int) (any, error)
		want  []string
	}{
		{"an activity, with the input as JSON", 7, func(ctx workflow.Context, in int) (any, error) {
			return workflow.ExecuteActivity[int](ctx, "reserve", map[string]int{"qty": in}).Get(ctx)
		}, []string{`activity 1 reserve {"qty":7}`}},
		{"a timer", nil, func(ctx workflow.Context, _ int) (any, error) {
			return nil, workflow.Sleep(ctx, time.Hour)
		}, []string{"timer 1 1h0m0s"}},
		{"a timer under a millisecond is a millisecond", nil, func(ctx workflow.Context, _ int) (any, error) {
			return nil, workflow.Sleep(ctx, time.Microsecond)
		}, []string{"timer 1 1ms"}},
		{"a sleep of zero takes no step", nil, func(ctx workflow.Context, _ int) (any, error) {
			return "slept", workflow.Sleep(ctx, 0)
		}, []string{`close completed "slept"`}},
		{"side effects and then an activity, in one task", nil, func(ctx workflow.Context, _ int) (any, error) {
			id, _ := workflow.SideEffect(ctx, "id", func() (string, error) { return "x", nil })
			workflow.Random(ctx)
			return workflow.ExecuteActivity[int](ctx, "use", id).Get(ctx)
		}, []string{"side-effect 1 id", "side-effect 2 random", `activity 3 use "x"`}},
		{"a child workflow", 5, func(ctx workflow.Context, in int) (any, error) {
			return workflow.ExecuteChild[string](ctx, "payment", in, workflow.ChildOptions{}).Get(ctx)
		}, []string{"child 1 payment 5"}},
		{"coroutines run in creation order after the one that started them blocks", nil, func(ctx workflow.Context, _ int) (any, error) {
			for _, name := range []string{"a", "b"} {
				workflow.Go(ctx, func(ctx workflow.Context) {
					_, _ = workflow.ExecuteActivity[int](ctx, name, nil).Get(ctx)
				})
			}
			return workflow.ExecuteActivity[int](ctx, "main", nil).Get(ctx)
		}, []string{"activity 1 main ", "activity 2 a ", "activity 3 b "}},
		{"a result completes the run", 41, func(_ workflow.Context, in int) (any, error) {
			return in + 1, nil
		}, []string{"close completed 42"}},
		{"an error fails the run with type workflow_error", nil, func(workflow.Context, int) (any, error) {
			return nil, errors.New("no luck")
		}, []string{"close failed workflow_error: no luck"}},
		{"an error with ErrorType names the type", nil, func(workflow.Context, int) (any, error) {
			return nil, fmt.Errorf("reserve: %w", typedErr{})
		}, []string{"close failed out_of_stock: reserve: out of stock"}},
		{"an input that does not decode fails the run", "not a number", func(workflow.Context, int) (any, error) {
			return nil, nil
		}, []string{`close failed payload_decode_error: workflow input: decode "\"not a number\"" into int: json: cannot unmarshal string into Go value of type int`}},
		{"continue as new", 2, func(_ workflow.Context, in int) (any, error) {
			return nil, workflow.NewContinueAsNewError(in + 1)
		}, []string{"close continued_as_new 3"}},
		{"canceled error without a cancel request is a failure", nil, func(workflow.Context, int) (any, error) {
			return nil, workflow.ErrCanceled
		}, []string{"close failed workflow_error: workflow canceled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", tc.fn))
			})
			s := newSim(t, e, "wf", tc.input)
			res := s.step()
			wantCmds(t, "first task", res, tc.want...)
			if !res.GetSticky() {
				t.Fatal("the result does not say the worker keeps the run")
			}
		})
	}
}

func TestActivityOptionsAreSentWithTheCommand(t *testing.T) {
	t.Parallel()
	opts := workflow.ActivityOptions{
		TaskQueue: "gpu", Node: "n1", ScheduleToStartTimeout: time.Minute, StartToCloseTimeout: 2 * time.Minute,
		ScheduleToCloseTimeout: time.Hour, HeartbeatTimeout: 10 * time.Second,
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{"bad_input"}},
	}
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) {
			a := workflow.ExecuteActivity[int](ctx, "explicit", nil, opts)
			dctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: "cpu"})
			b := workflow.ExecuteActivity[int](dctx, "from-context", nil)
			return 0, workflow.AwaitAll(ctx, a, b)
		}))
	})
	res := newSim(t, e, "wf", nil).step()
	wantCmds(t, "first task", res, "activity 1 explicit ", "activity 2 from-context ")
	got := res.GetCommands()[0].GetScheduleActivity().GetOptions()
	if got.GetTaskQueue() != "gpu" || got.GetNode() != "n1" || got.GetScheduleToStartTimeout().AsDuration() != time.Minute ||
		got.GetStartToCloseTimeout().AsDuration() != 2*time.Minute || got.GetScheduleToCloseTimeout().AsDuration() != time.Hour ||
		got.GetHeartbeatTimeout().AsDuration() != 10*time.Second {
		t.Fatalf("options = %v", got)
	}
	rp := got.GetRetryPolicy()
	if rp.GetInitialInterval().AsDuration() != time.Second || rp.GetBackoffCoefficient() != 2 ||
		rp.GetMaximumInterval().AsDuration() != time.Minute || rp.GetMaximumAttempts() != 5 ||
		strings.Join(rp.GetNonRetryableErrorTypes(), ",") != "bad_input" {
		t.Fatalf("retry policy = %v", rp)
	}
	if q := res.GetCommands()[1].GetScheduleActivity().GetOptions().GetTaskQueue(); q != "cpu" {
		t.Fatalf("the context's options gave task queue %q, want cpu", q)
	}
}

func TestInvalidActivityOptionsTakeNoStepAndNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts workflow.ActivityOptions
		want string
	}{
		{workflow.ActivityOptions{StartToCloseTimeout: -time.Second}, "ActivityOptions.StartToCloseTimeout is -1s"},
		{workflow.ActivityOptions{HeartbeatTimeout: -time.Second}, "ActivityOptions.HeartbeatTimeout is -1s"},
		{workflow.ActivityOptions{RetryPolicy: &workflow.RetryPolicy{BackoffCoefficient: 0.5}}, "ActivityOptions.RetryPolicy.BackoffCoefficient is 0.5"},
		{workflow.ActivityOptions{RetryPolicy: &workflow.RetryPolicy{MaximumAttempts: -1}}, "ActivityOptions.RetryPolicy.MaximumAttempts is -1"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) {
					return workflow.ExecuteActivity[int](ctx, "a", nil, tc.opts).Get(ctx)
				}))
			})
			res := newSim(t, e, "wf", nil).step()
			c := cmds(res)
			if res.GetFailure() != nil || len(c) != 1 || !strings.HasPrefix(c[0], `close failed workflow_error: workflow: activity "a": `+tc.want) {
				t.Fatalf("first task: %q (failure %v), want the run failed naming %q", c, res.GetFailure(), tc.want)
			}
		})
	}
}

func TestReplayAtEveryPrefixIssuesExactlyTheNextStep(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "five", sequential(5))) }
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "five", nil)
	wantCmds(t, "task 1", s.step(), "activity 1 step 1")
	for i := int64(1); i <= 5; i++ {
		s.completeActivity(i, i*10)
		res := s.step()
		if i < 5 {
			wantCmds(t, fmt.Sprintf("task %d", i+1), res, fmt.Sprintf("activity %d step %d", i+1, i+1))
		} else {
			wantCmds(t, "last task", res, "close completed 150")
		}
	}

	// What the live worker was asked at each point, by the last seq it saw.
	live := map[int64]*aionv1.WorkflowTaskResult{}
	for _, d := range s.tasks {
		live[d.seen] = d.result
	}
	fresh := newExecutor(t, workflow.ExecutorOptions{CacheSize: -1}, register)
	checked := 0
	for n := int64(1); n <= s.lastSeq(); n++ {
		if n < s.lastSeq() && isCommandEvent(s.events[n]) {
			continue // the server never cuts a marker from its commands
		}
		res := s.replay(fresh, n)
		if want, ok := live[n]; ok {
			wantCmds(t, fmt.Sprintf("replay of %d events", n), res, cmds(want)...)
		} else {
			// Right after a task's commands: the code waits on them.
			wantCmds(t, fmt.Sprintf("replay of %d events", n), res)
		}
		checked++
	}
	if checked != 12 {
		t.Fatalf("checked %d prefixes, want 12 (6 tasks, 5 waits after an activity was scheduled, the closed history)", checked)
	}
	if fresh.CachedRuns() != 0 {
		t.Fatalf("a disabled cache keeps %d runs", fresh.CachedRuns())
	}
}

func isCommandEvent(ev *aionv1.HistoryEvent) bool {
	switch ev.GetEvent().(type) {
	case *aionv1.HistoryEvent_ActivityScheduled, *aionv1.HistoryEvent_TimerStarted, *aionv1.HistoryEvent_TimerCanceled,
		*aionv1.HistoryEvent_SideEffectRecorded, *aionv1.HistoryEvent_ChildStarted, *aionv1.HistoryEvent_ActivityCancelRequested,
		*aionv1.HistoryEvent_WorkflowClosed:
		return true
	}
	return false
}

func TestFanOutThenAwaitAllGathersEveryResult(t *testing.T) {
	t.Parallel()
	const n = 8
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "fanout", func(ctx workflow.Context, _ struct{}) ([]int, error) {
			var fs []workflow.Awaitable
			var typed []workflow.Future[int]
			for i := range n {
				f := workflow.ExecuteActivity[int](ctx, "square", i)
				fs, typed = append(fs, f), append(typed, f)
			}
			if err := workflow.AwaitAll(ctx, fs...); err != nil {
				return nil, err
			}
			out := make([]int, n)
			for i, f := range typed {
				if !f.IsReady() {
					return nil, fmt.Errorf("future %d not ready after AwaitAll", i)
				}
				out[i], _ = f.Get(ctx)
			}
			return out, nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "fanout", nil)
	res := s.step()
	if len(res.GetCommands()) != n {
		t.Fatalf("first task issued %q, want %d activities", cmds(res), n)
	}
	// Half complete, in reverse order; the rest arrive while the next task
	// runs, and then in a task of their own.
	for i := int64(n); i > n/2; i-- {
		s.completeActivity(i, (i-1)*(i-1))
	}
	res = s.deliver(false)
	for i := int64(n / 2); i >= 1; i-- {
		s.completeActivity(i, (i-1)*(i-1))
	}
	s.accept(res)
	wantCmds(t, "half done", res)
	wantCmds(t, "all done", s.step(), "close completed [0,1,4,9,16,25,36,49]")
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
}

func TestAwaitAnyPicksWhatHistoryCompletedFirst(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "race", func(ctx workflow.Context, _ struct{}) (string, error) {
			a := workflow.ExecuteActivity[string](ctx, "a", nil)
			b := workflow.ExecuteActivity[string](ctx, "b", nil)
			i, err := workflow.AwaitAny(ctx, a, b)
			if err != nil {
				return "", err
			}
			v, err := []workflow.Future[string]{a, b}[i].Get(ctx)
			return fmt.Sprintf("%d:%s", i, v), err
		}))
	}
	for _, tc := range []struct {
		name  string
		order []int64 // steps in the order their activities closed, in one task
		want  string
	}{
		{"b then a", []int64{2, 1}, `close completed "1:B"`},
		{"a then b", []int64{1, 2}, `close completed "0:A"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "race", nil)
			wantCmds(t, "first task", s.step(), "activity 1 a ", "activity 2 b ")
			for _, st := range tc.order {
				s.completeActivity(st, map[int64]string{1: "A", 2: "B"}[st])
			}
			wantCmds(t, "both closed", s.step(), tc.want)
			fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
			wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
		})
	}
}

func TestAwaitAnyWithNoFuturesIsAnError(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) {
			return workflow.AwaitAny(ctx)
		}))
	})
	wantCmds(t, "first task", newSim(t, e, "wf", nil).step(), "close failed workflow_error: workflow: AwaitAny with no futures")
}

func TestSignalsAreReceivedInOrderExactlyOnce(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "collect", func(ctx workflow.Context, _ struct{}) ([]string, error) {
			var got []string
			for range 3 {
				v, err := workflow.ReceiveSignal[string](ctx, "item")
				if err != nil {
					return nil, err
				}
				got = append(got, v)
				// A step between receives: each receive happens in another round.
				if _, err := workflow.ExecuteActivity[int](ctx, "record", v).Get(ctx); err != nil {
					return nil, err
				}
			}
			return got, nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "collect", nil)
	s.signal("other", "ignored")
	s.signal("item", "a")
	s.signal("item", "b")
	wantCmds(t, "task 1", s.step(), `activity 1 record "a"`)
	s.completeActivity(1, 0)
	res := s.deliver(false)
	s.signal("item", "c") // arrives while the task runs: seen in the next round
	s.accept(res)
	wantCmds(t, "task 2", res, `activity 2 record "b"`)
	s.completeActivity(2, 0)
	wantCmds(t, "task 3", s.step(), `activity 3 record "c"`)
	s.signal("item", "d") // never received: stays buffered
	s.completeActivity(3, 0)
	wantCmds(t, "task 4", s.step(), `close completed ["a","b","c"]`)
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
}

// waitShip waits for the "ship" signal for an hour, then runs "after" with
// what it got.
func waitShip(ctx workflow.Context, _ struct{}) (string, error) {
	v, ok, err := workflow.ReceiveSignalWithTimeout[string](ctx, "ship", time.Hour)
	if err != nil {
		return "", err
	}
	got := fmt.Sprintf("%v:%s", ok, v)
	return workflow.ExecuteActivity[string](ctx, "after", got).Get(ctx)
}

func TestReceiveSignalWithTimeout(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "ship", waitShip)) }
	const timer = "timer 1 1h0m0s signal:ship"
	for _, tc := range []struct {
		name   string
		before func(s *sim) // events before the first task
		first  []string
		events func(s *sim) // events before the second task
		second []string
	}{
		{"the signal comes first: the timer is canceled", nil, []string{timer},
			func(s *sim) { s.signal("ship", "box") },
			[]string{"cancel-timer 1", `activity 2 after "true:box"`}},
		{"the timer fires first: the signal stays buffered", nil, []string{timer},
			func(s *sim) { s.fireTimer(1); s.signal("ship", "late") },
			[]string{`activity 2 after "false:"`}},
		{"both in one round, the signal earlier: no cancel, the timer had fired", nil, []string{timer},
			func(s *sim) { s.signal("ship", "box"); s.fireTimer(1) },
			[]string{`activity 2 after "true:box"`}},
		{"both in one round, the timer earlier: timeout", nil, []string{timer},
			func(s *sim) { s.fireTimer(1); s.signal("ship", "box") },
			[]string{`activity 2 after "false:"`}},
		{"a signal already buffered: no timer at all", func(s *sim) { s.signal("ship", "early") },
			[]string{`activity 1 after "true:early"`}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "ship", nil)
			if tc.before != nil {
				tc.before(s)
			}
			wantCmds(t, "first task", s.step(), tc.first...)
			if tc.events != nil {
				tc.events(s)
				wantCmds(t, "second task", s.step(), tc.second...)
			}
			// A timer that fires after it was canceled is ignored.
			if tc.second != nil && tc.second[0] == "cancel-timer 1" {
				s.fireTimer(1)
				wantCmds(t, "late fire", s.step())
			}
			s.completeActivity(s.lastActivityStep(), "done")
			wantCmds(t, "closing task", s.step(), `close completed "done"`)
			fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
			wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
		})
	}
}

// lastActivityStep is the step of the last activity the history records.
func (s *sim) lastActivityStep() int64 {
	for i := len(s.events) - 1; i >= 0; i-- {
		if a := s.events[i].GetActivityScheduled(); a != nil {
			return a.GetStep()
		}
	}
	s.t.Fatal("no activity in history")
	return 0
}

func TestSideEffectsAndRandomReplayTheirRecordedValue(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "effects", func(ctx workflow.Context, _ struct{}) (string, error) {
			id, err := workflow.SideEffect(ctx, "id", func() (string, error) {
				return fmt.Sprintf("id-%d", calls.Add(1)), nil
			})
			if err != nil {
				return "", err
			}
			n := workflow.Random(ctx)
			_, ferr := workflow.SideEffect(ctx, "flaky", func() (int, error) {
				return 0, fmt.Errorf("config unreadable (call %d)", calls.Add(1))
			})
			got := fmt.Sprintf("%s/%d/%v", id, n, ferr)
			if _, err := workflow.ExecuteActivity[int](ctx, "use", got).Get(ctx); err != nil {
				return "", err
			}
			return got, nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "effects", nil)
	res := s.step()
	c := cmds(res)
	if len(c) != 4 || c[0] != "side-effect 1 id" || c[1] != "side-effect 2 random" || c[2] != "side-effect 3 flaky" ||
		!strings.HasPrefix(c[3], `activity 4 use "id-1/`) || !strings.HasSuffix(c[3], `/config unreadable (call 2)"`) {
		t.Fatalf("first task issued %q", c)
	}
	got := strings.TrimPrefix(c[3], "activity 4 use ")
	s.completeActivity(4, 0)
	wantCmds(t, "closing task", s.step(), "close completed "+got)
	// A fresh worker replays the whole history: the functions are not
	// called again and the recorded values come back.
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "replay before the close", s.replay(fresh, s.lastSeq()-2), "close completed "+got)
	if n := calls.Load(); n != 2 {
		t.Fatalf("side-effect functions ran %d times, want 2 (once each)", n)
	}
}

func TestNowIsTheTimeOfTheLatestEventSeen(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "clock", func(ctx workflow.Context, _ struct{}) ([]time.Time, error) {
			start := workflow.Now(ctx)
			if err := workflow.Sleep(ctx, time.Minute); err != nil {
				return nil, err
			}
			return []time.Time{start, workflow.Now(ctx), workflow.GetInfo(ctx).StartTime}, nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "clock", nil)
	wantCmds(t, "first task", s.step(), "timer 1 1m0s")
	s.signal("noise", nil) // seq 4
	fired := s.fireTimer(1)
	want := fmt.Sprintf(`close completed ["%s","%s","%s"]`, epoch.Format(time.RFC3339),
		epoch.Add(time.Duration(fired-1)*time.Second).Format(time.RFC3339), epoch.Format(time.RFC3339))
	wantCmds(t, "after the timer", s.step(), want)
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "replay", s.replay(fresh, s.lastSeq()-2), want)
}
