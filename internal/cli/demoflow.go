package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// demoBuild is the build id of the demo worker's workflow code.
const demoBuild = "demo-1"

// The order workflow's input and result.
type (
	orderInput struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
		// FailCharge makes the charge step fail (not retryable), so the
		// workflow releases the reservation and fails.
		FailCharge bool `json:"fail_charge"`
		// ShipTimeout is how long to wait for the "ship" signal (a Go
		// duration); "0s" ships without waiting. Default 1h.
		ShipTimeout string `json:"ship_timeout"`
		// Sleep is the durable wait between shipping and the notice;
		// default 1s.
		Sleep string `json:"sleep"`
	}
	orderResult struct {
		OrderID  string `json:"order_id"`
		Status   string `json:"status"`
		Tracking string `json:"tracking,omitempty"`
		// Steps are the activity results in order.
		Steps []string `json:"steps"`
	}
	shipSignal struct {
		Carrier  string `json:"carrier"`
		Tracking string `json:"tracking"`
	}
	stepInput struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount,omitempty"`
		Fail    bool   `json:"fail,omitempty"`
		Note    string `json:"note,omitempty"`
	}
)

// demoOrder reserves, charges (releasing the reservation when the charge
// fails), waits for the "ship" signal up to its timeout (refunding and
// releasing when none comes), ships, sleeps durably, and notifies.
// The query "status" answers where it stands.
func demoOrder(ctx workflow.Context, in orderInput) (orderResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	shipTimeout, err := demoDuration("ship_timeout", in.ShipTimeout, time.Hour)
	if err != nil {
		return orderResult{}, err
	}
	pause, err := demoDuration("sleep", in.Sleep, time.Second)
	if err != nil {
		return orderResult{}, err
	}
	res := orderResult{OrderID: in.OrderID, Status: "reserving"}
	if err := workflow.SetQueryHandler(ctx, "status", func(struct{}) (orderResult, error) { return res, nil }); err != nil {
		return res, err
	}
	step := func(typ string, si stepInput) error {
		out, err := workflow.ExecuteActivity[string](ctx, typ, si).Get(ctx)
		if err == nil {
			res.Steps = append(res.Steps, out)
		}
		return err
	}
	base := stepInput{OrderID: in.OrderID, Amount: in.Amount}
	if err := step("reserve", base); err != nil {
		return res, err
	}
	res.Status = "charging"
	charge := base
	charge.Fail = in.FailCharge
	if err := step("charge", charge); err != nil {
		// Compensate on a context the run's own cancellation cannot stop.
		d := workflow.NewDisconnectedContext(ctx)
		if _, rerr := workflow.ExecuteActivity[string](d, "release", base).Get(d); rerr != nil {
			return res, errors.Join(err, rerr)
		}
		res.Status = "released"
		return res, fmt.Errorf("charge failed, reservation released: %w", err)
	}
	if shipTimeout > 0 {
		res.Status = "awaiting shipment"
		sig, ok, err := workflow.ReceiveSignalWithTimeout[shipSignal](ctx, "ship", shipTimeout)
		if err != nil {
			return res, err
		}
		if !ok {
			d := workflow.NewDisconnectedContext(ctx)
			note := base
			note.Note = "not shipped within " + shipTimeout.String()
			if _, err := workflow.ExecuteActivity[string](d, "refund", note).Get(d); err != nil {
				return res, err
			}
			res.Status = "refunded"
			return res, nil
		}
		res.Tracking = sig.Carrier + ":" + sig.Tracking
	}
	res.Status = "shipping"
	if err := step("ship", base); err != nil {
		return res, err
	}
	if pause > 0 {
		if err := workflow.Sleep(ctx, pause); err != nil {
			return res, err
		}
	}
	res.Status = "notifying"
	if err := step("notify", base); err != nil {
		return res, err
	}
	res.Status = "done"
	return res, nil
}

func demoDuration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, worker.NewError("invalid_input", fmt.Sprintf("%s: %q is not a duration of at least 0", field, s), false, nil)
	}
	return d, nil
}

// The agent workflow's input, result and signals.
type (
	agentFlowInput struct {
		Task string `json:"task"`
		// MaxTurns bounds the model turns; default 5.
		MaxTurns int `json:"max_turns"`
		// Budget is the cost units the run may spend (a model turn costs 3,
		// a tool call 1); default 100.
		Budget int `json:"budget"`
		// ApprovalAt is the turn whose tool call needs a person's approval
		// (the "approval" signal); 0 means none.
		ApprovalAt int `json:"approval_at"`
		// ApprovalTimeout bounds the wait for approval; default 1h.
		ApprovalTimeout string `json:"approval_timeout"`
		// TurnMS is how long one model turn takes; default 200.
		TurnMS int64 `json:"turn_ms"`
		// TurnsPerRun continues the run as new after this many turns, so a
		// long loop keeps a bounded history; default 100.
		TurnsPerRun int `json:"turns_per_run"`
		// Done carries the state of earlier runs of a continued loop.
		Done *agentFlowResult `json:"done,omitempty"`
	}
	agentFlowResult struct {
		Turns  int    `json:"turns"`
		Spent  int    `json:"spent"`
		Tools  int    `json:"tools"`
		Status string `json:"status"`
		// Messages are what operators injected into model turns.
		Messages []string `json:"messages,omitempty"`
		Runs     int      `json:"runs"`
	}
	approvalSignal struct {
		Approved bool   `json:"approved"`
		Note     string `json:"note"`
	}
)

// Costs of the agent workflow's steps, in budget units.
const (
	agentTurnCost = 3
	agentToolCost = 1
)

// demoAgentFlow loops over model turns (the "agent" activity, one turn
// each, which interventions steer while it runs) and tool calls (the
// "tool" activity) within a budget; the tool call of turn ApprovalAt waits
// for the "approval" signal first. It continues as new every TurnsPerRun
// turns. The query "status" answers its progress.
func demoAgentFlow(ctx workflow.Context, in agentFlowInput) (agentFlowResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: 30 * time.Second})
	if in.MaxTurns == 0 {
		in.MaxTurns = 5
	}
	if in.Budget == 0 {
		in.Budget = 100
	}
	if in.TurnMS == 0 {
		in.TurnMS = 200
	}
	if in.TurnsPerRun == 0 {
		in.TurnsPerRun = 100
	}
	approvalTimeout, err := demoDuration("approval_timeout", in.ApprovalTimeout, time.Hour)
	if err != nil {
		return agentFlowResult{}, err
	}
	if in.MaxTurns < 0 || in.Budget < 0 || in.TurnMS < 0 || in.TurnsPerRun < 0 {
		return agentFlowResult{}, worker.NewError("invalid_input", "max_turns, budget, turn_ms and turns_per_run may not be negative", false, nil)
	}
	res := agentFlowResult{Status: "running"}
	if in.Done != nil {
		res = *in.Done
	}
	res.Runs++
	if err := workflow.SetQueryHandler(ctx, "status", func(struct{}) (agentFlowResult, error) { return res, nil }); err != nil {
		return res, err
	}
	for turnsThisRun := 0; res.Turns < in.MaxTurns; turnsThisRun++ {
		if turnsThisRun == in.TurnsPerRun {
			next := in
			done := res
			next.Done = &done
			return res, workflow.NewContinueAsNewError(next)
		}
		if res.Spent+agentTurnCost+agentToolCost > in.Budget {
			res.Status = "budget spent"
			return res, nil
		}
		out, err := workflow.ExecuteActivity[agentOutput](ctx, "agent", agentInput{Turns: 1, TurnMS: in.TurnMS}).Get(ctx)
		if err != nil {
			return res, err
		}
		res.Turns++
		res.Spent += agentTurnCost
		for _, m := range out.Messages {
			res.Messages = append(res.Messages, m.Text)
		}
		if out.MaxTurns != nil && int(*out.MaxTurns) < in.MaxTurns {
			in.MaxTurns = max(int(*out.MaxTurns), res.Turns)
		}
		if res.Turns == in.ApprovalAt {
			res.Status = "awaiting approval"
			a, ok, err := workflow.ReceiveSignalWithTimeout[approvalSignal](ctx, "approval", approvalTimeout)
			if err != nil {
				return res, err
			}
			if !ok || !a.Approved {
				res.Status = "not approved"
				return res, nil
			}
			res.Status = "running"
		}
		if _, err := workflow.ExecuteActivity[string](ctx, "tool", stepInput{Note: fmt.Sprintf("%s: tool call of turn %d", in.Task, res.Turns)}).Get(ctx); err != nil {
			return res, err
		}
		res.Tools++
		res.Spent += agentToolCost
	}
	res.Status = "done"
	return res, nil
}

// ledger appends one line per execution of a demo workflow step to a file
// (aion worker demo --ledger), so a test can count how often each ran.
type ledger struct {
	mu sync.Mutex
	f  *os.File
}

func openLedger(path string) (*ledger, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--ledger: %w", err)
	}
	return &ledger{f: f}, nil
}

// record writes "<unix nanos> <activity id> <attempt> <type>" and syncs it,
// so a line written is kept across a kill of the worker.
func (l *ledger) record(ctx context.Context) error {
	if l == nil {
		return nil
	}
	info := worker.Info(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintf(l.f, "%d %s %d %s\n", time.Now().UnixNano(), info.ActivityID, info.Attempt, info.ActivityType); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return l.f.Sync()
}

func (l *ledger) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// registerDemoWorkflows registers the order and agent workflows and the
// activities they take as steps.
func registerDemoWorkflows(w *worker.Worker, log *slog.Logger, led *ledger) {
	worker.RegisterWorkflow(w, "order", demoOrder)
	worker.RegisterWorkflow(w, "agent", demoAgentFlow)
	for _, typ := range []string{"reserve", "charge", "release", "refund", "ship", "notify", "tool"} {
		worker.RegisterActivity(w, typ, logged(log, func(ctx context.Context, in stepInput) (string, error) {
			if err := led.record(ctx); err != nil {
				return "", err
			}
			info := worker.Info(ctx)
			if in.Fail {
				return "", worker.NewError("declined", fmt.Sprintf("%s of order %s declined", info.ActivityType, in.OrderID), false, nil)
			}
			return fmt.Sprintf("%s %s", info.ActivityType, in.OrderID), nil
		}))
	}
}
