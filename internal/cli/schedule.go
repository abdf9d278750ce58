package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/aion-run/aion/client"
)

func (a *app) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Create, inspect, pause, trigger, backfill and delete schedules",
		Long: `Schedules start a workflow or schedule an activity on a cron expression (in a
time zone) or an interval. Each tick fires exactly once, across restarts and
across the servers of a cluster: what a tick starts is named
<schedule-id>@<the tick's nominal time, RFC 3339, UTC> and carries the
schedule id and the tick's time.

While an earlier action is still open, the overlap policy decides what a tick
does: skip (the default), buffer_one (fire once it closes; at most one waits),
cancel_previous, or allow_all. A tick found later than the catch-up window
(default 1m; such as one that fell while no server ran) is missed, and the
catch-up policy decides: all (fire every missed tick), one (the default: only
the latest), or skip. docs/schedules.md has the whole model.

Every subcommand prints text by default and JSON with --output json.`,
		Example: `  aion schedule create nightly --namespace demo --cron '0 2 * * *' --tz Europe/Berlin --workflow-type report
  aion schedule create poll --namespace demo --every 30s --activity-type poll --input '{"url":"https://example.com"}' --overlap skip
  aion schedule get nightly --namespace demo
  aion schedule pause nightly --namespace demo --note "quarter close"
  aion schedule trigger nightly --namespace demo
  aion schedule backfill nightly --namespace demo --start-at 2026-03-01T00:00:00Z --end-at 2026-03-08T00:00:00Z`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.scheduleCreateCommand(), a.scheduleUpdateCommand(), a.scheduleGetCommand(), a.scheduleListCommand(),
		a.schedulePauseCommand(true), a.schedulePauseCommand(false), a.scheduleTriggerCommand(), a.scheduleBackfillCommand(),
		a.scheduleDeleteCommand())
	return cmd
}

// scheduleDefFlags are the flags that define a schedule: its spec, action
// and policy.
type scheduleDefFlags struct {
	cron, tz                                                  string
	every, offset, jitter                                     time.Duration
	startAt, endAt                                            string
	workflowType, activityType                                string
	taskQueue, node, input                                    string
	overlap, catchUp                                          string
	catchUpWindow                                             time.Duration
	scheduleToStart, startToClose, scheduleToClose, heartbeat time.Duration
	maxAttempts                                               int32
	initialInterval, maxInterval                              time.Duration
	backoff                                                   float64
	nonRetryable                                              []string
	flow                                                      flowFlags
}

func (f *scheduleDefFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.cron, "cron", "", "cron expression: 5 fields (minute first), 6 with seconds first, or @daily, @hourly, …")
	fl.StringVar(&f.tz, "tz", "", "IANA time zone the cron expression is read in, such as Europe/Berlin (default UTC)")
	fl.DurationVar(&f.every, "every", 0, "interval between ticks instead of --cron (at least 1s): ticks at the Unix epoch + offset + k*every")
	fl.DurationVar(&f.offset, "offset", 0, "shift of an interval's ticks from the epoch, below --every (e.g. --every 1h --offset 15m fires at :15)")
	fl.DurationVar(&f.jitter, "jitter", 0, "fire each tick up to this much after its time, by an amount every server computes alike")
	fl.StringVar(&f.startAt, "start-at", "", "no tick before this RFC 3339 time")
	fl.StringVar(&f.endAt, "end-at", "", "no tick at or after this RFC 3339 time")
	fl.StringVar(&f.workflowType, "workflow-type", "", "each tick starts a run of this workflow type")
	fl.StringVar(&f.activityType, "activity-type", "", "each tick schedules an activity of this type")
	fl.StringVarP(&f.taskQueue, "task-queue", "q", "", "task queue (worker pool) of what each tick starts; empty means default")
	fl.StringVar(&f.node, "node", "", "pin each activity to workers on this node")
	fl.StringVarP(&f.input, "input", "i", "", "JSON input of each run or activity: inline, @FILE, or - for stdin")
	fl.StringVar(&f.overlap, "overlap", "", "while an earlier action is open: skip (default), buffer_one, cancel_previous or allow_all")
	fl.StringVar(&f.catchUp, "catchup", "", "ticks later than the catch-up window: all, one (default) or skip")
	fl.DurationVar(&f.catchUpWindow, "catchup-window", 0, "how late a tick may fire and still count as on time (default 1m)")
	fl.DurationVar(&f.scheduleToStart, "schedule-to-start", 0, "activity: longest wait for a worker (0: server default)")
	fl.DurationVar(&f.startToClose, "start-to-close", 0, "activity: longest run of one attempt (0: server default)")
	fl.DurationVar(&f.scheduleToClose, "schedule-to-close", 0, "activity: longest life, retries included (0: server default)")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 0, "activity: longest gap between heartbeats (0: not required)")
	fl.Int32Var(&f.maxAttempts, "max-attempts", 0, "activity retry policy: most attempts including the first")
	fl.DurationVar(&f.initialInterval, "initial-interval", 0, "activity retry policy: delay before the second attempt")
	fl.Float64Var(&f.backoff, "backoff", 0, "activity retry policy: factor applied to the delay after each failure")
	fl.DurationVar(&f.maxInterval, "max-interval", 0, "activity retry policy: longest delay between attempts")
	fl.StringSliceVar(&f.nonRetryable, "non-retryable", nil, "activity retry policy: failure types never retried")
	f.flow.bind(fl, "the action")
}

func parseTimeFlag(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: not an RFC 3339 time such as 2026-12-24T18:00:00Z", flag, v)
	}
	return t, nil
}

// apply sets on d what the flags changed (all of them for a create, where
// d starts empty): a trigger or an action kind given replaces the other.
func (f *scheduleDefFlags) apply(cmd *cobra.Command, stdin io.Reader, d *client.ScheduleDefinition) error {
	fl := cmd.Flags()
	set := fl.Changed
	if set("cron") && set("every") && f.cron != "" && f.every != 0 {
		return errors.New("--cron and --every: give one")
	}
	if set("workflow-type") && set("activity-type") && f.workflowType != "" && f.activityType != "" {
		return errors.New("--workflow-type and --activity-type: give one")
	}
	sp, act, pol := &d.Spec, &d.Action, &d.Policy
	if set("cron") {
		sp.Cron, sp.Every, sp.Offset = f.cron, 0, 0
	}
	if set("every") {
		sp.Every, sp.Cron, sp.TimeZone = f.every, "", ""
	}
	if set("tz") {
		sp.TimeZone = f.tz
	}
	if set("offset") {
		sp.Offset = f.offset
	}
	if set("jitter") {
		sp.Jitter = f.jitter
	}
	var err error
	if set("start-at") {
		if sp.StartAt, err = parseTimeFlag("--start-at", f.startAt); err != nil {
			return err
		}
	}
	if set("end-at") {
		if sp.EndAt, err = parseTimeFlag("--end-at", f.endAt); err != nil {
			return err
		}
	}
	if set("workflow-type") {
		act.WorkflowType, act.ActivityType = f.workflowType, ""
	}
	if set("activity-type") {
		act.ActivityType, act.WorkflowType = f.activityType, ""
	}
	if set("task-queue") {
		act.TaskQueue = f.taskQueue
	}
	if set("node") {
		act.Node = f.node
	}
	if set("input") {
		if act.Input, err = readInput("--input", f.input, stdin); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		to   *time.Duration
	}{
		{"schedule-to-start", f.scheduleToStart, &act.ScheduleToStartTimeout},
		{"start-to-close", f.startToClose, &act.StartToCloseTimeout},
		{"schedule-to-close", f.scheduleToClose, &act.ScheduleToCloseTimeout},
		{"heartbeat-timeout", f.heartbeat, &act.HeartbeatTimeout},
	} {
		if set(d.flag) {
			*d.to = d.v
		}
	}
	if set("max-attempts") || set("initial-interval") || set("backoff") || set("max-interval") || set("non-retryable") {
		if act.RetryPolicy == nil {
			act.RetryPolicy = &client.RetryPolicy{}
		}
		r := act.RetryPolicy
		if set("max-attempts") {
			r.MaximumAttempts = f.maxAttempts
		}
		if set("initial-interval") {
			r.InitialInterval = f.initialInterval
		}
		if set("backoff") {
			r.BackoffCoefficient = f.backoff
		}
		if set("max-interval") {
			r.MaximumInterval = f.maxInterval
		}
		if set("non-retryable") {
			r.NonRetryableErrorTypes = f.nonRetryable
		}
	}
	if set("priority") {
		act.Priority = f.flow.priority
	}
	if set("fairness-key") {
		act.FairnessKey = f.flow.fairness
	}
	if set("fairness-weight") {
		act.FairnessWeight = f.flow.weight
	}
	if set("concurrency-key") {
		act.ConcurrencyKey = f.flow.concurrency
	}
	if set("overlap") {
		if pol.Overlap, err = client.ParseOverlap(f.overlap); err != nil {
			return fmt.Errorf("--overlap: %w", err)
		}
	}
	if set("catchup") {
		if pol.CatchUp, err = client.ParseCatchUp(f.catchUp); err != nil {
			return fmt.Errorf("--catchup: %w", err)
		}
	}
	if set("catchup-window") {
		pol.CatchUpWindow = f.catchUpWindow
	}
	return nil
}

func bindNamespace(fl *pflag.FlagSet, ns *string) {
	fl.StringVarP(ns, "namespace", "n", "", "namespace of the schedule (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
}

// withSchedules checks the namespace and calls f with a client and a
// context bounded like any unary call.
func (a *app) withSchedules(cmd *cobra.Command, ns string, f func(ctx context.Context, c *client.Client) error) error {
	if ns == "" {
		return errors.New("--namespace: required")
	}
	return a.withClient(cmd.Context(), func(c *client.Client) error {
		ctx, cancel := a.unary(cmd.Context())
		defer cancel()
		return f(ctx, c)
	})
}

func (a *app) scheduleCreateCommand() *cobra.Command {
	var (
		ns, note string
		paused   bool
		f        scheduleDefFlags
	)
	cmd := &cobra.Command{
		Use:   "create SCHEDULE_ID",
		Short: "Create a schedule",
		Long: `Create a schedule: when it ticks (--cron with --tz, or --every with --offset),
what each tick starts (--workflow-type or --activity-type, with --input and
the options of a run or an activity), and its policies (--overlap, --catchup,
--catchup-window). Its ticks after this call fire; earlier ones do not.

A cron expression has 5 fields (minute hour day-of-month month day-of-week),
or 6 with seconds first; @daily, @hourly and the like work too. It is read in
--tz (default UTC). On the day the clocks go forward a wall-clock time that
does not exist does not fire; on the day they go back a time that occurs twice
fires once, unless the hour field is * (then both occurrences fire).

The call is idempotent: creating the same id with the same definition again
returns the schedule; a different definition is refused (AlreadyExists).`,
		Example: `  aion schedule create nightly --namespace demo --cron '0 2 * * *' --tz Europe/Berlin --workflow-type report
  aion schedule create poll --namespace demo --every 30s --activity-type poll --overlap skip --catchup skip
  aion schedule create quarter --namespace demo --cron '0 9 1 1,4,7,10 *' --workflow-type close-books --paused --note "from Q3"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := client.ScheduleDefinition{Namespace: ns, ID: args[0], Paused: paused, Note: note}
			if err := f.apply(cmd, a.stdin, &d); err != nil {
				return err
			}
			if d.Spec.Cron == "" && d.Spec.Every == 0 {
				return errors.New("--cron or --every: required")
			}
			if d.Action.WorkflowType == "" && d.Action.ActivityType == "" {
				return errors.New("--workflow-type or --activity-type: required")
			}
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				v, existing, err := c.CreateSchedule(ctx, d)
				if err != nil {
					return err
				}
				verb := "created"
				if existing {
					verb = "already created"
				}
				return a.emit(v, func(w io.Writer) {
					fmt.Fprintf(w, "%s schedule %s in namespace %s\n", verb, v.ID, v.Namespace)
					printUpcoming(w, v)
				})
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	f.bind(fl)
	fl.BoolVar(&paused, "paused", false, "create it paused")
	fl.StringVar(&note, "note", "", "note, such as why it is paused")
	return cmd
}

func (a *app) scheduleUpdateCommand() *cobra.Command {
	var (
		ns string
		f  scheduleDefFlags
	)
	cmd := &cobra.Command{
		Use:   "update SCHEDULE_ID",
		Short: "Change a schedule's spec, action or policy",
		Long: `Change a schedule: the flags given replace those parts of its definition, the
rest stay (--cron replaces an interval and --every a cron expression;
--workflow-type replaces an activity action and --activity-type a workflow
one). A new spec counts from now: its ticks at or before this call do not
fire. Use pause and resume to pause it.`,
		Example: `  aion schedule update nightly --namespace demo --cron '0 3 * * *'
  aion schedule update poll --namespace demo --overlap buffer_one --catchup all`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				cur, err := c.GetSchedule(ctx, ns, args[0], 1)
				if err != nil {
					return err
				}
				d := client.ScheduleDefinition{Namespace: ns, ID: args[0], Spec: cur.Spec, Action: cur.Action, Policy: cur.Policy}
				if err := f.apply(cmd, a.stdin, &d); err != nil {
					return err
				}
				v, err := c.UpdateSchedule(ctx, d)
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) {
					fmt.Fprintf(w, "updated schedule %s in namespace %s\n", v.ID, v.Namespace)
					printUpcoming(w, v)
				})
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	f.bind(fl)
	return cmd
}

func (a *app) scheduleGetCommand() *cobra.Command {
	var (
		ns       string
		upcoming int
	)
	cmd := &cobra.Command{
		Use:   "get SCHEDULE_ID",
		Short: "Show a schedule, its next ticks and its recent actions",
		Long: `Show a schedule: its spec, action and policies, whether it is paused, its
next ticks (nominal time and the instant it fires, jitter included), how many
ticks fired, were skipped by the overlap policy or missed under the catch-up
policy, and its recent actions (what each tick became, with the workflow or
activity id it started).`,
		Example: `  aion schedule get nightly --namespace demo --upcoming 10
  aion schedule get nightly --namespace demo --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				v, err := c.GetSchedule(ctx, ns, args[0], upcoming)
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) { printSchedule(w, v) })
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	fl.IntVar(&upcoming, "upcoming", 5, "how many upcoming ticks to show (at most 100)")
	return cmd
}

func (a *app) scheduleListCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List a namespace's schedules",
		Long:    `List a namespace's schedules, ordered by id, with their trigger, action, whether they are paused, how many ticks fired, the last tick and the next one ("-" while paused or past its end).`,
		Example: `  aion schedule list --namespace demo`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				var all []*client.ScheduleView
				token := ""
				for {
					page, err := c.ListSchedules(ctx, ns, 1000, token)
					if err != nil {
						return err
					}
					all = append(all, page.Schedules...)
					if page.NextPageToken == "" || page.NextPageToken == token {
						break
					}
					token = page.NextPageToken
				}
				if all == nil {
					all = []*client.ScheduleView{}
				}
				return a.emit(all, func(w io.Writer) {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tTRIGGER\tACTION\tOVERLAP\tPAUSED\tFIRED\tLAST TICK\tNEXT TICK")
					for _, v := range all {
						next := "-"
						if len(v.Upcoming) > 0 {
							next = at(v.Upcoming[0].Nominal)
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%d\t%s\t%s\n", v.ID, triggerText(v.Spec), actionText(v.Action), v.Policy.Overlap,
							v.Paused, v.Fired, at(v.LastTick), next)
					}
					tw.Flush()
				})
			})
		},
	}
	bindNamespace(cmd.Flags(), &ns)
	return cmd
}

func (a *app) schedulePauseCommand(pause bool) *cobra.Command {
	var ns, note string
	use, short, long, example := "pause SCHEDULE_ID", "Pause a schedule",
		`Pause a schedule: its ticks stop firing until it is resumed. --note says why
(shown by get). Fires already decided are still carried out.`,
		`  aion schedule pause nightly --namespace demo --note "quarter close"`
	if !pause {
		use, short, long, example = "resume SCHEDULE_ID", "Resume a paused schedule",
			`Resume a paused schedule: its ticks fire again from now. Ticks that fell while
it was paused do not fire; backfill them if they should. --note replaces the
pause's note (empty clears it).`,
			`  aion schedule resume nightly --namespace demo`
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				call, verb := c.PauseSchedule, "paused"
				if !pause {
					call, verb = c.ResumeSchedule, "resumed"
				}
				v, err := call(ctx, ns, args[0], note)
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) {
					fmt.Fprintf(w, "%s schedule %s in namespace %s\n", verb, v.ID, v.Namespace)
					printUpcoming(w, v)
				})
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	fl.StringVar(&note, "note", "", "why")
	return cmd
}

func (a *app) scheduleTriggerCommand() *cobra.Command {
	var ns, overlap string
	cmd := &cobra.Command{
		Use:   "trigger SCHEDULE_ID",
		Short: "Fire a schedule once now",
		Long: `Fire a schedule once now, paused or not, with this moment as the tick's
nominal time. The command returns once the action started (or the overlap
policy skipped or buffered it) and prints what became of it. --overlap
overrides the schedule's overlap policy for this fire.`,
		Example: `  aion schedule trigger nightly --namespace demo
  aion schedule trigger nightly --namespace demo --overlap allow_all`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := client.ParseOverlap(overlap)
			if err != nil {
				return fmt.Errorf("--overlap: %w", err)
			}
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				v, err := c.TriggerSchedule(ctx, ns, args[0], o)
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) {
					if n := len(v.Recent); n > 0 {
						r := v.Recent[n-1]
						fmt.Fprintf(w, "triggered schedule %s: %s %s", v.ID, r.Outcome, r.ActionID)
						if r.Detail != "" {
							fmt.Fprintf(w, " (%s)", r.Detail)
						}
						fmt.Fprintln(w)
					}
				})
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	fl.StringVar(&overlap, "overlap", "", "overlap policy for this fire (default: the schedule's)")
	return cmd
}

func (a *app) scheduleBackfillCommand() *cobra.Command {
	var ns, start, end, overlap string
	cmd := &cobra.Command{
		Use:   "backfill SCHEDULE_ID",
		Short: "Fire a schedule's ticks of a past time range",
		Long: `Fire the schedule's ticks in [--start-at, --end-at), a range in the past,
oldest first, each with its own nominal time, under --overlap (default
allow_all). A tick that fired already does not fire again. The server works
through the ticks after this command returns; get shows their progress.`,
		Example: `  aion schedule backfill nightly --namespace demo --start-at 2026-03-01T00:00:00Z --end-at 2026-03-08T00:00:00Z`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseTimeFlag("--start-at", start)
			if err != nil {
				return err
			}
			to, err := parseTimeFlag("--end-at", end)
			if err != nil {
				return err
			}
			if from.IsZero() || to.IsZero() {
				return errors.New("--start-at and --end-at: required")
			}
			o, err := client.ParseOverlap(overlap)
			if err != nil {
				return fmt.Errorf("--overlap: %w", err)
			}
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				v, err := c.BackfillSchedule(ctx, ns, args[0], from, to, o)
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) {
					fmt.Fprintf(w, "backfill of schedule %s from %s to %s accepted (%d waiting)\n", v.ID,
						from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), v.BackfillsWaiting)
				})
			})
		},
	}
	fl := cmd.Flags()
	bindNamespace(fl, &ns)
	fl.StringVar(&start, "start-at", "", "first instant of the range, RFC 3339 (required)")
	fl.StringVar(&end, "end-at", "", "end of the range (exclusive), RFC 3339, not after now (required)")
	fl.StringVar(&overlap, "overlap", "", "overlap policy for the backfilled ticks (default allow_all)")
	return cmd
}

func (a *app) scheduleDeleteCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:     "delete SCHEDULE_ID",
		Short:   "Delete a schedule",
		Long:    `Delete a schedule. The workflows and activities it started are left alone.`,
		Example: `  aion schedule delete nightly --namespace demo`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSchedules(cmd, ns, func(ctx context.Context, c *client.Client) error {
				if err := c.DeleteSchedule(ctx, ns, args[0]); err != nil {
					return err
				}
				return a.emit(map[string]string{"namespace": ns, "schedule_id": args[0], "deleted": "true"}, func(w io.Writer) {
					fmt.Fprintf(w, "deleted schedule %s in namespace %s\n", args[0], ns)
				})
			})
		},
	}
	bindNamespace(cmd.Flags(), &ns)
	return cmd
}

// at shows an instant in UTC, "-" for none.
func at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func triggerText(sp client.ScheduleSpec) string {
	var s string
	if sp.Cron != "" {
		s = "cron " + sp.Cron
		if sp.TimeZone != "" {
			s += " (" + sp.TimeZone + ")"
		}
	} else {
		s = "every " + sp.Every.String()
		if sp.Offset != 0 {
			s += " +" + sp.Offset.String()
		}
	}
	if sp.Jitter != 0 {
		s += " jitter " + sp.Jitter.String()
	}
	return s
}

func actionText(a client.ScheduleAction) string {
	if a.WorkflowType != "" {
		return "workflow " + a.WorkflowType
	}
	return "activity " + a.ActivityType
}

func printUpcoming(w io.Writer, v *client.ScheduleView) {
	if v.Paused {
		fmt.Fprintf(w, "paused: %s\n", v.Note)
		return
	}
	if len(v.Upcoming) > 0 {
		fmt.Fprintf(w, "next tick: %s\n", at(v.Upcoming[0].Nominal))
	}
}

func printSchedule(w io.Writer, v *client.ScheduleView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "schedule:\t%s (namespace %s)\n", v.ID, v.Namespace)
	fmt.Fprintf(tw, "trigger:\t%s\n", triggerText(v.Spec))
	if !v.Spec.StartAt.IsZero() || !v.Spec.EndAt.IsZero() {
		fmt.Fprintf(tw, "between:\t%s and %s\n", at(v.Spec.StartAt), at(v.Spec.EndAt))
	}
	act := actionText(v.Action)
	if v.Action.TaskQueue != "" {
		act += " on task queue " + v.Action.TaskQueue
	}
	fmt.Fprintf(tw, "action:\t%s\n", act)
	fmt.Fprintf(tw, "policy:\toverlap %s, catch-up %s within %s\n", v.Policy.Overlap, v.Policy.CatchUp, v.Policy.CatchUpWindow)
	state := "active"
	if v.Paused {
		state = "paused"
		if v.Note != "" {
			state += ": " + v.Note
		}
	}
	fmt.Fprintf(tw, "state:\t%s\n", state)
	fmt.Fprintf(tw, "ticks:\t%d fired, %d skipped, %d missed; last %s\n", v.Fired, v.Skipped, v.Missed, at(v.LastTick))
	if !v.BufferedTick.IsZero() {
		fmt.Fprintf(tw, "buffered:\t%s\n", at(v.BufferedTick))
	}
	if len(v.RunningActions) > 0 {
		fmt.Fprintf(tw, "open:\t%s\n", strings.Join(v.RunningActions, ", "))
	}
	if v.PendingFires > 0 || v.BackfillsWaiting > 0 {
		fmt.Fprintf(tw, "waiting:\t%d fires, %d backfills\n", v.PendingFires, v.BackfillsWaiting)
	}
	tw.Flush()
	if len(v.Upcoming) > 0 {
		fmt.Fprintln(w, "upcoming:")
		for _, t := range v.Upcoming {
			line := "  " + at(t.Nominal)
			if !t.FireAt.Equal(t.Nominal) {
				line += " (fires " + at(t.FireAt) + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	if len(v.Recent) > 0 {
		fmt.Fprintln(w, "recent:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range v.Recent {
			what := r.ActionID
			if r.Count > 1 {
				what = fmt.Sprintf("%d ticks from %s", r.Count, at(r.First))
			}
			if r.Detail != "" {
				what += " (" + r.Detail + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", at(r.Nominal), r.Outcome, r.Origin, what)
		}
		tw.Flush()
	}
}
