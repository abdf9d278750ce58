package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func (b *bundle) mustConnect(t *testing.T, reg *aionv1.Register) *rawWorker {
	t.Helper()
	w, err := b.connect(t, reg)
	if err != nil {
		t.Fatalf("connect %v: %v", reg, err)
	}
	return w
}

func (b *bundle) schedule(t *testing.T, r *aionv1.ScheduleRequest) *aionv1.Activity {
	t.Helper()
	resp, err := b.activities.Schedule(context.Background(), r)
	if err != nil {
		t.Fatalf("schedule %v: %v", r, err)
	}
	return resp.GetActivity()
}

func (b *bundle) wait(t *testing.T, ns, id string) *aionv1.Activity {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := b.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: ns, Id: id})
	if err != nil {
		t.Fatalf("wait %s/%s: %v", ns, id, err)
	}
	return resp.GetActivity()
}

// nextTask skips pongs and acks until a task arrives.
func (w *rawWorker) nextTask() *aionv1.ActivityTask {
	w.t.Helper()
	return w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetActivityTask() != nil }).GetActivityTask()
}

// expectNoTask asserts the worker receives no task within d.
func (w *rawWorker) expectNoTask(d time.Duration) {
	w.t.Helper()
	got := make(chan *aionv1.ActivityTask, 1)
	go func() {
		for {
			m, err := w.stream.Recv()
			if err != nil {
				return
			}
			if task := m.GetActivityTask(); task != nil {
				got <- task
				return
			}
		}
	}()
	select {
	case task := <-got:
		w.t.Fatalf("worker %d got task %s/%s it must never receive", w.id, task.GetNamespace(), task.GetActivityId())
	case <-time.After(d):
	}
	w.cancel() // the reader goroutine above owns the stream now
}

func (w *rawWorker) fail(task *aionv1.ActivityTask, typ string, retryable bool) *aionv1.ResultAck {
	w.t.Helper()
	w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
		Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
		Outcome: &aionv1.ActivityResult_Failed{Failed: &aionv1.Failure{Message: "boom", Type: typ, Retryable: retryable}},
	}}})
	return w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetResultAck() != nil }).GetResultAck()
}

func reg(namespaces []string, queue, node string, types ...string) *aionv1.Register {
	return &aionv1.Register{Namespaces: namespaces, TaskQueue: queue, Node: node, ActivityTypes: types, Slots: 10}
}

func TestRoutingRulesAcrossTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "iso"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "iso",
		Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED, Nodes: []string{"gpu-1"}}}); err != nil {
		t.Fatal(err)
	}
	tenantA := b.mustConnect(t, reg([]string{"a"}, "", "", "work"))
	tenantB := b.mustConnect(t, reg([]string{"b"}, "", "", "work"))
	gpuQueue := b.mustConnect(t, reg([]string{"a"}, "gpu", "", "work"))
	onNode2 := b.mustConnect(t, reg([]string{"a"}, "pinq", "n2", "work"))
	onNode1 := b.mustConnect(t, reg([]string{"a"}, "pinq", "n1", "work"))
	isoGPU := b.mustConnect(t, reg([]string{"iso"}, "", "gpu-1", "work"))
	if _, err := b.connect(t, reg([]string{"iso"}, "", "cpu-1", "work")); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("worker on cpu-1 into pinned{gpu-1}: %v, want FailedPrecondition", err)
	}

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "b", Id: "for-b", ActivityType: "work"})
	if task := tenantB.nextTask(); task.GetActivityId() != "for-b" {
		t.Fatalf("tenant b got %v", task)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "a", Id: "for-gpu", TaskQueue: "gpu", ActivityType: "work"})
	if task := gpuQueue.nextTask(); task.GetActivityId() != "for-gpu" {
		t.Fatalf("gpu queue worker got %v", task)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "a", Id: "pinned-n1", TaskQueue: "pinq", Node: "n1", ActivityType: "work"})
	if task := onNode1.nextTask(); task.GetActivityId() != "pinned-n1" || task.GetNode() != "n1" {
		t.Fatalf("n1 worker got %v", task)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "iso", Id: "iso-1", ActivityType: "work"})
	if task := isoGPU.nextTask(); task.GetActivityId() != "iso-1" {
		t.Fatalf("pinned namespace worker got %v", task)
	}
	if _, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "iso", ActivityType: "work", Node: "cpu-1"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("pin outside pinned placement: %v, want FailedPrecondition", err)
	}
	// None of these must have reached another tenant, queue or node.
	tenantA.expectNoTask(300 * time.Millisecond)
	onNode2.expectNoTask(10 * time.Millisecond)
}

func TestPreferPlacementFillsPreferredNodeFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "p"})
	if _, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "p",
		Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PREFER, Nodes: []string{"fast"}}}); err != nil {
		t.Fatal(err)
	}
	fast := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"p"}, Node: "fast", ActivityTypes: []string{"w"}, Slots: 1})
	slow := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"p"}, Node: "slow", ActivityTypes: []string{"w"}, Slots: 1})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "p", Id: "1", ActivityType: "w"})
	if task := fast.nextTask(); task.GetActivityId() != "1" {
		t.Fatalf("first activity went to %v, want the preferred node", task)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "p", Id: "2", ActivityType: "w"})
	if task := slow.nextTask(); task.GetActivityId() != "2" {
		t.Fatalf("with the preferred node full the activity went to %v, want a spill", task)
	}
}

func TestWaitingWorkIsDispatchedWhenAWorkerArrives(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "late", Id: "x", ActivityType: "w"})
	waiting := `aion_backlog_activities{namespace="late",task_queue="default"}`
	for deadline := time.Now().Add(10 * time.Second); b.scrape(t)[waiting] != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached 1", waiting)
		}
	}
	w := b.mustConnect(t, reg([]string{"late"}, "", "", "w"))
	if task := w.nextTask(); task.GetActivityId() != "x" {
		t.Fatalf("late worker got %v", task)
	}
}

func TestRetriesFollowThePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, reg([]string{"r"}, "", "", "flaky"))
	policy := &aionv1.RetryPolicy{InitialInterval: durationpb.New(100 * time.Millisecond), BackoffCoefficient: 2,
		MaximumAttempts: 5, NonRetryableErrorTypes: []string{"fatal"}}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "r", Id: "flaky", ActivityType: "flaky", RetryPolicy: policy})
	var starts []time.Time
	for range 2 {
		task := w.nextTask()
		starts = append(starts, time.Now())
		if ack := w.fail(task, "io", true); ack.GetRefused() != "" {
			t.Fatalf("failure refused: %s", ack.GetRefused())
		}
	}
	task := w.nextTask()
	starts = append(starts, time.Now())
	if task.GetAttempt() != 3 {
		t.Fatalf("third task is attempt %d", task.GetAttempt())
	}
	w.complete(task, []byte(`"ok"`))
	a := b.wait(t, "r", "flaky")
	if a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED || a.GetAttempt() != 3 || len(a.GetAttempts()) != 3 {
		t.Fatalf("activity = %v", a)
	}
	// Backoff: 100ms after attempt 1, 200ms after attempt 2.
	if gap := starts[1].Sub(starts[0]); gap < 90*time.Millisecond {
		t.Fatalf("attempt 2 started %v after attempt 1, want at least the 100ms initial interval", gap)
	}
	if gap := starts[2].Sub(starts[1]); gap < 190*time.Millisecond {
		t.Fatalf("attempt 3 started %v after attempt 2, want at least 200ms (coefficient 2)", gap)
	}

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "r", Id: "fatal", ActivityType: "flaky", RetryPolicy: policy})
	w.fail(w.nextTask(), "fatal", true)
	if a := b.wait(t, "r", "fatal"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_FAILED || a.GetAttempt() != 1 ||
		a.GetFailure().GetType() != "fatal" {
		t.Fatalf("non-retryable type: %v", a)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "r", Id: "capped", ActivityType: "flaky",
		RetryPolicy: &aionv1.RetryPolicy{InitialInterval: durationpb.New(10 * time.Millisecond), MaximumAttempts: 2}})
	w.fail(w.nextTask(), "io", true)
	w.fail(w.nextTask(), "io", true)
	if a := b.wait(t, "r", "capped"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_FAILED || a.GetAttempt() != 2 {
		t.Fatalf("maximum attempts 2: %v", a)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "r", Id: "not-retryable", ActivityType: "flaky", RetryPolicy: policy})
	w.fail(w.nextTask(), "io", false)
	if a := b.wait(t, "r", "not-retryable"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_FAILED || a.GetAttempt() != 1 {
		t.Fatalf("failure marked not retryable: %v", a)
	}
}

func TestEachTimeoutFires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fast := durationpb.New(150 * time.Millisecond)
	noRetry := &aionv1.RetryPolicy{MaximumAttempts: 1}

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "t", Id: "no-worker", ActivityType: "nobody", ScheduleToStartTimeout: fast})
	a := b.wait(t, "t", "no-worker")
	if a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT || a.GetFailure().GetType() != "schedule_to_start_timeout" {
		t.Fatalf("schedule-to-start: %v", a)
	}

	w := b.mustConnect(t, reg([]string{"t"}, "", "", "slow"))
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "t", Id: "too-long", ActivityType: "slow", StartToCloseTimeout: fast, RetryPolicy: noRetry})
	task := w.nextTask()
	cancel := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if cancel == nil || cancel.GetActivityId() != "too-long" || cancel.GetAttempt() != task.GetAttempt() {
		t.Fatalf("after start-to-close the worker got %v, want cancel_activity", cancel)
	}
	if a := b.wait(t, "t", "too-long"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT ||
		a.GetFailure().GetType() != "start_to_close_timeout" {
		t.Fatalf("start-to-close: %v", a)
	}
	if ack := w.complete(task, []byte(`"late"`)); ack.GetRefused() == "" {
		t.Fatal("a result after start-to-close was accepted")
	}

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "t", Id: "silent", ActivityType: "slow", HeartbeatTimeout: fast, RetryPolicy: noRetry})
	task = w.nextTask()
	if a := b.wait(t, "t", "silent"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT ||
		a.GetFailure().GetType() != "heartbeat_timeout" {
		t.Fatalf("heartbeat: %v", a)
	}
	w.complete(task, nil)

	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "t", Id: "whole", ActivityType: "slow",
		ScheduleToCloseTimeout: durationpb.New(200 * time.Millisecond)})
	task = w.nextTask()
	if a := b.wait(t, "t", "whole"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_TIMED_OUT ||
		a.GetFailure().GetType() != "schedule_to_close_timeout" {
		t.Fatalf("schedule-to-close: %v", a)
	}
	w.complete(task, nil)
}

func TestHeartbeatsKeepAnAttemptAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, reg([]string{"h"}, "", "", "long"))
	const timeout = 500 * time.Millisecond
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "h", Id: "beating", ActivityType: "long",
		HeartbeatTimeout: durationpb.New(timeout)})
	task := w.nextTask()
	// Heartbeats every 100ms for three heartbeat timeouts: each leaves 400ms
	// of slack for a busy machine, and every one must be accepted.
	start, last := time.Now(), 0
	beat := time.NewTicker(100 * time.Millisecond) // the worker's pace
	defer beat.Stop()
	for i := 0; time.Since(start) < 3*timeout; i++ {
		<-beat.C
		w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
			Namespace: "h", ActivityId: "beating", Attempt: task.GetAttempt(), Details: []byte(fmt.Sprint(i)),
		}}})
		if ack := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetHeartbeatAck() != nil }).GetHeartbeatAck(); ack.GetRefused() != "" {
			t.Fatalf("heartbeat %d after %v: ack %v", i, time.Since(start), ack)
		}
		last = i
	}
	w.complete(task, []byte(`"done"`))
	if a := b.wait(t, "h", "beating"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED ||
		string(a.GetLastHeartbeatDetails()) != fmt.Sprint(last) {
		t.Fatalf("after %v of heartbeats every 100ms: %v, want completed with the last details %d", 3*timeout, a, last)
	}
}

func TestWorkerLossRetriesOnAnotherWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"l"}, ActivityTypes: []string{"w"}, Slots: 1})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "l", Id: "survivor", ActivityType: "w",
		RetryPolicy: &aionv1.RetryPolicy{InitialInterval: durationpb.New(10 * time.Millisecond)}})
	task := first.nextTask()
	second := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"l"}, ActivityTypes: []string{"w"}, Slots: 1})
	first.cancel() // the worker's connection drops mid-activity
	retry := second.nextTask()
	if retry.GetActivityId() != "survivor" || retry.GetAttempt() != task.GetAttempt()+1 {
		t.Fatalf("after worker loss the second worker got %v", retry)
	}
	second.complete(retry, []byte(`"ok"`))
	a := b.wait(t, "l", "survivor")
	if a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED || a.GetAttempts()[0].GetFailure().GetType() != "worker_lost" {
		t.Fatalf("activity = %v", a)
	}
}

func TestSilentWorkerIsTimedOutAndItsWorkRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.HeartbeatWindow = 300 * time.Millisecond })
	silent := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"s"}, ActivityTypes: []string{"w"}, Slots: 1})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "s", Id: "orphan", ActivityType: "w",
		RetryPolicy: &aionv1.RetryPolicy{InitialInterval: durationpb.New(10 * time.Millisecond)}})
	silent.nextTask()
	// Send nothing: the sweeper must end the stream with Unavailable.
	_, err := silent.stream.Recv()
	for err == nil {
		_, err = silent.stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("silent worker's stream ended with %v, want Unavailable", err)
	}
	next := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"s"}, ActivityTypes: []string{"w"}, Slots: 1})
	task := next.nextTask()
	if task.GetAttempt() != 2 {
		t.Fatalf("retry is attempt %d, want 2", task.GetAttempt())
	}
	next.complete(task, nil)
}

func TestRestartRetriesInterruptedWork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	withDir := func(c *server.Config) { c.DataDir = dir; c.DrainTimeout = 100 * time.Millisecond }
	b := setup(t, withDir)
	w := b.mustConnect(t, reg([]string{"d"}, "", "", "w"))
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "d", Id: "interrupted", ActivityType: "w",
		RetryPolicy: &aionv1.RetryPolicy{InitialInterval: durationpb.New(10 * time.Millisecond)}})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "d", Id: "queued", ActivityType: "nobody-yet"})
	w.nextTask() // never finished
	if err := b.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	b2 := setup(t, withDir)
	w2 := b2.mustConnect(t, reg([]string{"d"}, "", "", "w", "nobody-yet"))
	seen := map[string]uint32{}
	for range 2 {
		task := w2.nextTask()
		seen[task.GetActivityId()] = task.GetAttempt()
		w2.complete(task, []byte(`"after restart"`))
	}
	if seen["interrupted"] != 2 || seen["queued"] != 1 {
		t.Fatalf("after restart the worker got %v, want interrupted as attempt 2 and queued as attempt 1", seen)
	}
	for _, id := range []string{"interrupted", "queued"} {
		if a := b2.wait(t, "d", id); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
			t.Fatalf("%s after restart: %v", id, a)
		}
	}
}
