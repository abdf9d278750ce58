package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestScheduleServiceFiresToAWorkerAndReportsTheTick creates an
// every-second schedule over gRPC: a connected worker receives its
// activity, named by the schedule and the tick, and the activity and the
// schedule report the tick.
func TestScheduleServiceFiresToAWorkerAndReportsTheTick(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	conn := srv.Dial(t)
	sc := aionv1.NewScheduleServiceClient(conn)
	ctx := context.Background()
	w := srv.Connect(t, &aionv1.Register{Namespaces: []string{"s"}, ActivityTypes: []string{"tick"}, Slots: 4})

	created, err := sc.Create(ctx, &aionv1.CreateScheduleRequest{Namespace: "s", ScheduleId: "every-second",
		Spec:   &aionv1.ScheduleSpec{Every: durationpb.New(time.Second)},
		Action: &aionv1.ScheduleAction{ActivityType: "tick", Input: []byte(`"hi"`)},
		Policy: &aionv1.SchedulePolicy{Overlap: aionv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL}})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.GetSchedule(); len(got.GetUpcoming()) != 5 || got.GetPolicy().GetCatchUp() != aionv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE {
		t.Fatalf("created %v: want 5 upcoming ticks and the default catch-up ONE", got)
	}

	task := w.Task()
	id := task.GetActivityId()
	nominal, ok := strings.CutPrefix(id, "every-second@")
	if !ok || string(task.GetPayload()) != `"hi"` {
		t.Fatalf("task %s with %q, want an id every-second@<tick> and the schedule's input", id, task.GetPayload())
	}
	at, err := time.Parse(time.RFC3339Nano, nominal)
	if err != nil || at.Nanosecond() != 0 {
		t.Fatalf("tick %q is not a whole second: %v", nominal, err)
	}
	if ack := w.Complete(task, nil); ack.GetRefused() != "" {
		t.Fatal(ack)
	}
	act, err := aionv1.NewActivityServiceClient(conn).Get(ctx, &aionv1.GetActivityRequest{Namespace: "s", Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if a := act.GetActivity(); a.GetScheduleId() != "every-second" || !a.GetScheduleTime().AsTime().Equal(at) {
		t.Fatalf("activity carries schedule %q at %v, want every-second at %v", a.GetScheduleId(), a.GetScheduleTime().AsTime(), at)
	}

	paused, err := sc.Pause(ctx, &aionv1.PauseScheduleRequest{Namespace: "s", ScheduleId: "every-second", Note: "enough"})
	if err != nil || !paused.GetSchedule().GetPaused() || paused.GetSchedule().GetNote() != "enough" {
		t.Fatalf("pause: %v %v", paused, err)
	}
	got, err := sc.Get(ctx, &aionv1.GetScheduleRequest{Namespace: "s", ScheduleId: "every-second"})
	if err != nil {
		t.Fatal(err)
	}
	recent := got.GetSchedule().GetRecentActions()
	if len(recent) == 0 || recent[0].GetActionId() != id || recent[0].GetOutcome() != aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_STARTED {
		t.Fatalf("recent actions %v, want the first to be %s started", recent, id)
	}

	trig, err := sc.Trigger(ctx, &aionv1.TriggerScheduleRequest{Namespace: "s", ScheduleId: "every-second"})
	if err != nil {
		t.Fatal(err)
	}
	last := trig.GetSchedule().GetRecentActions()[len(trig.GetSchedule().GetRecentActions())-1]
	if last.GetOrigin() != "trigger" || last.GetOutcome() != aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_STARTED {
		t.Fatalf("trigger's record %v", last)
	}

	list, err := sc.List(ctx, &aionv1.ListSchedulesRequest{Namespace: "s"})
	if err != nil || len(list.GetSchedules()) != 1 || list.GetSchedules()[0].GetScheduleId() != "every-second" {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := sc.Delete(ctx, &aionv1.DeleteScheduleRequest{Namespace: "s", ScheduleId: "every-second"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Get(ctx, &aionv1.GetScheduleRequest{Namespace: "s", ScheduleId: "every-second"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
}

func TestScheduleServiceRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	sc := aionv1.NewScheduleServiceClient(srv.Dial(t))
	ctx := context.Background()
	act := &aionv1.ScheduleAction{ActivityType: "a"}
	for _, c := range []struct {
		name string
		req  *aionv1.CreateScheduleRequest
		code codes.Code
		want string
	}{
		{"BadCron", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Cron: "* * *"}, Action: act}, codes.InvalidArgument, `cron: "* * *"`},
		{"UnknownZone", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Cron: "0 * * * *", TimeZone: "Atlantis/Capital"}, Action: act},
			codes.InvalidArgument, `time_zone: "Atlantis/Capital"`},
		{"NegativeEvery", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(-time.Second)}, Action: act},
			codes.InvalidArgument, "spec.every: -1s"},
		{"OffsetPastEvery", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute), Offset: durationpb.New(time.Hour)}, Action: act},
			codes.InvalidArgument, "offset: 1h0m0s"},
		{"UnknownOverlap", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute)}, Action: act,
			Policy: &aionv1.SchedulePolicy{Overlap: 42}}, codes.InvalidArgument, "policy.overlap: 42"},
		{"UnknownCatchUp", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute)}, Action: act,
			Policy: &aionv1.SchedulePolicy{CatchUp: 9}}, codes.InvalidArgument, "policy.catch_up: 9"},
		{"NegativeJitter", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute), Jitter: durationpb.New(-time.Second)}, Action: act},
			codes.InvalidArgument, "spec.jitter: -1s"},
		{"EndBeforeStart", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute),
			StartTime: timestamppb.New(time.Unix(2000, 0)), EndTime: timestamppb.New(time.Unix(1000, 0))}, Action: act},
			codes.InvalidArgument, "end_at:"},
		{"TwoKinds", &aionv1.CreateScheduleRequest{Spec: &aionv1.ScheduleSpec{Every: durationpb.New(time.Minute)},
			Action: &aionv1.ScheduleAction{ActivityType: "a", WorkflowType: "w"}}, codes.InvalidArgument, "action:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Namespace, c.req.ScheduleId = "s", "bad"
			_, err := sc.Create(ctx, c.req)
			if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Fatalf("create: %v, want %s naming %q", err, c.code, c.want)
			}
		})
	}
	if _, err := sc.Get(ctx, &aionv1.GetScheduleRequest{Namespace: "s", ScheduleId: "bad"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused create left a schedule: %v", err)
	}
}
