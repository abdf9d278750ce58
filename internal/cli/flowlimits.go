package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/client"
)

func (a *app) nsLimitsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Set, show, list and clear a namespace's flow limits",
		Long: `Flow limits hold work of one activity (or workflow) type back; over a limit,
work waits, it is never failed:

  --concurrency N   at most N attempts running at once per concurrency key
                    (activity schedule --concurrency-key); work without a
                    key is not held by it
  --rate R          at most R starts a second, in bursts of up to --burst
                    (default: R rounded up), for the whole type, or with
                    --per-key per concurrency key

For a workflow type only --concurrency applies: at most N runs per
concurrency key (workflow start --concurrency-key) are admitted, from their
first workflow task until they close.

Every server of a cluster applies them, counting across the cluster;
'aion activity why' and 'aion workflow why' name the limit that holds an
activity or a run.`,
		Example: `  aion namespace limits set billing --activity-type charge --concurrency 2
  aion namespace limits set mail --activity-type send --rate 200 --burst 20
  aion namespace limits list billing
  aion namespace limits clear billing --activity-type charge`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.limitsSetCommand(), a.limitsGetCommand(), a.limitsListCommand(), a.limitsClearCommand())
	return cmd
}

// limitTarget is the --activity-type / --workflow-type pair: exactly one.
type limitTarget struct{ activity, workflow string }

func (f *limitTarget) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.activity, "activity-type", "", "the activity type the limit is for")
	cmd.Flags().StringVar(&f.workflow, "workflow-type", "", "the workflow type the limit is for")
}

func (f *limitTarget) get(cmd *cobra.Command) (client.FlowKind, string, error) {
	fl := cmd.Flags()
	switch {
	case fl.Changed("activity-type") && fl.Changed("workflow-type"):
		return "", "", errors.New("give one of --activity-type or --workflow-type, not both")
	case fl.Changed("activity-type"):
		return client.FlowActivity, f.activity, nil
	case fl.Changed("workflow-type"):
		return client.FlowWorkflow, f.workflow, nil
	}
	return "", "", errors.New("give --activity-type TYPE or --workflow-type TYPE")
}

func (a *app) limitsSetCommand() *cobra.Command {
	var (
		target      limitTarget
		concurrency int
		rate        float64
		burst       int
		perKey      bool
	)
	cmd := &cobra.Command{
		Use:   "set NAMESPACE (--activity-type T | --workflow-type T) [--concurrency N] [--rate R [--burst B] [--per-key]]",
		Short: "Set the flow limit of a type (replacing the one it had)",
		Long: `Set the flow limit of one type of a namespace, replacing the whole limit it had
(give every part you want to keep). At least one of --concurrency and --rate.
A changed limit starts with its buckets full. The namespace must exist.`,
		Example: `  aion namespace limits set billing --activity-type charge --concurrency 2
  aion namespace limits set mail --activity-type send --rate 200 --burst 20 --per-key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, typ, err := target.get(cmd)
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			// 0 means "not limited" to the client, so an explicit 0 is
			// refused here, as the server refuses it.
			if fl.Changed("concurrency") && concurrency <= 0 {
				return fmt.Errorf("--concurrency: %d is not above 0", concurrency)
			}
			if fl.Changed("rate") && !(rate > 0) {
				return fmt.Errorf("--rate: %g is not above 0", rate)
			}
			if fl.Changed("burst") && burst < 1 {
				return fmt.Errorf("--burst: %d is less than 1", burst)
			}
			l := client.FlowLimit{Namespace: args[0], Kind: kind, Type: typ, Concurrency: concurrency, Rate: rate, Burst: burst, PerKey: perKey}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				got, err := c.SetFlowLimit(ctx, l)
				if err != nil {
					return err
				}
				return a.emit(got, func(w io.Writer) {
					fmt.Fprintf(w, "%s type %s in namespace %s: %s\n", got.Kind, got.Type, got.Namespace, got)
				})
			})
		},
	}
	target.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&concurrency, "concurrency", 0, "at most this many running at once per concurrency key")
	fl.Float64Var(&rate, "rate", 0, "at most this many starts a second")
	fl.IntVar(&burst, "burst", 0, "starts allowed at once after a quiet spell (default: the rate rounded up)")
	fl.BoolVar(&perKey, "per-key", false, "count the rate per concurrency key instead of for the whole type")
	return cmd
}

func (a *app) limitsGetCommand() *cobra.Command {
	var target limitTarget
	cmd := &cobra.Command{
		Use:     "get NAMESPACE (--activity-type T | --workflow-type T)",
		Short:   "Show the flow limit of a type",
		Long:    `Show the flow limit of one type of a namespace; NotFound when it has none.`,
		Example: `  aion namespace limits get billing --activity-type charge`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, typ, err := target.get(cmd)
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				l, err := c.GetFlowLimit(ctx, args[0], kind, typ)
				if err != nil {
					return err
				}
				return a.emit(l, func(w io.Writer) { writeFlowLimits(w, []client.FlowLimit{l}) })
			})
		},
	}
	target.register(cmd)
	return cmd
}

func (a *app) limitsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list NAMESPACE",
		Short:   "List a namespace's flow limits",
		Long:    `List the flow limits of a namespace, by kind and type.`,
		Example: `  aion namespace limits list billing --output json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ls, err := c.ListFlowLimits(ctx, args[0])
				if err != nil {
					return err
				}
				return a.emit(ls, func(w io.Writer) { writeFlowLimits(w, ls) })
			})
		},
	}
}

func (a *app) limitsClearCommand() *cobra.Command {
	var target limitTarget
	cmd := &cobra.Command{
		Use:   "clear NAMESPACE (--activity-type T | --workflow-type T)",
		Short: "Remove the flow limit of a type",
		Long: `Remove the flow limit of one type of a namespace: the work it held starts as
workers allow. Clearing a type without a limit succeeds and says so.`,
		Example: `  aion namespace limits clear billing --activity-type charge`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, typ, err := target.get(cmd)
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				cleared, err := c.ClearFlowLimit(ctx, args[0], kind, typ)
				if err != nil {
					return err
				}
				return a.emit(struct {
					Cleared bool `json:"cleared"`
				}{cleared}, func(w io.Writer) {
					if cleared {
						fmt.Fprintf(w, "cleared the limit of %s type %s in namespace %s\n", kind, typ, args[0])
					} else {
						fmt.Fprintf(w, "%s type %s in namespace %s had no limit\n", kind, typ, args[0])
					}
				})
			})
		},
	}
	target.register(cmd)
	return cmd
}

func writeFlowLimits(w io.Writer, ls []client.FlowLimit) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTYPE\tCONCURRENCY\tRATE\tBURST\tRATE PER\tUPDATED")
	for _, l := range ls {
		conc, rate, burst, per := "-", "-", "-", "-"
		if l.Concurrency > 0 {
			conc = fmt.Sprintf("%d per key", l.Concurrency)
		}
		if l.Rate > 0 {
			rate, burst, per = fmt.Sprintf("%g/s", l.Rate), fmt.Sprint(l.Burst), "type"
			if l.PerKey {
				per = "key"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Kind, l.Type, conc, rate, burst, per, when(l.UpdatedTime))
	}
	tw.Flush()
}
