package aiontest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aion-run/aion/aiontest"
	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type doc struct {
	Text string `json:"text"`
}

type summary struct {
	Words int    `json:"words"`
	First string `json:"first"`
}

func summarize(_ context.Context, in doc) (summary, error) {
	f := strings.Fields(in.Text)
	if len(f) == 0 {
		return summary{}, worker.NewError("empty_document", "the document has no words", false, map[string]int{"bytes": len(in.Text)})
	}
	return summary{Words: len(f), First: f[0]}, nil
}

func TestWorkReportsTheResultAsASchedulerWouldDecodeIt(t *testing.T) {
	t.Parallel()
	res, err := aiontest.NewWorker(t, summarize, nil).Work(ctxFor(t), doc{Text: "to be or not to be"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != aiontest.Completed || res.Value != (summary{Words: 6, First: "to"}) || res.Err != nil || res.Failure != nil || len(res.Heartbeats) != 0 {
		t.Fatalf("Work = %+v", res)
	}
}

func TestFailuresAreReportedAsTheWorkerReportsThem(t *testing.T) {
	t.Parallel()
	errGateway := errors.New("gateway timeout")
	for _, tc := range []struct {
		name       string
		fn         func(context.Context, doc) (summary, error)
		wantType   string
		retryable  bool
		wantErr    error
		wantDetail string
	}{
		{"TypedNotRetryable", summarize, "empty_document", false, nil, `{"bytes":0}`},
		{"PlainErrorIsRetryable", func(context.Context, doc) (summary, error) { return summary{}, fmt.Errorf("call: %w", errGateway) },
			"error", true, errGateway, ""},
		{"NonRetryable", func(context.Context, doc) (summary, error) { return summary{}, worker.NonRetryable(errGateway) },
			"error", false, errGateway, ""},
		{"Panic", func(context.Context, doc) (summary, error) { panic("boom") }, "panic", true, nil, "goroutine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := aiontest.NewWorker(t, tc.fn, nil).Work(ctxFor(t), doc{})
			if err != nil {
				t.Fatal(err)
			}
			f := res.Failure
			if res.Outcome != aiontest.Failed || f == nil || f.Type != tc.wantType || f.Retryable != tc.retryable {
				t.Fatalf("Work = %+v, failure %+v; want failed, type %q, retryable %v", res, f, tc.wantType, tc.retryable)
			}
			if tc.wantErr != nil && !errors.Is(res.Err, tc.wantErr) {
				t.Errorf("Err = %v, want it to wrap %v", res.Err, tc.wantErr)
			}
			if !strings.Contains(string(f.Details), tc.wantDetail) {
				t.Errorf("details %s, want them to contain %q", f.Details, tc.wantDetail)
			}
		})
	}
}

func TestInfoReachesTheHandlerWithDefaultsAndTheDeadlineOnItsContext(t *testing.T) {
	t.Parallel()
	type seen struct {
		Info        worker.ActivityInfo
		HasDeadline bool
		Deadline    time.Time
	}
	info := func(ctx context.Context, _ struct{}) (seen, error) {
		d, ok := ctx.Deadline()
		return seen{Info: worker.Info(ctx), HasDeadline: ok, Deadline: d.UTC()}, nil
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		a := aiontest.NewWorker(t, info, nil).Start(ctxFor(t), struct{}{})
		res, err := a.Wait(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		got := res.Value
		if got.Info != a.Info() || got.HasDeadline {
			t.Fatalf("the handler saw %+v, Info() is %+v", got, a.Info())
		}
		i := got.Info
		if i.Namespace != "default" || i.ActivityID != "aiontest" || i.Attempt != 1 || i.TaskQueue != "default" ||
			i.ActivityType != "aiontest" || i.WorkerID != 1 || i.StartedTime.IsZero() || !i.ScheduledTime.Equal(i.StartedTime) {
			t.Fatalf("default info %+v", i)
		}
	})
	t.Run("Given", func(t *testing.T) {
		t.Parallel()
		started := time.Now().UTC().Truncate(time.Second)
		w := aiontest.NewWorker(t, info, &aiontest.Config{Info: worker.ActivityInfo{
			Namespace: "billing", ActivityID: "invoice-7", Attempt: 3, ActivityType: "charge", Node: "eu-1",
			StartedTime: started, StartToCloseTimeout: time.Hour, HeartbeatTimeout: time.Minute,
		}})
		res, err := w.Work(ctxFor(t), struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		i := res.Value.Info
		if i.Namespace != "billing" || i.ActivityID != "invoice-7" || i.Attempt != 3 || i.ActivityType != "charge" || i.Node != "eu-1" ||
			i.StartToCloseTimeout != time.Hour || i.HeartbeatTimeout != time.Minute || !i.StartedTime.Equal(started) {
			t.Fatalf("given info %+v", i)
		}
		// The deadline is start + start-to-close, on the context too.
		if want := started.Add(time.Hour); !i.Deadline.Equal(want) || !res.Value.HasDeadline || !res.Value.Deadline.Equal(want) {
			t.Fatalf("deadline: info %v, context %v (%v); want %v", i.Deadline, res.Value.Deadline, res.Value.HasDeadline, want)
		}
	})
}

type progress struct {
	Next int `json:"next"`
}

// process handles items from where a previous attempt's heartbeat left off,
// recording a heartbeat after each.
func process(ctx context.Context, items []string) (int, error) {
	start := 0
	if p, err := worker.HeartbeatDetails[progress](ctx); err == nil {
		start = p.Next
	} else if !errors.Is(err, worker.ErrNoHeartbeatDetails) {
		return 0, err
	}
	for i := start; i < len(items); i++ {
		worker.RecordHeartbeat(ctx, progress{Next: i + 1})
	}
	worker.RecordHeartbeat(ctx, nil)
	return len(items) - start, nil
}

func TestEveryHeartbeatIsRecordedInOrderAndARetryReadsThePreviousOnes(t *testing.T) {
	t.Parallel()
	items := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name  string
		cfg   *aiontest.Config
		done  int
		beats string
	}{
		{"FirstAttempt", nil, 4, `{"next":1} {"next":2} {"next":3} {"next":4} null`},
		{"Retry", &aiontest.Config{Info: worker.ActivityInfo{Attempt: 2}, LastHeartbeatDetails: progress{Next: 3}}, 1, `{"next":4} null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := aiontest.NewWorker(t, process, tc.cfg).Work(ctxFor(t), items)
			if err != nil {
				t.Fatal(err)
			}
			var beats []string
			for _, b := range res.Heartbeats {
				beats = append(beats, string(b))
			}
			if res.Value != tc.done || strings.Join(beats, " ") != tc.beats {
				t.Fatalf("processed %d with heartbeats %v; want %d with %s", res.Value, beats, tc.done, tc.beats)
			}
		})
	}
}

func TestNextHeartbeatFollowsARunningHandler(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	step := make(chan struct{})
	a := aiontest.NewWorker(t, func(ctx context.Context, n int) (int, error) {
		for i := range n {
			worker.RecordHeartbeat(ctx, i)
			<-step
		}
		return n, nil
	}, nil).Start(ctx, 3)
	for i := range 3 {
		b, err := a.NextHeartbeat(ctx)
		if err != nil || string(b) != fmt.Sprint(i) {
			t.Fatalf("heartbeat %d: %s, %v", i, b, err)
		}
		step <- struct{}{}
	}
	if _, err := a.NextHeartbeat(ctx); !errors.Is(err, aiontest.ErrNotRunning) {
		t.Fatalf("NextHeartbeat after the handler returned: %v, want ErrNotRunning", err)
	}
	if got := len(a.Heartbeats()); got != 3 {
		t.Fatalf("Heartbeats() has %d, want 3", got)
	}
}

// agent takes interventions until told "done", recording each message's
// text, priority and whether a pause held it; a turn cap can be lowered,
// approvals are declined. Before it waits out a pause it records a
// heartbeat, so a test knows it is waiting.
type agentOut struct {
	Messages []string `json:"messages"`
	MaxTurns uint32   `json:"max_turns"`
}

func agent(ctx context.Context, maxTurns uint32) (agentOut, error) {
	out := agentOut{MaxTurns: maxTurns}
	ivs := worker.Interventions(ctx)
	for {
		if worker.Paused(ctx) {
			worker.RecordHeartbeat(ctx, "paused")
		}
		waited, err := worker.WaitWhilePaused(ctx)
		if err != nil {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, context.Cause(ctx)
		case iv := <-ivs:
			switch iv.Kind {
			case worker.InterventionInjectMessage:
				out.Messages = append(out.Messages, fmt.Sprintf("%s/%s/waited:%v", iv.Message.Text, iv.Message.Priority, waited > 0))
				iv.Accept()
				if iv.Message.Text == "done" {
					return out, nil
				}
			case worker.InterventionUpdateBudget:
				out.MaxTurns = *iv.Budget.MaxTurns
				iv.Accept()
			default:
				iv.Decline("this agent asks for no approvals")
			}
		}
	}
}

func TestInterventionsReachTheHandlerAndItsAcknowledgementComesBack(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	a := aiontest.NewWorker(t, agent, nil).Start(ctx, 10)
	intervene := func(cmd client.InterventionCommand, want aiontest.Ack) {
		t.Helper()
		if got, err := a.Intervene(ctx, cmd); err != nil || got != want {
			t.Fatalf("Intervene(%s) = %+v, %v; want %+v", cmd.Kind(), got, err, want)
		}
	}
	intervene(client.InjectMessage("look at the logs", client.PriorityInterrupt), aiontest.Ack{Accepted: true})
	intervene(client.UpdateBudget(client.Budget{MaxTurns: new(uint32(4))}), aiontest.Ack{Accepted: true})
	intervene(client.RespondToApproval("call-1", true, ""), aiontest.Ack{Message: "this agent asks for no approvals"})
	intervene(client.Pause(), aiontest.Ack{Accepted: true})
	intervene(client.Pause(), aiontest.Ack{Accepted: true, Message: "already paused"})
	// The handler takes this one, then finds itself paused.
	intervene(client.InjectMessage("while paused", client.PriorityNormal), aiontest.Ack{Accepted: true})
	if b, err := a.NextHeartbeat(ctx); err != nil || string(b) != `"paused"` {
		t.Fatalf("heartbeat %s, %v; want the handler to say it is paused", b, err)
	}
	intervene(client.Resume(), aiontest.Ack{Accepted: true})
	intervene(client.Resume(), aiontest.Ack{Accepted: true, Message: "not paused"})
	intervene(client.InjectMessage("done", ""), aiontest.Ack{Accepted: true})
	res, err := a.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "look at the logs/interrupt/waited:false while paused/normal/waited:false done/normal/waited:true"
	if res.Outcome != aiontest.Completed || strings.Join(res.Value.Messages, " ") != want || res.Value.MaxTurns != 4 {
		t.Fatalf("Wait = %+v; want messages %q and 4 turns", res.Value, want)
	}
}

func TestAnInterventionTheHandlerNeverAcknowledgesIsDeclinedWhenItReturns(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	a := aiontest.NewWorker(t, func(ctx context.Context, _ struct{}) (string, error) {
		iv := <-worker.Interventions(ctx)
		return iv.Message.Text, nil // and forgets to Accept
	}, nil).Start(ctx, struct{}{})
	ack, err := a.Intervene(ctx, client.InjectMessage("hello", client.PriorityNormal))
	if err != nil || ack.Accepted || !strings.Contains(ack.Message, "without acknowledging") {
		t.Fatalf("Intervene = %+v, %v; want declined by the SDK", ack, err)
	}
	if res, err := a.Wait(ctx); err != nil || res.Value != "hello" {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
}

func TestCancelEndsTheAttemptCanceled(t *testing.T) {
	t.Parallel()
	waitForCancel := func(ctx context.Context, _ struct{}) (struct{}, error) {
		worker.RecordHeartbeat(ctx, "started")
		<-ctx.Done()
		return struct{}{}, context.Cause(ctx)
	}
	for _, tc := range []struct {
		name   string
		cancel func(context.Context, *aiontest.Attempt[struct{}]) error
		reason string
	}{
		{"ByTheServer", func(_ context.Context, a *aiontest.Attempt[struct{}]) error { a.Cancel("operator said so"); return nil }, "operator said so"},
		{"ByAnIntervention", func(ctx context.Context, a *aiontest.Attempt[struct{}]) error {
			ack, err := a.Intervene(ctx, client.CancelCommand("wind down"))
			if err == nil && !ack.Accepted {
				err = fmt.Errorf("cancel declined: %s", ack.Message)
			}
			return err
		}, "wind down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			a := aiontest.NewWorker(t, waitForCancel, nil).Start(ctx, struct{}{})
			if _, err := a.NextHeartbeat(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tc.cancel(ctx, a); err != nil {
				t.Fatal(err)
			}
			res, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != aiontest.Canceled || !errors.Is(res.Err, worker.ErrActivityCanceled) || !strings.Contains(res.Err.Error(), tc.reason) {
				t.Fatalf("Wait = %+v; want canceled with %q", res, tc.reason)
			}
		})
	}
}

func TestInterveneSendsNothingAServerWouldNotSend(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	w := aiontest.NewWorker(t, agent, &aiontest.Config{Capabilities: []worker.Capability{worker.CapabilityInjectMessage}})
	a := w.Start(ctx, 1)
	if _, err := a.Intervene(ctx, client.Pause()); !errors.Is(err, aiontest.ErrCapabilityNotSupported) || !strings.Contains(err.Error(), "pause_resume") {
		t.Errorf("pause without the capability: %v", err)
	}
	if _, err := a.Intervene(ctx, client.InjectMessage("", client.PriorityNormal)); err == nil || !strings.Contains(err.Error(), "command.inject_message.text: must not be empty") {
		t.Errorf("an empty message: %v", err)
	}
	if _, err := a.Intervene(ctx, client.InterventionCommand{}); err == nil || !strings.Contains(err.Error(), "command: missing") {
		t.Errorf("no command: %v", err)
	}
	if ack, err := a.Intervene(ctx, client.InjectMessage("done", client.PriorityNormal)); err != nil || !ack.Accepted {
		t.Fatalf("the advertised command: %+v, %v", ack, err)
	}
	if _, err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Intervene(ctx, client.InjectMessage("late", client.PriorityNormal)); !errors.Is(err, aiontest.ErrNotRunning) {
		t.Errorf("after the handler returned: %v, want ErrNotRunning", err)
	}
}

func TestEndingTheContextStopsTheHandlerAsAStoppingWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(ctxFor(t))
	causes := make(chan error, 1)
	a := aiontest.NewWorker(t, func(ctx context.Context, _ struct{}) (struct{}, error) {
		worker.RecordHeartbeat(ctx, nil)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return struct{}{}, ctx.Err()
	}, nil).Start(ctx, struct{}{})
	if _, err := a.NextHeartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	res, err := a.Wait(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrWorkerStopping) {
		t.Errorf("the handler's cause: %v, want ErrWorkerStopping", cause)
	}
	if res.Outcome != aiontest.Failed || res.Failure.Type != "worker_stopping" || !res.Failure.Retryable {
		t.Fatalf("Wait = %+v, failure %+v; want a retryable worker_stopping failure", res, res.Failure)
	}
}

func TestAHandlerStillRunningWhenTheTestEndsIsStopped(t *testing.T) {
	t.Parallel()
	returned := make(chan error, 1)
	t.Run("Inner", func(t *testing.T) {
		a := aiontest.NewWorker(t, func(ctx context.Context, _ struct{}) (struct{}, error) {
			worker.RecordHeartbeat(ctx, nil)
			<-ctx.Done()
			returned <- context.Cause(ctx)
			return struct{}{}, ctx.Err()
		}, nil).Start(context.Background(), struct{}{})
		if _, err := a.NextHeartbeat(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	})
	// The inner test's cleanup waited for the handler, so it has returned.
	select {
	case cause := <-returned:
		if !errors.Is(cause, worker.ErrWorkerStopping) {
			t.Fatalf("cause %v, want ErrWorkerStopping", cause)
		}
	default:
		t.Fatal("the handler was still running after its test ended")
	}
}

func TestNewWorkerRefusesAConfigThatDescribesNoAttempt(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*aiontest.Config{
		"UnknownCapability":  {Capabilities: []worker.Capability{"teleport"}},
		"UnencodableDetails": {LastHeartbeatDetails: make(chan int)},
	} {
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			aiontest.NewWorker(ft, summarize, cfg)
		}()
		if ft.msg == "" {
			t.Errorf("%s: NewWorker accepted %+v", name, cfg)
		}
	}
}

// fatalRecorder records Fatalf and stops the caller, as t.Fatalf would.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f.msg)
}
