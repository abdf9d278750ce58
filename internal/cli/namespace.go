package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/client"
)

func (a *app) namespaceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "namespace",
		Aliases: []string{"ns"},
		Short:   "Create, show and list namespaces; set their placement and flow limits",
		Long: `Namespaces are aion's isolation and authorization boundary. Under the open
auto-create policy a namespace is minted on first use; 'namespace create'
works under either policy.`,
		Example: `  aion namespace create billing
  aion namespace list
  aion namespace place vision --pinned gpu-a,gpu-b
  aion namespace limits set billing --activity-type charge --concurrency 2
  aion namespace retention set billing 72h`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.nsCreateCommand(), a.nsGetCommand(), a.nsListCommand(), a.nsPlaceCommand(), a.nsLimitsCommand(),
		a.nsWaitingCommand(), a.nsRetentionCommand())
	return cmd
}

func (a *app) nsCreateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Create a namespace (idempotent)",
		Long:  `Create a namespace. Creating one that exists succeeds and changes nothing.`,
		Example: `  aion namespace create billing
  aion namespace create billing --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ns, created, err := c.CreateNamespace(ctx, args[0])
				if err != nil {
					return err
				}
				return a.emit(struct {
					Namespace *client.Namespace `json:"namespace"`
					Created   bool              `json:"created"`
				}{ns, created}, func(w io.Writer) {
					if created {
						fmt.Fprintf(w, "created namespace %s\n", ns.Name)
					} else {
						fmt.Fprintf(w, "namespace %s already exists\n", ns.Name)
					}
				})
			})
		},
	}
}

func (a *app) nsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a namespace",
		Long:    `Show a namespace: how it was minted, its placement, when it was created and last used, and how long its closed work is kept (retention).`,
		Example: `  aion namespace get billing`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ns, err := c.GetNamespace(ctx, args[0])
				if err != nil {
					return err
				}
				return a.emit(ns, func(w io.Writer) { writeNamespace(w, ns) })
			})
		},
	}
}

func (a *app) nsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List namespaces",
		Long:    `List every namespace, by name.`,
		Example: `  aion namespace list --output json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				nss, err := c.ListNamespaces(ctx)
				if err != nil {
					return err
				}
				if nss == nil {
					nss = []*client.Namespace{}
				}
				return a.emit(nss, func(w io.Writer) { writeNamespaces(w, nss) })
			})
		},
	}
}

func (a *app) nsWaitingCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "waiting NAME",
		Short: "Show a namespace's waiting work by pool, priority and fairness key",
		Long: `Show the namespace's ready work waiting for a worker, counted by task queue,
type, priority and fairness key, the largest groups first, with how long the
oldest of each has waited. Work a flow limit holds (a concurrency key at its
limit, a rate without a token) is shown apart, with the limit and key; runs
waiting for a workflow task are shown as kind workflow_task. In a cluster the
activities are counted from the store (limits are applied at claim time, so
held work shows in its queue) and runs from the server answering.`,
		Example: `  aion namespace waiting shop
  aion namespace waiting shop --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				groups, truncated, err := c.ListWaiting(ctx, args[0])
				if err != nil {
					return err
				}
				return a.emit(groups, func(w io.Writer) { writeWaiting(w, groups, truncated) })
			})
		},
	}
}

// writeWaiting prints waiting groups as a table.
func writeWaiting(w io.Writer, groups []client.WaitingGroup, truncated int) {
	if len(groups) == 0 {
		fmt.Fprintln(w, "nothing waits")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK QUEUE\tKIND\tTYPE\tPRIORITY\tFAIRNESS KEY\tHELD BY\tCOUNT\tOLDEST")
	now := time.Now()
	for _, g := range groups {
		held := g.HeldBy
		if g.ConcurrencyKey != "" {
			held += " (" + g.ConcurrencyKey + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", g.TaskQueue, g.Kind, g.Type, g.Priority, orDash(g.FairnessKey),
			orDash(held), g.Count, now.Sub(g.OldestReady).Round(time.Millisecond))
	}
	tw.Flush()
	if truncated > 0 {
		fmt.Fprintf(w, "(%d smaller groups left out)\n", truncated)
	}
}

// placeFlags are the mutually exclusive flags of `namespace place`.
type placeFlags struct {
	unplaced bool
	prefer   []string
	pinned   []string
}

// placement checks that exactly one mode was given and builds it.
func (f *placeFlags) placement(cmd *cobra.Command) (client.Placement, error) {
	fl := cmd.Flags()
	var given []string
	for _, name := range []string{"unplaced", "prefer", "pinned"} {
		if fl.Changed(name) {
			given = append(given, "--"+name)
		}
	}
	switch len(given) {
	case 0:
		return client.Placement{}, errors.New("give exactly one of --unplaced, --prefer NODES or --pinned NODES")
	case 1:
	default:
		return client.Placement{}, fmt.Errorf("%v: give exactly one of --unplaced, --prefer or --pinned", given)
	}
	switch {
	case fl.Changed("unplaced"):
		if !f.unplaced {
			return client.Placement{}, errors.New("--unplaced=false: to set a placement, give --unplaced, --prefer or --pinned")
		}
		return client.Unplaced(), nil
	case fl.Changed("prefer"):
		if len(f.prefer) == 0 {
			return client.Placement{}, errors.New("--prefer: at least one node is required")
		}
		return client.Prefer(f.prefer...), nil
	default:
		if len(f.pinned) == 0 {
			return client.Placement{}, errors.New("--pinned: at least one node is required")
		}
		return client.Pinned(f.pinned...), nil
	}
}

func (a *app) nsPlaceCommand() *cobra.Command {
	var f placeFlags
	cmd := &cobra.Command{
		Use:   "place NAMESPACE (--unplaced | --prefer NODES | --pinned NODES)",
		Short: "Set which nodes run a namespace's work",
		Long: `Set a namespace's placement; exactly one of:

  --unplaced        any node
  --prefer N1,N2    workers on those nodes first, then any worker
  --pinned N1,N2    only workers on those nodes, ever: workers elsewhere are
                    refused registration and work waits rather than spill

The namespace must exist (NotFound otherwise).`,
		Example: `  aion namespace place vision --pinned gpu-a,gpu-b
  aion namespace place web --prefer eu-west-1a
  aion namespace place web --unplaced`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.placement(cmd)
			if err != nil {
				return err
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ns, err := c.SetPlacement(ctx, args[0], p)
				if err != nil {
					return err
				}
				return a.emit(ns, func(w io.Writer) {
					fmt.Fprintf(w, "namespace %s placement is now %s\n", ns.Name, ns.Placement)
				})
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.unplaced, "unplaced", false, "any node may run the namespace's work")
	fl.StringSliceVar(&f.prefer, "prefer", nil, "prefer workers on these nodes (comma-separated)")
	fl.StringSliceVar(&f.pinned, "pinned", nil, "only workers on these nodes (comma-separated)")
	return cmd
}

func (a *app) nsRetentionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Set how long a namespace keeps its closed activities and runs",
		Long: `A namespace keeps its closed activities (with their attempts) and closed
workflow runs (with their histories) for its retention after they close;
then the server's reaper deletes them. The default is 7 days. 'aion namespace
get' shows the retention in force.`,
		Example: `  aion namespace retention set billing 72h
  aion namespace retention set billing default`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "set NAMESPACE DURATION",
		Short: "Set a namespace's retention",
		Long: `Set how long the namespace keeps closed work: a Go duration from 1m to
87600h (10 years), such as 90m, 72h or 720h, or "default" for the server's
default of 7 days. The namespace must exist (NotFound otherwise).`,
		Example: `  aion namespace retention set billing 72h
  aion namespace retention set billing default`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d time.Duration
			if args[1] != "default" {
				var err error
				if d, err = time.ParseDuration(args[1]); err != nil {
					return fmt.Errorf("retention %q: want a duration such as 72h, or default: %w", args[1], err)
				}
				if d <= 0 {
					return fmt.Errorf("retention %q: must be more than zero (or default)", args[1])
				}
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ns, err := c.SetRetention(ctx, args[0], d)
				if err != nil {
					return err
				}
				return a.emit(ns, func(w io.Writer) {
					fmt.Fprintf(w, "namespace %s retention is now %s\n", ns.Name, ns.Retention)
				})
			})
		},
	})
	return cmd
}
