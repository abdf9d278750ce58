package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/cluster"
	"github.com/aion-run/aion/internal/intervention/wire"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (a *activityService) Cancel(ctx context.Context, r *aionv1.CancelRequest) (*aionv1.CancelResponse, error) {
	if err := checkRef(r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	if err := limit.Check("reason", r.GetReason(), limit.Reason); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	v, err := a.s.eng.Cancel(ctx, a.s.caller(ctx), r.GetNamespace(), r.GetId(), r.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.CancelResponse{Activity: activityToProto(v.Activity, v.Attempts)}, nil
}

// primitiveOf names the capability a command needs, and checks its fields.
func primitiveOf(cmd *aionv1.InterventionCommand) (registry.Capability, error) {
	p, err := wire.Check(cmd)
	if err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	return p, nil
}

// Intervene routes a command to the worker that owns the activity's current
// attempt. It reports delivered once the command is on that worker's
// stream, stale_target when no live worker owns the attempt, and
// capability_not_supported, without sending anything, when the owner did
// not advertise the primitive.
func (a *activityService) Intervene(ctx context.Context, r *aionv1.InterveneRequest) (*aionv1.InterveneResponse, error) {
	if err := checkRef(r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	if _, err := primitiveOf(r.GetCommand()); err != nil {
		return nil, err
	}
	if _, err := a.s.eng.Get(ctx, a.s.caller(ctx), r.GetNamespace(), r.GetId()); err != nil {
		return nil, toStatus(err) // unknown activity or not the caller's: NotFound / PermissionDenied
	}
	out, err := a.s.deliverIntervention(r)
	if err != nil {
		return nil, toStatus(err)
	}
	if out.Outcome != aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET || a.s.cluster == nil {
		return out, nil
	}
	// In a cluster the attempt may run on a worker of another server.
	owner, err := a.s.cluster.RunningElsewhere(ctx, r.GetNamespace(), r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	if owner == 0 {
		return out, nil
	}
	if out, err = a.s.cluster.Intervene(ctx, owner, r); err != nil {
		if errors.Is(err, cluster.ErrBadReply) {
			return nil, status.Errorf(codes.Internal, "intervene: server %d: %v", owner, err)
		}
		return nil, status.Errorf(codes.Unavailable, "intervene: forward to the server running the attempt: %v", err)
	}
	return out, nil
}

// deliverIntervention hands an authorized command to the worker of this
// server that runs the attempt, and says what became of it.
func (s *Server) deliverIntervention(r *aionv1.InterveneRequest) (*aionv1.InterveneResponse, error) {
	need, err := primitiveOf(r.GetCommand())
	if err != nil {
		return nil, err
	}
	w, attempt, err := s.eng.Owner(namespace.Anyone("server"), r.GetNamespace(), r.GetId(), int(r.GetAttempt()))
	if err != nil {
		return nil, err
	}
	out := &aionv1.InterveneResponse{Attempt: uint32(attempt)}
	if w == nil {
		out.Outcome = aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET
		return out, nil
	}
	if !w.Capabilities().Has(need) {
		out.Outcome = aionv1.InterventionOutcome_INTERVENTION_OUTCOME_CAPABILITY_NOT_SUPPORTED
		return out, nil
	}
	c, ok := w.Delivery().(*conn)
	if !ok {
		out.Outcome = aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET
		return out, nil
	}
	out.InterventionId = newInterventionID()
	err = c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_Intervention{Intervention: &aionv1.Intervention{
		Namespace: r.GetNamespace(), ActivityId: r.GetId(), Attempt: uint32(attempt),
		InterventionId: out.InterventionId, Command: r.GetCommand(),
	}}})
	if err != nil {
		out.Outcome, out.InterventionId = aionv1.InterventionOutcome_INTERVENTION_OUTCOME_STALE_TARGET, ""
		return out, nil
	}
	s.log.Info("intervention delivered", "namespace", r.GetNamespace(), "activity", r.GetId(), "attempt", attempt,
		"worker", w.ID(), "intervention", out.InterventionId, "command", kindOf(r.GetCommand()))
	out.Outcome = aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED
	return out, nil
}

// kindOf names a command for logs.
func kindOf(cmd *aionv1.InterventionCommand) string {
	kind, _, _ := wire.Of(cmd)
	return kind
}

func newInterventionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
