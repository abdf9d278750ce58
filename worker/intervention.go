package worker

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	ivwire "github.com/aion-run/aion/internal/intervention/wire"
)

// InterventionKind names the command an Intervention carries.
type InterventionKind string

// The interventions a handler receives from Interventions. Cancel, pause
// and resume never arrive there: the SDK applies them itself (see
// Interventions).
const (
	// InterventionInjectMessage: Message is set.
	InterventionInjectMessage InterventionKind = intervention.KindInjectMessage
	// InterventionUpdateBudget: Budget is set.
	InterventionUpdateBudget InterventionKind = intervention.KindUpdateBudget
	// InterventionRespondToApproval: Approval is set.
	InterventionRespondToApproval InterventionKind = intervention.KindRespondToApproval
)

// Priority says how urgently an injected message should be handled.
type Priority string

// The message priorities.
const (
	// PriorityNormal: at the next natural boundary (for an agent, after the
	// current turn).
	PriorityNormal Priority = intervention.PriorityNormal
	// PriorityInterrupt: at once, interrupting the current step.
	PriorityInterrupt Priority = intervention.PriorityInterrupt
)

// InjectedMessage is the payload of an inject-message intervention.
type InjectedMessage struct {
	Text     string
	Priority Priority
}

// BudgetUpdate is the payload of an update-budget intervention. A nil field
// leaves that limit unchanged; at least one is set.
type BudgetUpdate struct {
	MaxTokens *uint64
	MaxTurns  *uint32
}

// ApprovalResponse is the payload of a respond-to-approval intervention:
// the answer to an approval request the running work is waiting on.
type ApprovalResponse struct {
	// CallID names the call awaiting approval, as the work reported it.
	CallID string
	// Approve is true to allow the call, false to deny it.
	Approve bool
	// Note is an optional explanation from whoever decided.
	Note string
}

// Intervention is one mid-run command for the running attempt, taken from
// the channel Interventions returns. Kind says which of Message, Budget and
// Approval is set.
//
// Every intervention taken from the channel is acknowledged exactly once:
// call Accept once it is applied, or Decline with a reason. Only the first
// acknowledgement counts. An intervention the handler took but did not
// acknowledge by the time it returns is declined by the SDK, so a forgotten
// Accept shows up in the server's log rather than passing for success.
type Intervention struct {
	// ID is the server-assigned identifier, echoed in the acknowledgement.
	ID   string
	Kind InterventionKind

	Message  *InjectedMessage  // InterventionInjectMessage
	Budget   *BudgetUpdate     // InterventionUpdateBudget
	Approval *ApprovalResponse // InterventionRespondToApproval

	ack *interventionAck
}

// Accept acknowledges the intervention as applied.
func (iv Intervention) Accept() { iv.Ack(true, "") }

// Decline acknowledges the intervention as not applied, saying why.
func (iv Intervention) Decline(reason string) { iv.Ack(false, reason) }

// Ack acknowledges the intervention: accepted says whether it was applied,
// message (optional) explains, mainly when it was not. Only the first call
// has an effect. The acknowledgement is best effort: it is lost if the
// worker's connection to the server breaks first.
func (iv Intervention) Ack(accepted bool, message string) {
	if iv.ack != nil {
		iv.ack.send(accepted, message)
	}
}

// interventionAck sends one InterventionAck on the stream that delivered
// the intervention, once.
type interventionAck struct {
	out   *outbox
	frame *aionv1.InterventionAck
	owner *interventions // the attempt's state that awaits this ack; nil if none
	once  sync.Once
}

func (a *interventionAck) send(accepted bool, message string) (sent bool) {
	a.once.Do(func() {
		f := a.frame
		f.Accepted, f.Message = accepted, message
		a.out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_InterventionAck{InterventionAck: f}})
		if a.owner != nil {
			a.owner.acknowledged(f.GetInterventionId())
		}
		sent = true
	})
	return sent
}

// interventionBuffer is how many interventions may wait for a handler to
// take them; a further one is declined.
const interventionBuffer = 64

// Interventions returns the channel on which the attempt that ctx belongs to
// receives inject-message, update-budget and respond-to-approval
// interventions, in the order the server sent them. Acknowledge each one
// (see Intervention). Outside an activity handler it returns nil.
//
// The SDK applies the other primitives itself, like context cancellation:
// a cancel intervention cancels the handler's ctx (cause
// ErrActivityCanceled), and pause and resume switch the attempt's pause
// state, which the handler observes with Paused and WaitWhilePaused. These
// are acknowledged by the SDK as they arrive.
//
// Interventions are buffered from the start of the attempt, so none is lost
// between the start of the handler and its first call to Interventions. Up
// to 64 wait; beyond that the server's command is declined. Interventions
// still waiting when the handler returns are declined: a handler that never
// reads the channel declines everything it is sent. The channel is never
// closed; select on ctx.Done() alongside it.
//
// The server sends an intervention only if the worker advertised its
// primitive (Options.Capabilities), so advertise only what the handlers of
// this worker honour.
func Interventions(ctx context.Context) <-chan Intervention {
	a := attemptFrom(ctx)
	if a == nil {
		return nil
	}
	return a.iv.ch
}

// Paused reports whether the attempt that ctx belongs to is paused: a pause
// intervention arrived and no resume since. Outside an activity handler it
// is false.
func Paused(ctx context.Context) bool {
	a := attemptFrom(ctx)
	return a != nil && a.iv.gate() != nil
}

// WaitWhilePaused returns at once when the attempt that ctx belongs to is
// not paused; otherwise it blocks until a resume intervention arrives or ctx
// is done, and returns how long it waited (and ctx.Err() when ctx ended
// it). Call it where the work can safely stop, for example before each turn
// of an agent loop.
//
// While it waits it keeps the attempt's heartbeats going (with the last
// details recorded), so a paused attempt does not hit its heartbeat timeout.
// Pausing does not stop the attempt's other clocks: its start-to-close
// timeout still runs.
func WaitWhilePaused(ctx context.Context) (time.Duration, error) {
	a := attemptFrom(ctx)
	if a == nil {
		return 0, ctx.Err()
	}
	gate := a.iv.gate()
	if gate == nil {
		return 0, ctx.Err()
	}
	start := time.Now()
	var beat <-chan time.Time
	if a.info.HeartbeatTimeout > 0 && a.hbInterval > 0 {
		t := time.NewTicker(a.hbInterval)
		defer t.Stop()
		beat = t.C
	}
	for gate != nil {
		select {
		case <-gate:
			gate = a.iv.gate()
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-beat:
			a.heartbeat(a.latestDetails())
		}
	}
	return time.Since(start), nil
}

// interventions is one attempt's intervention state: the channel to the
// handler, the acknowledgements it still owes, and the pause gate.
type interventions struct {
	ch chan Intervention

	mu      sync.Mutex
	ended   bool                        // the handler returned; nothing more is delivered
	pending map[string]*interventionAck // delivered to ch, not yet acknowledged
	paused  chan struct{}               // non-nil while paused; closed on resume
}

// hasEnded reports whether the handler has returned.
func (s *interventions) hasEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// acknowledged forgets an intervention the handler acknowledged.
func (s *interventions) acknowledged(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// gate returns a channel that is closed on resume while the attempt is
// paused, nil when it is not paused.
func (s *interventions) gate() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		return nil
	}
	return s.paused
}

// setPaused switches the pause state and reports whether it changed.
func (s *interventions) setPaused(paused bool) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case paused && s.paused == nil:
		s.paused = make(chan struct{})
		return true
	case !paused && s.paused != nil:
		close(s.paused)
		s.paused = nil
		return true
	}
	return false
}

// offer hands iv to the handler; the reason is set when it cannot.
func (s *interventions) offer(iv Intervention) (reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return "the attempt ended before the intervention arrived"
	}
	select {
	case s.ch <- iv:
	default:
		return fmt.Sprintf("%d interventions are already waiting for the handler", cap(s.ch))
	}
	if s.pending == nil {
		s.pending = make(map[string]*interventionAck)
	}
	s.pending[iv.ID] = iv.ack
	return ""
}

// end stops delivery and declines whatever the handler did not
// acknowledge; it returns how many it declined.
func (s *interventions) end() int {
	s.mu.Lock()
	s.ended = true
	pending := s.pending
	s.pending = nil
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
	s.mu.Unlock()
	waiting := make(map[*interventionAck]bool)
	for drained := false; !drained; {
		select {
		case iv := <-s.ch:
			waiting[iv.ack] = true
		default:
			drained = true
		}
	}
	declined := 0
	for _, ack := range pending {
		msg := "the handler took the intervention but returned without acknowledging it"
		if waiting[ack] {
			msg = "the attempt ended before the handler took the intervention"
		}
		if ack.send(false, msg) {
			declined++
		}
	}
	return declined
}

// intervene applies one Intervention frame and acknowledges it, or hands
// it to the handler, which acknowledges it.
func (w *Worker) intervene(out *outbox, in *aionv1.Intervention) {
	k := attemptKey{namespace: in.GetNamespace(), id: in.GetActivityId(), attempt: in.GetAttempt()}
	ack := &interventionAck{out: out, frame: &aionv1.InterventionAck{
		Namespace: k.namespace, ActivityId: k.id, Attempt: k.attempt, InterventionId: in.GetInterventionId()}}
	kind, primitive, ok := ivwire.Of(in.GetCommand())
	reply := func(accepted bool, msg string) {
		ack.send(accepted, msg)
		w.log.Info("aion worker: intervention", "activity", k.String(), "intervention", in.GetInterventionId(),
			"command", cmp.Or(kind, "unknown"), "accepted", accepted, "message", msg)
	}
	if !ok {
		reply(false, "the intervention carries no command this SDK knows")
		return
	}
	if need := capabilityOf(primitive); !w.caps[need] {
		reply(false, fmt.Sprintf("this worker did not advertise the %s capability", need))
		return
	}
	w.mu.Lock()
	a := w.running[k]
	w.mu.Unlock()
	if a == nil || a.iv.hasEnded() {
		reply(false, fmt.Sprintf("attempt %s is not running on this worker", k))
		return
	}
	switch cmd := in.GetCommand().GetCommand().(type) {
	case *aionv1.InterventionCommand_Cancel:
		a.cancel(fmt.Errorf("%w: %s", ErrActivityCanceled, cmd.Cancel.GetReason()))
		reply(true, "")
	case *aionv1.InterventionCommand_Pause:
		if a.iv.setPaused(true) {
			reply(true, "")
		} else {
			reply(true, "already paused")
		}
	case *aionv1.InterventionCommand_Resume:
		if a.iv.setPaused(false) {
			reply(true, "")
		} else {
			reply(true, "not paused")
		}
	default:
		ack.owner = &a.iv
		iv := Intervention{ID: in.GetInterventionId(), ack: ack}
		switch c := cmd.(type) {
		case *aionv1.InterventionCommand_InjectMessage:
			iv.Kind, iv.Message = InterventionInjectMessage, &InjectedMessage{Text: c.InjectMessage.GetText(),
				Priority: Priority(ivwire.PriorityWord(c.InjectMessage.GetPriority()))}
		case *aionv1.InterventionCommand_UpdateBudget:
			iv.Kind, iv.Budget = InterventionUpdateBudget, &BudgetUpdate{MaxTokens: c.UpdateBudget.MaxTokens, MaxTurns: c.UpdateBudget.MaxTurns}
		case *aionv1.InterventionCommand_RespondToApproval:
			r := c.RespondToApproval
			iv.Kind, iv.Approval = InterventionRespondToApproval, &ApprovalResponse{CallID: r.GetCallId(), Approve: r.GetApprove(), Note: r.GetNote()}
		}
		if reason := a.iv.offer(iv); reason != "" {
			reply(false, reason)
			return
		}
		w.log.Debug("aion worker: intervention handed to the handler", "activity", k.String(),
			"intervention", in.GetInterventionId(), "command", iv.Kind)
	}
}
