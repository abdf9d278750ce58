package workflow_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

// mixed takes every kind of step from three coroutines: activities awaited
// in the order they complete, signal waits with timeouts, a side effect,
// random numbers and sleeps. What it returns depends on the order history
// gives events in.
func mixed(ctx workflow.Context, _ struct{}) ([]string, error) {
	var log []string
	waiting := 2
	for i := range 2 {
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer func() { waiting-- }()
			v, ok, err := workflow.ReceiveSignalWithTimeout[string](ctx, "s", time.Duration(i+1)*time.Minute)
			log = append(log, fmt.Sprintf("sig%d:%v:%s:%v", i, ok, v, err))
			if ok {
				// A new round draws a new number, so that it stays out of
				// the payloads the test compares; its step is compared.
				workflow.Random(ctx)
				_, err := workflow.ExecuteActivity[int](ctx, "on-signal", i).Get(ctx)
				log = append(log, fmt.Sprintf("sig%d-act:%v", i, err))
			}
		})
	}
	id, _ := workflow.SideEffect(ctx, "id", func() (int, error) { return 7, nil })
	pending := []workflow.Future[int]{}
	for _, name := range []string{"a", "b", "c"} {
		pending = append(pending, workflow.ExecuteActivity[int](ctx, name, id))
	}
	names := []string{"a", "b", "c"}
	for len(pending) > 0 {
		aw := make([]workflow.Awaitable, len(pending))
		for i, f := range pending {
			aw[i] = f
		}
		i, err := workflow.AwaitAny(ctx, aw...)
		if err != nil {
			return nil, err
		}
		v, _ := pending[i].Get(ctx)
		log = append(log, fmt.Sprintf("%s=%d", names[i], v))
		pending, names = slices.Delete(pending, i, i+1), slices.Delete(names, i, i+1)
		if len(pending) == 1 {
			if err := workflow.Sleep(ctx, time.Second); err != nil {
				return nil, err
			}
		}
	}
	if err := workflow.Await(ctx, func() bool { return waiting == 0 }); err != nil {
		return nil, err
	}
	return log, nil
}

// open lists the steps of a kind history started and has not closed.
func (s *sim) open() (activities, timers []int64) {
	started := map[int64]string{}
	var order []int64
	for _, ev := range s.events {
		switch x := ev.GetEvent().(type) {
		case *aionv1.HistoryEvent_ActivityScheduled:
			started[x.ActivityScheduled.GetStep()] = "activity"
			order = append(order, x.ActivityScheduled.GetStep())
		case *aionv1.HistoryEvent_TimerStarted:
			started[x.TimerStarted.GetStep()] = "timer"
			order = append(order, x.TimerStarted.GetStep())
		case *aionv1.HistoryEvent_ActivityClosed:
			delete(started, x.ActivityClosed.GetStep())
		case *aionv1.HistoryEvent_TimerFired:
			delete(started, x.TimerFired.GetStep())
		case *aionv1.HistoryEvent_TimerCanceled:
			delete(started, x.TimerCanceled.GetStep())
		}
	}
	for _, st := range order {
		switch started[st] {
		case "activity":
			activities = append(activities, st)
		case "timer":
			timers = append(timers, st)
		}
	}
	return activities, timers
}

func (s *sim) closed() bool {
	return len(s.events) > 0 && s.events[len(s.events)-1].GetWorkflowClosed() != nil
}

// Whatever order the world's events come in, and whichever way tasks are
// delivered (the new events to the worker that keeps the run, the whole
// history, events arriving while a task runs), each task's commands are
// exactly those a fresh worker replaying the same history from the top
// issues, and no task fails.
func TestAnyEventOrderGivesTheSameStepsKeptOrReplayed(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "mixed", mixed)) }
	rapid.Check(t, func(rt *rapid.T) {
		live := workflow.NewExecutor(workflow.ExecutorOptions{})
		defer live.Close()
		fresh := workflow.NewExecutor(workflow.ExecutorOptions{CacheSize: -1})
		defer fresh.Close()
		register(live)
		register(fresh)
		s := newSim(rt, live, "mixed", nil)
		// world adds one event the world could add now; false if none.
		world := func(label string) bool {
			acts, timers := s.open()
			choices := []string{"signal"}
			if len(acts) > 0 {
				choices = append(choices, "complete")
			}
			if len(timers) > 0 {
				choices = append(choices, "fire")
			}
			switch rapid.SampledFrom(choices).Draw(rt, label) {
			case "complete":
				s.completeActivity(rapid.SampledFrom(acts).Draw(rt, label+" activity"), rapid.IntRange(0, 9).Draw(rt, label+" result"))
			case "fire":
				s.fireTimer(rapid.SampledFrom(timers).Draw(rt, label+" timer"))
			case "signal":
				if rapid.Bool().Draw(rt, label+" signal or nothing") {
					s.signal("s", rapid.SampledFrom([]string{"x", "y"}).Draw(rt, label+" signal"))
				}
			}
			return true
		}
		for round := 0; !s.closed(); round++ {
			if round > 60 {
				rt.Fatalf("the run did not close in 60 tasks: %d events", len(s.events))
			}
			for n := rapid.IntRange(0, 3).Draw(rt, "events before the task"); n > 0; n-- {
				world("before")
			}
			res := s.deliver(rapid.IntRange(0, 3).Draw(rt, "full history") == 0)
			if res.GetFailure() != nil {
				rt.Fatalf("task %d failed: %v", s.task, res.GetFailure())
			}
			if rapid.Bool().Draw(rt, "an event while the task runs") {
				world("during")
			}
			s.accept(res)
			seen := s.tasks[len(s.tasks)-1].seen
			wantCmds(rt, fmt.Sprintf("fresh replay of task %d", s.task), s.replay(fresh, seen), cmds(res)...)
			if len(res.GetCommands()) == 0 && !s.closed() {
				// Blocked: something must happen for the run to go on.
				world("unblock")
			}
		}
		wantCmds(rt, "replay of the closed run", s.replay(fresh, s.lastSeq()))
	})
}
