package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// rawCodec sends and receives messages as the bytes the test built, so a
// test can put on the wire what the generated code would refuse to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// placeholder stands in a message for bytes that are not valid UTF-8.
const placeholder = "@@not-utf8@@"

// withInvalidUTF8 encodes m with every placeholder replaced by invalid bytes.
func withInvalidUTF8(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b, []byte(placeholder), bytes.Repeat([]byte{0xff}, len(placeholder)))
}

// stringField is one string field of a message, at any depth: its path as
// the server names it, and how to set it on a message of the top type.
type stringField struct {
	path string
	set  func(m protoreflect.Message, v string)
}

// stringFields lists every string field reachable from md (through nested
// messages and oneof branches, to depth levels), singular or repeated.
func stringFields(md protoreflect.MessageDescriptor, depth int) []stringField {
	var out []stringField
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			out = append(out, stringField{path: string(fd.Name()), set: func(m protoreflect.Message, v string) {
				if fd.IsList() {
					m.Mutable(fd).List().Append(protoreflect.ValueOfString(v))
					return
				}
				m.Set(fd, protoreflect.ValueOfString(v))
			}})
		case fd.Kind() == protoreflect.MessageKind && depth > 0:
			for _, inner := range stringFields(fd.Message(), depth-1) {
				out = append(out, stringField{path: string(fd.Name()) + "." + inner.path, set: func(m protoreflect.Message, v string) {
					if fd.IsList() {
						list := m.Mutable(fd).List()
						el := list.NewElement()
						inner.set(el.Message(), v)
						list.Append(el)
						return
					}
					inner.set(m.Mutable(fd).Message(), v)
				}})
			}
		}
	}
	return out
}

// callRaw makes one call of method with body, whatever its kind, and
// returns its status.
func callRaw(ctx context.Context, cc *grpc.ClientConn, method string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&body); err != nil && err != io.EOF {
		return err
	}
	_ = cs.CloseSend()
	var resp []byte
	return cs.RecvMsg(&resp)
}

// unaryMethods lists every method of the aion services whose caller sends
// one message.
func unaryMethods() []protoreflect.MethodDescriptor {
	var out []protoreflect.MethodDescriptor
	for _, fd := range []protoreflect.FileDescriptor{aionv1.File_aion_v1_activity_proto, aionv1.File_aion_v1_namespace_proto,
		aionv1.File_aion_v1_cluster_proto, aionv1.File_aion_v1_worker_proto} {
		for i := 0; i < fd.Services().Len(); i++ {
			svc := fd.Services().Get(i)
			for j := 0; j < svc.Methods().Len(); j++ {
				if m := svc.Methods().Get(j); !m.IsStreamingClient() {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

func fullName(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

// viewsWork checks every operator view answers: ListWorkers, the JSON API's
// workers and the event stream's first event.
func (b *bundle) viewsWork(t *testing.T, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := aionv1.NewClusterServiceClient(b.cc).ListWorkers(ctx, &aionv1.ListWorkersRequest{}); err != nil {
		t.Fatalf("%s: ListWorkers: %v", when, err)
	}
	w, err := aionv1.NewClusterServiceClient(b.cc).Watch(ctx, &aionv1.WatchRequest{})
	if err != nil {
		t.Fatalf("%s: Watch: %v", when, err)
	}
	if e, err := w.Recv(); err != nil || e.GetSnapshot() == nil {
		t.Fatalf("%s: Watch's first event = %v, %v; want the snapshot", when, e, err)
	}
	resp, err := http.Get("http://" + b.srv.HTTPAddr() + "/api/v1/workers")
	if err != nil {
		t.Fatalf("%s: GET /api/v1/workers: %v", when, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !json.Valid(body) {
		t.Fatalf("%s: GET /api/v1/workers = %d %.200s", when, resp.StatusCode, body)
	}
}

// TestEveryStringFieldRefusesInvalidUTF8NamingIt puts bytes that are not
// UTF-8 into each string field of each request and worker frame: each is
// InvalidArgument naming the field, and nothing is created.
func TestEveryStringFieldRefusesInvalidUTF8NamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, m := range unaryMethods() {
		for _, f := range stringFields(m.Input(), 3) {
			msg := dynamicpb.NewMessage(m.Input())
			f.set(msg, placeholder)
			err := callRaw(ctx, b.cc, fullName(m), withInvalidUTF8(t, msg))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), f.path+": not valid UTF-8") {
				t.Errorf("%s with %s not UTF-8: %v; want InvalidArgument naming %s", m.Name(), f.path, err, f.path)
			}
		}
	}
	valid := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"utf8"}, ActivityTypes: []string{"t"}}}}
	for _, f := range stringFields((&aionv1.WorkerMessage{}).ProtoReflect().Descriptor(), 3) {
		msg := dynamicpb.NewMessage((&aionv1.WorkerMessage{}).ProtoReflect().Descriptor())
		f.set(msg, placeholder)
		frames := [][]byte{withInvalidUTF8(t, msg)}
		if !strings.HasPrefix(f.path, "register.") {
			frames = append([][]byte{withInvalidUTF8(t, valid)}, frames...)
		}
		err := b.streamRaw(t, frames)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), f.path+": not valid UTF-8") {
			t.Errorf("worker frame with %s not UTF-8: %v; want InvalidArgument naming %s", f.path, err, f.path)
		}
	}
	list, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "utf8"})
	if err != nil || len(list.GetActivities()) != 0 {
		t.Fatalf("after the refusals: %v, %v; want no activities", list, err)
	}
	b.viewsWork(t, "after every refusal")
}

// streamRaw opens a worker stream, sends frames and returns how it ended.
func (b *bundle) streamRaw(t *testing.T, frames [][]byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := b.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/aion.v1.WorkerService/Connect", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := cs.SendMsg(&f); err != nil {
			break
		}
	}
	for {
		var resp []byte
		if err := cs.RecvMsg(&resp); err != nil {
			return err
		}
	}
}

// TestMultibyteTextNeverBreaksAView: long multibyte text in every string of
// a worker's registration and of every request is refused or clipped on a
// character boundary; while such a worker is connected every operator view
// still answers.
func TestMultibyteTextNeverBreaksAView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	long := "x" + strings.Repeat("é", 200) // 401 bytes: a byte cut lands inside a character
	regDesc := (&aionv1.Register{}).ProtoReflect().Descriptor()
	for _, f := range stringFields(regDesc, 1) {
		r := &aionv1.Register{Namespaces: []string{"mb"}, ActivityTypes: []string{"t"}}
		f.set(r.ProtoReflect(), long)
		w, err := b.connect(t, r)
		if err != nil {
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Errorf("register with a long multibyte %s: %v; want accepted or InvalidArgument", f.path, err)
			}
			continue
		}
		b.viewsWork(t, "with a worker whose "+f.path+" is long multibyte text")
		w.cancel()
	}
	for _, m := range unaryMethods() {
		if m.Name() == "Wait" {
			continue // would wait for an activity; its fields are Get's
		}
		for _, f := range stringFields(m.Input(), 3) {
			msg := dynamicpb.NewMessage(m.Input())
			f.set(msg, long)
			body, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			switch code := status.Code(callRaw(ctx, b.cc, fullName(m), body)); code {
			case codes.Internal, codes.Unknown, codes.DeadlineExceeded:
				t.Errorf("%s with a long multibyte %s: %v", m.Name(), f.path, code)
			}
		}
	}
	b.viewsWork(t, "after every request")
}

// TestMalformedFramesAreInvalidArgument: bytes that are not a message end a
// worker stream, and fail a unary call, with InvalidArgument; a worker
// frame as small as a ping (decoded on the stream's handler) and a larger
// one (decoded on a goroutine of its own) alike.
func TestMalformedFramesAreInvalidArgument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}           // a length running past the end
	large := append([]byte{0x0a, 0xc8, 0x01}, make([]byte, 100)...) // 200 bytes announced, 100 sent
	for _, frame := range [][]byte{garbage, large} {
		if err := b.streamRaw(t, [][]byte{frame}); status.Code(err) != codes.InvalidArgument ||
			!strings.Contains(err.Error(), "WorkerMessage does not decode") {
			t.Fatalf("worker stream with a malformed frame of %d bytes: %v; want InvalidArgument", len(frame), err)
		}
	}
	if err := callRaw(context.Background(), b.cc, "/aion.v1.ActivityService/Schedule", garbage); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "ScheduleRequest does not decode") {
		t.Fatalf("Schedule with a malformed request: %v; want InvalidArgument", err)
	}
}

func withClientKeys(names ...string) setupOpt {
	return func(c *server.Config) {
		c.Auth.Mode = "token"
		for _, n := range names {
			c.Auth.Keys = append(c.Auth.Keys, key(n, n+"-secret", []auth.Role{auth.RoleClient}, "edge"))
		}
	}
}

// openCall starts a Schedule call and sends no request: the call holds its
// room in the receive budget until it ends.
func openCall(t *testing.T, cc *grpc.ClientConn, token string) (grpc.ClientStream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/aion.v1.ActivityService/Schedule", grpc.PerRPCCredentials(bearer(token)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return cs, cancel
}

// answer is how a call that sent nothing ended; nil if it still waits.
func answer(cs grpc.ClientStream, within time.Duration) error {
	got := make(chan error, 1)
	go func() {
		var resp aionv1.ScheduleResponse
		got <- cs.RecvMsg(&resp)
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(within):
		return nil
	}
}

// TestUnauthenticatedCallIsRefusedBeforeItsBody: a caller without a valid
// token is answered Unauthenticated from its headers alone; the server does
// not wait for, buffer or decode its request.
func TestUnauthenticatedCallIsRefusedBeforeItsBody(t *testing.T) {
	t.Parallel()
	b := setup(t, withClientKeys("edge-a"))
	for _, token := range []string{"", "not-a-key"} {
		cs, cancel := openCall(t, b.cc, token)
		if err := answer(cs, 10*time.Second); status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q, no request sent: %v; want Unauthenticated at once", token, err)
		}
		cancel()
	}
}

// TestReceiveBudgetBoundsRequestsBeingRead: reading a request holds room
// for a whole message; one caller may hold half of the budget. A read past
// either waits for room (until its deadline) instead of being refused, and
// a call that ends gives its room back.
func TestReceiveBudgetBoundsRequestsBeingRead(t *testing.T) {
	t.Parallel()
	b := setup(t, withClientKeys("edge-a", "edge-b", "edge-c"), func(c *server.Config) {
		c.MaxReceiveMemory = 2 * limit.Message // two at once, one a caller
	})
	ctx := context.Background()
	scheduleWithin := func(token, id string, within time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := b.activities.Schedule(cctx, &aionv1.ScheduleRequest{Namespace: "edge", Id: id, ActivityType: "t"},
			grpc.PerRPCCredentials(bearer(token)))
		return err
	}
	// A call that sends no request holds its room while its handler waits
	// for the request. Once edge-a holds its share, its next call waits
	// (here until its deadline), while edge-b's has room.
	_, cancelA := openCall(t, b.cc, "edge-a-secret")
	defer cancelA()
	servertest.Eventually(t, "edge-a's held call to take its room", func() bool {
		return scheduleWithin("edge-a-secret", "probe", 300*time.Millisecond) != nil
	})
	if err := scheduleWithin("edge-a-secret", "a-2", 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second request of edge-a while its first is being read: %v; want it to wait (DeadlineExceeded)", err)
	}
	holdB, cancelB := openCall(t, b.cc, "edge-b-secret")
	defer cancelB()
	servertest.Eventually(t, "edge-b's held call to take its room", func() bool {
		return scheduleWithin("edge-c-secret", "probe-c", 300*time.Millisecond) != nil
	})
	if err := scheduleWithin("edge-c-secret", "c-1", 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third caller while two requests are being read: %v; want it to wait", err)
	}
	// A waiting request goes on once room is given back.
	waiting := make(chan error, 1)
	go func() { waiting <- scheduleWithin("edge-c-secret", "c-2", 20*time.Second) }()
	cancelA()
	if err := <-waiting; err != nil {
		t.Fatalf("edge-c's waiting request after edge-a's call ended: %v", err)
	}
	// edge-b's held call was admitted: its request, sent now, is scheduled.
	if err := holdB.SendMsg(&aionv1.ScheduleRequest{Namespace: "edge", Id: "from-b", ActivityType: "t"}); err != nil {
		t.Fatal(err)
	}
	_ = holdB.CloseSend()
	var resp aionv1.ScheduleResponse
	if err := holdB.RecvMsg(&resp); err != nil || resp.GetActivity().GetId() != "from-b" {
		t.Fatalf("edge-b's held call: %v, %v", &resp, err)
	}
	for _, id := range []string{"a-2", "c-1"} {
		if _, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "edge", Id: id},
			grpc.PerRPCCredentials(bearer("edge-b-secret"))); status.Code(err) != codes.NotFound {
			t.Fatalf("%s, which gave up waiting: %v; want NotFound", id, err)
		}
	}
}

// TestBurstOfSmallRequestsWaitsInsteadOfFailing: one caller's burst of
// many more requests than the budget holds at once all succeed.
func TestBurstOfSmallRequestsWaitsInsteadOfFailing(t *testing.T) {
	t.Parallel()
	b := setup(t, withClientKeys("edge-a"), func(c *server.Config) {
		c.MaxReceiveMemory = 2 * limit.Message // one request of edge-a at a time
	})
	const burst = 200
	errs := make(chan error, burst)
	for i := range burst {
		go func() {
			_, err := b.activities.Schedule(context.Background(), &aionv1.ScheduleRequest{Namespace: "edge", Id: fmt.Sprintf("burst-%d", i),
				ActivityType: "t"}, grpc.PerRPCCredentials(bearer("edge-a-secret")))
			errs <- err
		}()
	}
	for range burst {
		if err := <-errs; err != nil {
			t.Fatalf("a request of the burst: %v", err)
		}
	}
}

// TestWorkerFieldsHaveLimits: text and details a worker sends are bounded;
// an oversized heartbeat is refused in its ack and the stream goes on, an
// oversized failure ends the attempt as failure_too_large, and nothing
// oversized is stored.
func TestWorkerFieldsHaveLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"lim"}, ActivityTypes: []string{"t"}, Slots: 1})
	cases := []struct {
		name    string
		failure *aionv1.Failure
		field   string
	}{
		{"Message", &aionv1.Failure{Type: "e", Message: strings.Repeat("m", limit.FailureMessage+1)}, "failure.message"},
		{"Type", &aionv1.Failure{Type: strings.Repeat("t", limit.FailureType+1), Message: "m"}, "failure.type"},
		{"Details", &aionv1.Failure{Type: "e", Message: "m", Details: make([]byte, limit.FailureDetails+1)}, "failure.details"},
	}
	for _, c := range cases {
		id := "fail-" + c.name
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "lim", Id: id, ActivityType: "t",
			RetryPolicy: &aionv1.RetryPolicy{MaximumAttempts: 1}})
		task := w.nextTask()
		w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
			Namespace: "lim", ActivityId: id, Attempt: task.GetAttempt(), Details: make([]byte, limit.HeartbeatDetails+1)}}})
		hb := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetHeartbeatAck() != nil }).GetHeartbeatAck()
		if !strings.Contains(hb.GetRefused(), "activity_heartbeat.details") {
			t.Fatalf("oversized heartbeat ack = %v; want refused naming activity_heartbeat.details", hb)
		}
		w.send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
			Namespace: "lim", ActivityId: id, Attempt: task.GetAttempt(),
			Outcome: &aionv1.ActivityResult_Failed{Failed: c.failure}}}})
		if ack := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetResultAck() != nil }).GetResultAck(); ack.GetRefused() != "" {
			t.Fatalf("%s: result refused: %s", c.name, ack.GetRefused())
		}
		a := b.wait(t, "lim", id)
		f := a.GetFailure()
		if f.GetType() != "failure_too_large" || !strings.Contains(f.GetMessage(), c.field) || len(f.GetDetails()) != 0 ||
			len(a.GetLastHeartbeatDetails()) != 0 || proto.Size(a) > 64<<10 {
			t.Fatalf("%s: stored failure %q %.200q (%d detail bytes, activity %d bytes); want failure_too_large naming %s",
				c.name, f.GetType(), f.GetMessage(), len(f.GetDetails()), proto.Size(a), c.field)
		}
	}
	// A frame over the message limit ends the stream; the server does not
	// read it whole.
	big, err := b.workers.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = big.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"lim"}, ActivityTypes: []string{"t"}, Identity: strings.Repeat("i", limit.Message)}}})
	if _, err := big.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a frame over %d bytes: %v; want ResourceExhausted", limit.Message, err)
	}
	if _, err := b.activities.Schedule(context.Background(), &aionv1.ScheduleRequest{Namespace: "lim", Id: "many-types", ActivityType: "t",
		RetryPolicy: &aionv1.RetryPolicy{NonRetryableErrorTypes: make([]string, limit.NonRetryableTypes+1)}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "non_retryable_error_types") {
		t.Fatalf("schedule with %d non-retryable types: %v; want InvalidArgument", limit.NonRetryableTypes+1, err)
	}
}

// TestWorkerThatStopsReadingIsTimedOut: a worker that keeps pinging but
// stops reading its stream fills the flow-control window; the server
// deregisters it with reason timeout within its heartbeat window, and its
// attempt is retried on another worker.
func TestWorkerThatStopsReadingIsTimedOut(t *testing.T) {
	t.Parallel()
	window := 3 * time.Second
	b := setup(t, func(c *server.Config) { c.HeartbeatWindow = window })
	events := b.watch(t)
	// The stalled worker's connection grows no receive window beyond the
	// minimum, so a few large tasks fill it.
	cc, err := grpc.NewClient(b.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := aionv1.NewWorkerServiceClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"stall"}, ActivityTypes: []string{"big"}, Slots: 8}}}); err != nil {
		t.Fatal(err)
	}
	ack, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stalled := ack.GetRegisterAck().GetWorkerId()
	for i := range 8 {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "stall", Id: fmt.Sprintf("big-%d", i), ActivityType: "big",
			Payload: make([]byte, 256<<10), StartToCloseTimeout: durationpb.New(time.Hour), HeartbeatTimeout: durationpb.New(time.Hour)})
	}
	pinging := make(chan struct{})
	go func() { // pings keep the worker from looking silent; it never reads again
		defer close(pinging)
		tick := time.NewTicker(window / 10)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{}}}) != nil {
					return
				}
			}
		}
	}()
	defer func() { cancel(); <-pinging }()
	for {
		e := nextDelta(t, events)
		if d := e.GetWorkerDisconnected(); d != nil && d.GetWorkerId() == stalled {
			if d.GetReason() != aionv1.DisconnectReason_DISCONNECT_REASON_TIMEOUT {
				t.Fatalf("stalled worker left with reason %v, want timeout", d.GetReason())
			}
			break
		}
	}
	honest := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"stall"}, ActivityTypes: []string{"big"}, Slots: 8})
	task := honest.nextTask()
	if task.GetAttempt() != 2 {
		t.Fatalf("retried task %s attempt %d, want 2", task.GetActivityId(), task.GetAttempt())
	}
}
