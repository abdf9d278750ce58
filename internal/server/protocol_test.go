package server_test

// The decisions of the worker protocol (docs/protocol.md) that an outside
// implementer relies on, each checked over a real stream: when a slot frees,
// what a re-sent result is answered, what cancellation and drain look like
// from the worker's side, and what keeps a stream alive.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/servertest"
	"google.golang.org/protobuf/types/known/durationpb"
)

// protoSetup is a real server, an activity client and a way to register
// raw worker streams serving namespace "p", type "t".
type protoSetup struct {
	srv  *servertest.Server
	acts aionv1.ActivityServiceClient
}

func setupProto(t *testing.T, opts ...servertest.Option) *protoSetup {
	t.Helper()
	srv := servertest.Start(t, opts...)
	return &protoSetup{srv: srv, acts: aionv1.NewActivityServiceClient(srv.Dial(t))}
}

func (p *protoSetup) worker(t *testing.T, slots uint32, namespaces ...string) *servertest.Worker {
	t.Helper()
	if len(namespaces) == 0 {
		namespaces = []string{"p"}
	}
	return p.srv.Connect(t, &aionv1.Register{Namespaces: namespaces, ActivityTypes: []string{"t"}, Slots: slots})
}

func (p *protoSetup) schedule(t *testing.T, id string, tweak ...func(*aionv1.ScheduleRequest)) {
	t.Helper()
	r := &aionv1.ScheduleRequest{Namespace: "p", Id: id, ActivityType: "t", Payload: []byte(`{}`)}
	for _, f := range tweak {
		f(r)
	}
	if _, err := p.acts.Schedule(context.Background(), r); err != nil {
		t.Fatalf("schedule %s: %v", id, err)
	}
}

func resultFrame(task *aionv1.ActivityTask, r *aionv1.ActivityResult) *aionv1.WorkerMessage {
	r.Namespace, r.ActivityId, r.Attempt = task.GetNamespace(), task.GetActivityId(), task.GetAttempt()
	return &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: r}}
}

func completed(result string) *aionv1.ActivityResult {
	return &aionv1.ActivityResult{Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{Result: []byte(result)}}}
}

func failed(typ, msg string) *aionv1.ActivityResult {
	return &aionv1.ActivityResult{Outcome: &aionv1.ActivityResult_Failed{Failed: &aionv1.Failure{Type: typ, Message: msg, Retryable: true}}}
}

func canceled() *aionv1.ActivityResult {
	return &aionv1.ActivityResult{Outcome: &aionv1.ActivityResult_Canceled{Canceled: &aionv1.ActivityCanceled{}}}
}

// ackFor waits for the ResultAck of task's attempt.
func ackFor(w *servertest.Worker, task *aionv1.ActivityTask) *aionv1.ResultAck {
	return w.Frame("the result ack of "+task.GetActivityId(), func(m *aionv1.ServerMessage) bool {
		a := m.GetResultAck()
		return a != nil && a.GetActivityId() == task.GetActivityId() && a.GetAttempt() == task.GetAttempt()
	}).GetResultAck()
}

// nothingQueued proves no task (and no drain request) is on its way to w:
// a Ping sent now is answered behind every frame the server queued before
// it, so the Pong must come first. Work the server had to send is queued
// before the call that caused it returns.
func nothingQueued(t *testing.T, w *servertest.Worker, nonce uint64) {
	t.Helper()
	w.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: nonce}}})
	m := w.Frame("the pong", func(m *aionv1.ServerMessage) bool {
		return m.GetPong() != nil || m.GetActivityTask() != nil || m.GetDrainRequest() != nil
	})
	if m.GetPong().GetNonce() != nonce {
		t.Fatalf("got %v before the pong %d: the server sent what it must not", m, nonce)
	}
}

// roundTrip returns once the server has handled every frame w sent before.
func roundTrip(w *servertest.Worker, nonce uint64) {
	w.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: nonce}}})
	w.Frame("the pong", func(m *aionv1.ServerMessage) bool { return m.GetPong().GetNonce() == nonce })
}

func TestSlotFreesWhenTheResultArrivesSoAWorkerNeverHoldsMoreThanItsSlots(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	const slots, n = 2, 7
	w := p.worker(t, slots)
	for i := range n {
		p.schedule(t, fmt.Sprintf("s%d", i))
	}
	var unreported []*aionv1.ActivityTask // tasks received and not yet reported
	for done, nonce := 0, uint64(1); done < n; nonce++ {
		for len(unreported) < min(slots, n-done) {
			unreported = append(unreported, w.Task())
		}
		// Full: nothing more may be on its way until a result is sent.
		nothingQueued(t, w, nonce)
		task := unreported[0]
		unreported = unreported[1:]
		// Sending the result frees the slot; the next task may come before
		// the ack, so the worker counts the slot free now, not at the ack.
		w.Send(resultFrame(task, completed(`"ok"`)))
		done++
	}
	for i := range n {
		a, err := p.acts.Wait(context.Background(), &aionv1.WaitRequest{Namespace: "p", Id: fmt.Sprintf("s%d", i)})
		if err != nil || a.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
			t.Fatalf("s%d: %v, %v", i, a.GetActivity().GetState(), err)
		}
	}
}

func TestResentResultIsAnsweredAlreadyRecordedAndADiscardedOneStale(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	first := p.worker(t, 4)
	p.schedule(t, "done")
	p.schedule(t, "retried", func(r *aionv1.ScheduleRequest) {
		r.RetryPolicy = &aionv1.RetryPolicy{InitialInterval: durationpb.New(time.Millisecond), BackoffCoefficient: 1}
	})
	p.schedule(t, "canceled")
	tasks := map[string]*aionv1.ActivityTask{}
	for range 3 {
		task := first.Task()
		tasks[task.GetActivityId()] = task
	}
	recorded := func(w *servertest.Worker, task *aionv1.ActivityTask, r *aionv1.ActivityResult, want aionv1.ResultStatus) {
		t.Helper()
		w.Send(resultFrame(task, r))
		ack := ackFor(w, task)
		if ack.GetStatus() != want {
			t.Fatalf("%s#%d: status %v (refused %q), want %v", task.GetActivityId(), task.GetAttempt(), ack.GetStatus(), ack.GetRefused(), want)
		}
		if stale := want == aionv1.ResultStatus_RESULT_STATUS_STALE; stale != (ack.GetRefused() != "") {
			t.Fatalf("%s#%d: %v with refused %q: refused must be set exactly when stale", task.GetActivityId(), task.GetAttempt(), want, ack.GetRefused())
		}
	}
	recorded(first, tasks["done"], completed(`{"n":1}`), aionv1.ResultStatus_RESULT_STATUS_RECORDED)
	recorded(first, tasks["retried"], failed("boom", "first try"), aionv1.ResultStatus_RESULT_STATUS_RECORDED)
	if _, err := p.acts.Cancel(context.Background(), &aionv1.CancelRequest{Namespace: "p", Id: "canceled"}); err != nil {
		t.Fatal(err)
	}
	// The worker dies before it reads the acks of its next results; it
	// reconnects and sends them all again, as the protocol asks.
	retry := first.Task() // attempt 2 of "retried"
	first.Send(resultFrame(retry, failed("boom", "second try")))
	first.Send(resultFrame(tasks["canceled"], canceled()))
	roundTrip(first, 1) // the server has read both results
	first.Close()

	again := p.worker(t, 4)
	recorded(again, tasks["done"], completed(`{"n":1}`), aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED)
	recorded(again, tasks["retried"], failed("boom", "first try"), aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED)
	recorded(again, retry, failed("boom", "second try"), aionv1.ResultStatus_RESULT_STATUS_ALREADY_RECORDED)
	// The server canceled it: the worker's canceled result was never its outcome.
	recorded(again, tasks["canceled"], canceled(), aionv1.ResultStatus_RESULT_STATUS_STALE)
	// Another outcome than the one recorded is not "already recorded".
	recorded(again, tasks["done"], failed("boom", "no"), aionv1.ResultStatus_RESULT_STATUS_STALE)
	recorded(again, tasks["done"], completed(`{"n":2}`), aionv1.ResultStatus_RESULT_STATUS_STALE)
	recorded(again, tasks["retried"], failed("boom", "another message"), aionv1.ResultStatus_RESULT_STATUS_STALE)
	recorded(again, &aionv1.ActivityTask{Namespace: "p", ActivityId: "never-scheduled", Attempt: 1}, completed(`1`),
		aionv1.ResultStatus_RESULT_STATUS_STALE)
	// A worker that does not serve the namespace learns nothing of it.
	stranger := p.worker(t, 1, "elsewhere")
	recorded(stranger, tasks["done"], completed(`{"n":1}`), aionv1.ResultStatus_RESULT_STATUS_STALE)
}

func TestCanceledOrTimedOutAttemptIsSentCancelActivityAndKeepsItsSlotUntilReported(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	w := p.worker(t, 1)
	p.schedule(t, "c1")
	task := w.Task()
	if _, err := p.acts.Cancel(context.Background(), &aionv1.CancelRequest{Namespace: "p", Id: "c1", Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	cancel := w.Frame("CancelActivity", func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if cancel.GetActivityId() != "c1" || cancel.GetAttempt() != 1 || cancel.GetReason() != "not needed" {
		t.Fatalf("cancel = %v", cancel)
	}
	// Its heartbeats are refused from now on: that, not cancel_requested,
	// is the signal.
	w.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
		Namespace: "p", ActivityId: "c1", Attempt: 1}}})
	hb := w.Frame("the heartbeat ack", func(m *aionv1.ServerMessage) bool { return m.GetHeartbeatAck() != nil }).GetHeartbeatAck()
	//lint:ignore SA1019 the deprecated field must stay unset
	if hb.GetRefused() == "" || hb.GetCancelRequested() {
		t.Fatalf("heartbeat ack after cancel = %v, want refused and cancel_requested unset", hb)
	}
	// The attempt still holds the worker's only slot.
	p.schedule(t, "c2", func(r *aionv1.ScheduleRequest) { r.StartToCloseTimeout = durationpb.New(300 * time.Millisecond) })
	nothingQueued(t, w, 1)
	w.Send(resultFrame(task, canceled()))
	if ack := ackFor(w, task); ack.GetStatus() != aionv1.ResultStatus_RESULT_STATUS_STALE {
		t.Fatalf("report of the canceled attempt: %v, want STALE", ack)
	}
	// Reporting it freed the slot. The next attempt runs past its
	// start-to-close timeout: CancelActivity again.
	next := w.Task()
	if next.GetActivityId() != "c2" {
		t.Fatalf("next task = %v, want c2", next)
	}
	timedOut := w.Frame("CancelActivity for the timeout", func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if timedOut.GetActivityId() != "c2" || !strings.Contains(timedOut.GetReason(), "start_to_close") {
		t.Fatalf("cancel on timeout = %v", timedOut)
	}
	// Its retry (attempt 2) waits for the slot too, until c2#1 is reported.
	nothingQueued(t, w, 2)
	w.Send(resultFrame(next, failed("stopped", "deadline")))
	if ack := ackFor(w, next); ack.GetStatus() != aionv1.ResultStatus_RESULT_STATUS_STALE {
		t.Fatalf("report of the timed-out attempt: %v, want STALE", ack)
	}
	if retry := w.Task(); retry.GetActivityId() != "c2" || retry.GetAttempt() != 2 {
		t.Fatalf("after the report: %v, want c2 attempt 2", retry)
	}
}

func TestWorkersOwnDrainIsNotAnsweredAndEndsTheStreamWithOK(t *testing.T) {
	t.Parallel()
	p := setupProto(t)
	w := p.worker(t, 2)
	w.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Drain{Drain: &aionv1.Drain{Reason: "deploy"}}})
	servertest.Eventually(t, "the worker to be draining", func() bool {
		info, ok := p.srv.Registry().Lookup(registry.WorkerID(w.ID))
		return ok && info.Draining
	})
	p.schedule(t, "after-drain")
	nothingQueued(t, w, 1) // no DrainRequest, no task
	w.CloseSend()
	if err := w.End(); err != nil {
		t.Fatalf("stream after drain and CloseSend ended with %v, want OK", err)
	}
	if r := p.srv.DisconnectReason(t, registry.WorkerID(w.ID)); r != registry.ReasonDrained {
		t.Fatalf("disconnect reason %q, want %q", r, registry.ReasonDrained)
	}
}

func TestAnyFrameKeepsAStreamAliveAndPingsAreAskedEveryThirdOfTheWindow(t *testing.T) {
	t.Parallel()
	const window = 600 * time.Millisecond
	p := setupProto(t, servertest.HeartbeatWindow(window))
	busy := p.worker(t, 1)
	if got := busy.Ack.GetPingInterval().AsDuration(); got != window/3 {
		t.Fatalf("ping interval %v, want a third of the %v window", got, window)
	}
	if got := busy.Ack.GetHeartbeatWindow().AsDuration(); got != window {
		t.Fatalf("heartbeat window %v, want %v", got, window)
	}
	p.schedule(t, "long")
	task := busy.Task()
	// busy sends heartbeats and never a Ping; silent sends nothing.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(window / 6)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				busy.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
					Namespace: "p", ActivityId: task.GetActivityId(), Attempt: task.GetAttempt()}}})
			}
		}
	}()
	silent := p.worker(t, 1)
	reason := p.srv.DisconnectReason(t, registry.WorkerID(silent.ID))
	close(stop)
	<-stopped
	if reason != registry.ReasonTimeout {
		t.Fatalf("silent worker left with %q, want %q", reason, registry.ReasonTimeout)
	}
	// busy connected before silent, so it went longer than a window
	// without a Ping, and is still registered.
	if _, ok := p.srv.Registry().Lookup(registry.WorkerID(busy.ID)); !ok {
		t.Fatal("the worker that sent only heartbeats was deregistered")
	}
	nothingQueued(t, busy, 1)
}
