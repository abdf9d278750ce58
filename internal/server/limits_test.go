package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPendingCapRefusesScheduleAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.MaxPendingPerNamespace = 3 })
	ctx := context.Background()
	for i := range 3 {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "capped", Id: fmt.Sprint(i), ActivityType: "nobody"})
	}
	_, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "capped", Id: "over", ActivityType: "nobody"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), `"capped"`) {
		t.Fatalf("fourth pending activity: %v, want ResourceExhausted naming the namespace", err)
	}
	if _, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "capped", Id: "over"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused activity exists: %v", err)
	}
	// Another namespace has its own cap.
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "other", Id: "x", ActivityType: "nobody"})
	// Closing one frees a place.
	if _, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "capped", Id: "0"}); err != nil {
		t.Fatal(err)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "capped", Id: "after", ActivityType: "nobody"})
}

func TestInFlightCapQueuesTheExcess(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.MaxInFlightPerNamespace = 2 })
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"busy", "free"}, ActivityTypes: []string{"t"}, Slots: 10})
	for i := range 3 {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "busy", Id: fmt.Sprint(i), ActivityType: "t"})
	}
	first, second := w.nextTask(), w.nextTask()
	// The third waits although the worker has free slots; another
	// namespace is not held back.
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "free", Id: "f", ActivityType: "t"})
	if task := w.nextTask(); task.GetNamespace() != "free" {
		t.Fatalf("with busy at its cap the next task was %s/%s", task.GetNamespace(), task.GetActivityId())
	}
	a, err := b.activities.Get(context.Background(), &aionv1.GetActivityRequest{Namespace: "busy", Id: "2"})
	if err != nil || a.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED {
		t.Fatalf("third activity: %v %v, want it waiting", a, err)
	}
	w.complete(first, nil)
	third := w.nextTask()
	if third.GetNamespace() != "busy" || third.GetActivityId() != "2" {
		t.Fatalf("after one finished the worker got %s/%s", third.GetNamespace(), third.GetActivityId())
	}
	w.complete(second, nil)
	w.complete(third, nil)
	for i := range 3 {
		if a := b.wait(t, "busy", fmt.Sprint(i)); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
			t.Fatalf("busy/%d: %v", i, a.GetState())
		}
	}
}
