package workflow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

// statusFlow reports its progress through the "status" query.
func statusFlow(ctx workflow.Context, _ struct{}) (string, error) {
	status := "reserving"
	if err := workflow.SetQueryHandler(ctx, "status", func(prefix string) (string, error) { return prefix + status, nil }); err != nil {
		return "", err
	}
	if err := workflow.SetQueryHandler(ctx, "fails", func(struct{}) (int, error) { return 0, errors.New("not today") }); err != nil {
		return "", err
	}
	if err := workflow.SetQueryHandler(ctx, "blocks", func(struct{}) (int, error) {
		return 0, workflow.Sleep(ctx, time.Second)
	}); err != nil {
		return "", err
	}
	if err := workflow.SetQueryHandler(ctx, "info", func(struct{}) (string, error) {
		return workflow.GetInfo(ctx).WorkflowType + " at " + workflow.Now(ctx).Format(time.TimeOnly), nil
	}); err != nil {
		return "", err
	}
	if err := workflow.SetQueryHandler(ctx, "waits", func(struct{}) (int, error) {
		return 0, workflow.Await(ctx, func() bool { return false })
	}); err != nil {
		return "", err
	}
	if err := workflow.SetQueryHandler(ctx, "receives", func(struct{}) (int, error) {
		return workflow.ReceiveSignal[int](ctx, "any")
	}); err != nil {
		return "", err
	}
	for _, next := range []string{"charging", "done"} {
		if _, err := workflow.ExecuteActivity[int](ctx, strings.TrimSuffix(status, "ing"), nil).Get(ctx); err != nil {
			return "", err
		}
		status = next
	}
	return status, nil
}

func query(id, name string, input string) *aionv1.WorkflowQuery {
	return &aionv1.WorkflowQuery{QueryId: id, Name: name, Input: []byte(input)}
}

// queryOnly delivers a query-only task.
func (s *sim) queryOnly(full bool, queries ...*aionv1.WorkflowQuery) *aionv1.WorkflowTaskResult {
	s.t.Helper()
	task := s.newTask(full, queries...)
	task.QueryOnly = true
	res := s.e.Run(task)
	s.sent = s.lastSeq()
	return res
}

func answers(res *aionv1.WorkflowTaskResult) []string {
	var out []string
	for _, a := range res.GetQueryAnswers() {
		if a.GetError() != "" {
			out = append(out, a.GetQueryId()+" error "+a.GetError())
		} else {
			out = append(out, a.GetQueryId()+" "+string(a.GetResult()))
		}
	}
	return out
}

func wantAnswers(t *testing.T, what string, res *aionv1.WorkflowTaskResult, want ...string) {
	t.Helper()
	if res.GetFailure() != nil {
		t.Fatalf("%s: task failed: %v", what, res.GetFailure())
	}
	if got := answers(res); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: answers\n  %q\nwant\n  %q", what, got, want)
	}
}

func TestQueriesAnswerFromTheRecordedStateOnly(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "wf", statusFlow)) }
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "wf", nil)
	wantCmds(t, "task 1", s.step(), "activity 1 reserv ")
	s.completeActivity(1, 0)
	wantCmds(t, "task 2", s.step(), "activity 2 charg ")
	s.completeActivity(2, 0) // not yet seen by any task

	// A fresh worker replays only the recorded rounds: the code has not
	// seen the second activity's completion, and takes no step.
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	qs := []*aionv1.WorkflowQuery{query("q1", "status", `"now: "`), query("q2", "nope", ""), query("q3", "fails", ""),
		query("q4", "blocks", ""), query("q5", "status", "not json"), query("q6", "waits", ""), query("q6b", "receives", "")}
	task := &aionv1.WorkflowTask{Namespace: "ns", RunId: s.runID, WorkflowType: "wf", Task: 99, FirstSeq: 1,
		Events: cloneEvents(s.events), Queries: qs, QueryOnly: true}
	res := fresh.Run(task)
	wantCmds(t, "query-only", res)
	wantAnswers(t, "query-only", res,
		`q1 "now: charging"`,
		`q2 error unknown query "nope": the run's code registered ["blocks" "fails" "info" "receives" "status" "waits"]`,
		`q3 error query "fails": not today`,
		`q4 error query "blocks" panicked: workflow: a query handler must not start a timer`,
		`q5 error query "status": input: decode "not json" into string: invalid character 'o' in literal null (expecting 'u')`,
		`q6 error query "waits" panicked: workflow: a query handler must not block`,
		`q6b error query "receives" panicked: workflow: a query handler must not receive a signal`)
	if !res.GetSticky() || fresh.CachedRuns() != 1 {
		t.Fatalf("sticky %v, %d runs kept, want the replayed run kept", res.GetSticky(), fresh.CachedRuns())
	}

	// The live worker, which kept the run, is sent the new events with the
	// query: the same answer, and still no step taken.
	res = s.queryOnly(false, query("q7", "status", ""))
	wantCmds(t, "sticky query-only", res)
	wantAnswers(t, "sticky query-only", res, `q7 "charging"`)

	// A normal task answers after its new commands.
	res = s.deliver(false, query("q8", "status", ""))
	s.accept(res)
	wantCmds(t, "task 3", res, `close completed "done"`)
	wantAnswers(t, "task 3", res, `q8 "done"`)

	// A closed run still answers, on this worker (which ended the run's
	// goroutines) as on one that replays it.
	res = s.queryOnly(false, query("q9", "status", ""), query("q10", "info", ""))
	wantCmds(t, "query on the kept closed run", res)
	wantAnswers(t, "query on the kept closed run", res, `q9 "done"`, `q10 "wf at 00:00:06"`)
	res = s.queryOnly(true, query("q9", "status", ""), query("q10", "info", ""))
	wantCmds(t, "query on the closed run", res)
	wantAnswers(t, "query on the closed run", res, `q9 "done"`, `q10 "wf at 00:00:06"`)
}

func TestAQueryBeforeTheCodeRanIsUnknown(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) { must(t, workflow.Register(e, "wf", statusFlow)) })
	s := newSim(t, e, "wf", nil)
	res := s.queryOnly(false, query("q", "status", ""))
	wantCmds(t, "query-only", res)
	wantAnswers(t, "query-only", res, `q error unknown query "status": the run's code registered no query handler`)
	// The run went no further: its first task still takes the first step.
	wantCmds(t, "first task", s.step(), "activity 1 reserv ")
}

// checkAgainstReplay replays, on a fresh executor, the history each
// sticky task of s had seen, and wants the same commands.
func (s *sim) checkAgainstReplay(t *testing.T, register func(*workflow.Executor)) (sticky int) {
	t.Helper()
	fresh := newExecutor(t, workflow.ExecutorOptions{CacheSize: -1}, register)
	for i, d := range s.tasks {
		wantCmds(t, fmt.Sprintf("full replay of task %d", i+1), s.replay(fresh, d.seen), cmds(d.result)...)
	}
	return len(s.tasks)
}

func TestAKeptRunTakesOnlyTheNewEventsAndMatchesAFullReplay(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "ship", waitShip)) }
	e := newExecutor(t, workflow.ExecutorOptions{}, register)
	s := newSim(t, e, "ship", nil)
	wantCmds(t, "task 1", s.step(), "timer 1 1h0m0s signal:ship")
	s.signal("ship", "box")
	task := s.newTask(false)
	s.task-- // newTask only to look at it
	if task.GetFirstSeq() != 2 || len(task.GetEvents()) != 3 {
		t.Fatalf("task 2 starts at %d with %d events, want the 3 new ones from seq 2", task.GetFirstSeq(), len(task.GetEvents()))
	}
	wantCmds(t, "task 2", s.step(), "cancel-timer 1", `activity 2 after "true:box"`)
	s.completeActivity(2, "sent")
	wantCmds(t, "task 3", s.step(), `close completed "sent"`)
	s.checkAgainstReplay(t, register)
}

func TestStickyCacheMisses(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "five", sequential(5))) }
	twoSteps := func(t *testing.T, e *workflow.Executor, runID string) *sim {
		s := newSim(t, e, "five", nil)
		s.runID = runID
		s.step()
		s.completeActivity(1, 1)
		return s
	}
	for _, tc := range []struct {
		name string
		opts workflow.ExecutorOptions
		// prepare makes the executor lose (or never have) the run.
		prepare func(t *testing.T, e *workflow.Executor, s *sim)
	}{
		{"a run the worker never had", workflow.ExecutorOptions{}, func(t *testing.T, _ *workflow.Executor, s *sim) {
			s.e = newExecutor(t, workflow.ExecutorOptions{}, register)
		}},
		{"a run evicted by newer ones", workflow.ExecutorOptions{CacheSize: 1}, func(t *testing.T, e *workflow.Executor, _ *sim) {
			twoSteps(t, e, "another")
		}},
		{"a run whose result was refused", workflow.ExecutorOptions{}, func(_ *testing.T, e *workflow.Executor, s *sim) {
			e.Ack(&aionv1.WorkflowTaskAck{Namespace: "ns", RunId: "ignored", Task: 1, Refused: "not current"})
			if e.CachedRuns() != 1 {
				t.Fatal("a refusal for another run dropped this one")
			}
			e.Ack(&aionv1.WorkflowTaskAck{Namespace: "ns", RunId: s.runID, Task: s.task})
			if e.CachedRuns() != 1 {
				t.Fatal("an accepted result dropped the run")
			}
			e.Ack(&aionv1.WorkflowTaskAck{Namespace: "ns", RunId: s.runID, Task: s.task, Refused: "task timed out"})
		}},
		{"a task that skips an event", workflow.ExecutorOptions{}, func(_ *testing.T, _ *workflow.Executor, s *sim) {
			s.sent++ // the worker would miss the event after the last it saw
		}},
		{"a worker that keeps no run", workflow.ExecutorOptions{CacheSize: -1}, func(*testing.T, *workflow.Executor, *sim) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, tc.opts, register)
			s := twoSteps(t, e, "run")
			s.sticky = true // the server takes the worker to keep the run
			tc.prepare(t, e, s)
			res := s.deliver(false)
			wantFailure(t, "sticky task", res, "sticky_cache_miss", "run run is not kept by this worker")
			// The server then sends the whole history at once.
			s.sticky = false
			wantCmds(t, "full task", s.deliver(false), "activity 2 step 2")
		})
	}
}

func TestAFullHistoryReplacesAKeptRun(t *testing.T) {
	t.Parallel()
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "five", sequential(5))) }
	e := newExecutor(t, workflow.ExecutorOptions{}, register)
	s := newSim(t, e, "five", nil)
	s.step()
	s.completeActivity(1, 1)
	wantCmds(t, "full history", s.deliver(true), "activity 2 step 2")
	wantCmds(t, "again", s.deliver(true), "activity 2 step 2")
	if e.CachedRuns() != 1 {
		t.Fatalf("%d runs kept, want 1", e.CachedRuns())
	}
}

func TestInfoDescribesTheRun(t *testing.T) {
	t.Parallel()
	var seen []workflow.Info // what the code saw, in the order it ran
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) {
			seen = append(seen, workflow.GetInfo(ctx))
			if err := workflow.Sleep(ctx, time.Second); err != nil {
				return 0, err
			}
			seen = append(seen, workflow.GetInfo(ctx))
			return 0, nil
		}))
	}
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{BuildID: "b7"}, register), "wf", nil)
	s.events[0].GetWorkflowStarted().ParentWorkflowId = "parent"
	s.events[0].GetWorkflowStarted().ContinuedFromRunId = "earlier"
	s.step()
	s.fireTimer(1)
	s.step()
	fresh := newExecutor(t, workflow.ExecutorOptions{BuildID: "b8"}, register)
	s.replay(fresh, s.lastSeq()-2)
	if len(seen) != 4 {
		t.Fatalf("the code ran %d times, want 4", len(seen))
	}
	want := workflow.Info{Namespace: "ns", WorkflowID: "wf-wf", RunID: "run-wf", WorkflowType: "wf", TaskQueue: "default",
		BuildID: "b7", ParentWorkflowID: "parent", ContinuedFromRunID: "earlier", StartTime: epoch}
	for i, replaying := range []bool{false, false, true, false} {
		w := want
		w.Replaying = replaying
		if i >= 2 {
			w.BuildID = "b8"
		}
		if seen[i] != w {
			t.Errorf("info %d = %+v\nwant %+v", i, seen[i], w)
		}
	}
}

func TestAThousandStepHistoryReplays(t *testing.T) {
	t.Parallel()
	s, register := thousandSteps(t)
	fresh := newExecutor(t, workflow.ExecutorOptions{}, register)
	wantCmds(t, "replay of the closed run", s.replay(fresh, s.lastSeq()))
	wantCmds(t, "replay before the close", s.replay(fresh, s.lastSeq()-2), "close completed 500500")
	wantCmds(t, "replay at step 700", s.replay(fresh, s.tasks[700].seen), "activity 701 step 701")
}

// thousandSteps runs a 1,000-step workflow to its end with sticky tasks and
// returns its history.
func thousandSteps(t testing.TB) (*sim, func(*workflow.Executor)) {
	register := func(e *workflow.Executor) { must(t, workflow.Register(e, "thousand", sequential(1000))) }
	s := newSim(t, newExecutor(t, workflow.ExecutorOptions{}, register), "thousand", nil)
	s.step()
	for i := int64(1); i <= 1000; i++ {
		s.completeActivity(i, i)
		s.step()
	}
	// Started; marker and scheduled; then per step closed, marker and the
	// next scheduled (the last: closed, marker, closed run).
	if n := len(s.events); n != 1+2+1000*3 {
		t.Fatalf("history has %d events", n)
	}
	return s, register
}

func BenchmarkReplay1000Steps(b *testing.B) {
	s, register := thousandSteps(b)
	e := newExecutor(b, workflow.ExecutorOptions{CacheSize: -1}, register)
	b.ReportAllocs()
	for b.Loop() {
		if res := s.replay(e, s.lastSeq()); res.GetFailure() != nil || len(res.GetCommands()) != 0 {
			b.Fatalf("replay: %v %q", res.GetFailure(), cmds(res))
		}
	}
}

// This test is not parallel: it checks, with goleak, that the goroutines
// of runs it dropped are gone, and no other test may start any meanwhile.
func TestEvictedFailedAndFinishedRunsEndTheirGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	register := func(e *workflow.Executor) {
		must(t, workflow.Register(e, "many", func(ctx workflow.Context, fail bool) (int, error) {
			for range 3 {
				workflow.Go(ctx, func(ctx workflow.Context) {
					defer func() { _ = workflow.Sleep(ctx, time.Hour) }() // runs as the coroutine is killed
					_, _ = workflow.ReceiveSignal[int](ctx, "never")
				})
			}
			if _, err := workflow.ReceiveSignal[int](ctx, "go"); err != nil {
				return 0, err
			}
			if fail {
				panic("boom")
			}
			return 1, nil
		}))
	}
	e := workflow.NewExecutor(workflow.ExecutorOptions{CacheSize: 1})
	register(e)
	evicted := newSim(t, e, "many", false)
	evicted.runID = "evicted"
	wantCmds(t, "blocked run", evicted.step())
	failed := newSim(t, e, "many", true)
	failed.runID = "failed"
	failed.signal("go", 1)
	wantFailure(t, "panicking run", failed.deliver(false), "panic", "boom")
	finished := newSim(t, e, "many", false)
	finished.runID = "finished"
	finished.signal("go", 1)
	wantCmds(t, "finished run", finished.step(), "close completed 1") // evicts the blocked run
	if e.CachedRuns() != 1 {
		t.Fatalf("%d runs kept, want only the finished one", e.CachedRuns())
	}
	// Nothing of the three runs may still run: the finished one is kept,
	// but with no goroutine.
}
