package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestScheduleBadInputMatrix sends one malformed field at a time and checks
// the code, that the message names the field, and that nothing was created.
func TestScheduleBadInputMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.AutoCreate = namespace.Closed })
	ctx := context.Background()
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "pinned"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "pinned",
		Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED, Nodes: []string{"n1"}}}); err != nil {
		t.Fatal(err)
	}
	good := func() *aionv1.ScheduleRequest {
		return &aionv1.ScheduleRequest{Namespace: "ok", Id: "x", ActivityType: "echo", Payload: []byte(`{}`)}
	}
	cases := []struct {
		name   string
		mutate func(*aionv1.ScheduleRequest)
		code   codes.Code
		names  string
	}{
		{"EmptyNamespace", func(r *aionv1.ScheduleRequest) { r.Namespace = "" }, codes.InvalidArgument, "namespace"},
		{"NamespaceWithSpace", func(r *aionv1.ScheduleRequest) { r.Namespace = "a b" }, codes.InvalidArgument, `namespace: "a b"`},
		{"UnknownNamespaceUnderClosed", func(r *aionv1.ScheduleRequest) { r.Namespace = "ghost" }, codes.NotFound, `"ghost"`},
		{"EmptyActivityType", func(r *aionv1.ScheduleRequest) { r.ActivityType = "" }, codes.InvalidArgument, "activity_type"},
		{"LongTaskQueue", func(r *aionv1.ScheduleRequest) { r.TaskQueue = strings.Repeat("q", 129) }, codes.InvalidArgument, "task_queue"},
		{"BadNode", func(r *aionv1.ScheduleRequest) { r.Node = "n\x00" }, codes.InvalidArgument, "node"},
		{"BadID", func(r *aionv1.ScheduleRequest) { r.Id = "has space" }, codes.InvalidArgument, `id: "has space"`},
		{"OversizePayload", func(r *aionv1.ScheduleRequest) { r.Payload = make([]byte, 2<<20+1) }, codes.ResourceExhausted, "payload"},
		{"NegativeTimeout", func(r *aionv1.ScheduleRequest) { r.StartToCloseTimeout = durationpb.New(-time.Second) }, codes.InvalidArgument, "start_to_close_timeout"},
		{"InvalidDuration", func(r *aionv1.ScheduleRequest) {
			r.HeartbeatTimeout = &durationpb.Duration{Seconds: 1, Nanos: -1}
		}, codes.InvalidArgument, "heartbeat_timeout"},
		{"BackoffBelowOne", func(r *aionv1.ScheduleRequest) { r.RetryPolicy = &aionv1.RetryPolicy{BackoffCoefficient: 0.5} }, codes.InvalidArgument, "backoff_coefficient"},
		{"NegativeMaxAttempts", func(r *aionv1.ScheduleRequest) { r.RetryPolicy = &aionv1.RetryPolicy{MaximumAttempts: -1} }, codes.InvalidArgument, "maximum_attempts"},
		{"MaxIntervalBelowInitial", func(r *aionv1.ScheduleRequest) {
			r.RetryPolicy = &aionv1.RetryPolicy{InitialInterval: durationpb.New(time.Minute), MaximumInterval: durationpb.New(time.Second)}
		}, codes.InvalidArgument, "maximum_interval"},
		{"PinOutsidePinnedPlacement", func(r *aionv1.ScheduleRequest) { r.Namespace, r.Node = "pinned", "n2" }, codes.FailedPrecondition, "node"},
		{"StartDelayAndStartTime", func(r *aionv1.ScheduleRequest) {
			r.StartDelay, r.StartTime = durationpb.New(time.Minute), timestamppb.New(time.Now().Add(time.Hour))
		}, codes.InvalidArgument, "start_delay"},
		{"NegativeStartDelay", func(r *aionv1.ScheduleRequest) { r.StartDelay = durationpb.New(-time.Second) }, codes.InvalidArgument, "start_delay"},
		{"PriorityOutOfRange", func(r *aionv1.ScheduleRequest) { r.Priority = 9 }, codes.InvalidArgument, "priority: 9"},
		{"FairnessWeightOutOfRange", func(r *aionv1.ScheduleRequest) { r.FairnessWeight = 1001 }, codes.InvalidArgument, "fairness_weight: 1001"},
		{"NegativeFairnessWeight", func(r *aionv1.ScheduleRequest) { r.FairnessWeight = -2 }, codes.InvalidArgument, "fairness_weight: -2"},
		{"FairnessKeyWithControlByte", func(r *aionv1.ScheduleRequest) { r.FairnessKey = "tenant\x00a" }, codes.InvalidArgument, "fairness_key"},
		{"OversizeConcurrencyKey", func(r *aionv1.ScheduleRequest) { r.ConcurrencyKey = strings.Repeat("k", 300) }, codes.InvalidArgument, "concurrency_key"},
		{"InvalidStartTime", func(r *aionv1.ScheduleRequest) { r.StartTime = &timestamppb.Timestamp{Seconds: 1, Nanos: -1} }, codes.InvalidArgument, "start_time"},
		{"LifeEndsBeforeTheStart", func(r *aionv1.ScheduleRequest) {
			r.StartDelay, r.ScheduleToCloseTimeout = durationpb.New(time.Hour), durationpb.New(time.Minute)
		}, codes.InvalidArgument, "schedule_to_close_timeout"},
		{"BadTraceparent", func(r *aionv1.ScheduleRequest) { r.TraceContext = &aionv1.TraceContext{Traceparent: "00-x"} },
			codes.InvalidArgument, `trace_context.traceparent: "00-x"`},
		{"TracestateWithoutTraceparent", func(r *aionv1.ScheduleRequest) { r.TraceContext = &aionv1.TraceContext{Tracestate: "a=b"} },
			codes.InvalidArgument, "trace_context.traceparent: missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := good()
			c.mutate(r)
			_, err := b.activities.Schedule(ctx, r)
			if status.Code(err) != c.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, c.code)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, c.names) {
				t.Fatalf("message %q does not name %s", msg, c.names)
			}
			// The same request in a batch gets the same code in its slot.
			resp, err := b.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: []*aionv1.ScheduleRequest{r}})
			if err != nil {
				t.Fatalf("batch: %v", err)
			}
			if got := codes.Code(resp.GetResults()[0].GetError().GetCode()); got != c.code {
				t.Fatalf("batch slot code = %v, want %v", got, c.code)
			}
		})
	}
	for _, ns := range []string{"ok", "pinned"} {
		list, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetActivities()) != 0 {
			t.Fatalf("refused requests created %d activities in %s", len(list.GetActivities()), ns)
		}
	}
	all, err := b.namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetNamespaces()) != 2 {
		t.Fatalf("refused requests changed the namespaces: %v", all.GetNamespaces())
	}
}

func TestOtherRPCsRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"GetEmptyID", func() error {
			_, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "ns"})
			return err
		}, codes.InvalidArgument},
		{"GetMissing", func() error {
			_, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "ns", Id: "nope"})
			return err
		}, codes.NotFound},
		{"WaitMissing", func() error {
			_, err := b.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: "ns", Id: "nope"})
			return err
		}, codes.NotFound},
		{"ListBadState", func() error {
			_, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "ns", State: 99})
			return err
		}, codes.InvalidArgument},
		{"ListBadPageToken", func() error {
			_, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "ns", PageToken: "zzz"})
			return err
		}, codes.InvalidArgument},
		{"ListHugePage", func() error {
			_, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "ns", PageSize: 5000})
			return err
		}, codes.InvalidArgument},
		{"BatchEmpty", func() error {
			_, err := b.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{})
			return err
		}, codes.InvalidArgument},
		{"CreateBadName", func() error {
			_, err := b.namespaces.Create(ctx, &aionv1.CreateNamespaceRequest{Name: "white space"})
			return err
		}, codes.InvalidArgument},
		{"GetNamespaceMissing", func() error {
			_, err := b.namespaces.Get(ctx, &aionv1.GetNamespaceRequest{Name: "never"})
			return err
		}, codes.NotFound},
		{"PlaceNeverMinted", func() error {
			_, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "never",
				Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PREFER, Nodes: []string{"n"}}})
			return err
		}, codes.NotFound},
		{"PlaceUnspecifiedMode", func() error {
			_, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "ns", Placement: &aionv1.Placement{}})
			return err
		}, codes.InvalidArgument},
		{"PlacePinnedWithoutNodes", func() error {
			_, err := b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "ns",
				Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PINNED}})
			return err
		}, codes.InvalidArgument},
	}
	for _, c := range cases {
		if err := c.call(); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %v", c.name, err, c.code)
		}
	}
	all, _ := b.namespaces.List(ctx, &aionv1.ListNamespacesRequest{})
	if len(all.GetNamespaces()) != 0 {
		t.Fatalf("refused calls minted %v", all.GetNamespaces())
	}
}

func TestWorkerStreamRefusesBadFrames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	register := func(r *aionv1.Register) *aionv1.WorkerMessage {
		return &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: r}}
	}
	valid := &aionv1.Register{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}}
	cases := []struct {
		name   string
		frames []*aionv1.WorkerMessage
		code   codes.Code
		names  string
	}{
		{"FirstFramePing", []*aionv1.WorkerMessage{{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{}}}}, codes.InvalidArgument, "first frame"},
		{"EmptyFrame", []*aionv1.WorkerMessage{{}}, codes.InvalidArgument, "first frame"},
		{"NoNamespaces", []*aionv1.WorkerMessage{register(&aionv1.Register{ActivityTypes: []string{"t"}})}, codes.InvalidArgument, "namespaces"},
		{"BadNamespace", []*aionv1.WorkerMessage{register(&aionv1.Register{Namespaces: []string{"ok", "b\tad"}, ActivityTypes: []string{"t"}})}, codes.InvalidArgument, "namespaces[1]"},
		{"NoTypes", []*aionv1.WorkerMessage{register(&aionv1.Register{Namespaces: []string{"ns"}})}, codes.InvalidArgument, "activity_types"},
		{"TooManySlots", []*aionv1.WorkerMessage{register(&aionv1.Register{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"}, Slots: 1 << 20})}, codes.InvalidArgument, "slots"},
		{"BadCapability", []*aionv1.WorkerMessage{register(&aionv1.Register{Namespaces: []string{"ns"}, ActivityTypes: []string{"t"},
			Capabilities: []aionv1.InterventionPrimitive{42}})}, codes.InvalidArgument, "capabilities[0]"},
		{"RegisterTwice", []*aionv1.WorkerMessage{register(valid), register(valid)}, codes.InvalidArgument, "twice"},
		{"ResultWithoutOutcome", []*aionv1.WorkerMessage{register(valid), {Message: &aionv1.WorkerMessage_ActivityResult{
			ActivityResult: &aionv1.ActivityResult{Namespace: "ns", ActivityId: "a", Attempt: 1}}}}, codes.InvalidArgument, "outcome"},
		{"ResultWithoutAttempt", []*aionv1.WorkerMessage{register(valid), {Message: &aionv1.WorkerMessage_ActivityResult{
			ActivityResult: &aionv1.ActivityResult{Namespace: "ns", ActivityId: "a"}}}}, codes.InvalidArgument, "attempt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			stream, err := b.workers.Connect(cctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.frames {
				if err := stream.Send(proto.Clone(f).(*aionv1.WorkerMessage)); err != nil {
					break
				}
			}
			for {
				_, err = stream.Recv()
				if err != nil {
					break
				}
			}
			if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.names) {
				t.Fatalf("stream ended with %v, want %v naming %s", err, c.code, c.names)
			}
		})
	}
	if c := b.srv.Registry().Census(); c.Workers != 0 || c.Triples != 0 {
		t.Fatalf("refused streams left %+v in the registry", c)
	}
}
