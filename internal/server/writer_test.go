package server_test

import (
	"fmt"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
)

// waitIdle waits for the writer of worker id to stop, or fails the test.
func waitIdle(t *testing.T, b *bundle, id uint64, what string) {
	t.Helper()
	idle, ok := server.WriterIdle(b.srv, id)
	if !ok {
		t.Fatalf("%s: worker %d is not connected", what, id)
	}
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the stream's writer still runs after 10s with nothing to send", what)
	}
}

// TestWorkerStreamWriterRunsOnlyWhileFramesWait checks that an idle worker
// stream holds no writer goroutine, and that one starts again for each
// frame to send, in order.
func TestWorkerStreamWriterRunsOnlyWhileFramesWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"idle"}, ActivityTypes: []string{"x"}, Slots: 1})
	waitIdle(t, b, w.id, "after the register ack")
	for round := range 3 {
		for n := range 5 {
			nonce := uint64(round*10 + n)
			if err := w.stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: nonce}}}); err != nil {
				t.Fatalf("round %d: send ping %d: %v", round, nonce, err)
			}
		}
		for n := range 5 {
			want := uint64(round*10 + n)
			m := w.recv()
			if m.GetPong() == nil || m.GetPong().GetNonce() != want {
				t.Fatalf("round %d: got %v, want the pong of ping %d, in order", round, m, want)
			}
		}
		waitIdle(t, b, w.id, "after the pongs")
	}
}

// TestWorkerFramesAreAnsweredInOrderWhateverTheirSize interleaves pings,
// which the handler answers itself, with heartbeats small and large, which
// are decoded and handled on goroutines of their own: the answers still
// come one for each frame, in the order the frames were sent.
func TestWorkerFramesAreAnsweredInOrderWhateverTheirSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"order"}, ActivityTypes: []string{"x"}, Slots: 1})
	type frame struct {
		name string
		msg  *aionv1.WorkerMessage
		// answers reports whether m is this frame's answer.
		answers func(m *aionv1.ServerMessage) bool
	}
	var frames []frame
	for i := range 30 {
		if i%3 == 0 {
			nonce := uint64(i)
			frames = append(frames, frame{fmt.Sprintf("ping %d", i),
				&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: nonce}}},
				func(m *aionv1.ServerMessage) bool { return m.GetPong() != nil && m.GetPong().GetNonce() == nonce }})
			continue
		}
		id := fmt.Sprintf("a%d", i)
		details := []byte("x")
		if i%3 == 2 {
			details = make([]byte, 4096) // far larger than a ping
		}
		frames = append(frames, frame{fmt.Sprintf("heartbeat %d (%d bytes of details)", i, len(details)),
			&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityHeartbeat{ActivityHeartbeat: &aionv1.ActivityHeartbeat{
				Namespace: "order", ActivityId: id, Attempt: 1, Details: details}}},
			func(m *aionv1.ServerMessage) bool { return m.GetHeartbeatAck().GetActivityId() == id }})
	}
	for _, f := range frames {
		if err := w.stream.Send(f.msg); err != nil {
			t.Fatalf("send %s: %v", f.name, err)
		}
	}
	for _, f := range frames {
		if m := w.recv(); !f.answers(m) {
			t.Fatalf("got %v; want the answer to %s, in the order sent", m, f.name)
		}
	}
}
