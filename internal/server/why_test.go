package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Why over the wire: a delayed activity says until when, one no worker
// serves says so, and an unknown one is NotFound.
func TestWhyExplainsAWaitingActivityOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "why", Id: "later", ActivityType: "render",
		StartDelay: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, err := b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "why", Id: "later"})
	if err != nil || got.GetReason() != "delayed_start" || got.GetUntil() == nil || got.GetState() != aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED {
		t.Fatalf("why later: %v, %v", got, err)
	}
	a, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "why", Id: "later"})
	if err != nil || !a.GetActivity().GetReadyTime().AsTime().Equal(got.GetUntil().AsTime()) {
		t.Fatalf("get later: ready %v, why until %v, %v", a.GetActivity().GetReadyTime(), got.GetUntil(), err)
	}
	if _, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "why", Id: "now", ActivityType: "render"}); err != nil {
		t.Fatal(err)
	}
	got, err = b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "why", Id: "now"})
	if err != nil || got.GetReason() != "no_worker" || !strings.Contains(got.GetMessage(), `"render"`) {
		t.Fatalf("why now: %v, %v", got, err)
	}
	if _, err := b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "why", Id: "ghost"}); status.Code(err) != codes.NotFound {
		t.Fatalf("why of an unknown activity: %v, want NotFound", err)
	}
	if _, err := b.activities.Why(ctx, &aionv1.WhyRequest{Namespace: "why", Id: "bad id"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("why with a bad id: %v, want InvalidArgument", err)
	}
}

// WorkflowService.Why over the wire: a run no worker serves says so, an
// unknown workflow is NotFound, a missing workflow id InvalidArgument.
func TestWhyExplainsAWaitingRunOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := aionv1.NewWorkflowServiceClient(b.cc)
	if _, err := wf.Start(ctx, &aionv1.StartWorkflowRequest{Namespace: "why", WorkflowId: "o-1", WorkflowType: "order",
		Priority: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := wf.Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: "why", WorkflowId: "o-1"})
	if err != nil || got.GetReason() != "no_worker" || !strings.Contains(got.GetMessage(), `workflow type "order"`) {
		t.Fatalf("why o-1: %v, %v", got, err)
	}
	if _, err := wf.Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: "why", WorkflowId: "ghost"}); status.Code(err) != codes.NotFound {
		t.Fatalf("why of an unknown workflow: %v, want NotFound", err)
	}
	if _, err := wf.Why(ctx, &aionv1.WhyWorkflowRequest{Namespace: "why"}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "workflow_id") {
		t.Fatalf("why without a workflow id: %v, want InvalidArgument naming workflow_id", err)
	}
}
