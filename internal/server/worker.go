package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/h2"
	"github.com/aion-run/aion/internal/intervention/wire"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limits on a worker stream (the sizes of a registration are in
// internal/limit).
const (
	// maxOutbound bounds frames queued for one worker; a worker that stops
	// reading while asking for more (pings, heartbeats) is disconnected with
	// reason timeout, as one that stops reading is after half its window.
	maxOutbound = 100000
	// registerWithin bounds the wait for the first frame.
	registerWithin = 10 * time.Second
)

type workerService struct {
	aionv1.UnimplementedWorkerServiceServer
	s *Server
}

// A worker stream costs the server, on grpc-go's transport, gRPC's own
// goroutines for its connection and one goroutine while it is idle: its
// handler, which reads the stream. Work that calls deep runs on another
// goroutine the handler waits for (the registration on a short-lived one, a
// result on one kept for such work: see asides), so the handler's stack
// stays at 8 KiB: a stack grown once shrinks only while it is at most a
// quarter used, and a handler parked in Recv uses about 6 KiB of it. On the
// lean transport (internal/h2) it costs only its connection's reader: once
// registered, its frames are handed to the session as they arrive
// (h2.Stream.Receive) and handled aside, and no goroutine waits on it. On
// either, a writer goroutine runs only while frames wait to be sent. The
// sweeper, shutdown, an expiring credential or a failed send end the stream
// by writing its status on the transport (after the writer has sent what
// was queued): that ends the handler's Recv (grpc-go) or calls the
// session's end (lean), and the session ends with the same status.

// statusWriter is the transport stream's own way to end a stream with a
// status, which gRPC's server stream types have; a Connect whose transport
// stream lacks it is refused, so a gRPC upgrade that drops it fails loudly.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// endCause is why the server ended a worker stream: the status it wrote,
// and whether a send to the worker failed.
type endCause struct {
	err        error
	sendFailed bool
}

// conn is one worker stream: the registry's Delivery and the engine's Conn.
type conn struct {
	stream grpc.BidiStreamingServer[aionv1.WorkerMessage, aionv1.ServerMessage]
	peer   string

	mu  sync.Mutex
	out []*aionv1.ServerMessage
	// held keeps the writer from starting before the register ack is
	// queued; closed refuses frames once the stream is ending; writing is
	// set while a writer goroutine runs, and idle, when set, is closed by
	// it when it stops (see writerIdle).
	held, closed, writing bool
	idle                  chan struct{}

	lastSeen     atomic.Int64  // unix nanos of the last frame received
	queued, sent atomic.Int64  // frames handed to the writer, and written
	stalled      atomic.Bool   // the writer made no progress for too long
	stuck        chan struct{} // closed when stalled is set
	// Kept by the sweeper alone: the sent count it saw last, and since when.
	sweepSent     int64
	sweepSince    time.Time
	leaving       atomic.Bool // the worker announced its own drain
	drainDeadline func() time.Time
	shuttingDown  func() bool
	status        statusWriter
	cause         atomic.Pointer[endCause] // set once, by whoever ends the stream first
}

var (
	_ registry.Delivery = (*conn)(nil)
	_ engine.Conn       = (*conn)(nil)
)

func (c *conn) Transport() registry.Transport { return registry.TransportGRPC }

func (c *conn) RequestDrain() {
	if c.leaving.Load() {
		return // it asked to leave; no need to tell it
	}
	reason := aionv1.DrainReason_DRAIN_REASON_OPERATOR
	if c.shuttingDown() {
		reason = aionv1.DrainReason_DRAIN_REASON_SERVER_SHUTDOWN
	}
	c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_DrainRequest{
		DrainRequest: &aionv1.DrainRequest{Deadline: ts(c.drainDeadline()), Reason: reason}}})
}

func (c *conn) SendTask(t engine.Task) error { return c.push(taskToProto(t)) }

// SendWorkflowTask pushes one workflow task to the worker.
func (c *conn) SendWorkflowTask(t *aionv1.WorkflowTask) error {
	return c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_WorkflowTask{WorkflowTask: t}})
}

func (c *conn) SendCancel(ns, id string, attempt int, reason string) error {
	return c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_CancelActivity{CancelActivity: &aionv1.CancelActivity{
		Namespace: ns, ActivityId: id, Attempt: uint32(attempt), Reason: reason,
	}}})
}

// push queues a frame without blocking, and starts the writer unless it
// runs or is held.
func (c *conn) push(m *aionv1.ServerMessage) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("worker stream closed")
	}
	if len(c.out) >= maxOutbound {
		c.mu.Unlock()
		c.markStalled()
		c.end(status.Errorf(codes.Unavailable, "worker is not reading its stream: %d frames queued", maxOutbound))
		return errors.New("worker stream overloaded")
	}
	c.out = append(c.out, m)
	c.queued.Add(1)
	start := c.startLocked()
	c.mu.Unlock()
	if start {
		go c.write()
	}
	return nil
}

// startLocked reports whether the caller is to start the writer: frames
// wait, none runs and it is not held.
func (c *conn) startLocked() bool {
	if c.writing || c.held || len(c.out) == 0 {
		return false
	}
	c.writing = true
	return true
}

// end ends the stream with status err; the first call wins.
func (c *conn) end(err error) { c.endWith(&endCause{err: err}) }

// endWith ends the stream for e, unless it is ending already: the writer
// sends what is queued (unless it is stuck), then e's status is written,
// which ends the handler's Recv.
func (c *conn) endWith(e *endCause) {
	if !c.cause.CompareAndSwap(nil, e) {
		return
	}
	go func() {
		c.finish(nil)
		_ = c.status.WriteStatus(status.Convert(e.err))
	}()
}

// write sends the queued frames in order, until none is left or a send
// fails; a failed send ends the stream.
func (c *conn) write() {
	var batch []*aionv1.ServerMessage
	for {
		c.mu.Lock()
		if len(c.out) == 0 {
			c.out = nil // an idle stream keeps no queue
			c.stopWritingLocked()
			c.mu.Unlock()
			return
		}
		batch, c.out = c.out, batch[:0]
		c.mu.Unlock()
		for i, m := range batch {
			if err := c.stream.Send(m); err != nil {
				c.mu.Lock()
				c.closed, c.out = true, nil
				c.stopWritingLocked()
				c.mu.Unlock()
				c.endWith(&endCause{err: status.Errorf(codes.Unavailable, "send to worker: %v", err), sendFailed: true})
				return
			}
			c.sent.Add(1)
			batch[i] = nil
		}
	}
}

func (c *conn) stopWritingLocked() {
	c.writing = false
	if c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// release lets the writer start, once the register ack is queued first.
func (c *conn) release() {
	c.mu.Lock()
	c.held = false
	start := c.startLocked()
	c.mu.Unlock()
	if start {
		go c.write()
	}
}

// writerIdle returns a channel closed once no writer runs (at once when
// none does).
func (c *conn) writerIdle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writerIdleLocked()
}

func (c *conn) writerIdleLocked() <-chan struct{} {
	if !c.writing {
		return closedChan
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	return c.idle
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// finish refuses further frames and waits for the writer to send what is
// queued (the last acks of a stream), unless it is stuck in Send: that
// returns only once the stream has ended, so it is waited for in the
// background, on wg when set.
func (c *conn) finish(wg *sync.WaitGroup) {
	c.mu.Lock()
	c.closed = true
	idle := c.writerIdleLocked()
	c.mu.Unlock()
	select {
	case <-idle:
	case <-c.stuck:
		if wg != nil {
			wg.Go(func() { <-idle })
		}
	}
}

// markStalled records that the writer is stuck in Send: the worker stopped
// reading its stream.
func (c *conn) markStalled() {
	if c.stalled.CompareAndSwap(false, true) {
		close(c.stuck)
	}
}

func (ws *workerService) Connect(stream grpc.BidiStreamingServer[aionv1.WorkerMessage, aionv1.ServerMessage]) error {
	s := ws.s
	if s.shuttingDown.Load() {
		return status.Error(codes.Unavailable, "server is shutting down; reconnect later")
	}
	ctx := stream.Context()
	sw, ok := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if !ok {
		return status.Error(codes.Internal, "worker stream: the transport stream cannot be ended with a status")
	}
	c := &conn{
		stream:        stream,
		status:        sw,
		held:          true,
		stuck:         make(chan struct{}),
		drainDeadline: s.drainDeadline,
		shuttingDown:  s.shuttingDown.Load,
	}
	if p, ok := peer.FromContext(ctx); ok {
		c.peer = p.Addr.String()
	}
	c.lastSeen.Store(time.Now().UnixNano())

	// The registration runs on a goroutine of its own: it calls deep (the
	// Register frame's decoding, the registry, logging, the first
	// dispatch), and the handler's stack, kept for the stream's whole life,
	// would otherwise stay sized for it (a stack shrinks only while it is at
	// most a quarter used, and a parked handler uses about 6 KiB).
	done := make(chan registration, 1)
	go func() { done <- ws.registerStream(ctx, c) }()
	r := <-done
	if r.err != nil {
		return r.err
	}
	tok, w := r.tok, r.tok.Worker()
	var expire *time.Timer
	if id, ok := identityFrom(ctx); ok && !id.Expires.IsZero() {
		// A credential that expires ends the stream a grace period later;
		// the worker reconnects with a fresh one.
		at := id.Expires.Add(s.cfg.Auth.ExpiryGrace)
		expire = time.AfterFunc(time.Until(at), func() {
			c.end(status.Errorf(codes.Unauthenticated, "the credential of %q expired at %s; reconnect with a fresh one",
				id.Name, id.Expires.UTC().Format(time.RFC3339)))
		})
	}
	x := &session{s: s, c: c, tok: tok, w: w, expire: expire}
	if r, ok := grpc.ServerTransportStreamFromContext(ctx).(receiver); ok {
		// The lean transport: no goroutine waits on the stream; its frames
		// come to x.deliver and its end to x.ended.
		r.Receive(x.deliver, x.ended)
		return h2.ErrDetached
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return x.end(err)
		}
		if err := x.frame(m); err != nil {
			return x.fail(err)
		}
	}
}

// receiver is a transport stream that hands its messages to callbacks
// instead of a goroutine waiting in Recv (h2.Stream.Receive).
type receiver interface {
	Receive(deliver func([]byte) error, done func(error))
}

// session is a registered worker's stream: its frames, and its end.
type session struct {
	s      *Server
	c      *conn
	tok    *registry.Registration
	w      *registry.Worker
	expire *time.Timer // nil when the credential does not expire
	failed error       // a frame the server refused (lean transport)
}

// frame acts on one frame from the worker.
func (x *session) frame(m *aionv1.WorkerMessage) error {
	x.c.lastSeen.Store(time.Now().UnixNano())
	return x.s.handleFrameAside(x.c, x.w, m)
}

// fail ends the session after a frame it refused with err, the stream's
// status.
func (x *session) fail(err error) error {
	x.c.finish(&x.s.bg)
	x.leave("")
	return err
}

// end ends the session once the stream's receive ended with err, and
// returns the status the stream ends with.
func (x *session) end(err error) error {
	s, c, w := x.s, x.c, x.w
	c.finish(&s.bg)
	reason := registry.Reason("")
	var out error
	switch e := c.cause.Load(); {
	case e == nil:
		if info, ok := s.reg.Lookup(w.ID()); ok && info.Draining && errors.Is(err, io.EOF) {
			reason = registry.ReasonDrained
		}
		s.log.Info("worker disconnected", "worker", w.ID(), "reason", orDefault(reason, registry.ReasonDisconnect))
		out = recvStatus(err)
	case e.sendFailed:
		s.log.Info("worker disconnected", "worker", w.ID(), "reason", registry.ReasonDisconnect, "err", e.err)
		out = e.err
	default:
		if status.Code(e.err) == codes.Unavailable && !s.shuttingDown.Load() {
			reason = registry.ReasonTimeout // the sweeper: silent, or not reading
		} else {
			reason = registry.ReasonDeregistered // shutdown, expired credential
		}
		s.log.Info("worker disconnected", "worker", w.ID(), "reason", reason, "err", e.err)
		out = e.err
	}
	x.leave(reason)
	return out
}

// leave takes the worker out: of the registry (with reason, or closed), the
// engine and the server's streams. It leaves before the stream's status is
// written, so the departure is published while shutdown still waits.
func (x *session) leave(reason registry.Reason) {
	if x.expire != nil {
		x.expire.Stop()
	}
	if reason != "" {
		x.tok.Leave(reason)
	} else {
		x.tok.Close()
	}
	x.s.eng.WorkerLeft(x.w)
	x.s.untrack(x.w.ID())
}

// deliver takes one frame on the lean transport, on a goroutine aside while
// the connection's reader waits (see asides: the reader, kept for the
// connection's life, stays at its small stack): decoded (a malformed one
// ends the stream with the decoder's status, as Recv's error does on
// grpc-go) and acted on.
func (x *session) deliver(b []byte) error {
	var err error
	x.s.asides.run(func() {
		m := new(aionv1.WorkerMessage)
		err = x.s.decoder.recv(m, func(v any) error {
			return x.s.decoder.unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v)
		})
		if err != nil {
			return
		}
		x.c.lastSeen.Store(time.Now().UnixNano())
		if err = x.s.handleFrame(x.c, x.w, m); err != nil {
			x.failed = err
		}
	})
	return err
}

// ended ends the session on the lean transport, off the transport's
// goroutine: the same end as Recv's error gives on grpc-go, then the
// stream's status (so the worker sees its end once it is out of the
// registry, as on grpc-go) and its count.
func (x *session) ended(err error) {
	x.s.bg.Go(func() {
		var out error
		if x.failed != nil {
			out = x.fail(x.failed)
		} else {
			out = x.end(err)
		}
		_ = x.c.status.WriteStatus(status.Convert(out))
		x.s.metrics.StreamEnded(aionv1.WorkerService_Connect_FullMethodName, out)
	})
}

// handleFrameAside acts on one frame as handleFrame does. A ping is
// answered on the handler; any other frame is handled aside (see asides)
// while the handler waits, so frames are still handled one at a time and
// in order. Handling a result calls deep (the engine, the next task's
// dispatch): on the handler it would leave the stream a 16 KiB stack for
// its whole life where 8 KiB do.
func (s *Server) handleFrameAside(c *conn, w *registry.Worker, m *aionv1.WorkerMessage) error {
	if m.GetPing() != nil {
		return s.handleFrame(c, w, m)
	}
	var err error
	s.asides.run(func() { err = s.handleFrame(c, w, m) })
	return err
}

// registration is how a stream's registration ended: the registry's token
// of the worker, or the status that ends the stream.
type registration struct {
	tok *registry.Registration
	err error
}

// registerStream reads the Register frame (or ends the stream when none
// comes within registerWithin), registers the worker, and queues its
// RegisterAck ahead of any task. On success the worker is tracked and the
// engine told it joined; the caller then owns the token and undoes both.
func (ws *workerService) registerStream(ctx context.Context, c *conn) registration {
	s := ws.s
	fail := func(err error) registration {
		if err == nil { // a registration without a worker always ends the stream with a status
			err = status.Error(codes.Internal, "worker stream: registration ended without a worker or a status")
		}
		return registration{err: err}
	}
	// Either the first frame or the registration deadline comes first;
	// decided exactly once.
	var decided atomic.Bool
	late := status.Errorf(codes.DeadlineExceeded, "no Register frame within %v of connecting", registerWithin)
	deadline := time.AfterFunc(registerWithin, func() {
		if decided.CompareAndSwap(false, true) {
			c.end(late)
		}
	})
	first, err := c.stream.Recv()
	deadline.Stop()
	if !decided.CompareAndSwap(false, true) {
		return fail(late)
	}
	if errors.Is(err, io.EOF) {
		// The worker closed its side before saying who it is: there is no
		// worker to register, and the stream ends as refused.
		return fail(status.Error(codes.InvalidArgument, "first frame: the stream ended before its register frame"))
	}
	if err != nil {
		return fail(recvStatus(err))
	}
	reg := first.GetRegister()
	if reg == nil {
		return fail(status.Errorf(codes.InvalidArgument, "first frame: got %s, want register", frameKind(first)))
	}
	spec, err := specFromProto(reg)
	if err != nil {
		return fail(toStatus(fmt.Errorf("register: %w", err)))
	}
	spec.Delivery = c
	tok, err := s.reg.Accept(ctx, s.caller(ctx), spec)
	if err != nil {
		return fail(toStatus(err))
	}
	w := tok.Worker()
	s.track(w.ID(), c)
	s.log.Info("worker connected", "worker", w.ID(), "namespaces", spec.Namespaces, "task_queue", spec.TaskQueue,
		"node", spec.Node, "slots", spec.Slots, "peer", c.peer)

	// The worker became selectable inside Accept, so a task may already be
	// queued; the ack still goes first (the writer is held until it is).
	window := s.cfg.HeartbeatWindow
	c.mu.Lock()
	c.out = slices.Insert(c.out, 0, &aionv1.ServerMessage{Message: &aionv1.ServerMessage_RegisterAck{RegisterAck: &aionv1.RegisterAck{
		WorkerId:        uint64(w.ID()),
		HeartbeatWindow: durationpb.New(window),
		PingInterval:    durationpb.New(window / 3),
	}}})
	c.queued.Add(1)
	c.mu.Unlock()
	c.release()
	s.eng.WorkerJoined(w)
	return registration{tok: tok}
}

func orDefault(r, d registry.Reason) registry.Reason {
	if r == "" {
		return d
	}
	return r
}

// handleFrame acts on one frame after registration; an error ends the stream.
func (s *Server) handleFrame(c *conn, w *registry.Worker, m *aionv1.WorkerMessage) error {
	switch f := m.GetMessage().(type) {
	case *aionv1.WorkerMessage_ActivityResult:
		r := f.ActivityResult
		if err := checkAttemptRef("activity_result", r.GetNamespace(), r.GetActivityId(), r.GetAttempt()); err != nil {
			return err
		}
		var out engine.Outcome
		switch o := r.GetOutcome().(type) {
		case *aionv1.ActivityResult_Completed:
			if n := len(o.Completed.GetResult()); n > limit.Payload {
				out.Failure = &store.Failure{Type: "result_too_large",
					Message: fmt.Sprintf("result is %d bytes, at most %d allowed", n, limit.Payload)}
			} else {
				out.Completed, out.Result = true, o.Completed.GetResult()
			}
		case *aionv1.ActivityResult_Failed:
			out.Failure = checkedFailure(o.Failed)
		case *aionv1.ActivityResult_Canceled:
			out.Canceled = true
		default:
			return status.Error(codes.InvalidArgument, "activity_result.outcome: missing; want completed, failed or canceled")
		}
		out.Trace = traceContextFromProto(r.GetTraceContext()) // only ever a span's parent: one that does not parse is ignored
		s.completeResult(c, w, r, out)
	case *aionv1.WorkerMessage_ActivityHeartbeat:
		h := f.ActivityHeartbeat
		if err := checkAttemptRef("activity_heartbeat", h.GetNamespace(), h.GetActivityId(), h.GetAttempt()); err != nil {
			return err
		}
		var refused string
		if err := limit.Bytes("activity_heartbeat.details", h.GetDetails(), limit.HeartbeatDetails); err != nil {
			refused = err.Error() // recorded nowhere; the attempt's heartbeat clock is not reset
		} else {
			refused = s.eng.Heartbeat(w, h.GetNamespace(), h.GetActivityId(), int(h.GetAttempt()), h.GetDetails())
		}
		c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_HeartbeatAck{HeartbeatAck: &aionv1.HeartbeatAck{
			Namespace: h.GetNamespace(), ActivityId: h.GetActivityId(), Attempt: h.GetAttempt(), Refused: refused,
		}}})
	case *aionv1.WorkerMessage_Ping:
		c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_Pong{Pong: &aionv1.Pong{Nonce: f.Ping.GetNonce()}}})
	case *aionv1.WorkerMessage_Drain:
		c.leaving.Store(true)
		s.reg.Drain(w.ID())
		s.log.Info("worker draining", "worker", w.ID(), "reason", limit.Clip(f.Drain.GetReason(), limit.Reason))
	case *aionv1.WorkerMessage_InterventionAck:
		ack := f.InterventionAck
		s.log.Info("intervention acknowledged", "worker", w.ID(), "namespace", ack.GetNamespace(), "activity", ack.GetActivityId(),
			"attempt", ack.GetAttempt(), "intervention", limit.Clip(ack.GetInterventionId(), limit.CallID), "accepted", ack.GetAccepted(),
			"message", limit.Clip(ack.GetMessage(), limit.Reason))
	case *aionv1.WorkerMessage_WorkflowTaskResult:
		r := f.WorkflowTaskResult
		if err := checkWorkflowTaskResult(r); err != nil {
			return err
		}
		ns, run, task := r.GetNamespace(), r.GetRunId(), r.GetTask()
		s.eng.CompleteWorkflowTask(w, r, func(refused string) {
			c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_WorkflowTaskAck{WorkflowTaskAck: &aionv1.WorkflowTaskAck{
				Namespace: ns, RunId: run, Task: task, Refused: refused}}})
		})
	case *aionv1.WorkerMessage_Register:
		return status.Error(codes.InvalidArgument, "register: sent twice; a stream registers once, as its first frame")
	default:
		return status.Errorf(codes.InvalidArgument, "frame: %s is not a worker frame", frameKind(m))
	}
	return nil
}

// completeResult hands a worker's result to the engine and answers it with a
// ResultAck. An accepted result is answered RECORDED once it is durable. A
// refused one is answered here, on the stream's handler, after a look-up:
// ALREADY_RECORDED when the store holds this same outcome (the worker lost
// the first ack), STALE otherwise. The look-up waits for the writes before
// it, so it is bounded; when it fails the result is not answered at all,
// and the worker sends it again after its next reconnect.
func (s *Server) completeResult(c *conn, w *registry.Worker, r *aionv1.ActivityResult, out engine.Outcome) {
	ns, id, attempt := r.GetNamespace(), r.GetActivityId(), r.GetAttempt()
	answer := func(st aionv1.ResultStatus, refused string) {
		c.push(&aionv1.ServerMessage{Message: &aionv1.ServerMessage_ResultAck{ResultAck: &aionv1.ResultAck{
			Namespace: ns, ActivityId: id, Attempt: attempt, Refused: refused, Status: st,
		}}})
	}
	// The engine answers a refusal during Complete and an acceptance later,
	// from the committer; only the first kind is kept for the look-up.
	var (
		mu        sync.Mutex
		returned  bool
		refusedAt string
	)
	s.eng.Complete(w, ns, id, int(attempt), out, func(refused string) {
		if refused == "" {
			answer(aionv1.ResultStatus_RESULT_STATUS_RECORDED, "")
			return
		}
		mu.Lock()
		during := !returned
		if during {
			refusedAt = refused
		}
		mu.Unlock()
		if !during {
			answer(aionv1.ResultStatus_RESULT_STATUS_STALE, refused)
		}
	})
	mu.Lock()
	returned = true
	refused := refusedAt
	mu.Unlock()
	if refused == "" {
		return
	}
	ctx, cancel := context.WithTimeout(c.stream.Context(), max(s.cfg.HeartbeatWindow/4, 10*time.Millisecond))
	defer cancel()
	recorded, err := s.eng.Recorded(ctx, w, ns, id, int(attempt), out)
	switch {
	case err != nil:
		s.log.Warn("result left unanswered: could not tell whether it was recorded before", "worker", w.ID(),
			"namespace", ns, "activity", id, "attempt", attempt, "err", err)
	case recorded:
		answer(aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED, "")
	default:
		answer(aionv1.ResultStatus_RESULT_STATUS_STALE, refused)
	}
}

func checkAttemptRef(frame, ns, id string, attempt uint32) error {
	switch {
	case ns == "":
		return status.Errorf(codes.InvalidArgument, "%s.namespace: must not be empty", frame)
	case id == "":
		return status.Errorf(codes.InvalidArgument, "%s.activity_id: must not be empty", frame)
	case attempt == 0:
		return status.Errorf(codes.InvalidArgument, "%s.attempt: must be at least 1", frame)
	}
	return nil
}

func frameKind(m *aionv1.WorkerMessage) string {
	switch m.GetMessage().(type) {
	case nil:
		return "an empty frame"
	case *aionv1.WorkerMessage_Register:
		return "register"
	case *aionv1.WorkerMessage_ActivityResult:
		return "activity_result"
	case *aionv1.WorkerMessage_ActivityHeartbeat:
		return "activity_heartbeat"
	case *aionv1.WorkerMessage_Ping:
		return "ping"
	case *aionv1.WorkerMessage_Drain:
		return "drain"
	case *aionv1.WorkerMessage_InterventionAck:
		return "intervention_ack"
	case *aionv1.WorkerMessage_WorkflowTaskResult:
		return "workflow_task_result"
	}
	return "an unknown frame"
}

func recvStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// specFromProto checks a Register frame field by field.
func specFromProto(r *aionv1.Register) (registry.Spec, error) {
	for i, ns := range r.GetNamespaces() {
		if err := name.Check(fmt.Sprintf("namespaces[%d]", i), ns, name.MaxName); err != nil {
			return registry.Spec{}, err
		}
	}
	if n := len(r.GetNamespaces()); n == 0 || n > limit.WorkerNamespaces {
		return registry.Spec{}, fmt.Errorf("namespaces: %d given, at least 1 and at most %d allowed: %w", n, limit.WorkerNamespaces, errInvalid)
	}
	if err := name.CheckOptional("task_queue", r.GetTaskQueue(), name.MaxName); err != nil {
		return registry.Spec{}, err
	}
	if err := name.CheckOptional("node", r.GetNode(), name.MaxName); err != nil {
		return registry.Spec{}, err
	}
	nAct, nWF := len(r.GetActivityTypes()), len(r.GetWorkflowTypes())
	if nAct+nWF == 0 || nAct > limit.WorkerActivityTypes {
		return registry.Spec{}, fmt.Errorf("activity_types: %d given, want 1 to %d (or 0 with workflow_types): %w", nAct, limit.WorkerActivityTypes, errInvalid)
	}
	for i, t := range r.GetActivityTypes() {
		if err := name.Check(fmt.Sprintf("activity_types[%d]", i), t, name.MaxName); err != nil {
			return registry.Spec{}, err
		}
	}
	if nWF > limit.WorkerActivityTypes {
		return registry.Spec{}, fmt.Errorf("workflow_types: %d given, at most %d allowed: %w", nWF, limit.WorkerActivityTypes, errInvalid)
	}
	for i, t := range r.GetWorkflowTypes() {
		if err := name.Check(fmt.Sprintf("workflow_types[%d]", i), t, name.MaxName); err != nil {
			return registry.Spec{}, err
		}
	}
	if n := len(r.GetCompatibleBuildIds()); n > 16 {
		return registry.Spec{}, fmt.Errorf("compatible_build_ids: %d given, at most 16 allowed: %w", n, errInvalid)
	}
	for i, b := range r.GetCompatibleBuildIds() {
		if err := name.Check(fmt.Sprintf("compatible_build_ids[%d]", i), b, name.MaxName); err != nil {
			return registry.Spec{}, err
		}
	}
	wfSlots := int(r.GetWorkflowSlots())
	if nWF > 0 {
		if err := name.Check("build_id", r.GetBuildId(), name.MaxName); err != nil {
			return registry.Spec{}, fmt.Errorf("%w (required with workflow_types)", err)
		}
		if wfSlots == 0 {
			wfSlots = 100
		}
		if wfSlots > limit.WorkerSlots {
			return registry.Spec{}, fmt.Errorf("workflow_slots: %d, at most %d allowed: %w", wfSlots, limit.WorkerSlots, errInvalid)
		}
	}
	slots := int(r.GetSlots())
	if slots == 0 {
		slots = 1
	}
	if slots > limit.WorkerSlots {
		return registry.Spec{}, fmt.Errorf("slots: %d, at most %d allowed: %w", slots, limit.WorkerSlots, errInvalid)
	}
	var caps registry.Capabilities
	for i, p := range r.GetCapabilities() {
		c, ok := wire.FromProto(p)
		if !ok {
			return registry.Spec{}, fmt.Errorf("capabilities[%d]: %v is not an intervention primitive: %w", i, p, errInvalid)
		}
		caps = caps.With(c)
	}
	return registry.Spec{
		Namespaces:       r.GetNamespaces(),
		TaskQueue:        r.GetTaskQueue(),
		Node:             r.GetNode(),
		ActivityTypes:    r.GetActivityTypes(),
		Slots:            slots,
		Capabilities:     caps,
		Identity:         limit.Clip(r.GetIdentity(), limit.Identity),
		SDKVersion:       limit.Clip(r.GetSdkVersion(), limit.SDKVersion),
		WorkflowTypes:    r.GetWorkflowTypes(),
		BuildID:          r.GetBuildId(),
		CompatibleBuilds: r.GetCompatibleBuildIds(),
		WorkflowSlots:    wfSlots,
	}, nil
}

// checkWorkflowTaskResult checks the fields that name the task; the
// commands are the engine's to check, against the run.
func checkWorkflowTaskResult(r *aionv1.WorkflowTaskResult) error {
	switch {
	case r.GetNamespace() == "":
		return status.Error(codes.InvalidArgument, "workflow_task_result.namespace: must not be empty")
	case r.GetRunId() == "":
		return status.Error(codes.InvalidArgument, "workflow_task_result.run_id: must not be empty")
	case r.GetTask() == 0:
		return status.Error(codes.InvalidArgument, "workflow_task_result.task: must be at least 1")
	}
	if f := r.GetFailure(); f != nil {
		// A task failure only explains why the run waits: an oversized one
		// is clipped, never a reason to end the stream.
		f.Type = limit.Clip(f.GetType(), limit.FailureType)
		f.Message = limit.Clip(f.GetMessage(), limit.FailureMessage)
		if len(f.GetDetails()) > limit.FailureDetails {
			f.Details = nil
		}
	}
	for i, a := range r.GetQueryAnswers() {
		if err := limit.Bytes(fmt.Sprintf("workflow_task_result.query_answers[%d].result", i), a.GetResult(), limit.Payload); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := limit.Check(fmt.Sprintf("workflow_task_result.query_answers[%d].error", i), a.GetError(), limit.FailureMessage); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return nil
}

// checkedFailure is the failure a worker reported, or, when one of its
// fields is over its limit, a failure of type failure_too_large saying which:
// the attempt still ends, the oversized text is recorded nowhere.
func checkedFailure(f *aionv1.Failure) *store.Failure {
	for _, err := range []error{
		limit.Check("failure.type", f.GetType(), limit.FailureType),
		limit.Check("failure.message", f.GetMessage(), limit.FailureMessage),
		limit.Bytes("failure.details", f.GetDetails(), limit.FailureDetails),
	} {
		if err != nil {
			return &store.Failure{Type: "failure_too_large", Retryable: f.GetRetryable(),
				Message: fmt.Sprintf("the worker's failure of type %q was not recorded: %v", limit.Clip(f.GetType(), limit.FailureType), err)}
		}
	}
	return failureFromProto(f)
}

// writeStall is how long frames have waited for this worker with none
// written, as seen by the sweeper's ticks; zero while the writer keeps up.
// Pings keep a worker's lastSeen fresh, so a worker that sends but stops
// reading is caught here and not by silence.
func (c *conn) writeStall(now time.Time) time.Duration {
	sent := c.sent.Load()
	if c.queued.Load() == sent || sent != c.sweepSent || c.sweepSince.IsZero() {
		c.sweepSent, c.sweepSince = sent, now
		return 0
	}
	return now.Sub(c.sweepSince)
}

// sweep deregisters, with reason timeout, workers silent for longer than the
// heartbeat window and workers that have not read their stream for half of it.
func (s *Server) sweep(ctx context.Context) {
	defer s.bg.Done()
	window := s.cfg.HeartbeatWindow
	t := time.NewTicker(max(window/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.connsMu.Lock()
			for id, c := range s.conns {
				if silent := now.Sub(time.Unix(0, c.lastSeen.Load())); silent > window {
					c.end(status.Errorf(codes.Unavailable, "worker %v sent nothing for %v, over its heartbeat window of %v",
						id, silent.Round(time.Millisecond), window))
				} else if stuck := c.writeStall(now); stuck > window/2 {
					c.markStalled()
					c.end(status.Errorf(codes.Unavailable, "worker %v read nothing from its stream for %v with frames waiting, over half its heartbeat window of %v",
						id, stuck.Round(time.Millisecond), window))
				}
			}
			s.connsMu.Unlock()
		}
	}
}
