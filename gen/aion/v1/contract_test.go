package aionv1_test

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// roundTrip marshals m and unmarshals the bytes into a fresh message of the same type.
func roundTrip[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %T: %v", m, err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatalf("unmarshal %T: %v", m, err)
	}
	if !proto.Equal(m, out) {
		t.Fatalf("round trip changed %T:\n in: %v\nout: %v", m, m, out)
	}
	return out
}

func TestWorkerMessageRegisterRoundTrip(t *testing.T) {
	in := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces:    []string{"tenant-a", "tenant-b"},
		TaskQueue:     "gpu",
		Node:          "rack-7",
		ActivityTypes: []string{"embed", "train"},
		Slots:         4,
		Capabilities: []aionv1.InterventionPrimitive{
			aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE,
			aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_PAUSE_RESUME,
		},
		Identity:   "host-1:4242",
		SdkVersion: "aion-go/0.1.0",
	}}}

	reg := roundTrip(t, in).GetRegister()
	if reg == nil {
		t.Fatal("register frame lost its oneof case")
	}
	if !slices.Equal(reg.GetNamespaces(), []string{"tenant-a", "tenant-b"}) {
		t.Errorf("namespaces = %q", reg.GetNamespaces())
	}
	if reg.GetTaskQueue() != "gpu" || reg.GetNode() != "rack-7" || reg.GetSlots() != 4 {
		t.Errorf("task queue/node/slots = %q/%q/%d", reg.GetTaskQueue(), reg.GetNode(), reg.GetSlots())
	}
	if !slices.Equal(reg.GetActivityTypes(), []string{"embed", "train"}) {
		t.Errorf("activity types = %q", reg.GetActivityTypes())
	}
	if len(reg.GetCapabilities()) != 2 ||
		reg.GetCapabilities()[1] != aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_PAUSE_RESUME {
		t.Errorf("capabilities = %v", reg.GetCapabilities())
	}
	if reg.GetIdentity() != "host-1:4242" || reg.GetSdkVersion() != "aion-go/0.1.0" {
		t.Errorf("identity/sdk = %q/%q", reg.GetIdentity(), reg.GetSdkVersion())
	}
}

func TestServerMessageActivityTaskRoundTrip(t *testing.T) {
	scheduled := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	started := scheduled.Add(1500 * time.Microsecond)
	in := &aionv1.ServerMessage{Message: &aionv1.ServerMessage_ActivityTask{ActivityTask: &aionv1.ActivityTask{
		Namespace:            "tenant-a",
		ActivityId:           "act-1",
		Attempt:              2,
		TaskQueue:            "gpu",
		ActivityType:         "embed",
		Payload:              []byte(`{"text":"hi"}`),
		Node:                 "rack-7",
		ScheduledTime:        timestamppb.New(scheduled),
		StartedTime:          timestamppb.New(started),
		StartToCloseTimeout:  durationpb.New(30 * time.Second),
		HeartbeatTimeout:     durationpb.New(5 * time.Second),
		Deadline:             timestamppb.New(started.Add(30 * time.Second)),
		LastHeartbeatDetails: []byte("page=3"),
	}}}

	task := roundTrip(t, in).GetActivityTask()
	if task == nil {
		t.Fatal("activity task frame lost its oneof case")
	}
	if task.GetNamespace() != "tenant-a" || task.GetActivityId() != "act-1" || task.GetAttempt() != 2 {
		t.Errorf("fencing token = %q/%q/%d", task.GetNamespace(), task.GetActivityId(), task.GetAttempt())
	}
	if task.GetTaskQueue() != "gpu" || task.GetActivityType() != "embed" || task.GetNode() != "rack-7" {
		t.Errorf("pool/type/node = %q/%q/%q", task.GetTaskQueue(), task.GetActivityType(), task.GetNode())
	}
	if string(task.GetPayload()) != `{"text":"hi"}` || string(task.GetLastHeartbeatDetails()) != "page=3" {
		t.Errorf("payload/details = %q/%q", task.GetPayload(), task.GetLastHeartbeatDetails())
	}
	if !task.GetScheduledTime().AsTime().Equal(scheduled) || !task.GetStartedTime().AsTime().Equal(started) {
		t.Errorf("scheduled/started = %v/%v", task.GetScheduledTime().AsTime(), task.GetStartedTime().AsTime())
	}
	if task.GetStartToCloseTimeout().AsDuration() != 30*time.Second || task.GetHeartbeatTimeout().AsDuration() != 5*time.Second {
		t.Errorf("timeouts = %v/%v", task.GetStartToCloseTimeout().AsDuration(), task.GetHeartbeatTimeout().AsDuration())
	}
	if !task.GetDeadline().AsTime().Equal(started.Add(30 * time.Second)) {
		t.Errorf("deadline = %v", task.GetDeadline().AsTime())
	}
}

func TestServiceMethods(t *testing.T) {
	tests := []struct {
		desc    grpc.ServiceDesc
		name    string
		unary   []string
		streams []string
	}{
		{aionv1.WorkerService_ServiceDesc, "aion.v1.WorkerService", nil, []string{"Connect"}},
		{aionv1.ActivityService_ServiceDesc, "aion.v1.ActivityService",
			[]string{"Schedule", "ScheduleBatch", "Get", "Wait", "Cancel", "List", "Intervene", "Why"}, nil},
		{aionv1.WorkflowService_ServiceDesc, "aion.v1.WorkflowService",
			[]string{"Start", "Get", "List", "Wait", "Signal", "Query", "Cancel", "Terminate", "History", "Why"}, nil},
		{aionv1.NamespaceService_ServiceDesc, "aion.v1.NamespaceService",
			[]string{"Create", "Get", "List", "SetPlacement", "SetFlowLimit", "GetFlowLimit", "ListFlowLimits", "ClearFlowLimit", "SetRetention"}, nil},
		{aionv1.ClusterService_ServiceDesc, "aion.v1.ClusterService",
			[]string{"ListWorkers", "DrainWorker", "ListWaiting"}, []string{"Watch"}},
		{aionv1.ScheduleService_ServiceDesc, "aion.v1.ScheduleService",
			[]string{"Create", "Get", "List", "Update", "Pause", "Resume", "Trigger", "Backfill", "Delete"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.desc.ServiceName != tt.name {
				t.Fatalf("service name = %q, want %q", tt.desc.ServiceName, tt.name)
			}
			var unary, streams []string
			for _, m := range tt.desc.Methods {
				unary = append(unary, m.MethodName)
			}
			for _, s := range tt.desc.Streams {
				streams = append(streams, s.StreamName)
			}
			if !slices.Equal(unary, tt.unary) {
				t.Errorf("unary methods = %q, want %q", unary, tt.unary)
			}
			if !slices.Equal(streams, tt.streams) {
				t.Errorf("streaming methods = %q, want %q", streams, tt.streams)
			}
		})
	}

	// Connect is bidirectional; Watch streams from the server only.
	connect := aionv1.WorkerService_ServiceDesc.Streams[0]
	if !connect.ClientStreams || !connect.ServerStreams {
		t.Errorf("Connect streams client=%v server=%v, want both", connect.ClientStreams, connect.ServerStreams)
	}
	watch := aionv1.ClusterService_ServiceDesc.Streams[0]
	if watch.ClientStreams || !watch.ServerStreams {
		t.Errorf("Watch streams client=%v server=%v, want server only", watch.ClientStreams, watch.ServerStreams)
	}
}

// Every enum must start with a zero value named <ENUM_NAME>_UNSPECIFIED, and every value must
// carry the enum's prefix.
func TestEnumConventions(t *testing.T) {
	checked := 0
	for _, fd := range []protoreflect.FileDescriptor{
		aionv1.File_aion_v1_common_proto,
		aionv1.File_aion_v1_intervention_proto,
		aionv1.File_aion_v1_worker_proto,
		aionv1.File_aion_v1_activity_proto,
		aionv1.File_aion_v1_namespace_proto,
		aionv1.File_aion_v1_cluster_proto,
		aionv1.File_aion_v1_schedule_proto,
	} {
		enums := fd.Enums()
		for i := range enums.Len() {
			e := enums.Get(i)
			checked++
			prefix := screamingSnake(string(e.Name())) + "_"
			zero := e.Values().ByNumber(0)
			if zero == nil || string(zero.Name()) != prefix+"UNSPECIFIED" {
				t.Errorf("%s: zero value must be %sUNSPECIFIED", e.FullName(), prefix)
			}
			for j := range e.Values().Len() {
				if v := e.Values().Get(j); !strings.HasPrefix(string(v.Name()), prefix) {
					t.Errorf("%s: value %s lacks prefix %s", e.FullName(), v.Name(), prefix)
				}
			}
		}
	}
	if checked < 9 {
		t.Errorf("checked %d enums, want at least 9", checked)
	}
}

// screamingSnake turns an enum name such as InterventionPrimitive into INTERVENTION_PRIMITIVE.
func screamingSnake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
