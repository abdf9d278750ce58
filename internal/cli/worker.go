package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/aion-run/aion/internal/intervention"
	"github.com/aion-run/aion/worker"
)

func (a *app) workerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run workers",
		Long:  `Run workers that connect to an aion server and run its activities.`,
		Example: `  aion worker demo --namespace demo --task-queue default
  aion worker demo --namespace a,b --task-queue gpu --node gpu-a --slots 4`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.demoWorkerCommand())
	return cmd
}

// demoFlags are the flags of `aion worker demo`.
type demoFlags struct {
	namespaces  []string
	taskQueue   string
	node        string
	slots       int
	identity    string
	stopTimeout time.Duration
	exitOnDrain bool
	caps        []string
	buildID     string
	compatible  []string
	wfSlots     int
	ledger      string
}

// demoCapabilities are the intervention primitives the demo worker
// advertises by default: everything its agent activity honours.
var demoCapabilities = []string{
	string(worker.CapabilityInjectMessage), string(worker.CapabilityCancel),
	string(worker.CapabilityPauseResume), string(worker.CapabilityUpdateBudget),
}

// parseCapabilities reads --capabilities: primitive names, or "none".
func parseCapabilities(names []string) ([]worker.Capability, error) {
	if len(names) == 1 && names[0] == "none" {
		return nil, nil
	}
	var caps []worker.Capability
	for _, n := range names {
		p, err := intervention.Parse(n)
		if err != nil {
			return nil, fmt.Errorf("--capabilities %q: want none, or some of %s", n, strings.Join(intervention.Names(), ", "))
		}
		caps = append(caps, worker.Capability(p.String()))
	}
	return caps, nil
}

func (a *app) demoWorkerCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a worker with built-in demo activities and workflows",
		Long: `Run a worker serving built-in demo activity types and two workflows.

Activity types:

  echo    returns its input unchanged
  sleep   input {"ms":N}: sleeps N milliseconds, heartbeating with its progress
          (a retry resumes from the last heartbeat), honours cancellation,
          returns {"slept_ms":N}
  fail    input {"times":N}: fails the first N attempts (retryably), then
          returns {"attempts":K} where K is the attempt that succeeded
  agent   input {"turns":N,"turn_ms":M} (defaults 3 and 1000): an agent loop
          that runs N turns of M milliseconds, heartbeating after each, and
          can be steered with 'aion activity intervene':
            --inject TEXT   recorded after the current turn; with --interrupt
                            the current turn is cut short and it is recorded
                            at once
            --pause/--resume  no new turn starts while paused
            --max-turns K   at most K turns in all (--max-tokens is recorded)
            --cancel        the attempt stops, canceled
          returns {"turns_run":K,"messages":[{"text","priority","turn"}...],
          "paused_ms":P,"interrupted_turns":I} (turn: turns run when the
          message was handled)

  reserve, charge, release, refund, ship, notify, tool
          the steps of the demo workflows: input {"order_id","amount","fail"};
          "fail": true fails the attempt (type declined, not retryable)

Workflows (build id --build-id, default demo-1):
  order   input {"order_id","amount","fail_charge","ship_timeout","sleep"}:
          reserve → charge (on failure: release, and the run fails) → wait
          for the signal "ship" {"carrier","tracking"} up to ship_timeout
          (default 1h; "0s" does not wait; no signal: refund) → ship →
          durable sleep (default 1s) → notify. Query "status".
  agent   input {"task","max_turns","budget","approval_at","approval_timeout",
          "turn_ms","turns_per_run"}: a loop of model turns (the agent
          activity, one turn each, steerable with 'aion activity intervene'
          while it runs) and tool calls within a budget; the tool call of turn
          approval_at waits for the signal "approval" {"approved","note"}; it
          continues as new every turns_per_run turns. Query "status".

With --ledger FILE every execution of a workflow step's activity appends
"<unix nanos> <activity id> <attempt> <type>" to FILE (synced), so a test
can count how often each step ran.

The worker advertises the intervention capabilities inject_message, cancel,
pause_resume and update_budget (not respond_to_approval: the demo agent asks
for no approvals); --capabilities replaces the list, --capabilities none
advertises nothing.

It logs one line per attempt. On SIGINT or SIGTERM it stops taking work,
finishes what it has (up to --stop-timeout), and exits. When the server asks
it to drain it finishes its work and reconnects (or exits with
--exit-on-drain).`,
		Example: `  aion worker demo --namespace demo --task-queue default
  aion worker demo --namespace demo --ledger /tmp/ledger.txt
  aion worker demo --namespace team-a,team-b --task-queue gpu --node gpu-a --slots 8
  aion worker demo --namespace demo --capabilities inject_message,cancel
  aion worker demo --namespace demo --capabilities none`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(f.namespaces) == 0 {
				return errors.New("--namespace: at least one namespace is required")
			}
			for _, ns := range f.namespaces {
				if ns == "" {
					return fmt.Errorf("--namespace %q: empty namespace name in the list", f.namespaces)
				}
			}
			if f.slots < 1 {
				return fmt.Errorf("--slots %d: must be at least 1", f.slots)
			}
			caps, err := parseCapabilities(f.caps)
			if err != nil {
				return err
			}
			if f.wfSlots < 1 {
				return fmt.Errorf("--workflow-slots %d: must be at least 1", f.wfSlots)
			}
			led, err := openLedger(f.ledger)
			if err != nil {
				return err
			}
			defer led.Close()
			log := a.logger()
			creds, err := a.transport()
			if err != nil {
				return err
			}
			var dial []grpc.DialOption
			if creds != nil {
				dial = append(dial, grpc.WithTransportCredentials(creds))
			}
			w, err := worker.New(a.address, worker.Options{
				DialOptions:  dial,
				Namespaces:   f.namespaces,
				TaskQueue:    f.taskQueue,
				Node:         f.node,
				Slots:        f.slots,
				Identity:     f.identity,
				Token:        a.token,
				Logger:       log,
				StopTimeout:  f.stopTimeout,
				ExitOnDrain:  f.exitOnDrain,
				Capabilities: caps,

				BuildID:            f.buildID,
				CompatibleBuildIDs: f.compatible,
				WorkflowSlots:      f.wfSlots,
			})
			if err != nil {
				return err
			}
			registerDemo(w, log)
			registerDemoWorkflows(w, log, led)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("demo worker starting", "address", a.address, "namespaces", f.namespaces, "task_queue", f.taskQueue,
				"node", f.node, "slots", f.slots, "types", []string{"echo", "sleep", "fail", "agent"}, "capabilities", caps,
				"workflows", []string{"order", "agent"}, "build_id", f.buildID)
			return w.Run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVarP(&f.namespaces, "namespace", "n", nil, "namespaces to serve (comma-separated or repeated; required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVarP(&f.taskQueue, "task-queue", "q", "default", "task queue (worker pool) to serve")
	fl.StringVar(&f.node, "node", "", "node label to advertise (for pinned activities and placement)")
	fl.IntVar(&f.slots, "slots", 4, "most attempts run at once")
	fl.StringVar(&f.identity, "identity", "", "name shown to operators (default host:pid)")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight attempts may keep running")
	fl.BoolVar(&f.exitOnDrain, "exit-on-drain", false, "exit when the server asks this worker to drain, instead of reconnecting")
	fl.StringVar(&f.buildID, "build-id", demoBuild, "build id of the workflow code (runs stay on the build they started on)")
	fl.StringSliceVar(&f.compatible, "compatible-builds", nil, "other build ids whose open runs this code may also advance (it takes the same steps)")
	fl.IntVar(&f.wfSlots, "workflow-slots", 100, "most workflow tasks run at once, apart from --slots")
	fl.StringVar(&f.ledger, "ledger", "", "append one line per workflow step execution to this file")
	fl.StringSliceVar(&f.caps, "capabilities", demoCapabilities,
		"intervention capabilities to advertise (comma-separated): inject_message, cancel, pause_resume, update_budget, respond_to_approval; or none")
	return cmd
}
