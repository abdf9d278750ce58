package attack

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc"
)

const connectMethod = "/aion.v1.WorkerService/Connect"

// workerStream is a raw worker stream: frames go out as they are, so a
// large field is never copied.
type workerStream struct {
	cc     *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
}

// connectWorker opens a worker stream with the attacker's worker key and
// registers it for one task queue; it returns after the RegisterAck.
func connectWorker(ctx context.Context, e *env, queue string, opts ...grpc.DialOption) (*workerStream, uint64, error) {
	cc, err := dial(e.srv.grpcAddr, e.srv.keys.attackWorker, opts...)
	if err != nil {
		return nil, 0, err
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := cc.NewStream(sctx, &aionv1.WorkerService_ServiceDesc.Streams[0], connectMethod)
	ws := &workerStream{cc: cc, stream: st, cancel: cancel}
	if err != nil {
		ws.close()
		return nil, 0, err
	}
	reg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{attackerNS}, TaskQueue: queue, ActivityTypes: []string{"x"}, Slots: 1, Identity: "attacker"}}}
	if err := st.SendMsg(reg); err != nil {
		ws.close()
		return nil, 0, ws.recvErr(err)
	}
	m, err := ws.recv()
	if err != nil {
		ws.close()
		return nil, 0, err
	}
	ack := m.GetRegisterAck()
	if ack == nil {
		ws.close()
		return nil, 0, fmt.Errorf("first frame from the server: %v, want register_ack", m)
	}
	return ws, ack.GetWorkerId(), nil
}

func (w *workerStream) recv() (*aionv1.ServerMessage, error) {
	m := new(aionv1.ServerMessage)
	if err := w.stream.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// recvErr turns a send's io.EOF into the stream's status, which only a
// receive reports.
func (w *workerStream) recvErr(sendErr error) error {
	if err := w.stream.RecvMsg(new(aionv1.ServerMessage)); err != nil {
		return err
	}
	return sendErr
}

func (w *workerStream) close() {
	w.cancel()
	w.cc.Close()
}

// task waits for the next ActivityTask, skipping other frames.
func (w *workerStream) task() (*aionv1.ActivityTask, error) {
	for {
		m, err := w.recv()
		if err != nil {
			return nil, err
		}
		if t := m.GetActivityTask(); t != nil {
			return t, nil
		}
	}
}

// scheduleFor schedules one small activity into the attacker's namespace
// on queue, to be run by the attack's own worker, with at most maxAttempts
// attempts (0: the server's default, unlimited).
func scheduleFor(ctx context.Context, c *client.Client, queue string, maxAttempts int32) (*client.Handle, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.ScheduleRaw(ctx, client.ScheduleOptions{Namespace: attackerNS, TaskQueue: queue, ActivityType: "x",
		RetryPolicy: &client.RetryPolicy{MaximumAttempts: maxAttempts}}, []byte(`{}`))
}

// workerFields runs Attackers workers with a valid key for the attacker's
// namespace. Each takes a task the attack's own client scheduled, sends a
// heartbeat with DetailsBytes of details, then fails the attempt with a
// message, type and details of FailureBytes each; and again.
func workerFields(ctx context.Context, e *env) {
	c, err := client.Dial(ctx, e.srv.grpcAddr, client.WithToken(e.srv.keys.attackClient))
	if err != nil {
		e.failed(ctx, "client", err)
		return
	}
	defer c.Close()
	details := make([]byte, e.o.DetailsBytes)
	text := make([]byte, e.o.FailureBytes)
	for i := range text {
		text[i] = 'x' // strings must be valid UTF-8
	}
	var wg sync.WaitGroup
	for i := range e.o.Attackers {
		wg.Go(func() { fieldsWorker(ctx, e, c, fmt.Sprintf("fields-%d", i), details, text) })
	}
	wg.Wait()
	e.note("each heartbeat carries %d bytes of details; each failure %d bytes each of message, type and details", len(details), len(text))
}

func fieldsWorker(ctx context.Context, e *env, c *client.Client, queue string, details, text []byte) {
	var ws *workerStream
	defer func() {
		if ws != nil {
			ws.close()
		}
	}()
	for range e.o.MaxRequests {
		if ctx.Err() != nil {
			return
		}
		if ws == nil {
			var err error
			if ws, _, err = connectWorker(ctx, e, queue); err != nil {
				e.failed(ctx, "register", err)
				if !pause(ctx, 100*time.Millisecond) {
					return
				}
				continue
			}
		}
		if _, err := scheduleFor(ctx, c, queue, 1); err != nil {
			e.failed(ctx, "schedule", err)
			if !pause(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		t, err := ws.task()
		if err != nil {
			e.failed(ctx, "task", err)
			ws.close()
			ws = nil
			continue
		}
		ref := &aionv1.ActivityHeartbeat{Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt()}
		hb := encode(ref).bytesField(ref, "details", details).nest(&aionv1.WorkerMessage{}, "activity_heartbeat")
		if !fieldsExchange(ctx, e, ws, "heartbeat", hb) {
			ws.close()
			ws = nil
			continue
		}
		failure := frame{}.bytesField(&aionv1.Failure{}, "message", text).
			bytesField(&aionv1.Failure{}, "type", text).
			bytesField(&aionv1.Failure{}, "details", text).
			nest(&aionv1.ActivityResult{Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt()}, "failed").
			nest(&aionv1.WorkerMessage{}, "activity_result")
		if !fieldsExchange(ctx, e, ws, "failure", failure) {
			ws.close()
			ws = nil
		}
	}
}

// fieldsExchange sends one frame and waits for its acknowledgement,
// counting how the server answered; false means the stream is gone.
func fieldsExchange(ctx context.Context, e *env, ws *workerStream, label string, f frame) bool {
	e.tally.sent.Add(1)
	if err := ws.stream.SendMsg(f); err != nil {
		streamEnded(ctx, e, label, ws.recvErr(err))
		return false
	}
	for {
		m, err := ws.recv()
		if err != nil {
			streamEnded(ctx, e, label, err)
			return false
		}
		var refused string
		switch {
		case m.GetHeartbeatAck() != nil && label == "heartbeat":
			refused = m.GetHeartbeatAck().GetRefused()
		case m.GetResultAck() != nil && label == "failure":
			refused = m.GetResultAck().GetRefused()
		default:
			continue
		}
		if refused != "" {
			e.tally.add(label+": refused", 1)
		} else {
			e.tally.add(label+": accepted", 1)
		}
		return true
	}
}

// streamEnded counts a worker stream that ended while label was under way.
func streamEnded(ctx context.Context, e *env, label string, err error) {
	if ctx.Err() != nil {
		e.tally.add(label+": cut off at the end", 1)
		return
	}
	e.tally.add(label+": stream ended, "+outcome(err), 1)
}

// pause waits d or until ctx ends; false when ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
