package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/client"
)

func (a *app) cancelCommand() *cobra.Command {
	var ns, reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel an activity: it ends canceled at once, and its running attempt is told to stop",
		Long: `Cancel an activity that has not finished. The server closes it as canceled at
once, whether it is waiting for a worker or running; the worker running it is
told to stop, and the result that worker reports afterwards is refused. No
worker capability is needed.

Cancelling an activity that is already canceled changes nothing and succeeds;
cancelling one that completed, failed or timed out is refused
(FailedPrecondition). --reason is recorded in the activity's failure and sent
to the worker.

To ask the worker to wind the attempt down by itself instead, see
'aion activity intervene --cancel'.`,
		Example: `  aion activity cancel invoice-42 --namespace billing
  aion activity cancel invoice-42 --namespace billing --reason "customer withdrew" --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ns == "" {
				return errors.New("--namespace: required")
			}
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				act, err := c.Cancel(ctx, ns, args[0], reason)
				if err != nil {
					return err
				}
				return a.emit(act, func(w io.Writer) {
					fmt.Fprintf(w, "canceled activity %s in namespace %s\n", act.ID, act.Namespace)
					writeActivity(w, act)
				})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&ns, "namespace", "n", "", "namespace of the activity (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVar(&reason, "reason", "", "why the activity is canceled (recorded, and sent to the worker)")
	return cmd
}

// interveneFlags are the flags of `aion activity intervene`.
type interveneFlags struct {
	ns        string
	inject    string
	interrupt bool
	pause     bool
	resume    bool
	cancel    bool
	reason    string
	maxTokens uint64
	maxTurns  uint32
	approve   string
	deny      string
	note      string
	attempt   uint32
}

// command builds the one command the flags ask for.
func (f *interveneFlags) command(cmd *cobra.Command) (client.InterventionCommand, error) {
	fl := cmd.Flags()
	var chosen []string
	for _, name := range []string{"inject", "pause", "resume", "cancel", "approve", "deny"} {
		if fl.Changed(name) {
			chosen = append(chosen, "--"+name)
		}
	}
	budget := fl.Changed("max-tokens") || fl.Changed("max-turns")
	if budget {
		chosen = append(chosen, "--max-tokens/--max-turns")
	}
	switch {
	case len(chosen) == 0:
		return client.InterventionCommand{}, errors.New("no command: give one of --inject, --pause, --resume, --cancel, --max-tokens/--max-turns, --approve or --deny")
	case len(chosen) > 1:
		return client.InterventionCommand{}, fmt.Errorf("%s: give exactly one command", strings.Join(chosen, ", "))
	case fl.Changed("interrupt") && !fl.Changed("inject"):
		return client.InterventionCommand{}, errors.New("--interrupt: only with --inject")
	case fl.Changed("reason") && !f.cancel:
		return client.InterventionCommand{}, errors.New("--reason: only with --cancel")
	case fl.Changed("note") && !fl.Changed("approve") && !fl.Changed("deny"):
		return client.InterventionCommand{}, errors.New("--note: only with --approve or --deny")
	}
	switch {
	case fl.Changed("inject"):
		if f.inject == "" {
			return client.InterventionCommand{}, errors.New("--inject: the message must not be empty")
		}
		p := client.PriorityNormal
		if f.interrupt {
			p = client.PriorityInterrupt
		}
		return client.InjectMessage(f.inject, p), nil
	case fl.Changed("pause"):
		if !f.pause {
			return client.InterventionCommand{}, errors.New("--pause=false: leave the flag out instead")
		}
		return client.Pause(), nil
	case fl.Changed("resume"):
		if !f.resume {
			return client.InterventionCommand{}, errors.New("--resume=false: leave the flag out instead")
		}
		return client.Resume(), nil
	case fl.Changed("cancel"):
		if !f.cancel {
			return client.InterventionCommand{}, errors.New("--cancel=false: leave the flag out instead")
		}
		return client.CancelCommand(f.reason), nil
	case budget:
		var b client.Budget
		if fl.Changed("max-tokens") {
			b.MaxTokens = new(f.maxTokens)
		}
		if fl.Changed("max-turns") {
			b.MaxTurns = new(f.maxTurns)
		}
		return client.UpdateBudget(b), nil
	case fl.Changed("approve"):
		if f.approve == "" {
			return client.InterventionCommand{}, errors.New("--approve: the call id must not be empty")
		}
		return client.RespondToApproval(f.approve, true, f.note), nil
	default:
		if f.deny == "" {
			return client.InterventionCommand{}, errors.New("--deny: the call id must not be empty")
		}
		return client.RespondToApproval(f.deny, false, f.note), nil
	}
}

// interventionJSON is what `activity intervene --output json` prints.
type interventionJSON struct {
	Namespace  string `json:"namespace"`
	ActivityID string `json:"activity_id"`
	Command    string `json:"command"`
	*client.InterventionResult
}

func (a *app) interveneCommand() *cobra.Command {
	var f interveneFlags
	cmd := &cobra.Command{
		Use:   "intervene ID",
		Short: "Send a mid-run command (message, pause, resume, cancel, budget, approval) to a running activity",
		Long: `Send one mid-run command to the worker running an activity's current attempt:

  --inject TEXT [--interrupt]     add a message (normal priority: at the next
                                  natural boundary; --interrupt: at once)
  --pause / --resume              suspend the work at its next safe point, and
                                  continue it
  --cancel [--reason R]           ask the worker to wind the attempt down by
                                  itself; it then reports the outcome (compare
                                  'aion activity cancel', which closes the
                                  activity at once)
  --max-tokens N --max-turns N    change the work's budget (either or both)
  --approve CALL_ID | --deny CALL_ID [--note N]
                                  answer an approval request the work waits on

The server sends the command only to a worker that advertised the command's
capability (inject_message, pause_resume, cancel, update_budget,
respond_to_approval; 'aion workers list --output json' shows them). --attempt
N sends it only if attempt N is the one running.

It prints the outcome and exits with it:

  0  delivered: the command is on the worker's stream (the worker's own
     verdict is in its acknowledgement, which the server logs)
  3  stale_target: nothing was sent; no attempt is running on a live worker,
     or the one running is not --attempt
  4  capability_not_supported: nothing was sent; the worker running the
     attempt did not advertise the command's capability
  1  the call failed (unknown activity, malformed command, ...)`,
		Example: `  aion activity intervene agent-7 --namespace agents --inject "focus on the failing test" --interrupt
  aion activity intervene agent-7 --namespace agents --pause
  aion activity intervene agent-7 --namespace agents --resume --attempt 2
  aion activity intervene agent-7 --namespace agents --max-turns 5
  aion activity intervene agent-7 --namespace agents --deny call-12 --note "not on production" --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.ns == "" {
				return errors.New("--namespace: required")
			}
			command, err := f.command(cmd)
			if err != nil {
				return err
			}
			var opts []client.InterveneOption
			if cmd.Flags().Changed("attempt") {
				if f.attempt == 0 {
					return errors.New("--attempt 0: attempts are numbered from 1 (leave the flag out to target the running one)")
				}
				opts = append(opts, client.ForAttempt(f.attempt))
			}
			id := args[0]
			return a.withClient(cmd.Context(), func(c *client.Client) error {
				ctx, cancel := a.unary(cmd.Context())
				defer cancel()
				res, err := c.Intervene(ctx, f.ns, id, command, opts...)
				if err != nil {
					return err
				}
				kind := command.Kind()
				target := "the running attempt"
				if f.attempt > 0 {
					target = fmt.Sprintf("attempt %d", f.attempt)
				}
				err = a.emit(interventionJSON{Namespace: f.ns, ActivityID: id, Command: kind, InterventionResult: res}, func(w io.Writer) {
					switch res.Outcome {
					case client.InterventionDelivered:
						fmt.Fprintf(w, "delivered %s to attempt %d of activity %s in namespace %s (intervention %s)\n",
							kind, res.Attempt, id, f.ns, res.InterventionID)
					case client.InterventionStaleTarget:
						fmt.Fprintf(w, "stale_target: %s not sent: no live worker runs %s of activity %s in namespace %s\n",
							kind, target, id, f.ns)
					case client.InterventionCapabilityNotSupported:
						fmt.Fprintf(w, "capability_not_supported: %s not sent: the worker running attempt %d of activity %s in namespace %s did not advertise %s\n",
							kind, res.Attempt, id, f.ns, command.Capability())
					}
				})
				if err != nil {
					return err
				}
				switch res.Outcome {
				case client.InterventionStaleTarget:
					return &codeError{code: exitStaleTarget, err: fmt.Errorf("%s not delivered: stale target", kind)}
				case client.InterventionCapabilityNotSupported:
					return &codeError{code: exitCapabilityNotSupported, err: fmt.Errorf("%s not delivered: capability %s not supported", kind, command.Capability())}
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.ns, "namespace", "n", "", "namespace of the activity (required)")
	bindEnv(fl, "namespace", "AION_NAMESPACE")
	fl.StringVar(&f.inject, "inject", "", "inject a message with this text")
	fl.BoolVar(&f.interrupt, "interrupt", false, "with --inject: interrupt priority (handled at once) instead of normal")
	fl.BoolVar(&f.pause, "pause", false, "pause the work at its next safe point")
	fl.BoolVar(&f.resume, "resume", false, "resume paused work")
	fl.BoolVar(&f.cancel, "cancel", false, "ask the worker to wind the attempt down cooperatively")
	fl.StringVar(&f.reason, "reason", "", "with --cancel: why")
	fl.Uint64Var(&f.maxTokens, "max-tokens", 0, "update the budget: new ceiling on tokens")
	fl.Uint32Var(&f.maxTurns, "max-turns", 0, "update the budget: new ceiling on turns")
	fl.StringVar(&f.approve, "approve", "", "approve the pending call with this id")
	fl.StringVar(&f.deny, "deny", "", "deny the pending call with this id")
	fl.StringVar(&f.note, "note", "", "with --approve or --deny: a note passed to the work")
	fl.Uint32Var(&f.attempt, "attempt", 0, "send only if this attempt is the running one (default: whichever runs)")
	return cmd
}
