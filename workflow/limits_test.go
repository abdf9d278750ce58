package workflow_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/workflow"
)

var big = strings.Repeat("x", 2<<20) // over the 2 MiB payload limit once quoted

type longTypeErr struct{}

func (longTypeErr) Error() string     { return "long type" }
func (longTypeErr) ErrorType() string { return strings.Repeat("t", 300) }

func TestStepsThatBreakTheServersRulesAreErrorsTheCodeSees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(ctx workflow.Context) error
		want string // in the run's failure, which comes with no step taken
	}{
		{"an empty activity type", func(ctx workflow.Context) error {
			_, err := workflow.ExecuteActivity[int](ctx, "", nil).Get(ctx)
			return err
		}, "workflow: ExecuteActivity: activity type: must not be empty"},
		{"an activity type off the name rule", func(ctx workflow.Context) error {
			_, err := workflow.ExecuteActivity[int](ctx, "charge card", nil).Get(ctx)
			return err
		}, `activity type: "charge card" has ' ' at byte 6`},
		{"an activity input over 2 MiB", func(ctx workflow.Context) error {
			_, err := workflow.ExecuteActivity[int](ctx, "a", big).Get(ctx)
			return err
		}, `workflow: activity "a": input string: the input is 2097154 bytes, at most 2097152 allowed`},
		{"a task queue off the name rule", func(ctx workflow.Context) error {
			_, err := workflow.ExecuteActivity[int](ctx, "a", nil, workflow.ActivityOptions{TaskQueue: "gpu pool"}).Get(ctx)
			return err
		}, `ActivityOptions.TaskQueue: "gpu pool" has ' '`},
		{"a child workflow id off the name rule", func(ctx workflow.Context) error {
			_, err := workflow.ExecuteChild[int](ctx, "child", nil, workflow.ChildOptions{WorkflowID: "a\tb"}).Get(ctx)
			return err
		}, `workflow: ExecuteChild: ChildOptions.WorkflowID: "a\tb" has '\t'`},
		{"a side effect name over 128 bytes", func(ctx workflow.Context) error {
			_, err := workflow.SideEffect(ctx, strings.Repeat("n", 129), func() (int, error) { return 1, nil })
			return err
		}, "workflow: SideEffect: side effect name: 129 bytes, at most 128 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
				must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) { return 0, tc.fn(ctx) }))
			})
			res := newSim(t, e, "wf", nil).step()
			c := cmds(res)
			if len(c) != 1 || !strings.HasPrefix(c[0], "close failed workflow_error: ") || !strings.Contains(c[0], tc.want) {
				t.Fatalf("commands %q, want only a failed close naming %q", c, tc.want)
			}
		})
	}
}

func TestResultsAndFailuresAreKeptWithinTheLimits(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "big-result", func(workflow.Context, struct{}) (string, error) { return big, nil }))
		must(t, workflow.Register(e, "big-continue", func(workflow.Context, struct{}) (string, error) {
			return "", workflow.NewContinueAsNewError(big)
		}))
		must(t, workflow.Register(e, "long-type", func(workflow.Context, struct{}) (string, error) { return "", longTypeErr{} }))
		must(t, workflow.Register(e, "long-error", func(workflow.Context, struct{}) (string, error) {
			return "", errors.New(strings.Repeat("é", 20000) + "\xff")
		}))
		must(t, workflow.Register(e, "big-effect", func(ctx workflow.Context, _ struct{}) (string, error) {
			_, err := workflow.SideEffect(ctx, "blob", func() (string, error) { return big, nil })
			return "", err
		}))
		must(t, workflow.Register(e, "big-panic", func(workflow.Context, struct{}) (string, error) {
			panic(strings.Repeat("p", 100000))
		}))
	})
	closeOf := func(typ string) (*aionv1.WorkflowTaskResult, *aionv1.CloseWorkflowCommand) {
		res := newSim(t, e, typ, nil).step()
		if len(res.GetCommands()) == 0 {
			t.Fatalf("%s: commands %q", typ, cmds(res))
		}
		return res, res.GetCommands()[len(res.GetCommands())-1].GetClose()
	}
	if _, cl := closeOf("big-result"); cl.GetFailure().GetType() != "result_too_large" || len(cl.GetResult()) != 0 {
		t.Errorf("a result over 2 MiB: close %v, want failed result_too_large", cl.GetFailure())
	}
	if _, cl := closeOf("big-continue"); cl.GetFailure().GetType() != "input_too_large" {
		t.Errorf("a next input over 2 MiB: close %v, want failed input_too_large", cl.GetFailure())
	}
	if _, cl := closeOf("long-type"); len(cl.GetFailure().GetType()) != 128 {
		t.Errorf("a 300-byte error type: %d bytes sent, want 128", len(cl.GetFailure().GetType()))
	}
	if _, cl := closeOf("long-error"); len(cl.GetFailure().GetMessage()) > 16<<10 || !utf8.ValidString(cl.GetFailure().GetMessage()) {
		t.Errorf("a 40 KB error message: %d bytes sent, valid UTF-8 %v; want at most 16 KiB of valid UTF-8",
			len(cl.GetFailure().GetMessage()), utf8.ValidString(cl.GetFailure().GetMessage()))
	}
	res, cl := closeOf("big-effect")
	if c := cmds(res); len(c) != 2 || c[0] != "side-effect 1 blob" || len(res.GetCommands()[0].GetRecordSideEffect().GetValue()) > 1000 ||
		!strings.Contains(cl.GetFailure().GetMessage(), `side effect "blob": value string: the value is 2097154 bytes`) {
		t.Errorf("a side effect over 2 MiB: %q, want its error recorded instead", c)
	}
	res = newSim(t, e, "big-panic", nil).deliver(false)
	if f := res.GetFailure(); f.GetType() != "panic" || len(f.GetMessage()) > 16<<10 || len(f.GetDetails()) > 256<<10 {
		t.Errorf("a 100 KB panic: failure of %d bytes, details %d bytes", len(f.GetMessage()), len(f.GetDetails()))
	}
}

func TestQueryAnswersAreKeptWithinTheLimits(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, workflow.ExecutorOptions{}, func(e *workflow.Executor) {
		must(t, workflow.Register(e, "wf", func(ctx workflow.Context, _ struct{}) (int, error) {
			must(t, workflow.SetQueryHandler(ctx, "big", func(struct{}) (string, error) { return big, nil }))
			must(t, workflow.SetQueryHandler(ctx, "long-error", func(struct{}) (string, error) {
				return "", errors.New(strings.Repeat("e", 20000))
			}))
			return 0, workflow.Sleep(ctx, 1)
		}))
	})
	s := newSim(t, e, "wf", nil)
	s.step()
	res := s.queryOnly(false, query("q1", "big", ""), query("q2", "long-error", ""))
	a := res.GetQueryAnswers()
	if len(a) != 2 || len(a[0].GetResult()) != 0 || !strings.Contains(a[0].GetError(), `query "big": the result is 2097154 bytes, at most 2097152 allowed`) {
		t.Fatalf("answer to a 2 MiB result: %.200v", a[0])
	}
	if len(a[1].GetError()) != 16<<10 {
		t.Fatalf("a 20 KB query error was sent as %d bytes, want 16 KiB", len(a[1].GetError()))
	}
}
