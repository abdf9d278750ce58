package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/client"
)

func (a *app) workflowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Start, inspect, signal, query and stop durable workflows",
		Long: `Start, inspect, list, wait for, signal, query, cancel and terminate workflow runs,
and read their history. A workflow is code registered on workers; each run's
steps are recorded in its history, and a completed step never runs again
(docs/workflows.md). Every subcommand prints text by default and JSON with
--output json.`,
		Example: `  aion workflow start --namespace demo --type order --id order-42 --input '{"item":"book","amount":12}'
  aion workflow signal order-42 --namespace demo --name ship --input '{"carrier":"post"}'
  aion workflow get order-42 --namespace demo
  aion workflow wait order-42 --namespace demo
  aion workflow history order-42 --namespace demo --output json`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.workflowStartCommand(), a.workflowGetCommand(), a.workflowListCommand(), a.workflowWaitCommand(),
		a.workflowSignalCommand(), a.workflowQueryCommand(), a.workflowCancelCommand(), a.workflowTerminateCommand(),
		a.workflowHistoryCommand(), a.workflowWhyCommand())
	return cmd
}

func (a *app) workflowWhyCommand() *cobra.Command {
	var ref runRef
	cmd := &cobra.Command{
		Use:   "why WORKFLOW_ID",
		Short: "Explain why a run has no workflow task running",
		Long: `Explain, from the server's live state, why a run's code is not running now: it
waits on its steps (activities, timers, signals, children); no connected worker
serves its workflow type, or none runs its build; every workflow slot is busy
(and how many runs wait before it); its delayed start or a failed workflow
task's backoff has not come (until when); another server of the cluster holds
it. Or that its workflow task runs, and on which worker.`,
		Example: `  aion workflow why order-42 --namespace demo
  aion workflow why order-42 --namespace demo --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				ex, err := h.Why(ctx)
				if err != nil {
					return err
				}
				return a.emit(ex, func(w io.Writer) { fmt.Fprintf(w, "%s: %s\n", ex.Reason, ex.Message) })
			})
		},
	}
	ref.bind(cmd)
	return cmd
}

// runRef holds the flags naming one run.
type runRef struct{ namespace, runID string }

func (r *runRef) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&r.namespace, "namespace", "n", "", "namespace of the workflow (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVar(&r.runID, "run", "", "run id (default: the open run, or else the latest)")
}

func (r *runRef) handle(c *client.Client, id string) (*client.WorkflowHandle, error) {
	if r.namespace == "" {
		return nil, errors.New("--namespace: required")
	}
	return c.Workflow(r.namespace, id, r.runID), nil
}

// withRun calls f with a handle on the run ref names and a context bounded
// like any unary call.
func (a *app) withRun(cmd *cobra.Command, ref *runRef, id string, f func(ctx context.Context, h *client.WorkflowHandle) error) error {
	return a.withClient(cmd.Context(), func(c *client.Client) error {
		h, err := ref.handle(c, id)
		if err != nil {
			return err
		}
		ctx, cancel := a.unary(cmd.Context())
		defer cancel()
		return f(ctx, h)
	})
}

func (a *app) workflowStartCommand() *cobra.Command {
	var (
		ns, typ, tq, id, input, reuse string
		wait                          bool
		waitTimeout                   time.Duration
		start                         startFlags
		flow                          flowFlags
	)
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a workflow run",
		Long: `Start a workflow run: the server records it durably before this command
returns, then gives its first workflow task to a worker of the newest build
that serves the workflow type.

--input is the workflow's JSON input: inline, @FILE, or - for stdin.

With --id the call is idempotent while the run is open: the same id and
request return the open run; the same id with a different request is refused
(AlreadyExists). After the run closed, --id-reuse decides: allow (default),
failed-only (only after a run that did not complete) or reject.

With --wait the command waits for the run to close, prints it, and exits 0
only if it completed (2 otherwise).`,
		Example: `  aion workflow start --namespace demo --type order --id order-42 --input '{"item":"book","amount":12}'
  aion workflow start --namespace demo --type agent --input @task.json --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			if typ == "" {
				return errors.New("--type: required")
			}
			policy, err := parseReuse(reuse)
			if err != nil {
				return err
			}
			delay, at, err := start.parse()
			if err != nil {
				return err
			}
			payload, err := readInput("--input", input, a.stdin)
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				h, err := c.StartWorkflowRaw(ctx, client.StartWorkflowOptions{Namespace: ns, WorkflowID: id, WorkflowType: typ,
					TaskQueue: tq, IDReuse: policy, StartDelay: delay, StartAt: at, Priority: flow.priority,
					FairnessKey: flow.fairness, FairnessWeight: flow.weight, ConcurrencyKey: flow.concurrency}, payload)
				cancel()
				if err != nil {
					return err
				}
				if !wait {
					return a.emit(h.Run, func(w io.Writer) {
						verb := "started"
						if h.Existing {
							verb = "already started"
						}
						fmt.Fprintf(w, "%s workflow %s run %s in namespace %s\n", verb, h.WorkflowID, h.RunID, h.Namespace)
					})
				}
				return a.waitRun(cmd.Context(), c.Workflow(h.Namespace, h.WorkflowID, ""), waitTimeout)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&ns, "namespace", "n", "", "namespace to start in (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVarP(&typ, "type", "t", "", "workflow type (required)")
	fl.StringVarP(&tq, "task-queue", "q", "", "task queue (worker pool); empty means default")
	fl.StringVar(&id, "id", "", "workflow id; makes the start idempotent (default: the server picks one)")
	fl.StringVarP(&input, "input", "i", "", "JSON input: inline, @FILE, or - for stdin")
	fl.StringVar(&reuse, "id-reuse", "allow", "after the id's run closed: allow, failed-only or reject")
	fl.BoolVarP(&wait, "wait", "w", false, "wait for the run to close and print it; exit non-zero unless completed")
	fl.DurationVar(&waitTimeout, "wait-timeout", 0, "give up waiting after this long (0: wait until it closes)")
	start.bind(fl)
	flow.bind(fl, "the run")
	return cmd
}

func parseReuse(s string) (client.IDReuse, error) {
	switch s {
	case "", "allow":
		return client.AllowDuplicate, nil
	case "failed-only":
		return client.AllowDuplicateFailedOnly, nil
	case "reject":
		return client.RejectDuplicate, nil
	}
	return 0, fmt.Errorf("--id-reuse %q: want allow, failed-only or reject", s)
}

// waitRun waits for a run, prints it, and turns a close other than
// completed into exit code 2.
func (a *app) waitRun(ctx context.Context, h *client.WorkflowHandle, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	run, err := h.Wait(ctx)
	if err != nil {
		return err
	}
	if err := a.emit(run, func(w io.Writer) { writeRun(w, run) }); err != nil {
		return err
	}
	if run.Status != client.RunCompleted {
		return &codeError{code: exitNotCompleted, err: fmt.Errorf("workflow %s run %s ended %s", run.WorkflowID, run.RunID, run.Status)}
	}
	return nil
}

func (a *app) workflowGetCommand() *cobra.Command {
	var ref runRef
	cmd := &cobra.Command{
		Use:   "get WORKFLOW_ID",
		Short: "Show a run and the steps it waits on",
		Long: `Show a run: its status, build, input, result or failure, a workflow task failure
it waits on (such as a non-deterministic error naming the step), and each
pending step with the worker running it.`,
		Example: `  aion workflow get order-42 --namespace demo
  aion workflow get order-42 --namespace demo --run 0193c0de... --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				run, err := h.Get(ctx)
				if err != nil {
					return err
				}
				return a.emit(run, func(w io.Writer) { writeRun(w, run) })
			})
		},
	}
	ref.bind(cmd)
	return cmd
}

func (a *app) workflowWaitCommand() *cobra.Command {
	var (
		ref     runRef
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait WORKFLOW_ID",
		Short: "Wait for a run to close and print it",
		Long: `Wait until a run closes, print it, and exit 0 only if it completed (2 if it
failed, was canceled or terminated; 1 on any other error). Without --run a
run that continued as new is followed to its last run.`,
		Example: `  aion workflow wait order-42 --namespace demo --wait-timeout 1m`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				h, err := ref.handle(c, args[0])
				if err != nil {
					return err
				}
				return a.waitRun(cmd.Context(), h, timeout)
			})
		},
	}
	ref.bind(cmd)
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 0, "give up after this long (0: wait until it closes)")
	return cmd
}

func (a *app) workflowListCommand() *cobra.Command {
	var (
		ns, status, typ string
		limit           int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a namespace's runs, newest first",
		Long: `List a namespace's runs, newest first, optionally only those in one status
(running, completed, failed, canceled, terminated, continued_as_new) or of one
type. --limit caps how many are printed (0: all).`,
		Example: `  aion workflow list --namespace demo --status running
  aion workflow list --namespace demo --type order --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			st, err := client.ParseRunStatus(status)
			if err != nil {
				return fmt.Errorf("--status: %w", err)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", limit)
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				opts := client.ListWorkflowsOptions{Namespace: ns, Status: st, WorkflowType: typ}
				if limit > 0 && limit < 1000 {
					opts.PageSize = int32(limit)
				}
				runs := []*client.Run{}
				for {
					page, err := c.ListWorkflows(ctx, opts)
					if err != nil {
						return err
					}
					runs = append(runs, page.Runs...)
					if page.NextPageToken == "" || (limit > 0 && len(runs) >= limit) {
						break
					}
					opts.PageToken = page.NextPageToken
				}
				if limit > 0 && len(runs) > limit {
					runs = runs[:limit]
				}
				return a.emit(runs, func(w io.Writer) { writeRuns(w, runs) })
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&ns, "namespace", "n", "", "namespace to list (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVar(&status, "status", "", "only runs in this status")
	fl.StringVarP(&typ, "type", "t", "", "only runs of this workflow type")
	fl.IntVar(&limit, "limit", 50, "most runs to print (0: all)")
	return cmd
}

func (a *app) workflowSignalCommand() *cobra.Command {
	var (
		ref        runRef
		sig, input string
	)
	cmd := &cobra.Command{
		Use:   "signal WORKFLOW_ID",
		Short: "Send a named signal to an open run",
		Long: `Send a named signal to an open run. The command returns once the signal is in
the run's history: it reaches the workflow's code exactly once, in order, even
if no worker is connected now.`,
		Example: `  aion workflow signal order-42 --namespace demo --name ship --input '{"carrier":"post"}'
  aion workflow signal agent-7 --namespace demo --name approval --input '{"approved":true}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sig == "" {
				return errors.New("--name: required")
			}
			payload, err := readInput("--input", input, a.stdin)
			if err != nil {
				return err
			}
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				if err := h.Signal(ctx, sig, client.Payload(payload)); err != nil {
					return err
				}
				return a.emit(map[string]string{"workflow_id": args[0], "signal": sig}, func(w io.Writer) {
					fmt.Fprintf(w, "signal %s recorded for workflow %s\n", sig, args[0])
				})
			})
		},
	}
	ref.bind(cmd)
	cmd.Flags().StringVar(&sig, "name", "", "signal name (required)")
	cmd.Flags().StringVarP(&input, "input", "i", "", "JSON input: inline, @FILE, or - for stdin")
	return cmd
}

func (a *app) workflowQueryCommand() *cobra.Command {
	var (
		ref        runRef
		qry, input string
	)
	cmd := &cobra.Command{
		Use:   "query WORKFLOW_ID",
		Short: "Ask a run's code for a query handler's answer",
		Long: `Ask a run's code for the answer of one of its query handlers. A worker of the
run's build evaluates it on the run's current state; nothing is written to
history. It fails with Unavailable when no such worker answers in time.`,
		Example: `  aion workflow query agent-7 --namespace demo --name status`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if qry == "" {
				return errors.New("--name: required")
			}
			payload, err := readInput("--input", input, a.stdin)
			if err != nil {
				return err
			}
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				var out client.Payload
				if err := h.Query(ctx, qry, client.Payload(payload), &out); err != nil {
					return err
				}
				return a.emit(out, func(w io.Writer) { fmt.Fprintln(w, payloadText(out)) })
			})
		},
	}
	ref.bind(cmd)
	cmd.Flags().StringVar(&qry, "name", "", "query name (required)")
	cmd.Flags().StringVarP(&input, "input", "i", "", "JSON input: inline, @FILE, or - for stdin")
	return cmd
}

func (a *app) workflowCancelCommand() *cobra.Command {
	var (
		ref    runRef
		reason string
	)
	cmd := &cobra.Command{
		Use:   "cancel WORKFLOW_ID",
		Short: "Ask an open run to stop and clean up",
		Long: `Ask an open run to stop: its running activities and child workflows are
canceled, and its code sees a canceled context, runs its cleanup and closes as
canceled. Use terminate to stop a run without running its code.`,
		Example: `  aion workflow cancel order-42 --namespace demo --reason "customer withdrew"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				run, err := h.Cancel(ctx, reason)
				if err != nil {
					return err
				}
				return a.emit(run, func(w io.Writer) {
					fmt.Fprintf(w, "cancel requested for workflow %s run %s\n", run.WorkflowID, run.RunID)
				})
			})
		},
	}
	ref.bind(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the run's history")
	return cmd
}

func (a *app) workflowTerminateCommand() *cobra.Command {
	var (
		ref    runRef
		reason string
	)
	cmd := &cobra.Command{
		Use:   "terminate WORKFLOW_ID",
		Short: "Close an open run at once without running its code",
		Long: `Close an open run at once as terminated, without running any more of its code;
its running activities and children are canceled.`,
		Example: `  aion workflow terminate order-42 --namespace demo --reason "stuck on bad input"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				run, err := h.Terminate(ctx, reason)
				if err != nil {
					return err
				}
				return a.emit(run, func(w io.Writer) { writeRun(w, run) })
			})
		},
	}
	ref.bind(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the run's failure")
	return cmd
}

func (a *app) workflowHistoryCommand() *cobra.Command {
	var ref runRef
	cmd := &cobra.Command{
		Use:   "history WORKFLOW_ID",
		Short: "Print a run's history, oldest event first",
		Long: `Print a run's history: every event in order with its sequence number, time,
kind and step. --output json prints each event's attributes too.`,
		Example: `  aion workflow history order-42 --namespace demo
  aion workflow history order-42 --namespace demo --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withRun(cmd, &ref, args[0], func(ctx context.Context, h *client.WorkflowHandle) error {
				evs := []client.Event{}
				for ev, err := range h.History(ctx) {
					if err != nil {
						return err
					}
					evs = append(evs, ev)
				}
				return a.emit(evs, func(w io.Writer) {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SEQ\tTIME\tEVENT\tSTEP")
					for _, ev := range evs {
						step := "-"
						if ev.Step > 0 {
							step = fmt.Sprint(ev.Step)
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ev.Seq, when(ev.Time), ev.Kind, step)
					}
					tw.Flush()
				})
			})
		},
	}
	ref.bind(cmd)
	return cmd
}

// writeRun prints one run as aligned "key: value" lines.
func writeRun(w io.Writer, r *client.Run) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("workflow id", r.WorkflowID)
	row("run id", r.RunID)
	row("namespace", r.Namespace)
	row("type", r.WorkflowType)
	row("task queue", r.TaskQueue)
	row("status", string(r.Status))
	row("build", orDash(r.BuildID))
	writePlacement(row, r.Priority, r.FairnessKey, r.FairnessWeight, r.ConcurrencyKey, r.ScheduleID, r.ScheduleTime)
	if len(r.Input) > 0 {
		row("input", payloadText(r.Input))
	}
	if r.Status == client.RunCompleted {
		row("result", payloadText(r.Result))
	}
	if r.Failure != nil {
		row("failure", failureText(r.Failure))
	}
	if r.TaskFailure != "" {
		row("task failure", r.TaskFailure+" (the run waits for fixed code)")
	}
	if r.NextRunID != "" {
		row("continued as", r.NextRunID)
	}
	if r.ParentWorkflowID != "" {
		row("parent", r.ParentWorkflowID+" run "+r.ParentRunID)
	}
	row("history", fmt.Sprintf("%d events", r.HistoryLength))
	row("started", when(r.StartTime))
	row("closed", when(r.CloseTime))
	for _, s := range r.PendingSteps {
		line := s.Kind + " " + orDash(s.Name)
		switch {
		case s.ActivityID != "":
			line += fmt.Sprintf(", activity %s attempt %d", s.ActivityID, s.Attempt)
			if s.WorkerID != 0 {
				line += fmt.Sprintf(" on worker %d", s.WorkerID)
			}
		case !s.FireTime.IsZero():
			line += ", fires " + when(s.FireTime)
		case s.ChildWorkflowID != "":
			line += ", child " + s.ChildWorkflowID
		}
		row(fmt.Sprintf("pending step %d", s.Step), line)
	}
	tw.Flush()
}

// writeRuns prints runs as a table.
func writeRuns(w io.Writer, runs []*client.Run) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW ID\tRUN ID\tTYPE\tSTATUS\tBUILD\tSTARTED")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.WorkflowID, r.RunID, r.WorkflowType, r.Status, orDash(r.BuildID), when(r.StartTime))
	}
	tw.Flush()
}
