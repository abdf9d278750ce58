package workflow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

var canceledFailure = &aionv1.Failure{Type: "canceled", Message: "the run was canceled"}

func TestCancellationRunsCleanupOnADisconnectedContextAndClosesCanceled(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (string, error) {
			_, err := workflow.ExecuteActivity[string](ctx, "work", nil).Get(ctx)
			if !errors.Is(err, workflow.ErrCanceled) {
				return "done", err
			}
			if ctx.Err() != workflow.ErrCanceled || !ctx.Done().IsReady() {
				return "", fmt.Errorf("ctx.Err() = %v, Done ready %v after the cancel", ctx.Err(), ctx.Done().IsReady())
			}
			// Steps on the canceled context are refused without a command.
			if _, serr := workflow.ExecuteActivity[string](ctx, "refused", nil).Get(ctx); !errors.Is(serr, workflow.ErrCanceled) {
				return "", fmt.Errorf("activity on a canceled context: %v", serr)
			}
			if serr := workflow.Sleep(ctx, time.Minute); !errors.Is(serr, workflow.ErrCanceled) {
				return "", fmt.Errorf("sleep on a canceled context: %v", serr)
			}
			dctx := workflow.NewDisconnectedContext(ctx)
			if dctx.Err() != nil {
				return "", fmt.Errorf("disconnected context: %v", dctx.Err())
			}
			if _, cerr := workflow.ExecuteActivity[string](dctx, "cleanup", nil).Get(dctx); cerr != nil {
				return "", cerr
			}
			return "", fmt.Errorf("stopped: %w", err)
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "wf", nil)
	wantCmds(t, "first task", s.step(), "activity 1 work ")
	s.cancel("operator")
	// No command cancels the activity: the server cancels the run's
	// running activities itself.
	wantCmds(t, "cancel", s.step(), "activity 2 cleanup ")
	s.failActivity(1, canceledFailure)
	s.completeActivity(2, "ok")
	wantCmds(t, "cleanup done", s.step(), "close canceled canceled: stopped: workflow canceled")
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
}

func TestAResultAfterACancelCompletesTheRun(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (string, error) {
			_, err := workflow.ReceiveSignal[string](ctx, "go")
			if errors.Is(err, workflow.ErrCanceled) {
				return "gave up cleanly", nil
			}
			return "signaled", err
		}))
	})
	s := newSim(t, e, "wf", nil)
	wantCmds(t, "first task", s.step())
	s.cancel("operator")
	wantCmds(t, "cancel", s.step(), `close completed "gave up cleanly"`)
}

func TestWithCancelCancelsItsTimersAndActivities(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (string, error) {
			cctx, cancel := workflow.WithCancel(ctx)
			timer := workflow.NewTimer(cctx, time.Hour)
			act := workflow.ExecuteActivity[string](cctx, "long", nil)
			if _, err := workflow.ReceiveSignal[string](ctx, "stop"); err != nil {
				return "", err
			}
			cancel()
			cancel() // a second call does nothing
			_, terr := timer.Get(ctx)
			_, aerr := act.Get(ctx) // resolves when the activity closes
			var ae *workflow.ActivityError
			return fmt.Sprint(errors.Is(terr, workflow.ErrCanceled), errors.As(aerr, &ae) && ae.Type == "canceled" && ae.Step == 2,
				errors.Is(aerr, workflow.ErrCanceled), ctx.Err() == nil, cctx.Err() == workflow.ErrCanceled), nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "wf", nil)
	wantCmds(t, "first task", s.step(), "timer 1 1h0m0s", "activity 2 long ")
	s.signal("stop", nil)
	wantCmds(t, "stop", s.step(), "cancel-timer 1", "cancel-activity 2")
	s.fireTimer(1) // fired before the cancel took effect: ignored
	s.failActivity(2, canceledFailure)
	wantCmds(t, "activity closed", s.step(), `close completed "true true true true true"`)
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
}

func TestChildWorkflows(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "parent", func(ctx workflow.Context, in int) (string, error) {
			return workflow.ExecuteChild[string](ctx, "payment", in, workflow.ChildOptions{TaskQueue: "payments"}).Get(ctx)
		}))
	}
	for _, tc := range []struct {
		name   string
		status aionv1.RunStatus
		result any
		f      *aionv1.Failure
		want   string
	}{
		{"completed", aionv1.RunStatus_RUN_STATUS_COMPLETED, "paid", nil, `close completed "paid"`},
		{"failed", aionv1.RunStatus_RUN_STATUS_FAILED, nil, &aionv1.Failure{Type: "card_declined", Message: "no funds"},
			`close failed card_declined: child workflow "payment" (step 1) failed: card_declined: no funds`},
		{"terminated", aionv1.RunStatus_RUN_STATUS_TERMINATED, nil, &aionv1.Failure{Message: "by operator"},
			`close failed terminated: child workflow "payment" (step 1) terminated: by operator`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "parent", 12)
			res := s.step()
			wantCmds(t, "first task", res, "child 1 payment 12")
			if q := res.GetCommands()[0].GetStartChild().GetTaskQueue(); q != "payments" {
				t.Fatalf("child task queue %q", q)
			}
			s.childClosed(1, tc.status, tc.result, tc.f)
			wantCmds(t, "child closed", s.step(), tc.want)
			fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
			wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
		})
	}
}

func TestAChildCanceledIsErrCanceled(t *testing.T) {
	t.Parallel()
	err := error(&workflow.ChildError{Status: "canceled"})
	if !errors.Is(err, workflow.ErrCanceled) {
		t.Fatal("a canceled child is not ErrCanceled")
	}
	if errors.Is(&workflow.ChildError{Status: "failed"}, workflow.ErrCanceled) {
		t.Fatal("a failed child is ErrCanceled")
	}
}

func TestActivityFailuresAreTypedErrors(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (string, error) {
			_, err := workflow.ExecuteActivity[int](ctx, "charge", nil).Get(ctx)
			var ae *workflow.ActivityError
			if !errors.As(err, &ae) {
				return "", fmt.Errorf("not an ActivityError: %v", err)
			}
			return fmt.Sprintf("%d %s %s %s %v %s", ae.Step, ae.ActivityType, ae.Type, ae.Message, ae.Retryable, ae.Details), nil
		}))
	})
	s := newSim(t, e, "wf", nil)
	s.step()
	s.failActivity(1, &aionv1.Failure{Type: "card_declined", Message: "no funds", Retryable: false, Details: []byte(`{"code":51}`)})
	wantCmds(t, "failed", s.step(), `close completed "1 charge card_declined no funds false {\"code\":51}"`)
}

func TestContinueAsNewCarriesTheNextInput(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "loop", func(ctx workflow.Context, n int) (int, error) {
			if _, err := workflow.ExecuteActivity[int](ctx, "batch", n).Get(ctx); err != nil {
				return 0, err
			}
			if n < 3 {
				return 0, workflow.NewContinueAsNewError(n + 1)
			}
			return n, nil
		}))
	}
	e := newExecutor(t, workflow.ExecutorOptions{}, register)
	for n := 1; n <= 3; n++ {
		// Each run starts with fresh history and the input of the last.
		s := newSim(t, e, "loop", n)
		s.runID = fmt.Sprintf("run-%d", n)
		wantCmds(t, "first task", s.step(), fmt.Sprintf("activity 1 batch %d", n))
		s.completeActivity(1, 0)
		want := fmt.Sprintf("close continued_as_new %d", n+1)
		if n == 3 {
			want = "close completed 3"
		}
		wantCmds(t, "batch done", s.step(), want)
	}
	// An input that does not encode fails the run.
	bad := workflow.NewContinueAsNewError(func() {})
	var can *workflow.ContinueAsNewError
	if !errors.As(bad, &can) || bad.Error() == "continue as new" {
		t.Fatalf("NewContinueAsNewError(func) = %v, want an encoding error", bad)
	}
}

func TestAwaitWaitsForAConditionOnTheRunsState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cond   func(got []string) bool
		events func(s *sim)
		want   []string
		fails  string
	}{
		{"until the coroutines are done", func(got []string) bool { return len(got) == 2 },
			func(s *sim) { s.signal("a", "1"); s.signal("b", "2") }, []string{`close completed ["1","2"]`}, ""},
		{"until canceled", func([]string) bool { return false },
			func(s *sim) { s.cancel("stop") }, []string{"close canceled canceled: workflow canceled"}, ""},
		{"a condition that panics fails the task", func(got []string) bool {
			if len(got) > 0 {
				panic("bad condition")
			}
			return false
		}, func(s *sim) { s.signal("a", "1") }, nil, "workflow panicked: bad condition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) ([]string, error) {
					var got []string
					for _, name := range []string{"a", "b"} {
						workflow.Go(ctx, func(ctx workflow.Context) {
							v, err := workflow.ReceiveSignal[string](ctx, name)
							if err == nil {
								got = append(got, v)
							}
						})
					}
					return got, workflow.Await(ctx, func() bool { return tc.cond(got) })
				}))
			})
			s := newSim(t, e, "wf", nil)
			wantCmds(t, "first task", s.step())
			tc.events(s)
			if tc.fails != "" {
				wantFailure(t, "second task", s.deliver(false), "panic", tc.fails)
				return
			}
			wantCmds(t, "second task", s.step(), tc.want...)
		})
	}
}

func TestTheRunsCancellationReachesChildScopesWithoutCommands(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (string, error) {
			cctx, cancel := workflow.WithCancel(ctx)
			defer cancel()
			err := workflow.Sleep(cctx, time.Hour)
			return "", fmt.Errorf("sleep: %w (child canceled: %v)", err, cctx.Err() == workflow.ErrCanceled)
		}))
	})
	s := newSim(t, e, "wf", nil)
	wantCmds(t, "first task", s.step(), "timer 1 1h0m0s")
	s.cancel("operator")
	// The server stops the run's timers and activities itself: the code
	// issues no cancel for them.
	wantCmds(t, "cancel", s.step(), "close canceled canceled: sleep: workflow canceled (child canceled: true)")
}

func TestASignalWaitsTimerNameIsClippedToTheNameLimit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 128)
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (bool, error) {
			_, ok, err := workflow.ReceiveSignalWithTimeout[string](ctx, long, time.Minute)
			return ok, err
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "wf", nil)
	res := s.step()
	wantCmds(t, "first task", res, "timer 1 1m0s "+("signal:" + long)[:128])
	s.fireTimer(1)
	wantCmds(t, "timeout", s.step(), "close completed false")
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "full replay", s.replay(fresh, s.lastSeq()))
}

// The server closes a child whose workflow id already has an open run as it
// records the child's start, so its ChildClosed sits among the task's
// command events.
func TestAChildClosedAmongTheCommandEventsIsSeenInTheNextRound(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "parent", func(ctx workflow.Context, _ struct{}) (string, error) {
			a := workflow.ExecuteChild[string](ctx, "child", "a", workflow.ChildOptions{WorkflowID: "taken"})
			b := workflow.ExecuteChild[string](ctx, "child", "b", workflow.ChildOptions{})
			_, aerr := a.Get(ctx)
			bv, berr := b.Get(ctx)
			return fmt.Sprintf("%v / %s %v", aerr, bv, berr), nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "parent", nil)
	res := s.deliver(false)
	wantCmds(t, "first task", res, `child 1 child "a"`, `child 2 child "b"`)
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowTaskCompleted{WorkflowTaskCompleted: &aionv1.WorkflowTaskCompleted{SeenSeq: s.sent}}})
	s.add(commandEvent(s, res.GetCommands()[0]))
	s.childClosed(1, aionv1.RunStatus_RUN_STATUS_FAILED, nil, &aionv1.Failure{Type: "already_exists", Message: `workflow "taken" already has an open run`})
	s.add(commandEvent(s, res.GetCommands()[1]))
	s.sticky = true
	wantCmds(t, "kept run", s.step())
	s.childClosed(2, aionv1.RunStatus_RUN_STATUS_COMPLETED, "B", nil)
	want := `close completed "child workflow \"child\" (step 1) failed: already_exists: workflow \"taken\" already has an open run / B \u003cnil\u003e"`
	wantCmds(t, "second child closed", s.step(), want)
	s.checkAgainstReplay(t, register)
}
