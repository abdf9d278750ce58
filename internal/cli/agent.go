package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aion-run/aion/worker"
)

// The demo agent's input, output and heartbeat details.
type (
	agentInput struct {
		// Turns to run; 0 means 3.
		Turns int `json:"turns"`
		// TurnMS is how long one turn takes; 0 means 1000.
		TurnMS int64 `json:"turn_ms"`
	}
	agentMessage struct {
		Text     string `json:"text"`
		Priority string `json:"priority"`
		// Turn is how many turns had run when the message was handled.
		Turn int `json:"turn"`
	}
	agentOutput struct {
		TurnsRun int            `json:"turns_run"`
		Messages []agentMessage `json:"messages"`
		PausedMS int64          `json:"paused_ms"`
		// InterruptedTurns counts turns cut short by an interrupt message.
		InterruptedTurns int `json:"interrupted_turns"`
		// MaxTurns and MaxTokens are the last budget received, if any.
		MaxTurns  *uint32 `json:"max_turns,omitempty"`
		MaxTokens *uint64 `json:"max_tokens,omitempty"`
	}
	agentProgress struct {
		TurnsRun int `json:"turns_run"`
	}
)

// Defaults of the demo agent's input.
const (
	agentDefaultTurns  = 3
	agentDefaultTurnMS = 1000
)

// demoAgent returns the demo agent: a loop of turns that interventions
// steer. Between turns it takes waiting interventions and waits while
// paused; during a turn an interrupt-priority message cuts the turn short,
// and a normal one is recorded when the turn ends. An update-budget's
// max_turns caps the turns (it never raises them above the input's).
// Heartbeats carry the turns run, and a retry resumes from them.
func demoAgent(log *slog.Logger) func(context.Context, agentInput) (agentOutput, error) {
	return func(ctx context.Context, in agentInput) (agentOutput, error) {
		if in.Turns < 0 || in.TurnMS < 0 {
			return agentOutput{}, worker.NewError("invalid_input",
				fmt.Sprintf("turns %d and turn_ms %d: neither may be negative", in.Turns, in.TurnMS), false, nil)
		}
		if in.Turns == 0 {
			in.Turns = agentDefaultTurns
		}
		if in.TurnMS == 0 {
			in.TurnMS = agentDefaultTurnMS
		}
		a := &agentRun{log: log.With("activity_id", worker.Info(ctx).ActivityID), limit: in.Turns, turns: in.Turns,
			out: agentOutput{Messages: []agentMessage{}}}
		if prev, err := worker.HeartbeatDetails[agentProgress](ctx); err == nil {
			a.out.TurnsRun = min(prev.TurnsRun, in.Turns)
		}
		return a.run(ctx, time.Duration(in.TurnMS)*time.Millisecond)
	}
}

// agentRun is one attempt of the demo agent.
type agentRun struct {
	log    *slog.Logger
	turns  int // from the input
	limit  int // turns, capped by the budget
	out    agentOutput
	queued []agentMessage // normal-priority messages, recorded when the turn ends
}

func (a *agentRun) run(ctx context.Context, turn time.Duration) (agentOutput, error) {
	ivs := worker.Interventions(ctx)
	worker.RecordHeartbeat(ctx, agentProgress{TurnsRun: a.out.TurnsRun})
	for {
		a.takeWaiting(ivs)
		paused, err := worker.WaitWhilePaused(ctx)
		a.out.PausedMS += paused.Milliseconds()
		if err != nil {
			return a.out, context.Cause(ctx)
		}
		if paused > 0 {
			a.log.Info("demo agent resumed", "paused", paused.Round(time.Millisecond), "turns_run", a.out.TurnsRun)
		}
		a.takeWaiting(ivs) // what arrived while paused
		a.record()
		if a.out.TurnsRun >= a.limit {
			return a.out, nil
		}

		t := time.NewTimer(turn)
		interrupted := false
		for running := true; running; {
			select {
			case <-ctx.Done():
				t.Stop()
				return a.out, context.Cause(ctx)
			case iv := <-ivs:
				if a.apply(iv) {
					t.Stop()
					interrupted, running = true, false
				}
			case <-t.C:
				running = false
			}
		}
		a.out.TurnsRun++
		if interrupted {
			a.out.InterruptedTurns++
		}
		a.record()
		worker.RecordHeartbeat(ctx, agentProgress{TurnsRun: a.out.TurnsRun})
	}
}

// takeWaiting applies the interventions already waiting, without blocking.
func (a *agentRun) takeWaiting(ivs <-chan worker.Intervention) {
	for {
		select {
		case iv := <-ivs:
			a.apply(iv)
		default:
			return
		}
	}
}

// record moves the queued messages into the output, as handled now.
func (a *agentRun) record() {
	for _, m := range a.queued {
		m.Turn = a.out.TurnsRun
		a.out.Messages = append(a.out.Messages, m)
	}
	a.queued = a.queued[:0]
}

// apply handles one intervention and acknowledges it; it reports whether
// it interrupts the current turn.
func (a *agentRun) apply(iv worker.Intervention) (interrupt bool) {
	switch iv.Kind {
	case worker.InterventionInjectMessage:
		m := agentMessage{Text: iv.Message.Text, Priority: string(iv.Message.Priority)}
		a.log.Info("demo agent got a message", "priority", m.Priority, "text", m.Text, "turns_run", a.out.TurnsRun)
		iv.Accept()
		if iv.Message.Priority == worker.PriorityInterrupt {
			m.Turn = a.out.TurnsRun
			a.out.Messages = append(a.out.Messages, m)
			return true
		}
		a.queued = append(a.queued, m)
	case worker.InterventionUpdateBudget:
		if b := iv.Budget.MaxTurns; b != nil {
			a.out.MaxTurns = b
			a.limit = min(a.turns, int(*b))
		}
		if b := iv.Budget.MaxTokens; b != nil {
			a.out.MaxTokens = b
		}
		a.log.Info("demo agent budget updated", "turn_limit", a.limit, "turns_run", a.out.TurnsRun)
		iv.Accept()
	default:
		iv.Decline(fmt.Sprintf("the demo agent does not handle %s", iv.Kind))
	}
	return false
}
