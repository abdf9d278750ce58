package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/aion-run/aion/client"
)

func (a *app) activityCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "activity",
		Short: "Schedule, inspect, list, wait for, cancel and steer activities",
		Long: `Schedule, inspect, list, wait for, cancel and steer (intervene in) activities.
Every subcommand prints text by default and JSON with --output json.`,
		Example: `  aion activity schedule --namespace demo --type echo --input '{"hello":"world"}' --wait
  aion activity list --namespace demo --state failed
  aion activity get 0193c0de-... --namespace demo --output json
  aion activity cancel 0193c0de-... --namespace demo --reason "not needed"
  aion activity intervene 0193c0de-... --namespace demo --inject "check the logs first"`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.scheduleCommand(), a.getCommand(), a.listCommand(), a.waitCommand(), a.cancelCommand(), a.interveneCommand(),
		a.whyCommand())
	return cmd
}

// scheduleFlags are the flags of `aion activity schedule`.
type scheduleFlags struct {
	namespace, taskQueue, activityType, input, id, node string

	wait        bool
	waitTimeout time.Duration

	scheduleToStart, startToClose, scheduleToClose, heartbeat time.Duration

	maxAttempts     int32
	initialInterval time.Duration
	backoff         float64
	maxInterval     time.Duration
	nonRetryable    []string

	start startFlags
	flow  flowFlags
}

// flowFlags place work in its pool: priority, fairness and concurrency keys,
// for activity schedule and workflow start.
type flowFlags struct {
	priority, weight      int
	fairness, concurrency string
}

func (f *flowFlags) bind(fl *pflag.FlagSet, what string) {
	fl.IntVar(&f.priority, "priority", 0, "priority within the pool: 1 is dispatched first, 5 last (0: the default 3)")
	fl.StringVar(&f.fairness, "fairness-key", "", what+"'s fairness key (a tenant, say): a pool's free slots are shared between keys by weight")
	fl.IntVar(&f.weight, "fairness-weight", 0, "weight of the fairness key's share, 1 to 1000 (0: 1)")
	fl.StringVar(&f.concurrency, "concurrency-key", "", "key the namespace's concurrency and per-key rate limits count "+what+" under")
}

// startFlags are the delayed-start flags of activity schedule and workflow
// start.
type startFlags struct {
	in time.Duration
	at string
}

func (f *startFlags) bind(fl *pflag.FlagSet) {
	fl.DurationVar(&f.in, "start-in", 0, "delayed start: durable now, ready after this long (e.g. 10m)")
	fl.StringVar(&f.at, "start-at", "", "delayed start: durable now, ready at this RFC 3339 time (e.g. 2026-12-24T18:00:00Z)")
}

// parse returns the delay or start time the flags give, at most one.
func (f *startFlags) parse() (time.Duration, time.Time, error) {
	if f.in < 0 {
		return 0, time.Time{}, fmt.Errorf("--start-in %v: must not be negative", f.in)
	}
	if f.at == "" {
		return f.in, time.Time{}, nil
	}
	if f.in != 0 {
		return 0, time.Time{}, errors.New("--start-in and --start-at: give at most one")
	}
	at, err := parseTimeFlag("--start-at", f.at)
	return 0, at, err
}

// options builds the schedule options; the retry policy is set only when a
// retry flag was given.
func (f *scheduleFlags) options(cmd *cobra.Command) client.ScheduleOptions {
	o := client.ScheduleOptions{
		Namespace:              f.namespace,
		ID:                     f.id,
		TaskQueue:              f.taskQueue,
		ActivityType:           f.activityType,
		Node:                   f.node,
		ScheduleToStartTimeout: f.scheduleToStart,
		StartToCloseTimeout:    f.startToClose,
		ScheduleToCloseTimeout: f.scheduleToClose,
		HeartbeatTimeout:       f.heartbeat,
		Priority:               f.flow.priority,
		FairnessKey:            f.flow.fairness,
		FairnessWeight:         f.flow.weight,
		ConcurrencyKey:         f.flow.concurrency,
	}
	fl := cmd.Flags()
	if fl.Changed("max-attempts") || fl.Changed("initial-interval") || fl.Changed("backoff") ||
		fl.Changed("max-interval") || fl.Changed("non-retryable") {
		o.RetryPolicy = &client.RetryPolicy{
			InitialInterval:        f.initialInterval,
			BackoffCoefficient:     f.backoff,
			MaximumInterval:        f.maxInterval,
			MaximumAttempts:        f.maxAttempts,
			NonRetryableErrorTypes: f.nonRetryable,
		}
	}
	return o
}

func (a *app) scheduleCommand() *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Schedule an activity",
		Long: `Schedule an activity: the server records it durably before this command
returns, then pushes it to an eligible worker.

--input is the activity's JSON input: inline, @FILE to read a file, or - to
read stdin. Invalid JSON is refused before anything is sent.

With --id the call is idempotent: the same id and request return the existing
activity; the same id with a different request is refused (AlreadyExists).

With --wait the command waits for the outcome, prints it, and exits 0 only if
the activity completed (2 if it failed, was canceled or timed out; 1 on any
other error).`,
		Example: `  aion activity schedule --namespace demo --type echo --input '{"hello":"world"}' --wait
  aion activity schedule --namespace demo --type sleep --input '{"ms":5000}' --heartbeat-timeout 3s
  aion activity schedule --namespace demo --type fail --input '{"times":2}' --max-attempts 3 --initial-interval 200ms --wait
  aion activity schedule --namespace gpu --task-queue gpu --type render --input @job.json --id render-42 --node gpu-a
  cat job.json | aion activity schedule --namespace demo --type echo --input -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.namespace == "" {
				return errors.New("--namespace: required")
			}
			if f.activityType == "" {
				return errors.New("--type: required")
			}
			payload, err := readInput("--input", f.input, a.stdin)
			if err != nil {
				return err
			}
			opts := f.options(cmd)
			if opts.StartDelay, opts.StartAt, err = f.start.parse(); err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				h, err := c.ScheduleRaw(ctx, opts, payload)
				cancel()
				if err != nil {
					return err
				}
				if !f.wait {
					return a.emit(h.Activity, func(w io.Writer) {
						verb := "scheduled"
						if h.Existing {
							verb = "already scheduled"
						}
						fmt.Fprintf(w, "%s activity %s in namespace %s\n", verb, h.ID, h.Namespace)
					})
				}
				return a.waitAndPrint(cmd.Context(), c, h.Namespace, h.ID, f.waitTimeout)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.namespace, "namespace", "n", "", "namespace to schedule in (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVarP(&f.taskQueue, "task-queue", "q", "", "task queue (worker pool); empty means default")
	fl.StringVarP(&f.activityType, "type", "t", "", "activity type (required)")
	fl.StringVarP(&f.input, "input", "i", "", "JSON input: inline, @FILE, or - for stdin")
	fl.StringVar(&f.id, "id", "", "activity id; makes scheduling idempotent (default: the server picks one)")
	fl.StringVar(&f.node, "node", "", "pin the activity to workers on this node")
	fl.BoolVarP(&f.wait, "wait", "w", false, "wait for the outcome and print it; exit non-zero unless completed")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 0, "give up waiting after this long (0: wait until the outcome)")
	fl.DurationVar(&f.scheduleToStart, "schedule-to-start", 0, "longest wait for a worker (0: server default)")
	fl.DurationVar(&f.startToClose, "start-to-close", 0, "longest run of one attempt (0: server default)")
	fl.DurationVar(&f.scheduleToClose, "schedule-to-close", 0, "longest life of the activity, retries included (0: server default)")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 0, "longest gap between heartbeats (0: heartbeats not required)")
	fl.Int32Var(&f.maxAttempts, "max-attempts", 0, "retry policy: most attempts including the first (0: unlimited or server default; 1: no retry)")
	fl.DurationVar(&f.initialInterval, "initial-interval", 0, "retry policy: delay before the second attempt")
	fl.Float64Var(&f.backoff, "backoff", 0, "retry policy: factor applied to the delay after each failure (at least 1)")
	fl.DurationVar(&f.maxInterval, "max-interval", 0, "retry policy: longest delay between attempts")
	fl.StringSliceVar(&f.nonRetryable, "non-retryable", nil, "retry policy: failure types never retried (comma-separated or repeated)")
	f.start.bind(fl)
	f.flow.bind(fl, "the activity")
	return cmd
}

// waitAndPrint waits for an activity, prints it, and turns an outcome other
// than completed into exit code 2.
func (a *app) waitAndPrint(ctx context.Context, c *client.Client, ns, id string, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	act, err := c.Wait(ctx, ns, id)
	if err != nil {
		return err
	}
	if err := a.emit(act, func(w io.Writer) { writeActivity(w, act) }); err != nil {
		return err
	}
	if act.State != client.StateCompleted {
		return &codeError{code: exitNotCompleted, err: fmt.Errorf("activity %s in namespace %s ended %s", act.ID, act.Namespace, act.State)}
	}
	return nil
}

func (a *app) getCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show an activity and its attempts",
		Long:  `Show an activity: its state, input, result or failure, and every attempt so far.`,
		Example: `  aion activity get invoice-42 --namespace billing
  aion activity get invoice-42 --namespace billing --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				act, err := c.Get(ctx, ns, args[0])
				if err != nil {
					return err
				}
				return a.emit(act, func(w io.Writer) { writeActivity(w, act) })
			})
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "namespace of the activity (required)")
	bindEnv(cmd.Flags(), "namespace", "AION_NAMESPACE")
	return cmd
}

func (a *app) waitCommand() *cobra.Command {
	var (
		ns      string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for an activity to finish and print its outcome",
		Long: `Wait until an activity reaches a terminal state, print it, and exit 0 only if
it completed (2 if it failed, was canceled or timed out; 1 on any other error,
including --wait-timeout running out).`,
		Example: `  aion activity wait invoice-42 --namespace billing
  aion activity wait invoice-42 --namespace billing --wait-timeout 30s --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				return a.waitAndPrint(cmd.Context(), c, ns, args[0], timeout)
			})
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "namespace of the activity (required)")
	bindEnv(cmd.Flags(), "namespace", "AION_NAMESPACE")
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 0, "give up after this long (0: wait until the outcome)")
	return cmd
}

func (a *app) listCommand() *cobra.Command {
	var (
		ns, state, typ string
		limit          int
		payloads       bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a namespace's activities, newest first",
		Long: `List a namespace's activities, newest first, optionally only those in one
state (scheduled, running, completed, failed, canceled, timed_out) or of one
type. --limit caps how many are printed (0: all).

Payloads, results and heartbeat and failure details are left out of a
listing unless --payloads asks for them (with --output json); 'aion activity
get' shows them for one activity.`,
		Example: `  aion activity list --namespace demo
  aion activity list --namespace demo --state failed --type charge --limit 10 --output json
  aion activity list --namespace demo --payloads --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			st, err := client.ParseState(state)
			if err != nil {
				return fmt.Errorf("--state: %w", err)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", limit)
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				opts := client.ListOptions{Namespace: ns, State: st, ActivityType: typ, IncludePayloads: payloads}
				if limit > 0 && limit < 1000 {
					opts.PageSize = int32(limit)
				}
				acts := []*client.Activity{}
				for act, err := range c.ListAll(ctx, opts) {
					if err != nil {
						return err
					}
					acts = append(acts, act)
					if limit > 0 && len(acts) >= limit {
						break
					}
				}
				return a.emit(acts, func(w io.Writer) { writeActivities(w, acts) })
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&ns, "namespace", "n", "", "namespace to list (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVar(&state, "state", "", "only activities in this state")
	fl.StringVarP(&typ, "type", "t", "", "only activities of this type")
	fl.IntVar(&limit, "limit", 50, "most activities to print (0: all)")
	fl.BoolVar(&payloads, "payloads", false, "include payloads, results and details (left out of listings by default)")
	return cmd
}

func (a *app) whyCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "why ID",
		Short: "Explain why an activity is not running",
		Long: `Explain, from the server's live state, why an activity is not running now: no
connected worker serves its namespace, task queue and type; its node pin or
its namespace's placement excludes the workers there are (and which nodes are
connected); every eligible slot is busy (and how many activities wait before
it); its namespace is at its in-flight cap; its type's concurrency limit
holds it (which key, how many of its limit run) or its rate limit does (until
when); its delayed start or its retry's backoff has not come (until when). Or
that it runs, and on which worker.`,
		Example: `  aion activity why render-42 --namespace gpu
  aion activity why render-42 --namespace gpu --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ex, err := c.Why(ctx, ns, args[0])
				if err != nil {
					return err
				}
				return a.emit(ex, func(w io.Writer) { fmt.Fprintf(w, "%s (%s): %s\n", ex.Reason, ex.State, ex.Message) })
			})
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "namespace of the activity (required)")
	bindEnv(cmd.Flags(), "namespace", "AION_NAMESPACE")
	return cmd
}
