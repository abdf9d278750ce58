package client

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/target"
)

// Client talks to one aion server. It is safe for concurrent use; create one
// per process and share it.
type Client struct {
	conn       *grpc.ClientConn // nil when built with New
	activities aionv1.ActivityServiceClient
	workflows  aionv1.WorkflowServiceClient
	namespaces aionv1.NamespaceServiceClient
	cluster    aionv1.ClusterServiceClient
	schedules  aionv1.ScheduleServiceClient
	// tracer makes the client's spans; nil without WithTracerProvider.
	tracer trace.Tracer
}

// Option configures Dial (and New: WithTracerProvider only).
type Option func(*options)

type options struct {
	token       string
	dialOptions []grpc.DialOption
	tracer      trace.TracerProvider
}

// WithTracerProvider makes a span, of kind client, for each call that
// starts work, Schedule ("aion.Schedule"), ScheduleBatch
// ("aion.ScheduleBatch") and StartWorkflow ("aion.StartWorkflow"), child of
// the span in the call's context, and sends the span's W3C trace context
// with the request: the server's spans, the worker's and those of the
// activity's handler join its trace. Without it no span is made, and those
// calls send the trace context of the span in their context, if any, as it
// is.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// WithToken sends "authorization: Bearer <token>" metadata on every call.
// Without TLS the token travels in clear text: against a server that
// serves TLS, pass its transport credentials with WithDialOptions
// (grpc.WithTransportCredentials).
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithDialOptions appends gRPC dial options. They are applied after the
// client's own (plain-gRPC transport credentials, the token), so they can
// override them, for example with grpc.WithTransportCredentials for TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// Dial creates a client for the server at address (host:port, or any gRPC
// target such as "dns:///aion.internal:50051"), or for a cluster's servers
// listed as "host1:port,host2:port,…": the client then uses one of them, in
// a random order, and moves to another when it goes away.
//
// Dial does not wait for the connection: the first call connects, and a
// server that is down shows up as an Unavailable error from that call. ctx
// is only checked for cancellation.
func Dial(ctx context.Context, address string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("aion client: dial %s: %w", address, err)
	}
	if address == "" {
		return nil, errors.New("aion client: dial: empty address")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := target.DialSDK(address, o.token, o.dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("aion client: dial %s: %w", address, err)
	}
	c := newClient(conn, o)
	c.conn = conn
	return c, nil
}

// New returns a client that uses an existing connection (for example one
// shared with other services, or an in-memory connection in tests). Close
// does not close a connection passed to New. Of the options only
// WithTracerProvider applies: the connection's own settings stand.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newClient(conn, o)
}

func newClient(conn grpc.ClientConnInterface, o options) *Client {
	c := &Client{
		activities: aionv1.NewActivityServiceClient(conn),
		workflows:  aionv1.NewWorkflowServiceClient(conn),
		namespaces: aionv1.NewNamespaceServiceClient(conn),
		cluster:    aionv1.NewClusterServiceClient(conn),
		schedules:  aionv1.NewScheduleServiceClient(conn),
	}
	if o.tracer != nil {
		c.tracer = o.tracer.Tracer("github.com/aion-run/aion/client")
	}
	return c
}

// Close releases the connection Dial opened. Calls in flight fail with
// Canceled.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// ActivityService returns the raw generated gRPC client, for fields or
// calls the SDK does not wrap.
func (c *Client) ActivityService() aionv1.ActivityServiceClient { return c.activities }

// NamespaceService returns the raw generated gRPC client.
func (c *Client) NamespaceService() aionv1.NamespaceServiceClient { return c.namespaces }

// ClusterService returns the raw generated gRPC client.
func (c *Client) ClusterService() aionv1.ClusterServiceClient { return c.cluster }

// rpcError wraps an RPC error with what the call was about while keeping its
// gRPC status reachable: status.Code(err) and status.FromError(err) see
// through the wrapping.
func rpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &callError{op: op, err: err}
}

// callError is an RPC error with context. It implements GRPCStatus so that
// status.Convert and status.Code report the server's code and message.
type callError struct {
	op  string
	err error
}

func (e *callError) Error() string { return "aion client: " + e.op + ": " + e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// GRPCStatus returns the status of the wrapped RPC error.
func (e *callError) GRPCStatus() *status.Status {
	if s, ok := status.FromError(e.err); ok {
		return s
	}
	return status.New(status.Code(e.err), e.err.Error())
}
