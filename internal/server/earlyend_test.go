package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
)

// workerTransports are the transports a worker's connection can be served
// on; the edge's tests run on each.
var workerTransports = []string{server.WorkerTransportGRPC, server.WorkerTransportLean}

func withTransport(tr string) setupOpt {
	return func(c *server.Config) { c.Conn.WorkerTransport = tr }
}

// onEachTransport runs test in parallel subtests, each on a server of its
// own whose worker connections one of workerTransports serves.
func onEachTransport(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, tr := range workerTransports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t, withTransport(tr)))
		})
	}
}

// served counts the activities serves scheduled, so their ids differ.
var served atomic.Int64

// serves checks that the server still does its work: a worker registers,
// takes an activity and completes it, and the client sees the result.
func (b *bundle) serves(t *testing.T) {
	t.Helper()
	n := served.Add(1)
	ns := "alive-" + strconv.FormatInt(n, 10)
	w, err := b.connect(t, &aionv1.Register{Namespaces: []string{ns}, ActivityTypes: []string{"echo"}, Slots: 1})
	if err != nil {
		t.Fatalf("an honest worker after the attack: %v", err)
	}
	defer w.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: ns, Id: "a", ActivityType: "echo",
		Payload: []byte(`"hi"`), StartToCloseTimeout: durationpb.New(time.Minute)}); err != nil {
		t.Fatalf("schedule after the attack: %v", err)
	}
	task := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetActivityTask() != nil }).GetActivityTask()
	if ack := w.complete(task, []byte(`"hi"`)); ack.GetRefused() != "" {
		t.Fatalf("result refused after the attack: %s", ack.GetRefused())
	}
	got, err := b.activities.Wait(ctx, &aionv1.WaitRequest{Namespace: ns, Id: "a"})
	if err != nil || got.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
		t.Fatalf("wait after the attack: %v, %v", got, err)
	}
}

// noWorkers waits until the registry holds no worker.
func (b *bundle) noWorkers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.srv.Registry().Census().Workers != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a worker stayed registered after its stream ended: %+v", b.srv.Registry().Census())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEveryStreamEndedBeforeItsRequestIsAnsweredAndTheServerServesOn opens,
// on each transport, a call of every streaming method (and a unary one)
// whose HEADERS frame carries END_STREAM: the client ends its side before
// sending a single message. Each connection's first call is such a Connect
// stream (a 33-byte stream that once took the process down), so on the lean
// transport every other method is served by it too. Each call gets an
// answer, and the server goes on serving.
func TestEveryStreamEndedBeforeItsRequestIsAnsweredAndTheServerServesOn(t *testing.T) {
	t.Parallel()
	ok, invalid, internal := strconv.Itoa(int(codes.OK)), strconv.Itoa(int(codes.InvalidArgument)), strconv.Itoa(int(codes.Internal))
	methods := []struct {
		name, path string
		want       []string // grpc-status values accepted
	}{
		{"worker connect", aionv1.WorkerService_Connect_FullMethodName, []string{invalid}},
		{"cluster watch", aionv1.ClusterService_Watch_FullMethodName, []string{internal}},
		{"health watch", healthpb.Health_Watch_FullMethodName, []string{internal}},
		{"reflection", reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName, []string{ok}},
		{"unary schedule", aionv1.ActivityService_Schedule_FullMethodName, []string{internal}},
	}
	onEachTransport(t, func(t *testing.T, b *bundle) {
		for _, m := range methods {
			c := dialH2(t, b.srv.GRPCAddr())
			first := c.open(aionv1.WorkerService_Connect_FullMethodName, true)
			e, err := c.await(first, 10*time.Second)
			if err != nil || e.status != invalid {
				t.Fatalf("%s: a Connect stream ended before Register ended with %v, %v; want grpc-status %s", m.name, e, err, invalid)
			}
			if m.path != aionv1.WorkerService_Connect_FullMethodName {
				id := c.open(m.path, true)
				e, err = c.await(id, 10*time.Second)
				if err != nil || !slices.Contains(m.want, e.status) {
					t.Fatalf("%s ended before its request: %v, %v; want grpc-status in %v", m.name, e, err, m.want)
				}
			}
		}
		b.noWorkers(t)
		b.serves(t)
	})
}

// TestWorkerStreamEndedAtEveryPointLeavesNoWorkerAndTheServerServesOn ends
// a worker's stream every way a client can, before, between and after its
// frames, on each transport: by ending its side, by a reset, by closing the
// connection, and in the middle of a message.
func TestWorkerStreamEndedAtEveryPointLeavesNoWorkerAndTheServerServesOn(t *testing.T) {
	t.Parallel()
	register, err := proto.Marshal(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"eof"}, ActivityTypes: []string{"echo"}, Slots: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ping, err := proto.Marshal(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	half := message(register)[:7] // a length prefix promising more than comes

	// Each case sends frames on one Connect stream, then ends it by how.
	type how int
	const (
		endSide   how = iota // END_STREAM
		resetIt              // RST_STREAM CANCEL
		closeConn            // TCP close
	)
	cases := []struct {
		name   string
		frames [][]byte
		how    how
		want   string // grpc-status when the server answers with trailers; "" when it need not answer
	}{
		{"no frame, end of side", nil, endSide, strconv.Itoa(int(codes.InvalidArgument))},
		{"no frame, reset", nil, resetIt, ""},
		{"no frame, connection closed", nil, closeConn, ""},
		{"half a register, end of side", [][]byte{half}, endSide, strconv.Itoa(int(codes.Internal))},
		{"half a register, reset", [][]byte{half}, resetIt, ""},
		{"half a register, connection closed", [][]byte{half}, closeConn, ""},
		{"registered, end of side", [][]byte{message(register)}, endSide, strconv.Itoa(int(codes.OK))},
		{"registered, reset", [][]byte{message(register)}, resetIt, ""},
		{"registered, connection closed", [][]byte{message(register)}, closeConn, ""},
		{"registered and pinged, end of side", [][]byte{message(register), message(ping)}, endSide, strconv.Itoa(int(codes.OK))},
		{"registered, half a ping, end of side", [][]byte{message(register), message(ping)[:3]}, endSide, strconv.Itoa(int(codes.Internal))},
		{"registered, half a ping, reset", [][]byte{message(register), message(ping)[:3]}, resetIt, ""},
	}
	onEachTransport(t, func(t *testing.T, b *bundle) {
		for _, tc := range cases {
			c := dialH2(t, b.srv.GRPCAddr())
			id := c.open(aionv1.WorkerService_Connect_FullMethodName, false)
			for _, f := range tc.frames {
				c.data(id, f, false)
			}
			switch tc.how {
			case endSide:
				c.data(id, nil, true)
				e, err := c.await(id, 10*time.Second)
				if err != nil || e.status != tc.want {
					t.Fatalf("%s: the stream ended with %v, %v; want grpc-status %s", tc.name, e, err, tc.want)
				}
			case resetIt:
				c.reset(id, http2.ErrCodeCancel)
			case closeConn:
				c.conn.Close()
			}
			b.noWorkers(t)
			c.conn.Close()
		}
		b.serves(t)
	})
}

// TestStreamsClosedBeforeRegisterFromTheGRPCClientEndAsInvalidArgument
// checks what a worker built on grpc-go sees when it closes its side (or
// cancels) before Register: InvalidArgument naming the missing frame, and
// nothing registered.
func TestStreamsClosedBeforeRegisterFromTheGRPCClientEndAsInvalidArgument(t *testing.T) {
	t.Parallel()
	onEachTransport(t, func(t *testing.T, b *bundle) {
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			stream, err := b.workers.Connect(ctx)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			if err := stream.CloseSend(); err != nil {
				cancel()
				t.Fatal(err)
			}
			_, err = stream.Recv()
			cancel()
			if status.Code(err) != codes.InvalidArgument ||
				!strings.Contains(status.Convert(err).Message(), "ended before its register frame") {
				t.Fatalf("Connect closed before Register: %v; want InvalidArgument naming the register frame", err)
			}
		}
		for range 20 {
			ctx, cancel := context.WithCancel(context.Background())
			stream, err := b.workers.Connect(ctx)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			cancel()
			if _, err := stream.Recv(); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("a canceled Connect received %v", err)
			}
		}
		b.noWorkers(t)
		b.serves(t)
	})
}

// TestDefaultTransportAnswersSettingsAndPingBeforeAnyRequest holds the
// default worker transport to HTTP/2's handshake: a client that has sent
// only its preface, SETTINGS and a PING gets its SETTINGS acknowledged and
// its PING answered before it makes any call.
func TestDefaultTransportAnswersSettingsAndPingBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := dialH2(t, b.srv.GRPCAddr())
	want := [8]byte{'a', 'i', 'o', 'n', 'p', 'i', 'n', 'g'}
	if err := c.fr.WritePing(false, want); err != nil {
		t.Fatal(err)
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var settingsAcked, pinged bool
	for !settingsAcked || !pinged {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("before any request: SETTINGS acknowledged %v, PING answered %v, then %v", settingsAcked, pinged, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			settingsAcked = settingsAcked || f.IsAck()
		case *http2.PingFrame:
			pinged = pinged || f.IsAck() && f.Data == want
		}
	}
}

// TestConnectionThatSendsTooMuchBeforeItsFirstCallIsClosed sends what the
// "undecided" attack sends, PRIORITY frames after the preface and no call:
// past its limit the server closes the connection, while a client that makes
// its call after its opening frames is served.
func TestConnectionThatSendsTooMuchBeforeItsFirstCallIsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := dialH2(t, b.srv.GRPCAddr())
	for range (32 << 10) / 14 {
		c.write(func() error { return c.fr.WritePriority(1, http2.PriorityParam{Weight: 15}) })
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept a connection open that sent 32 KiB of PRIORITY frames and no call")
			}
			break
		}
	}
	b.serves(t)
}
