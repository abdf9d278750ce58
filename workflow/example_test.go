package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// Order is the input of OrderWorkflow.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	Email  string `json:"email"`
}

// OrderWorkflow reserves stock, charges the card (releasing the stock if
// the charge fails), waits up to two days for the warehouse's "ship" signal,
// lets a day of cooling-off pass, and notifies the customer. Its "status"
// query tells where it stands.
func OrderWorkflow(ctx workflow.Context, o Order) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &workflow.RetryPolicy{MaximumAttempts: 5, NonRetryableErrorTypes: []string{"card_declined"}},
	})
	status := "reserving"
	if err := workflow.SetQueryHandler(ctx, "status", func(struct{}) (string, error) { return status, nil }); err != nil {
		return "", err
	}

	reservation, err := workflow.ExecuteActivity[string](ctx, "reserve", o).Get(ctx)
	if err != nil {
		return "", err
	}
	status = "charging"
	if _, err := workflow.ExecuteActivity[string](ctx, "charge", o).Get(ctx); err != nil {
		// Compensate. The disconnected context lets the release run even
		// when the run is being canceled.
		dctx := workflow.NewDisconnectedContext(ctx)
		if _, rerr := workflow.ExecuteActivity[struct{}](dctx, "release", reservation).Get(dctx); rerr != nil {
			return "", errors.Join(err, rerr)
		}
		return "", err
	}
	status = "awaiting shipment"
	tracking, shipped, err := workflow.ReceiveSignalWithTimeout[string](ctx, "ship", 48*time.Hour)
	if err != nil {
		return "", err
	}
	if !shipped {
		return "", fmt.Errorf("order %s: not shipped within two days", o.ID)
	}
	status = "cooling off"
	if err := workflow.Sleep(ctx, 24*time.Hour); err != nil {
		return "", err
	}
	status = "notifying"
	if _, err := workflow.ExecuteActivity[struct{}](ctx, "notify", map[string]string{"to": o.Email, "tracking": tracking}).Get(ctx); err != nil {
		return "", err
	}
	status = "done"
	return tracking, nil
}

// A worker serves the order workflow and the activities it takes. This
// example needs an aion server, so it does not run as a test.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	w, err := worker.New("127.0.0.1:50051", worker.Options{
		Namespaces: []string{"shop"},
		TaskQueue:  "orders",
		Slots:      16,
		// Required with workflows: runs stay on the build id they started
		// on, so code that changes their steps ships under a new one.
		BuildID: "orders-2026-01-15",
	})
	if err != nil {
		log.Fatal(err)
	}
	worker.RegisterWorkflow(w, "order", OrderWorkflow)
	worker.RegisterActivity(w, "reserve", func(ctx context.Context, o Order) (string, error) { return "rsv-" + o.ID, nil })
	worker.RegisterActivity(w, "charge", func(ctx context.Context, o Order) (string, error) { return "ch-" + o.ID, nil })
	worker.RegisterActivity(w, "release", func(ctx context.Context, reservation string) (struct{}, error) { return struct{}{}, nil })
	worker.RegisterActivity(w, "notify", func(ctx context.Context, msg map[string]string) (struct{}, error) { return struct{}{}, nil })
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// story is a run's history as the server writes it, for the examples: the
// Executor is handed the whole history each time, as a worker that does not
// keep the run is, and replays the code from the top.
type story struct {
	e      *workflow.Executor
	events []*aionv1.HistoryEvent
	task   uint64
}

func (s *story) add(ev *aionv1.HistoryEvent) {
	ev.Seq = int64(len(s.events) + 1)
	ev.Time = timestamppb.New(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC).Add(time.Duration(len(s.events)) * time.Minute))
	s.events = append(s.events, ev)
}

// advance delivers a task and records its commands as the server would,
// printing them.
func (s *story) advance(queries ...*aionv1.WorkflowQuery) {
	s.task++
	res := s.e.Run(&aionv1.WorkflowTask{Namespace: "shop", WorkflowId: "order-7", RunId: "r1", WorkflowType: "order",
		Task: s.task, FirstSeq: 1, Events: s.events, Queries: queries})
	if f := res.GetFailure(); f != nil {
		fmt.Printf("task %d failed: %s: %s\n", s.task, f.GetType(), f.GetMessage())
		return
	}
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowTaskCompleted{WorkflowTaskCompleted: &aionv1.WorkflowTaskCompleted{SeenSeq: int64(len(s.events))}}})
	var took []string
	for _, c := range res.GetCommands() {
		took = append(took, cmdString(c))
		s.add(commandEvent(&sim{runID: "r1", wfType: "order"}, c))
	}
	fmt.Printf("task %d: %s\n", s.task, strings.Join(took, "; "))
	for _, a := range res.GetQueryAnswers() {
		fmt.Printf("query %s: %s%s\n", a.GetQueryId(), a.GetResult(), a.GetError())
	}
}

func (s *story) activityClosed(step int64, result string, failure *aionv1.Failure) {
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_ActivityClosed{ActivityClosed: &aionv1.ActivityClosed{
		Step: step, Result: []byte(result), Failure: failure}}})
}

// An Executor replays a run's history through the workflow code, without a
// server: what a worker does with each workflow task. Each task replays the
// steps history records and returns only the new ones.
func ExampleExecutor() {
	e := workflow.NewExecutor(workflow.ExecutorOptions{BuildID: "orders-2026-01-15"})
	defer e.Close()
	if err := workflow.Register(e, "order", OrderWorkflow); err != nil {
		log.Fatal(err)
	}
	s := &story{e: e}
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: &aionv1.WorkflowStarted{
		WorkflowType: "order", Input: []byte(`{"id":"7","amount":120,"email":"ada@example.com"}`)}}})
	s.advance()
	s.activityClosed(1, `"rsv-7"`, nil)
	s.advance()
	s.activityClosed(2, `"ch-7"`, nil)
	s.advance()
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_SignalReceived{SignalReceived: &aionv1.SignalReceived{
		Name: "ship", Input: []byte(`"1Z999"`)}}})
	s.advance(&aionv1.WorkflowQuery{QueryId: "status", Name: "status"})
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_TimerFired{TimerFired: &aionv1.TimerFired{Step: 4}}})
	s.advance()
	s.activityClosed(5, `{}`, nil)
	s.advance()
	// Output:
	// task 1: activity 1 reserve {"id":"7","amount":120,"email":"ada@example.com"}
	// task 2: activity 2 charge {"id":"7","amount":120,"email":"ada@example.com"}
	// task 3: timer 3 48h0m0s signal:ship
	// task 4: cancel-timer 3; timer 4 24h0m0s
	// query status: "cooling off"
	// task 5: activity 5 notify {"to":"ada@example.com","tracking":"1Z999"}
	// task 6: close completed "1Z999"
}

// A declined charge is compensated: the reservation is released, and the
// run fails with the charge's failure type.
func ExampleActivityError() {
	e := workflow.NewExecutor(workflow.ExecutorOptions{BuildID: "orders-2026-01-15"})
	defer e.Close()
	if err := workflow.Register(e, "order", OrderWorkflow); err != nil {
		log.Fatal(err)
	}
	s := &story{e: e}
	s.add(&aionv1.HistoryEvent{Event: &aionv1.HistoryEvent_WorkflowStarted{WorkflowStarted: &aionv1.WorkflowStarted{
		WorkflowType: "order", Input: []byte(`{"id":"8","amount":9000}`)}}})
	s.advance()
	s.activityClosed(1, `"rsv-8"`, nil)
	s.advance()
	s.activityClosed(2, "", &aionv1.Failure{Type: "card_declined", Message: "insufficient funds"})
	s.advance()
	s.activityClosed(3, `{}`, nil)
	s.advance()
	// Output:
	// task 1: activity 1 reserve {"id":"8","amount":9000,"email":""}
	// task 2: activity 2 charge {"id":"8","amount":9000,"email":""}
	// task 3: activity 3 release "rsv-8"
	// task 4: close failed card_declined: activity "charge" (step 2) failed: card_declined: insufficient funds
}
