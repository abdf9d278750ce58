package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// RunStatus is where a workflow run is in its life. Every status but
// RunRunning is closed.
type RunStatus string

// The run statuses.
const (
	RunRunning        RunStatus = "running"
	RunCompleted      RunStatus = "completed"
	RunFailed         RunStatus = "failed"
	RunCanceled       RunStatus = "canceled"
	RunTerminated     RunStatus = "terminated"
	RunContinuedAsNew RunStatus = "continued_as_new"
)

// Closed reports whether the run has ended.
func (s RunStatus) Closed() bool { return s != RunRunning && s != "" }

var runStatuses = map[aionv1.RunStatus]RunStatus{
	aionv1.RunStatus_RUN_STATUS_RUNNING:          RunRunning,
	aionv1.RunStatus_RUN_STATUS_COMPLETED:        RunCompleted,
	aionv1.RunStatus_RUN_STATUS_FAILED:           RunFailed,
	aionv1.RunStatus_RUN_STATUS_CANCELED:         RunCanceled,
	aionv1.RunStatus_RUN_STATUS_TERMINATED:       RunTerminated,
	aionv1.RunStatus_RUN_STATUS_CONTINUED_AS_NEW: RunContinuedAsNew,
}

// ParseRunStatus reads a run status by name; "" is no filter.
func ParseRunStatus(s string) (RunStatus, error) {
	if s == "" {
		return "", nil
	}
	for _, v := range runStatuses {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("run status %q is not one of running, completed, failed, canceled, terminated, continued_as_new", s)
}

func runStatusToProto(s RunStatus) aionv1.RunStatus {
	for p, v := range runStatuses {
		if v == s {
			return p
		}
	}
	return aionv1.RunStatus_RUN_STATUS_UNSPECIFIED
}

// Run is one execution of a workflow id, as the server reports it.
type Run struct {
	Namespace    string    `json:"namespace"`
	WorkflowID   string    `json:"workflow_id"`
	RunID        string    `json:"run_id"`
	WorkflowType string    `json:"workflow_type"`
	TaskQueue    string    `json:"task_queue"`
	BuildID      string    `json:"build_id,omitempty"`
	Status       RunStatus `json:"status"`
	Input        Payload   `json:"input,omitempty"`
	// Result is set when Status is RunCompleted.
	Result Payload `json:"result,omitempty"`
	// Failure is set when the run failed, was canceled or terminated.
	Failure   *ActivityError `json:"failure,omitempty"`
	StartTime time.Time      `json:"start_time"`
	// CloseTime is zero while the run is open.
	CloseTime     time.Time `json:"close_time,omitzero"`
	HistoryLength int64     `json:"history_length"`
	// TaskFailure is the last workflow task failure while the run is open
	// (for example a non-deterministic error naming the step).
	TaskFailure      string `json:"task_failure,omitempty"`
	ParentWorkflowID string `json:"parent_workflow_id,omitempty"`
	ParentRunID      string `json:"parent_run_id,omitempty"`
	NextRunID        string `json:"next_run_id,omitempty"`
	// Priority of the run's workflow tasks within their pool: 1 first … 5 last.
	Priority int `json:"priority"`
	// FairnessKey and FairnessWeight share the run's pools out between
	// keys; ConcurrencyKey is the group limits count it in.
	FairnessKey    string `json:"fairness_key,omitempty"`
	FairnessWeight int    `json:"fairness_weight,omitempty"`
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// ScheduleID and ScheduleTime name the schedule tick (its nominal
	// time) that started the run; empty and zero otherwise.
	ScheduleID   string    `json:"schedule_id,omitempty"`
	ScheduleTime time.Time `json:"schedule_time,omitzero"`
	// TraceParent and TraceState are the W3C trace context the run's spans
	// and its steps' activities join; empty when it has none.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// PendingSteps are the steps the run waits on (Get only).
	PendingSteps []PendingStep `json:"pending_steps,omitempty"`
}

// PendingStep is a step a run waits on.
type PendingStep struct {
	Step int64 `json:"step"`
	// Kind is activity, timer, side_effect or child.
	Kind string `json:"kind"`
	Name string `json:"name,omitempty"`
	// For an activity: its id, current attempt and the worker running it.
	ActivityID string `json:"activity_id,omitempty"`
	Attempt    uint32 `json:"attempt,omitempty"`
	WorkerID   uint64 `json:"worker_id,omitempty"`
	// For a timer: when it fires.
	FireTime time.Time `json:"fire_time,omitzero"`
	// For a child: its workflow id.
	ChildWorkflowID string `json:"child_workflow_id,omitempty"`
}

func runFromProto(p *aionv1.Run) *Run {
	if p == nil {
		return nil
	}
	r := &Run{
		Namespace: p.GetNamespace(), WorkflowID: p.GetWorkflowId(), RunID: p.GetRunId(), WorkflowType: p.GetWorkflowType(),
		TaskQueue: p.GetTaskQueue(), BuildID: p.GetBuildId(), Status: runStatuses[p.GetStatus()], Input: p.GetInput(),
		Result: p.GetResult(), Failure: failureFromProto(p.GetFailure()), StartTime: timeFromProto(p.GetStartTime()),
		CloseTime: timeFromProto(p.GetCloseTime()), HistoryLength: p.GetHistoryLength(), TaskFailure: p.GetTaskFailure(),
		ParentWorkflowID: p.GetParentWorkflowId(), ParentRunID: p.GetParentRunId(), NextRunID: p.GetNextRunId(),
		Priority: int(p.GetPriority()), FairnessKey: p.GetFairnessKey(), FairnessWeight: int(p.GetFairnessWeight()),
		ConcurrencyKey: p.GetConcurrencyKey(), ScheduleID: p.GetScheduleId(), ScheduleTime: timeFromProto(p.GetScheduleTime()),
		TraceParent: p.GetTraceContext().GetTraceparent(), TraceState: p.GetTraceContext().GetTracestate(),
	}
	for _, s := range p.GetPendingSteps() {
		r.PendingSteps = append(r.PendingSteps, PendingStep{Step: s.GetStep(),
			Kind: strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "STEP_KIND_")),
			Name: s.GetName(), ActivityID: s.GetActivityId(), Attempt: s.GetAttempt(), WorkerID: s.GetWorkerId(),
			FireTime: timeFromProto(s.GetFireTime()), ChildWorkflowID: s.GetChildWorkflowId()})
	}
	return r
}

// IDReuse decides whether a workflow id whose last run closed may start
// again.
type IDReuse int

// The id reuse policies.
const (
	// AllowDuplicate: a new run may start whatever way the last closed.
	AllowDuplicate IDReuse = iota
	// AllowDuplicateFailedOnly: only after a run that did not complete.
	AllowDuplicateFailedOnly
	// RejectDuplicate: never a second run of the id.
	RejectDuplicate
)

// StartWorkflowOptions describe a run to start.
type StartWorkflowOptions struct {
	// Namespace to start in; required.
	Namespace string
	// WorkflowID makes Start idempotent: while its run is open, the same
	// request returns that run (WorkflowHandle.Existing) and a different
	// one fails with AlreadyExists. Empty lets the server pick one.
	WorkflowID string
	// WorkflowType is the workflow to run; required.
	WorkflowType string
	// TaskQueue selects the worker pool; empty means "default".
	TaskQueue string
	// IDReuse decides what happens when WorkflowID's last run closed.
	IDReuse IDReuse
	// StartDelay or StartAt (at most one) delay the run's first step: the
	// run is durable at once. A StartAt in the past is now.
	StartDelay time.Duration
	StartAt    time.Time
	// Priority of the run's workflow tasks within their pool: 1 first, 5
	// last; 0 means 3. Its steps take their own priority (see the
	// workflow package's ActivityOptions).
	Priority int
	// FairnessKey, FairnessWeight and ConcurrencyKey place the run and
	// its steps as ScheduleOptions place an activity.
	FairnessKey    string
	FairnessWeight int
	ConcurrencyKey string
}

// WorkflowHandle names a started run.
type WorkflowHandle struct {
	Namespace, WorkflowID, RunID string
	// Existing is true when an identical request had started the run.
	Existing bool
	// Run is the run as the server recorded it at the start.
	Run *Run

	c *Client
}

// StartWorkflow durably starts a run of a workflow with input encoded as
// JSON and returns once the server has recorded it.
func StartWorkflow[In any](ctx context.Context, c *Client, opts StartWorkflowOptions, input In) (*WorkflowHandle, error) {
	payload, err := EncodePayload(input)
	if err != nil {
		return nil, fmt.Errorf("aion client: start workflow %s in %q: %w", opts.WorkflowType, opts.Namespace, err)
	}
	return c.StartWorkflowRaw(ctx, opts, payload)
}

// StartWorkflowRaw starts a run with an already-encoded input.
func (c *Client) StartWorkflowRaw(ctx context.Context, opts StartWorkflowOptions, input []byte) (*WorkflowHandle, error) {
	ctx, tc, end := c.traceCall(ctx, "aion.StartWorkflow", callAttrs{namespace: opts.Namespace, typeKey: "aion.workflow.type", typ: opts.WorkflowType})
	resp, err := c.workflows.Start(ctx, &aionv1.StartWorkflowRequest{Namespace: opts.Namespace, WorkflowId: opts.WorkflowID,
		WorkflowType: opts.WorkflowType, TaskQueue: opts.TaskQueue, Input: input, IdReuse: aionv1.IDReusePolicy(opts.IDReuse + 1),
		StartDelay: durationToProto(opts.StartDelay), StartTime: timeToProto(opts.StartAt), Priority: int32(opts.Priority),
		FairnessKey: opts.FairnessKey, FairnessWeight: int32(opts.FairnessWeight), ConcurrencyKey: opts.ConcurrencyKey,
		TraceContext: tc})
	end(err)
	if err != nil {
		return nil, rpcError(fmt.Sprintf("start workflow %s in %q", opts.WorkflowType, opts.Namespace), err)
	}
	r := runFromProto(resp.GetRun())
	return &WorkflowHandle{Namespace: r.Namespace, WorkflowID: r.WorkflowID, RunID: r.RunID, Existing: resp.GetExisting(), Run: r, c: c}, nil
}

// Workflow returns a handle on a workflow id's runs: runID "" means the open
// (or else the latest) run.
func (c *Client) Workflow(namespace, workflowID, runID string) *WorkflowHandle {
	return &WorkflowHandle{Namespace: namespace, WorkflowID: workflowID, RunID: runID, c: c}
}

// Get returns the run with the steps it waits on.
func (h *WorkflowHandle) Get(ctx context.Context) (*Run, error) {
	resp, err := h.c.workflows.Get(ctx, &aionv1.GetWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID, RunId: h.RunID})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("get workflow %q in %q", h.WorkflowID, h.Namespace), err)
	}
	return runFromProto(resp.GetRun()), nil
}

// Why explains why the run has no workflow task running now: it waits on
// its steps, for a worker (of its build), for a free workflow slot (with
// how many runs wait before it), or for a delay or a failed task's backoff.
func (h *WorkflowHandle) Why(ctx context.Context) (*Explanation, error) {
	resp, err := h.c.workflows.Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID, RunId: h.RunID})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("why workflow %q in %q", h.WorkflowID, h.Namespace), err)
	}
	return explanationFromProto(resp), nil
}

// Wait blocks until the run closes and returns it, or until ctx ends. A
// handle without a run id follows continue-as-new to the last run. Like
// Client.Wait it is a series of long polls that ride out a server restart.
func (h *WorkflowHandle) Wait(ctx context.Context) (*Run, error) {
	req := &aionv1.WaitWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID, RunId: h.RunID}
	resp, err := longPoll(ctx, fmt.Sprintf("wait for workflow %q in %q", h.WorkflowID, h.Namespace), func(ctx context.Context) (*aionv1.WaitWorkflowResponse, error) {
		return h.c.workflows.Wait(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return runFromProto(resp.GetRun()), nil
}

// ErrRunNotClosed is returned (wrapped) by WorkflowResult for an open run.
var ErrRunNotClosed = errors.New("run has not closed")

// WorkflowResult decodes a completed run's JSON result into Out. A run that
// closed otherwise gives an error wrapping its *ActivityError failure.
func WorkflowResult[Out any](r *Run) (Out, error) {
	var out Out
	switch {
	case r == nil:
		return out, errors.New("aion client: result of a nil run")
	case r.Status == RunCompleted:
		if err := r.Result.Decode(&out); err != nil {
			return out, fmt.Errorf("aion client: decode result of workflow %q into %T: %w", r.WorkflowID, out, err)
		}
		return out, nil
	case r.Status.Closed():
		f := r.Failure
		if f == nil {
			f = &ActivityError{Type: string(r.Status), Message: "run ended " + string(r.Status)}
		}
		return out, fmt.Errorf("workflow %q run %s %s: %w", r.WorkflowID, r.RunID, r.Status, f)
	}
	return out, fmt.Errorf("workflow %q run %s is %s: %w", r.WorkflowID, r.RunID, r.Status, ErrRunNotClosed)
}

// Signal sends a named signal with input encoded as JSON; it returns once
// the signal is in the run's history.
func (h *WorkflowHandle) Signal(ctx context.Context, name string, input any) error {
	payload, err := EncodePayload(input)
	if err != nil {
		return fmt.Errorf("aion client: signal %s to workflow %q: %w", name, h.WorkflowID, err)
	}
	_, err = h.c.workflows.Signal(ctx, &aionv1.SignalWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID,
		RunId: h.RunID, SignalName: name, Input: payload})
	return rpcError(fmt.Sprintf("signal %s to workflow %q in %q", name, h.WorkflowID, h.Namespace), err)
}

// Query asks the run's code for a query handler's answer, decoded into out
// (a pointer, or nil to discard it); nothing is written to history.
func (h *WorkflowHandle) Query(ctx context.Context, name string, input, out any) error {
	payload, err := EncodePayload(input)
	if err != nil {
		return fmt.Errorf("aion client: query %s of workflow %q: %w", name, h.WorkflowID, err)
	}
	resp, err := h.c.workflows.Query(ctx, &aionv1.QueryWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID,
		RunId: h.RunID, QueryName: name, Input: payload})
	if err != nil {
		return rpcError(fmt.Sprintf("query %s of workflow %q in %q", name, h.WorkflowID, h.Namespace), err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.GetResult(), out); err != nil {
		return fmt.Errorf("aion client: decode the answer to query %s into %T: %w", name, out, err)
	}
	return nil
}

// Cancel asks the open run to stop: its running activities and children are
// canceled and its code cleans up and closes as canceled.
func (h *WorkflowHandle) Cancel(ctx context.Context, reason string) (*Run, error) {
	resp, err := h.c.workflows.Cancel(ctx, &aionv1.CancelWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID,
		RunId: h.RunID, Reason: reason})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("cancel workflow %q in %q", h.WorkflowID, h.Namespace), err)
	}
	return runFromProto(resp.GetRun()), nil
}

// Terminate closes the open run at once without running any more of its code.
func (h *WorkflowHandle) Terminate(ctx context.Context, reason string) (*Run, error) {
	resp, err := h.c.workflows.Terminate(ctx, &aionv1.TerminateWorkflowRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID,
		RunId: h.RunID, Reason: reason})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("terminate workflow %q in %q", h.WorkflowID, h.Namespace), err)
	}
	return runFromProto(resp.GetRun()), nil
}

// Event is one event of a run's history.
type Event struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Kind names the event: workflow_started, activity_scheduled, …
	Kind string `json:"kind"`
	// Step is the step the event belongs to, 0 when none.
	Step int64 `json:"step,omitempty"`
	// Attributes are the event's fields as JSON (protojson, snake_case).
	Attributes json.RawMessage `json:"attributes"`
}

func eventFromProto(p *aionv1.HistoryEvent) Event {
	ev := Event{Seq: p.GetSeq(), Time: timeFromProto(p.GetTime())}
	m := p.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("event")
	if fd := m.WhichOneof(od); fd != nil {
		ev.Kind = string(fd.Name())
		attrs := m.Get(fd).Message().Interface()
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(attrs)
		if err == nil {
			ev.Attributes = b
		}
		if f := attrs.ProtoReflect().Descriptor().Fields().ByName("step"); f != nil {
			ev.Step = attrs.ProtoReflect().Get(f).Int()
		}
	}
	if ev.Attributes == nil {
		ev.Attributes = json.RawMessage("{}")
	}
	return ev
}

// History iterates over the run's events in order, fetching pages as
// needed. Iteration stops at the first error, yielded with a zero Event.
func (h *WorkflowHandle) History(ctx context.Context) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		req := &aionv1.GetHistoryRequest{Namespace: h.Namespace, WorkflowId: h.WorkflowID, RunId: h.RunID}
		for {
			resp, err := h.c.workflows.History(ctx, req)
			if err != nil {
				yield(Event{}, rpcError(fmt.Sprintf("history of workflow %q in %q", h.WorkflowID, h.Namespace), err))
				return
			}
			for _, p := range resp.GetEvents() {
				if !yield(eventFromProto(p), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" || resp.GetNextPageToken() == req.PageToken {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// ListWorkflowsOptions select runs for ListWorkflows.
type ListWorkflowsOptions struct {
	// Namespace to list; required.
	Namespace string
	// Status filters by status; empty matches all.
	Status RunStatus
	// WorkflowType filters by type; empty matches all.
	WorkflowType string
	// PageSize is the most runs per page; 0 takes the server default.
	PageSize int32
	// PageToken continues a previous listing.
	PageToken string
}

// RunPage is one page of ListWorkflows.
type RunPage struct {
	Runs []*Run
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// ListWorkflows returns one page of a namespace's runs, newest first,
// without their inputs and results.
func (c *Client) ListWorkflows(ctx context.Context, opts ListWorkflowsOptions) (*RunPage, error) {
	resp, err := c.workflows.List(ctx, &aionv1.ListWorkflowsRequest{Namespace: opts.Namespace, Status: runStatusToProto(opts.Status),
		WorkflowType: opts.WorkflowType, PageSize: opts.PageSize, PageToken: opts.PageToken})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("list workflows in %q", opts.Namespace), err)
	}
	page := &RunPage{NextPageToken: resp.GetNextPageToken()}
	for _, r := range resp.GetRuns() {
		page.Runs = append(page.Runs, runFromProto(r))
	}
	return page, nil
}

// WorkflowService returns the raw generated gRPC client.
func (c *Client) WorkflowService() aionv1.WorkflowServiceClient { return c.workflows }
