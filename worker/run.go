package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// sessionEnd is how one stream ended.
type sessionEnd int

const (
	endBroken  sessionEnd = iota // transport loss or a retryable status: reconnect
	endFatal                     // registration refused or protocol error: Run returns it
	endStopped                   // clean close after Run's ctx was canceled
	endDrained                   // clean close after the server's DrainRequest
	endRetired                   // clean close after an operator's drain
	endGaveUp                    // a stopping worker ran out of time for acknowledgements
)

// fatal reports whether a stream error means "stop, report" rather than
// "reconnect": the registration (or a frame) was refused and trying again
// would not change that.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated,
		codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// Run connects, registers, and runs the attempts the server sends until ctx
// is canceled or the server refuses the worker. It may be called once.
//
// Connection loss, Unavailable and other transient errors are retried with
// exponential backoff and jitter (Options.MinBackoff..MaxBackoff); after each
// reconnect the results the server has not acknowledged are sent again,
// right after RegisterAck. A refused registration (InvalidArgument,
// PermissionDenied, Unauthenticated, NotFound, FailedPrecondition,
// Unimplemented) is returned at once.
//
// When ctx is canceled the worker stops gracefully: it sends Drain, takes no
// new work, lets in-flight handlers finish (their contexts are canceled
// after Options.StopTimeout), waits for the ResultAcks, closes the stream
// and returns nil. It returns an error only if results were still
// unacknowledged 10s after the stop timeout.
//
// When the server sends DrainRequest the worker does the same (handlers are
// canceled at the request's deadline). If the server is shutting down it then
// reconnects with backoff, since the server is usually restarting (with
// Options.ExitOnDrain it returns nil instead); if an operator drained this
// worker, Run returns nil: the worker is retired.
//
// Handlers must honour their context: Run does not return while one is
// still running, so that no goroutine outlives it.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.started = true
	if len(w.handlers) == 0 && len(w.register.GetWorkflowTypes()) == 0 {
		w.mu.Unlock()
		w.wf.Close()
		return errors.New("worker: no activity or workflow registered (call RegisterActivity or RegisterWorkflow before Run)")
	}
	if err := w.checkWorkflowsLocked(); err != nil {
		w.mu.Unlock()
		w.wf.Close()
		return err
	}
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	w.startWorkflows()
	w.mu.Unlock()
	defer w.stopWorkflows()

	cc := w.opts.Conn
	if cc == nil {
		conn, err := w.dial()
		if err != nil {
			w.cancelHandlers(nil)
			return fmt.Errorf("worker: dial %s: %w", w.address, err)
		}
		defer conn.Close()
		cc = conn
	}
	wc := aionv1.NewWorkerServiceClient(cc)

	err := w.loop(ctx, wc)

	// Nothing may outlive Run: cancel whatever still runs and wait for it.
	w.cancelHandlers(ErrWorkerStopping)
	w.tasks.Wait()
	w.mu.Lock()
	if w.stopTime != nil {
		w.stopTime.Stop()
	}
	w.mu.Unlock()
	w.aux.Wait()
	return err
}

func (w *Worker) loop(ctx context.Context, wc aionv1.WorkerServiceClient) error {
	bo := newBackoff(w.opts.MinBackoff, w.opts.MaxBackoff)
	for {
		if ctx.Err() != nil {
			w.beginStop()
			if w.idle() {
				return nil
			}
		}
		began := time.Now()
		end, registered, err := w.session(ctx, wc)
		switch end {
		case endStopped:
			w.log.Info("aion worker stopped")
			return nil
		case endFatal:
			w.log.Error("aion worker: server refused the worker", "err", err)
			return err
		case endGaveUp:
			return err
		case endRetired:
			w.log.Info("aion worker drained by an operator; exiting")
			return nil
		case endDrained:
			if w.opts.ExitOnDrain {
				w.log.Info("aion worker drained by the server; exiting")
				return nil
			}
			w.log.Info("aion worker drained by the server; reconnecting")
		case endBroken:
			w.log.Warn("aion worker: stream lost", "err", err)
		}
		if registered && time.Since(began) > 5*time.Second {
			bo.reset()
		}
		delay := bo.next()
		w.log.Info("aion worker: reconnecting", "in", delay.Round(time.Millisecond))
		if err := w.sleep(ctx, delay); err != nil {
			return err
		}
	}
}

// sleep waits out a reconnect delay. A canceled ctx ends it early when
// nothing is left to deliver; a stopping worker that runs out of time gives
// up.
func (w *Worker) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	done := ctx.Done()
	for {
		var final <-chan time.Time
		w.mu.Lock()
		stopping, finalAt := w.stopping, w.finalAt
		w.mu.Unlock()
		if stopping {
			ft := time.NewTimer(time.Until(finalAt))
			defer ft.Stop()
			final = ft.C
		}
		select {
		case <-t.C:
			return nil
		case <-done:
			w.beginStop()
			if w.idle() {
				return nil
			}
			done = nil
		case <-w.changed:
			if stopping && w.idle() {
				return nil
			}
		case <-final:
			return w.giveUp()
		}
	}
}

func (w *Worker) giveUp() error {
	w.mu.Lock()
	running, unacked := len(w.running), w.book.len()
	w.mu.Unlock()
	err := fmt.Errorf("worker: stopped with %d attempt(s) still running and %d result(s) not acknowledged by the server", running, unacked)
	w.log.Warn("aion worker: giving up on acknowledgements", "running", running, "unacknowledged", unacked)
	return err
}

// session runs one stream from Connect to its end.
func (w *Worker) session(ctx context.Context, wc aionv1.WorkerServiceClient) (end sessionEnd, registered bool, err error) {
	// The stream outlives ctx: a stopping worker still needs it to drain.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stream, err := wc.Connect(sctx, w.connectOptions()...)
	if err != nil {
		return classify(err), false, fmt.Errorf("worker: connect to %s: %w", w.server(), err)
	}

	// Register goes out before the sender starts: nothing else may precede it.
	w.mu.Lock()
	reg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: w.register}}
	w.mu.Unlock()
	sendErr := stream.Send(reg)

	frames := make(chan *aionv1.ServerMessage)
	recvErr := make(chan error, 1)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case frames <- m:
			case <-sctx.Done():
				return
			}
		}
	}()

	out := newOutbox()
	senderErr := make(chan error, 1)
	senderDone := make(chan struct{})
	defer func() {
		w.detach(out)
		cancel()
		<-recvDone
		<-senderDone
	}()
	if sendErr != nil {
		// The stream is gone; Recv reports why.
		close(senderDone)
		select {
		case err := <-recvErr:
			return classify(err), false, fmt.Errorf("worker: register: %w", err)
		case <-time.After(w.closeWait):
			return endBroken, false, fmt.Errorf("worker: register: %w", sendErr)
		}
	}
	go func() {
		defer close(senderDone)
		if err := out.run(stream, sctx.Done()); err != nil {
			senderErr <- err
		}
	}()

	var (
		registerTimer = time.NewTimer(w.registerTimeout)
		pings         *time.Ticker
		pingC         <-chan time.Time
		stopC         = ctx.Done()
		drainTimerC   <-chan time.Time
		closeTimerC   <-chan time.Time
		finalC        <-chan time.Time
		draining      bool // no new work is coming: stopping or DrainRequest
		serverDrain   bool
		retire        bool // the drain came from an operator: do not come back
		closing       bool // CloseSend queued
		nonce         uint64
	)
	defer registerTimer.Stop()
	defer func() {
		if pings != nil {
			pings.Stop()
		}
	}()
	if w.isStopping() {
		// The stop began before this stream: Drain goes out with the
		// re-sent results right after RegisterAck (see attach).
		stopC = nil
		ft := time.NewTimer(time.Until(w.finalAtTime()))
		defer ft.Stop()
		finalC = ft.C
	}

	for {
		if registered && draining && !closing && w.idle() {
			out.finish()
			closing = true
			ct := time.NewTimer(w.closeWait)
			defer ct.Stop()
			closeTimerC = ct.C
		}
		select {
		case m := <-frames:
			if !registered {
				ack := m.GetRegisterAck()
				if ack == nil {
					// A server bug, not a refusal: drop the stream (the
					// server retries whatever it sent) and reconnect.
					return endBroken, false, status.Errorf(codes.Internal, "worker: protocol error: first server frame is %T, want RegisterAck", m.GetMessage())
				}
				registered = true
				registerTimer.Stop()
				resent, stopping := w.attach(out, ack.GetWorkerId())
				if stopping {
					draining = true
				}
				every := pingInterval(ack)
				pings = time.NewTicker(every)
				pingC = pings.C
				w.log.Info("aion worker registered", "worker_id", ack.GetWorkerId(), "namespaces", w.register.GetNamespaces(),
					"task_queue", w.register.GetTaskQueue(), "node", w.register.GetNode(), "types", w.register.GetActivityTypes(),
					"workflow_types", w.register.GetWorkflowTypes(), "build_id", w.register.GetBuildId(),
					"slots", w.register.GetSlots(), "capabilities", w.opts.Capabilities, "heartbeat_window", ack.GetHeartbeatWindow().AsDuration(), "ping_interval", every,
					"resent_results", resent)
				continue
			}
			if d, isDrain := w.handle(out, m); isDrain {
				if !draining {
					w.log.Info("aion worker: server asked to drain", "deadline", d)
				}
				draining, serverDrain = true, true
				retire = m.GetDrainRequest().GetReason() == aionv1.DrainReason_DRAIN_REASON_OPERATOR
				if !d.IsZero() && drainTimerC == nil {
					t := time.NewTimer(time.Until(d))
					defer t.Stop()
					drainTimerC = t.C
				}
			}

		case err := <-recvErr:
			if closing && w.idle() {
				if serverDrain && !w.isStopping() {
					return drainEnd(retire), true, nil
				}
				return endStopped, true, nil
			}
			if err == io.EOF {
				err = status.Error(codes.Unavailable, "server closed the stream")
			}
			return classify(err), registered, err

		case err := <-senderErr:
			// Recv will report the stream's status; give it a moment.
			select {
			case rerr := <-recvErr:
				if rerr != io.EOF {
					err = rerr
				}
			case <-time.After(w.closeWait):
			}
			return classify(err), registered, fmt.Errorf("worker: send: %w", err)

		case <-w.changed:

		case <-pingC:
			nonce++
			out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: nonce}}})

		case <-stopC:
			stopC = nil
			w.beginStop()
			if !registered && w.idle() {
				return endStopped, false, nil
			}
			if registered && !draining {
				out.push(drainFrame("worker stopping"))
			}
			if registered {
				draining = true
			}
			ft := time.NewTimer(time.Until(w.finalAtTime()))
			defer ft.Stop()
			finalC = ft.C

		case <-drainTimerC:
			drainTimerC = nil
			w.cancelRunning(ErrWorkerStopping)

		case <-closeTimerC:
			// The server did not end the stream after CloseSend; we are done
			// with it anyway.
			if serverDrain && !w.isStopping() {
				return drainEnd(retire), true, nil
			}
			return endStopped, true, nil

		case <-registerTimer.C:
			return endBroken, false, status.Errorf(codes.DeadlineExceeded, "worker: no RegisterAck within %s", w.registerTimeout)

		case <-finalC:
			return endGaveUp, registered, w.giveUp()
		}
	}
}

func (w *Worker) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

func (w *Worker) finalAtTime() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.finalAt
}

func classify(err error) sessionEnd {
	if fatal(err) {
		return endFatal
	}
	return endBroken
}

// pingInterval is the ack's ping interval, else a third of the heartbeat
// window, else 5s.
func pingInterval(ack *aionv1.RegisterAck) time.Duration {
	if d := ack.GetPingInterval().AsDuration(); ack.GetPingInterval() != nil && d > 0 {
		return d
	}
	if d := ack.GetHeartbeatWindow().AsDuration(); ack.GetHeartbeatWindow() != nil && d > 0 {
		return max(d/3, 10*time.Millisecond)
	}
	return 5 * time.Second
}

// declineTask answers a task that arrived while stopping with a retryable
// worker_stopping failure, kept until acknowledged like any result. If the
// stream is already half-closed it is dropped: the server fails the attempt
// as worker_lost when the stream ends, and retries it.
func (w *Worker) declineTask(out *outbox, t *aionv1.ActivityTask) {
	res := &aionv1.ActivityResult{Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Failed{Failed: &aionv1.Failure{Type: "worker_stopping", Retryable: true,
			Message: "the worker was stopping when the task arrived"}}}
	w.mu.Lock()
	if out.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: res}}) {
		w.book.add(res)
	}
	w.mu.Unlock()
	w.log.Info("aion worker: task declined while stopping", "namespace", t.GetNamespace(), "activity", t.GetActivityId(),
		"attempt", t.GetAttempt())
}

// drainEnd is how a session ends after a server's drain request.
func drainEnd(retire bool) sessionEnd {
	if retire {
		return endRetired
	}
	return endDrained
}

// handle applies one server frame after registration. For a DrainRequest it
// returns isDrain and the request's deadline.
func (w *Worker) handle(out *outbox, m *aionv1.ServerMessage) (deadline time.Time, isDrain bool) {
	switch f := m.GetMessage().(type) {
	case *aionv1.ServerMessage_ActivityTask:
		w.log.Debug("aion worker: task", "namespace", f.ActivityTask.GetNamespace(), "activity_id", f.ActivityTask.GetActivityId(),
			"attempt", f.ActivityTask.GetAttempt(), "type", f.ActivityTask.GetActivityType())
		if w.isStopping() {
			// The server sent it before it saw our Drain: hand it back at
			// once rather than start work while stopping.
			w.declineTask(out, f.ActivityTask)
			return deadline, false
		}
		w.startAttempt(f.ActivityTask)

	case *aionv1.ServerMessage_ResultAck:
		ra := f.ResultAck
		k := attemptKey{namespace: ra.GetNamespace(), id: ra.GetActivityId(), attempt: ra.GetAttempt()}
		w.mu.Lock()
		known := w.book.ack(k)
		w.mu.Unlock()
		switch {
		case ra.GetRefused() != "":
			// STALE: the server's own outcome for the attempt stands.
			w.log.Warn("aion worker: result refused by the server", "activity", k.String(), "reason", ra.GetRefused())
		case ra.GetStatus() == aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED:
			w.log.Info("aion worker: result had been recorded before (its first ack was lost)", "activity", k.String())
		case !known:
			w.log.Debug("aion worker: ack for an unknown result", "activity", k.String())
		}
		w.notify()

	case *aionv1.ServerMessage_HeartbeatAck:
		ha := f.HeartbeatAck
		k := attemptKey{namespace: ha.GetNamespace(), id: ha.GetActivityId(), attempt: ha.GetAttempt()}
		if ha.GetRefused() != "" {
			if w.cancelAttempt(k, fmt.Errorf("%w: %s", ErrAttemptStale, ha.GetRefused())) {
				w.log.Info("aion worker: heartbeat refused; stopping the attempt", "activity", k.String(), "reason", ha.GetRefused())
			}
		}

	case *aionv1.ServerMessage_CancelActivity:
		ca := f.CancelActivity
		k := attemptKey{namespace: ca.GetNamespace(), id: ca.GetActivityId(), attempt: ca.GetAttempt()}
		if w.cancelAttempt(k, fmt.Errorf("%w: %s", ErrActivityCanceled, ca.GetReason())) {
			w.log.Info("aion worker: activity canceled", "activity", k.String(), "reason", ca.GetReason())
		}

	case *aionv1.ServerMessage_Intervention:
		w.intervene(out, f.Intervention)

	case *aionv1.ServerMessage_DrainRequest:
		if d := f.DrainRequest.GetDeadline(); d != nil {
			deadline = d.AsTime()
		}
		return deadline, true

	case *aionv1.ServerMessage_WorkflowTask:
		w.handleWorkflowTask(out, f.WorkflowTask)

	case *aionv1.ServerMessage_WorkflowTaskAck:
		w.handleWorkflowTaskAck(f.WorkflowTaskAck)

	case *aionv1.ServerMessage_Pong:
		// Liveness only.

	case *aionv1.ServerMessage_RegisterAck:
		w.log.Warn("aion worker: unexpected second RegisterAck ignored")

	default:
		w.log.Warn("aion worker: unknown server frame ignored", "frame", fmt.Sprintf("%T", m.GetMessage()))
	}
	return time.Time{}, false
}
