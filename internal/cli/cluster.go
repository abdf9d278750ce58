package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
)

func (a *app) workersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List connected workers or drain one",
		Long: `workers shows the workers connected to the server and drains them. A
drained worker gets no new work, finishes what it is running, then leaves
(its disconnect reason is drained).`,
		Example: `  aion workers list
  aion workers list --namespace demo --output json
  aion workers drain 7`,
	}
	var ns string
	list := &cobra.Command{
		Use:   "list",
		Short: "List connected workers: namespaces, task queue, node, slots in use, state, last sign of life",
		Long: `list prints every connected worker with the namespaces it serves, its task
queue, node, slots in use out of its total, whether it is draining, the
activity types it runs, and when it last sent anything.`,
		Example: `  aion workers list
  aion workers list --namespace demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				ws, err := c.ListWorkers(ctx, ns)
				if err != nil {
					return err
				}
				return a.emit(ws, func(w io.Writer) { writeWorkers(w, ws) })
			})
		},
	}
	list.Flags().StringVar(&ns, "namespace", "", "only workers serving this namespace")
	drain := &cobra.Command{
		Use:   "drain ID",
		Short: "Drain one worker: it gets no new work, finishes what it has, then leaves",
		Long: `drain stops sending new work to the worker with the given id and asks it,
over its stream, to finish its in-flight attempts and disconnect. Nothing is
dropped: attempts it does not finish are retried elsewhere.`,
		Example: `  aion workers drain 7`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("worker id %q: not a number", args[0])
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				wk, err := c.DrainWorker(ctx, id)
				if err != nil {
					return err
				}
				return a.emit(wk, func(w io.Writer) { fmt.Fprintf(w, "worker %d is draining\n", wk.ID) })
			})
		},
	}
	cmd.AddCommand(list, drain)
	return cmd
}

func writeWorkers(w io.Writer, ws []*client.Worker) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAMESPACES\tTASK QUEUE\tNODE\tSLOTS\tSTATE\tTYPES\tLAST SEEN")
	for _, wk := range ws {
		state := "connected"
		if wk.Draining {
			state = "draining"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", wk.ID, strings.Join(wk.Namespaces, ","), wk.TaskQueue,
			orDash(wk.Node), wk.SlotsInUse, wk.Slots, state, strings.Join(wk.ActivityTypes, ","), when(wk.LastHeartbeatTime))
	}
	tw.Flush()
}

func (a *app) eventsCommand() *cobra.Command {
	var after string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the cluster's events as they happen: a snapshot, then every change",
		Long: `events prints the cluster event stream: first a snapshot of the connected
workers, namespaces and pools, then one line per change (worker connected,
draining or disconnected with its reason, namespace created, placement
changed, pool stats every second, workflow runs started and closed,
schedule fires) until interrupted. With --output json each event is one
JSON object a line.

Each line starts with the event's sequence (#N); the snapshot's line ends
with the stream's epoch. To pick up after an interruption without a new
snapshot, pass the position of the last event printed, <epoch>-<sequence>,
as --after: when the server still holds every event after it, the first
line is "resumed after <position>" and the events missed follow; otherwise
(they were let go of, or the server restarted) it is a fresh snapshot that
says why it did not resume. With --output json the first object holds
"resumed" or "snapshot", and "epoch".`,
		Example: `  aion events
  aion events --output json | jq .
  aion events --after 3f9c2a71d04b88e5-1042`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []client.WatchOption
			var from *events.Position
			if after != "" {
				p, err := events.ParsePosition(after)
				if err != nil {
					return fmt.Errorf("--after: %w", err)
				}
				from = &p
				opts = append(opts, client.WatchAfter(client.WatchPosition{Epoch: p.Epoch.String(), Sequence: p.Seq}))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.withClient(ctx, func(c *client.Client) error {
				first := true
				for e, err := range c.Watch(ctx, opts...) {
					if err != nil {
						return err
					}
					if a.output == "json" {
						b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(e)
						if err != nil {
							return err
						}
						fmt.Fprintf(a.stdout, "%s\n", b)
						continue
					}
					if first {
						fmt.Fprintln(a.stdout, describeStart(e, from))
						first = false
						continue
					}
					fmt.Fprintln(a.stdout, describeEvent(e))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "resume after this position, <epoch>-<sequence> (the snapshot's epoch, the last event's #): the events missed follow, or a fresh snapshot when the server no longer holds them all")
	return cmd
}

// describeStart renders the first event of a watch, which asked to resume
// after from (nil for none): the snapshot with its epoch, so that a later
// watch can resume, and why it is not a resume when one was asked for; or
// the resume.
func describeStart(e *aionv1.ClusterEvent, from *events.Position) string {
	if e.GetResumed() != nil {
		return describeEvent(e)
	}
	line := describeEvent(e) + "; epoch " + e.GetEpoch()
	switch {
	case from == nil || e.GetSnapshot() == nil:
	case from.Epoch.String() != e.GetEpoch():
		line += fmt.Sprintf("; not resumed: %s is of another epoch (the server restarted, or is another server)", from)
	case from.Seq > e.GetSequence():
		line += fmt.Sprintf("; not resumed: %s is past the server's last event", from)
	default:
		line += fmt.Sprintf("; not resumed: the server no longer holds every event after %s", from)
	}
	return line
}

// describeEvent renders one event as a line of text.
func describeEvent(e *aionv1.ClusterEvent) string {
	head := fmt.Sprintf("#%d %s ", e.GetSequence(), e.GetTime().AsTime().Local().Format("15:04:05.000"))
	switch ev := e.GetEvent().(type) {
	case *aionv1.ClusterEvent_Snapshot:
		s := ev.Snapshot
		return head + fmt.Sprintf("snapshot: %d workers, %d namespaces, %d pools",
			len(s.GetWorkers()), len(s.GetNamespaces()), len(s.GetPools()))
	case *aionv1.ClusterEvent_WorkerConnected:
		w := ev.WorkerConnected.GetWorker()
		return head + fmt.Sprintf("worker %d connected: namespaces=%s task_queue=%s node=%s slots=%d transport=%s",
			w.GetId(), strings.Join(w.GetNamespaces(), ","), w.GetTaskQueue(), orDash(w.GetNode()), w.GetSlots(), w.GetTransport())
	case *aionv1.ClusterEvent_WorkerDraining:
		return head + fmt.Sprintf("worker %d draining", ev.WorkerDraining.GetWorkerId())
	case *aionv1.ClusterEvent_WorkerDisconnected:
		d := ev.WorkerDisconnected
		reason := strings.ToLower(strings.TrimPrefix(d.GetReason().String(), "DISCONNECT_REASON_"))
		return head + fmt.Sprintf("worker %d disconnected: reason=%s", d.GetWorkerId(), reason)
	case *aionv1.ClusterEvent_NamespaceCreated:
		n := ev.NamespaceCreated.GetNamespace()
		return head + fmt.Sprintf("namespace %s created: origin=%s", n.GetName(),
			strings.ToLower(strings.TrimPrefix(n.GetOrigin().String(), "NAMESPACE_ORIGIN_")))
	case *aionv1.ClusterEvent_PlacementChanged:
		n := ev.PlacementChanged.GetNamespace()
		return head + fmt.Sprintf("namespace %s placement: %s", n.GetName(), placementText(n.GetPlacement()))
	case *aionv1.ClusterEvent_PoolStats:
		var parts []string
		for _, p := range ev.PoolStats.GetPools() {
			parts = append(parts, fmt.Sprintf("%s/%s backlog=%d oldest=%s workers=%d free=%d", p.GetNamespace(), p.GetTaskQueue(),
				p.GetBacklog(), p.GetOldestAge().AsDuration().Round(1e6), p.GetWorkers(), p.GetSlotsFree()))
		}
		return head + "pools: " + strings.Join(parts, "; ")
	case *aionv1.ClusterEvent_RunStarted:
		r := ev.RunStarted.GetRun()
		return head + fmt.Sprintf("run started: namespace=%s workflow=%s run=%s type=%s task_queue=%s",
			r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), r.GetWorkflowType(), r.GetTaskQueue())
	case *aionv1.ClusterEvent_Resumed:
		return head + fmt.Sprintf("resumed after %s-%d: the events missed follow", e.GetEpoch(), e.GetSequence())
	case *aionv1.ClusterEvent_ScheduleFired:
		f := ev.ScheduleFired
		line := fmt.Sprintf("schedule %s: namespace=%s outcome=%s origin=%s", f.GetScheduleId(), f.GetNamespace(),
			strings.ToLower(strings.TrimPrefix(f.GetOutcome().String(), "SCHEDULE_ACTION_OUTCOME_")), orDash(f.GetOrigin()))
		if f.GetCount() > 1 {
			line += fmt.Sprintf(" count=%d", f.GetCount())
		}
		if f.GetActionId() != "" {
			line += " action=" + f.GetActionId()
		}
		if f.GetDetail() != "" {
			line += fmt.Sprintf(" detail=%q", f.GetDetail())
		}
		return head + line
	case *aionv1.ClusterEvent_RunClosed:
		r := ev.RunClosed.GetRun()
		return head + fmt.Sprintf("run closed: namespace=%s workflow=%s run=%s status=%s", r.GetNamespace(), r.GetWorkflowId(),
			r.GetRunId(), strings.ToLower(strings.TrimPrefix(r.GetStatus().String(), "RUN_STATUS_")))
	}
	return head + "unknown event"
}

func placementText(p *aionv1.Placement) string {
	mode := strings.ToLower(strings.TrimPrefix(p.GetMode().String(), "PLACEMENT_MODE_"))
	if len(p.GetNodes()) == 0 {
		return mode
	}
	return mode + "{" + strings.Join(p.GetNodes(), ",") + "}"
}
