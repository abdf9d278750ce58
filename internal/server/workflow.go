package server

import (
	"context"
	"fmt"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/store"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// workflowService is the gRPC face of the engine's workflow runs.
type workflowService struct {
	aionv1.UnimplementedWorkflowServiceServer
	s *Server
}

func (ws *workflowService) Start(ctx context.Context, r *aionv1.StartWorkflowRequest) (*aionv1.StartWorkflowResponse, error) {
	reuse, err := reuseFromProto(r.GetIdReuse())
	if err != nil {
		return nil, toStatus(err)
	}
	delay, err := fromDur("start_delay", r.GetStartDelay())
	if err != nil {
		return nil, toStatus(err)
	}
	at, err := fromTimestamp("start_time", r.GetStartTime())
	if err != nil {
		return nil, toStatus(err)
	}
	req := engine.WorkflowRequest{
		Namespace: r.GetNamespace(), WorkflowID: r.GetWorkflowId(), WorkflowType: r.GetWorkflowType(),
		TaskQueue: r.GetTaskQueue(), Input: r.GetInput(), IDReuse: reuse, StartDelay: delay, StartAt: at,
		Priority: int(r.GetPriority()), Flow: flowFromProto(r),
		Trace: traceContextFromProto(r.GetTraceContext()),
	}
	var span trace.Span
	if t := ws.s.tracing; t != nil && req.Trace.Validate("") == nil { // a bad one is the engine's to refuse
		span, req.Trace = startSpan(t, spanStartWorkflow, req.Trace, attrNamespace.String(req.Namespace),
			attrWorkflowType.String(req.WorkflowType), attrTaskQueue.String(req.TaskQueue))
	}
	rec, existing, err := ws.s.eng.StartWorkflow(ctx, ws.s.caller(ctx), req)
	if span != nil {
		span.SetAttributes(attrWorkflowID.String(rec.WorkflowID), attrRunID.String(rec.RunID), attrExisting.Bool(existing))
		endSpan(span, err)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.StartWorkflowResponse{Run: runToProto(rec, nil), Existing: existing}, nil
}

func (ws *workflowService) Why(ctx context.Context, r *aionv1.WhyWorkflowRequest) (*aionv1.WhyResponse, error) {
	ex, err := ws.s.eng.WhyWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return whyToProto(ex), nil
}

func (ws *workflowService) Get(ctx context.Context, r *aionv1.GetWorkflowRequest) (*aionv1.GetWorkflowResponse, error) {
	v, err := ws.s.eng.GetWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.GetWorkflowResponse{Run: runToProto(v.Run, v.Pending)}, nil
}

func (ws *workflowService) List(ctx context.Context, r *aionv1.ListWorkflowsRequest) (*aionv1.ListWorkflowsResponse, error) {
	st, err := runStatusFromProto(r.GetStatus())
	if err != nil {
		return nil, toStatus(err)
	}
	runs, next, err := ws.s.eng.ListWorkflows(ctx, ws.s.caller(ctx), engine.RunFilter{Namespace: r.GetNamespace(), Status: st,
		WorkflowType: r.GetWorkflowType(), PageSize: int(r.GetPageSize()), PageToken: r.GetPageToken()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.ListWorkflowsResponse{NextPageToken: next, Runs: make([]*aionv1.Run, len(runs))}
	for i, rec := range runs {
		out.Runs[i] = runToProto(rec, nil)
	}
	return out, nil
}

func (ws *workflowService) Wait(ctx context.Context, r *aionv1.WaitWorkflowRequest) (*aionv1.WaitWorkflowResponse, error) {
	rec, err := ws.s.eng.WaitWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.WaitWorkflowResponse{Run: runToProto(rec, nil)}, nil
}

func (ws *workflowService) Signal(ctx context.Context, r *aionv1.SignalWorkflowRequest) (*aionv1.SignalWorkflowResponse, error) {
	seq, err := ws.s.eng.SignalWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), r.GetSignalName(), r.GetInput())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.SignalWorkflowResponse{EventSeq: seq}, nil
}

func (ws *workflowService) Query(ctx context.Context, r *aionv1.QueryWorkflowRequest) (*aionv1.QueryWorkflowResponse, error) {
	res, err := ws.s.eng.QueryWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), r.GetQueryName(), r.GetInput())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.QueryWorkflowResponse{Result: res}, nil
}

func (ws *workflowService) Cancel(ctx context.Context, r *aionv1.CancelWorkflowRequest) (*aionv1.CancelWorkflowResponse, error) {
	rec, err := ws.s.eng.CancelWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), r.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.CancelWorkflowResponse{Run: runToProto(rec, nil)}, nil
}

func (ws *workflowService) Terminate(ctx context.Context, r *aionv1.TerminateWorkflowRequest) (*aionv1.TerminateWorkflowResponse, error) {
	rec, err := ws.s.eng.TerminateWorkflow(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), r.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &aionv1.TerminateWorkflowResponse{Run: runToProto(rec, nil)}, nil
}

func (ws *workflowService) History(ctx context.Context, r *aionv1.GetHistoryRequest) (*aionv1.GetHistoryResponse, error) {
	var after int64
	if t := r.GetPageToken(); t != "" {
		if _, err := fmt.Sscan(t, &after); err != nil || after <= 0 {
			return nil, status.Errorf(codes.InvalidArgument, "page_token: %q is not a token this server issued", t)
		}
	}
	evs, next, err := ws.s.eng.WorkflowHistory(ctx, ws.s.caller(ctx), r.GetNamespace(), r.GetWorkflowId(), r.GetRunId(), after, int(r.GetPageSize()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &aionv1.GetHistoryResponse{Events: evs}
	if next > 0 {
		out.NextPageToken = fmt.Sprint(next)
	}
	return out, nil
}

func reuseFromProto(p aionv1.IDReusePolicy) (engine.IDReuse, error) {
	switch p {
	case aionv1.IDReusePolicy_ID_REUSE_POLICY_UNSPECIFIED, aionv1.IDReusePolicy_ID_REUSE_POLICY_ALLOW_DUPLICATE:
		return engine.ReuseAllowDuplicate, nil
	case aionv1.IDReusePolicy_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY:
		return engine.ReuseAllowDuplicateFailedOnly, nil
	case aionv1.IDReusePolicy_ID_REUSE_POLICY_REJECT_DUPLICATE:
		return engine.ReuseRejectDuplicate, nil
	}
	return 0, fmt.Errorf("id_reuse: %d is not a known policy: %w", p, errInvalid)
}

func runStatusFromProto(p aionv1.RunStatus) (store.RunStatus, error) {
	switch p {
	case aionv1.RunStatus_RUN_STATUS_UNSPECIFIED:
		return "", nil
	case aionv1.RunStatus_RUN_STATUS_RUNNING:
		return store.RunRunning, nil
	case aionv1.RunStatus_RUN_STATUS_COMPLETED:
		return store.RunCompleted, nil
	case aionv1.RunStatus_RUN_STATUS_FAILED:
		return store.RunFailed, nil
	case aionv1.RunStatus_RUN_STATUS_CANCELED:
		return store.RunCanceled, nil
	case aionv1.RunStatus_RUN_STATUS_TERMINATED:
		return store.RunTerminated, nil
	case aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW:
		return store.RunContinuedAsNew, nil
	}
	return "", fmt.Errorf("status: %d is not a run status: %w", p, errInvalid)
}

func runToProto(r store.Run, pending []engine.PendingStep) *aionv1.Run {
	out := &aionv1.Run{
		Namespace: r.Namespace, WorkflowId: r.WorkflowID, RunId: r.RunID, WorkflowType: r.WorkflowType, TaskQueue: r.TaskQueue,
		BuildId: r.BuildID, Status: engine.RunStatusProto(r.Status), Input: r.Input, Result: r.Result, Failure: failureToProto(r.Failure),
		StartTime: ts(r.StartedAt), CloseTime: ts(r.ClosedAt), HistoryLength: r.HistoryLength, TaskFailure: r.TaskFailure,
		ParentWorkflowId: r.ParentWorkflowID, ParentRunId: r.ParentRunID, NextRunId: r.NextRunID,
		Priority: int32(r.Priority), FairnessKey: r.Flow.FairnessKey, FairnessWeight: int32(r.Flow.FairnessWeight),
		ConcurrencyKey: r.Flow.ConcurrencyKey, ScheduleId: r.Origin.ScheduleID, ScheduleTime: ts(r.Origin.Time),
		TraceContext: engine.TraceContextProto(r.Trace),
	}
	for _, p := range pending {
		out.PendingSteps = append(out.PendingSteps, &aionv1.PendingStep{Step: p.Step, Kind: p.Kind, Name: p.Name,
			ActivityId: p.ActivityID, Attempt: uint32(p.Attempt), WorkerId: uint64(p.WorkerID), FireTime: ts(p.FireAt),
			ChildWorkflowId: p.ChildID})
	}
	return out
}
