package servertest

import (
	"context"
	"io"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Worker speaks the worker protocol frame by frame over a real stream, for
// tests that need a server-side outcome (a completion, a failure) without
// the worker SDK. Frames a test is not looking for are kept for later,
// except pongs and heartbeat acks, which are dropped.
type Worker struct {
	t      testing.TB
	stream aionv1.WorkerService_ConnectClient
	cancel context.CancelFunc
	frames chan *aionv1.ServerMessage
	end    chan error // the stream's final error, once
	held   []*aionv1.ServerMessage
	// ID is the worker id from RegisterAck.
	ID uint64
	// Ack is the RegisterAck.
	Ack *aionv1.RegisterAck
}

// Connect opens a stream, registers reg and waits for RegisterAck. The
// stream is canceled when the test ends.
func (s *Server) Connect(t testing.TB, reg *aionv1.Register) *Worker {
	t.Helper()
	w, err := s.TryConnect(t, reg)
	if err != nil {
		t.Fatalf("servertest: register %v: %v", reg, err)
	}
	return w
}

// TryConnect is Connect that returns the stream's error when the server
// refuses the registration.
func (s *Server) TryConnect(t testing.TB, reg *aionv1.Register) (*Worker, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := aionv1.NewWorkerServiceClient(s.Dial(t)).Connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &Worker{t: t, stream: stream, cancel: cancel, frames: make(chan *aionv1.ServerMessage, 64), end: make(chan error, 1)}
	reader := make(chan struct{})
	t.Cleanup(func() { cancel(); <-reader })
	go func() {
		defer close(reader)
		for {
			m, err := stream.Recv()
			if err != nil {
				w.end <- err
				close(w.frames)
				return
			}
			select {
			case w.frames <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: reg}}); err != nil && err != io.EOF {
		return nil, err
	}
	m, ok := w.recv(10 * time.Second)
	if !ok {
		return nil, <-w.end
	}
	ack := m.GetRegisterAck()
	if ack == nil {
		t.Fatalf("servertest: first server frame is %v, want RegisterAck", m)
	}
	w.ID, w.Ack = ack.GetWorkerId(), ack
	return w, nil
}

func (w *Worker) recv(timeout time.Duration) (*aionv1.ServerMessage, bool) {
	w.t.Helper()
	select {
	case m, ok := <-w.frames:
		return m, ok
	case <-time.After(timeout):
		w.t.Fatalf("servertest: worker %d got no frame within %v", w.ID, timeout)
		return nil, false
	}
}

// next returns the first frame keep accepts, holding the others (but pongs
// and heartbeat acks) for later calls.
func (w *Worker) next(what string, keep func(*aionv1.ServerMessage) bool) *aionv1.ServerMessage {
	w.t.Helper()
	for i, m := range w.held {
		if keep(m) {
			w.held = append(w.held[:i:i], w.held[i+1:]...)
			return m
		}
	}
	for {
		m, ok := w.recv(10 * time.Second)
		if !ok {
			w.t.Fatalf("servertest: worker %d stream ended (%v) while waiting for %s", w.ID, <-w.end, what)
		}
		if keep(m) {
			return m
		}
		if m.GetPong() == nil && m.GetHeartbeatAck() == nil {
			w.held = append(w.held, m)
		}
	}
}

// Task waits for the next ActivityTask.
func (w *Worker) Task() *aionv1.ActivityTask {
	w.t.Helper()
	return w.next("a task", func(m *aionv1.ServerMessage) bool { return m.GetActivityTask() != nil }).GetActivityTask()
}

// Frame waits for the next frame keep accepts (a DrainRequest, a
// CancelActivity, ...), holding the others for later.
func (w *Worker) Frame(what string, keep func(*aionv1.ServerMessage) bool) *aionv1.ServerMessage {
	w.t.Helper()
	return w.next(what, keep)
}

// Complete reports task completed with result and returns the ResultAck.
func (w *Worker) Complete(task *aionv1.ActivityTask, result []byte) *aionv1.ResultAck {
	w.t.Helper()
	return w.report(&aionv1.ActivityResult{Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{Result: result}}})
}

// Fail reports task failed with f and returns the ResultAck.
func (w *Worker) Fail(task *aionv1.ActivityTask, f *aionv1.Failure) *aionv1.ResultAck {
	w.t.Helper()
	return w.report(&aionv1.ActivityResult{Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Failed{Failed: f}})
}

func (w *Worker) report(r *aionv1.ActivityResult) *aionv1.ResultAck {
	w.t.Helper()
	if err := w.stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: r}}); err != nil {
		w.t.Fatalf("servertest: send result: %v", err)
	}
	return w.next("a result ack", func(m *aionv1.ServerMessage) bool {
		a := m.GetResultAck()
		return a != nil && a.GetActivityId() == r.GetActivityId() && a.GetAttempt() == r.GetAttempt()
	}).GetResultAck()
}

// Send sends one frame.
func (w *Worker) Send(m *aionv1.WorkerMessage) {
	w.t.Helper()
	if err := w.stream.Send(m); err != nil {
		w.t.Fatalf("servertest: worker %d send: %v", w.ID, err)
	}
}

// CloseSend closes the worker's side of the stream, as a worker that has
// drained does.
func (w *Worker) CloseSend() {
	w.t.Helper()
	if err := w.stream.CloseSend(); err != nil {
		w.t.Fatalf("servertest: worker %d close send: %v", w.ID, err)
	}
}

// End waits for the stream to end, dropping the frames still arriving, and
// returns its final error: nil when the server ended it with OK.
func (w *Worker) End() error {
	w.t.Helper()
	for {
		if _, ok := w.recv(10 * time.Second); !ok {
			if err := <-w.end; err != io.EOF {
				return err
			}
			return nil
		}
	}
}

// Close cancels the stream, as a worker process dying would.
func (w *Worker) Close() { w.cancel() }

// ConnectTo is Connect for a server started some other way, by its gRPC
// address.
func ConnectTo(t testing.TB, addr string, reg *aionv1.Register) *Worker {
	t.Helper()
	return (&Server{Addr: addr}).Connect(t, reg)
}

// WorkflowTask waits for the next WorkflowTask. Register the worker with
// workflow_types and a build_id to be sent some.
func (w *Worker) WorkflowTask() *aionv1.WorkflowTask {
	w.t.Helper()
	return w.next("a workflow task", func(m *aionv1.ServerMessage) bool { return m.GetWorkflowTask() != nil }).GetWorkflowTask()
}

// AnswerWorkflowTask reports the commands a workflow's code issued for task
// and returns the WorkflowTaskAck, which comes once they are durable.
func (w *Worker) AnswerWorkflowTask(task *aionv1.WorkflowTask, cmds ...*aionv1.WorkflowCommand) *aionv1.WorkflowTaskAck {
	w.t.Helper()
	return w.ReportWorkflowTask(&aionv1.WorkflowTaskResult{Namespace: task.GetNamespace(), RunId: task.GetRunId(), Task: task.GetTask(),
		Commands: cmds})
}

// FailWorkflowTask reports task failed with f (a panic, a non-deterministic
// error) and returns the WorkflowTaskAck.
func (w *Worker) FailWorkflowTask(task *aionv1.WorkflowTask, f *aionv1.Failure) *aionv1.WorkflowTaskAck {
	w.t.Helper()
	return w.ReportWorkflowTask(&aionv1.WorkflowTaskResult{Namespace: task.GetNamespace(), RunId: task.GetRunId(), Task: task.GetTask(),
		Failure: f})
}

// ReportWorkflowTask sends r and returns the WorkflowTaskAck for its task.
func (w *Worker) ReportWorkflowTask(r *aionv1.WorkflowTaskResult) *aionv1.WorkflowTaskAck {
	w.t.Helper()
	w.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_WorkflowTaskResult{WorkflowTaskResult: r}})
	return w.next("a workflow task ack", func(m *aionv1.ServerMessage) bool {
		a := m.GetWorkflowTaskAck()
		return a != nil && a.GetRunId() == r.GetRunId() && a.GetTask() == r.GetTask()
	}).GetWorkflowTaskAck()
}

// ScheduleActivity is the command that starts activity step step.
func ScheduleActivity(step int64, activityType string, input []byte) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_ScheduleActivity{ScheduleActivity: &aionv1.ScheduleActivityCommand{
		Step: step, ActivityType: activityType, Input: input}}}
}

// StartTimer is the command that starts timer step step, firing after d.
func StartTimer(step int64, name string, d time.Duration) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_StartTimer{StartTimer: &aionv1.StartTimerCommand{
		Step: step, Name: name, Duration: durationpb.New(d)}}}
}

// CompleteRun is the command that closes the run as completed with result.
func CompleteRun(result []byte) *aionv1.WorkflowCommand {
	return &aionv1.WorkflowCommand{Command: &aionv1.WorkflowCommand_Close{Close: &aionv1.CloseWorkflowCommand{
		Status: aionv1.RunStatus_RUN_STATUS_COMPLETED, Result: result}}}
}
