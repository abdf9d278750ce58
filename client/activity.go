package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// ErrNotTerminal is returned (wrapped) by Result for an activity that has
// not finished yet.
var ErrNotTerminal = errors.New("activity has not finished")

// ScheduleOptions describes an activity to schedule. Zero values take the
// server's defaults.
type ScheduleOptions struct {
	// Namespace to schedule in; required.
	Namespace string
	// ID is optional. A client-supplied id makes scheduling idempotent: the
	// same id with the same request returns the existing activity
	// (Handle.Existing), the same id with a different request fails with
	// AlreadyExists. Empty lets the server pick an id.
	ID string
	// TaskQueue selects the worker pool; empty means "default".
	TaskQueue string
	// ActivityType is the work to run; required.
	ActivityType string
	// Node pins the activity: only a worker advertising this node runs it.
	Node string
	// ScheduleToStartTimeout limits the wait for a worker.
	ScheduleToStartTimeout time.Duration
	// StartToCloseTimeout limits one attempt's run time.
	StartToCloseTimeout time.Duration
	// ScheduleToCloseTimeout limits the whole activity, retries included.
	ScheduleToCloseTimeout time.Duration
	// HeartbeatTimeout is the longest gap allowed between heartbeats; 0 means
	// heartbeats are not required.
	HeartbeatTimeout time.Duration
	// RetryPolicy; nil (or zero fields) takes the server defaults.
	RetryPolicy *RetryPolicy
	// StartDelay or StartAt (at most one) delay the start: the activity is
	// durable at once and waits as scheduled until then. A StartAt in the
	// past is now.
	StartDelay time.Duration
	StartAt    time.Time
	// Priority within the pool: 1 is dispatched first, 5 last; 0 means 3.
	Priority int
	// FairnessKey (a tenant, say) shares the pool's free slots with other
	// keys in proportion to FairnessWeight (1 to 1000; 0 means 1), so one
	// key's backlog cannot starve another's. Empty is the default key.
	FairnessKey    string
	FairnessWeight int
	// ConcurrencyKey is the group the namespace's concurrency limit and
	// per-key rate limit of this activity type count the activity in.
	ConcurrencyKey string
}

func (o ScheduleOptions) toProto(payload []byte) *aionv1.ScheduleRequest {
	return &aionv1.ScheduleRequest{
		Namespace:              o.Namespace,
		Id:                     o.ID,
		TaskQueue:              o.TaskQueue,
		ActivityType:           o.ActivityType,
		Payload:                payload,
		Node:                   o.Node,
		ScheduleToStartTimeout: durationToProto(o.ScheduleToStartTimeout),
		StartToCloseTimeout:    durationToProto(o.StartToCloseTimeout),
		ScheduleToCloseTimeout: durationToProto(o.ScheduleToCloseTimeout),
		HeartbeatTimeout:       durationToProto(o.HeartbeatTimeout),
		RetryPolicy:            o.RetryPolicy.toProto(),
		StartDelay:             durationToProto(o.StartDelay),
		StartTime:              timeToProto(o.StartAt),
		Priority:               int32(o.Priority),
		FairnessKey:            o.FairnessKey,
		FairnessWeight:         int32(o.FairnessWeight),
		ConcurrencyKey:         o.ConcurrencyKey,
	}
}

// Handle names a scheduled activity.
type Handle struct {
	// ID and Namespace identify the activity.
	ID        string
	Namespace string
	// Existing is true when the client-supplied id already named an
	// identical activity and nothing new was scheduled.
	Existing bool
	// Activity is the activity as the server recorded it at scheduling.
	Activity *Activity

	c *Client
}

// Get returns the activity's current state.
func (h *Handle) Get(ctx context.Context) (*Activity, error) { return h.c.Get(ctx, h.Namespace, h.ID) }

// Wait blocks until the activity is terminal or ctx ends; see Client.Wait.
func (h *Handle) Wait(ctx context.Context) (*Activity, error) {
	return h.c.Wait(ctx, h.Namespace, h.ID)
}

// EncodePayload encodes a value as a JSON payload, the way Schedule does. A
// json.RawMessage (or client.Payload) is used as is, after checking it is
// valid JSON.
func EncodePayload(v any) ([]byte, error) {
	switch raw := v.(type) {
	case json.RawMessage:
		if !json.Valid(raw) {
			return nil, errors.New("encode payload: json.RawMessage is not valid JSON")
		}
		return raw, nil
	case Payload:
		if len(raw) > 0 && !json.Valid(raw) {
			return nil, errors.New("encode payload: Payload is not valid JSON")
		}
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	return b, nil
}

// Schedule durably schedules an activity with input encoded as JSON and
// returns once the server has recorded it. With opts.ID set it is idempotent
// (see ScheduleOptions.ID).
func Schedule[In any](ctx context.Context, c *Client, opts ScheduleOptions, input In) (*Handle, error) {
	payload, err := EncodePayload(input)
	if err != nil {
		return nil, fmt.Errorf("aion client: schedule %s in %q: %w", opts.ActivityType, opts.Namespace, err)
	}
	return c.ScheduleRaw(ctx, opts, payload)
}

// ScheduleRaw schedules an activity with an already-encoded payload, which
// the server treats as opaque bytes.
func (c *Client) ScheduleRaw(ctx context.Context, opts ScheduleOptions, payload []byte) (*Handle, error) {
	req := opts.toProto(payload)
	ctx, tc, end := c.traceCall(ctx, "aion.Schedule", callAttrs{namespace: opts.Namespace, typeKey: "aion.activity.type", typ: opts.ActivityType})
	req.TraceContext = tc
	resp, err := c.activities.Schedule(ctx, req)
	end(err)
	if err != nil {
		return nil, rpcError(fmt.Sprintf("schedule %s in %q", opts.ActivityType, opts.Namespace), err)
	}
	return c.handle(resp.GetActivity(), resp.GetExisting()), nil
}

func (c *Client) handle(p *aionv1.Activity, existing bool) *Handle {
	return &Handle{ID: p.GetId(), Namespace: p.GetNamespace(), Existing: existing, Activity: activityFromProto(p), c: c}
}

// ScheduleRequest is one item of ScheduleBatch: options and an encoded
// payload. Build one with NewScheduleRequest.
type ScheduleRequest struct {
	Options ScheduleOptions
	Payload []byte
}

// NewScheduleRequest encodes input as JSON into a batch item.
func NewScheduleRequest[In any](opts ScheduleOptions, input In) (ScheduleRequest, error) {
	payload, err := EncodePayload(input)
	if err != nil {
		return ScheduleRequest{}, err
	}
	return ScheduleRequest{Options: opts, Payload: payload}, nil
}

// BatchResult is the outcome of one ScheduleBatch item: Handle on success,
// otherwise Err, which carries the gRPC status Schedule would have returned
// (status.Code(Err)).
type BatchResult struct {
	Handle *Handle
	Err    error
}

// ScheduleBatch schedules many activities in one RPC and one durable write.
// Each item succeeds or fails on its own; results come back in request
// order. The returned error is for the call as a whole (transport,
// authentication); item errors are in the results.
func (c *Client) ScheduleBatch(ctx context.Context, reqs []ScheduleRequest) ([]BatchResult, error) {
	in := &aionv1.ScheduleBatchRequest{Requests: make([]*aionv1.ScheduleRequest, len(reqs))}
	ctx, tc, end := c.traceCall(ctx, "aion.ScheduleBatch", callAttrs{batch: len(reqs)})
	for i, r := range reqs {
		in.Requests[i] = r.Options.toProto(r.Payload)
		in.Requests[i].TraceContext = tc
	}
	resp, err := c.activities.ScheduleBatch(ctx, in)
	end(err)
	if err != nil {
		return nil, rpcError(fmt.Sprintf("schedule batch of %d", len(reqs)), err)
	}
	if got := len(resp.GetResults()); got != len(reqs) {
		return nil, fmt.Errorf("aion client: schedule batch of %d: server returned %d results", len(reqs), got)
	}
	out := make([]BatchResult, len(reqs))
	for i, r := range resp.GetResults() {
		switch {
		case r.GetActivity() != nil:
			out[i].Handle = c.handle(r.GetActivity(), r.GetExisting())
		case r.GetError() != nil:
			e := r.GetError()
			out[i].Err = rpcError(fmt.Sprintf("schedule batch item %d (%s in %q)", i, reqs[i].Options.ActivityType, reqs[i].Options.Namespace),
				status.Error(codes.Code(e.GetCode()), e.GetMessage()))
		default:
			out[i].Err = fmt.Errorf("aion client: schedule batch item %d: server returned neither activity nor error", i)
		}
	}
	return out, nil
}

// Get returns an activity; the error has code NotFound when it does not
// exist.
func (c *Client) Get(ctx context.Context, namespace, id string) (*Activity, error) {
	resp, err := c.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: namespace, Id: id})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("get activity %q in %q", id, namespace), err)
	}
	return activityFromProto(resp.GetActivity()), nil
}

// waitPoll bounds one Wait RPC, so a long wait is a series of long polls
// rather than one call that a proxy or load balancer might cut.
const waitPoll = time.Minute

// Wait blocks until the activity reaches a terminal state and returns it, or
// until ctx ends (the error then has code DeadlineExceeded or Canceled).
//
// Wait is a series of server-side waits: when one ends with
// DeadlineExceeded while ctx is still alive it simply calls again, and when
// the server is Unavailable (restarting) it retries with a short backoff.
// Any other error is returned at once.
func (c *Client) Wait(ctx context.Context, namespace, id string) (*Activity, error) {
	req := &aionv1.WaitRequest{Namespace: namespace, Id: id}
	resp, err := longPoll(ctx, fmt.Sprintf("wait for activity %q in %q", id, namespace), func(ctx context.Context) (*aionv1.WaitResponse, error) {
		return c.activities.Wait(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return activityFromProto(resp.GetActivity()), nil
}

// longPoll makes call as a series of server-side waits of at most
// waitPoll each: one that ends with DeadlineExceeded while ctx is alive is
// made again, and one that finds the server Unavailable (restarting) is
// retried with a short backoff. Any other error is returned at once.
func longPoll[T any](ctx context.Context, op string, call func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	retry := 50 * time.Millisecond
	for {
		callCtx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > waitPoll {
			callCtx, cancel = context.WithTimeout(ctx, waitPoll)
		}
		resp, err := call(callCtx)
		cancel()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return zero, rpcError(op, status.FromContextError(ctx.Err()).Err())
		}
		switch status.Code(err) {
		case codes.DeadlineExceeded:
			retry = 50 * time.Millisecond
			continue
		case codes.Unavailable:
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return zero, rpcError(op, status.FromContextError(ctx.Err()).Err())
			case <-t.C:
			}
			retry = min(2*retry, 2*time.Second)
		default:
			return zero, rpcError(op, err)
		}
	}
}

// Result decodes a completed activity's JSON result into Out. For an
// activity that ended otherwise it returns an error wrapping the
// *ActivityError (use errors.As); for one still in progress, an error
// wrapping ErrNotTerminal.
func Result[Out any](a *Activity) (Out, error) {
	var out Out
	if a == nil {
		return out, errors.New("aion client: result of a nil activity")
	}
	switch {
	case a.State == StateCompleted:
		if err := a.Result.Decode(&out); err != nil {
			return out, fmt.Errorf("aion client: decode result of activity %q in %q into %T: %w", a.ID, a.Namespace, out, err)
		}
		return out, nil
	case a.State.Terminal():
		f := a.Failure
		if f == nil {
			f = &ActivityError{Type: string(a.State), Message: "activity ended " + string(a.State)}
		}
		return out, fmt.Errorf("activity %q in %q %s after %d attempt(s): %w", a.ID, a.Namespace, a.State, a.Attempt, f)
	}
	return out, fmt.Errorf("activity %q in %q is %s: %w", a.ID, a.Namespace, a.State, ErrNotTerminal)
}

// WaitResult waits for an activity (see Client.Wait) and decodes its result
// (see Result).
func WaitResult[Out any](ctx context.Context, c *Client, namespace, id string) (Out, error) {
	a, err := c.Wait(ctx, namespace, id)
	if err != nil {
		var zero Out
		return zero, err
	}
	return Result[Out](a)
}

// Cancel cancels an activity that has not finished; a running attempt is
// told to stop. It returns the activity after the cancellation.
func (c *Client) Cancel(ctx context.Context, namespace, id, reason string) (*Activity, error) {
	resp, err := c.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: namespace, Id: id, Reason: reason})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("cancel activity %q in %q", id, namespace), err)
	}
	return activityFromProto(resp.GetActivity()), nil
}

// ListOptions selects activities for List.
type ListOptions struct {
	// Namespace to list; required.
	Namespace string
	// State filters by state; empty matches all.
	State State
	// ActivityType filters by type; empty matches all.
	ActivityType string
	// PageSize is the most activities per page; 0 takes the server default.
	PageSize int32
	// PageToken continues a previous List (ActivityPage.NextPageToken).
	PageToken string
	// IncludePayloads returns each activity's payload, result, heartbeat
	// details and failure details, which a listing leaves out by default
	// (Get returns them for one activity). A page with them may hold fewer
	// activities than PageSize: the server bounds a page's bytes.
	IncludePayloads bool
}

// ActivityPage is one page of List.
type ActivityPage struct {
	Activities []*Activity
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
}

// List returns one page of a namespace's activities, newest first.
func (c *Client) List(ctx context.Context, opts ListOptions) (*ActivityPage, error) {
	st, err := stateToProto(opts.State)
	if err != nil {
		return nil, fmt.Errorf("aion client: list activities in %q: %w", opts.Namespace, err)
	}
	resp, err := c.activities.List(ctx, &aionv1.ListActivitiesRequest{
		Namespace:       opts.Namespace,
		State:           st,
		ActivityType:    opts.ActivityType,
		PageSize:        opts.PageSize,
		PageToken:       opts.PageToken,
		IncludePayloads: opts.IncludePayloads,
	})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("list activities in %q", opts.Namespace), err)
	}
	page := &ActivityPage{NextPageToken: resp.GetNextPageToken()}
	for _, a := range resp.GetActivities() {
		page.Activities = append(page.Activities, activityFromProto(a))
	}
	return page, nil
}

// ListAll iterates over every matching activity, fetching pages as needed.
// Iteration stops at the first error, which is yielded with a nil activity.
//
//	for a, err := range c.ListAll(ctx, client.ListOptions{Namespace: "demo"}) {
//		if err != nil { return err }
//		fmt.Println(a.ID, a.State)
//	}
func (c *Client) ListAll(ctx context.Context, opts ListOptions) iter.Seq2[*Activity, error] {
	return func(yield func(*Activity, error) bool) {
		for {
			page, err := c.List(ctx, opts)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, a := range page.Activities {
				if !yield(a, nil) {
					return
				}
			}
			if page.NextPageToken == "" || page.NextPageToken == opts.PageToken {
				return
			}
			opts.PageToken = page.NextPageToken
		}
	}
}

// Explanation says why an activity is not running, from the server's live
// state at the moment of the call.
type Explanation struct {
	State State `json:"state"`
	// Reason is no_worker, node_pin, placement, slots_busy,
	// namespace_in_flight_cap, concurrency_limit, rate_limited,
	// delayed_start, retry_backoff, waiting_for_a_claim (in a cluster),
	// being_recorded, running or closed; for a run's workflow task also
	// waiting_on_steps, task_backoff, no_worker_of_its_build or
	// held_by_another_server.
	Reason string `json:"reason"`
	// Message says it in words, with its figures.
	Message string `json:"message"`
	// Until is when a delayed start or a retry backoff ends, or when a
	// rate limit allows the next start.
	Until time.Time `json:"until,omitzero"`
	// Ahead counts the activities queued before it.
	Ahead int `json:"ahead"`
	// Workers counts the connected workers of its triple, Eligible those
	// its node pin or placement allows, FreeSlots their free slots.
	Workers   int      `json:"workers"`
	Eligible  int      `json:"eligible"`
	FreeSlots int      `json:"free_slots"`
	Nodes     []string `json:"nodes,omitempty"`
	// WorkerID is the worker running it, when running.
	WorkerID uint64 `json:"worker_id,omitempty"`
	// ConcurrencyKey, Running and Limit say, for concurrency_limit, which
	// key is full: how many of its attempts run, and its limit.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	Running        int    `json:"running,omitempty"`
	Limit          int    `json:"limit,omitempty"`
}

// Why explains why an activity is not running now.
func (c *Client) Why(ctx context.Context, namespace, id string) (*Explanation, error) {
	resp, err := c.activities.Why(ctx, &aionv1.WhyRequest{Namespace: namespace, Id: id})
	if err != nil {
		return nil, rpcError(fmt.Sprintf("why activity %q in %q", id, namespace), err)
	}
	return explanationFromProto(resp), nil
}

func explanationFromProto(resp *aionv1.WhyResponse) *Explanation {
	return &Explanation{State: stateFromProto(resp.GetState()), Reason: resp.GetReason(), Message: resp.GetMessage(),
		Until: timeFromProto(resp.GetUntil()), Ahead: int(resp.GetAhead()), Workers: int(resp.GetWorkers()),
		Eligible: int(resp.GetEligible()), FreeSlots: int(resp.GetFreeSlots()), Nodes: resp.GetNodes(), WorkerID: resp.GetWorkerId(),
		ConcurrencyKey: resp.GetConcurrencyKey(), Running: int(resp.GetRunning()), Limit: int(resp.GetLimit())}
}
