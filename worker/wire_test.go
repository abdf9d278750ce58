package worker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// wire watches a worker's real connection to a real server: every frame
// each way, numbered by stream, and how each stream ended. It can also cut
// the TCP connection, the way a network failure would. It observes and
// breaks; it never invents a frame.
type wire struct {
	mu      sync.Mutex
	sent    []frame[*aionv1.WorkerMessage]
	recv    []frame[*aionv1.ServerMessage]
	ends    []error // per stream, nil while open
	streams int
	conns   []net.Conn
	// beforeSend and afterRecv cut the connection at a chosen frame (see
	// cutBeforeSend, cutAfterRecv).
	beforeSend func(*aionv1.WorkerMessage) bool
	afterRecv  func(*aionv1.ServerMessage) bool
}

type frame[M any] struct {
	stream int // from 1
	msg    M
}

func (w *wire) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				w.mu.Lock()
				w.conns = append(w.conns, c)
				w.mu.Unlock()
			}
			return c, err
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.streams++
			w.ends = append(w.ends, nil)
			n := w.streams
			w.mu.Unlock()
			return &tappedStream{ClientStream: cs, w: w, n: n}, nil
		}),
	}
}

// cutBeforeSend cuts the connection, once, just before the first frame
// that matches would be sent: the frame never reaches the server.
func (w *wire) cutBeforeSend(match func(*aionv1.WorkerMessage) bool) {
	var once sync.Once
	w.mu.Lock()
	defer w.mu.Unlock()
	w.beforeSend = func(m *aionv1.WorkerMessage) (cut bool) {
		if match(m) {
			once.Do(func() { cut = true })
		}
		return cut
	}
}

// cutAfterRecv cuts the connection, once, when the first frame that
// matches arrives: the frame is lost with it and never reaches the worker.
func (w *wire) cutAfterRecv(match func(*aionv1.ServerMessage) bool) {
	var once sync.Once
	w.mu.Lock()
	defer w.mu.Unlock()
	w.afterRecv = func(m *aionv1.ServerMessage) (cut bool) {
		if match(m) {
			once.Do(func() { cut = true })
		}
		return cut
	}
}

// cut closes every TCP connection the worker opened so far.
func (w *wire) cut() {
	w.mu.Lock()
	conns := w.conns
	w.conns = nil
	w.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type tappedStream struct {
	grpc.ClientStream
	w *wire
	n int
}

func (s *tappedStream) SendMsg(m any) error {
	msg := m.(*aionv1.WorkerMessage)
	s.w.mu.Lock()
	s.w.sent = append(s.w.sent, frame[*aionv1.WorkerMessage]{s.n, msg})
	hook := s.w.beforeSend
	s.w.mu.Unlock()
	if hook != nil && hook(msg) {
		s.w.cut()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *tappedStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err != nil {
			s.w.mu.Lock()
			if s.w.ends[s.n-1] == nil {
				s.w.ends[s.n-1] = err
			}
			s.w.mu.Unlock()
			return err
		}
		msg := m.(*aionv1.ServerMessage)
		s.w.mu.Lock()
		hook := s.w.afterRecv
		s.w.mu.Unlock()
		if hook != nil && hook(msg) {
			s.w.cut() // the frame dies with the connection
			continue
		}
		s.w.mu.Lock()
		s.w.recv = append(s.w.recv, frame[*aionv1.ServerMessage]{s.n, msg})
		s.w.mu.Unlock()
		return nil
	}
}

// sentWhere returns the frames sent that match, in order.
func (w *wire) sentWhere(match func(*aionv1.WorkerMessage) bool) []frame[*aionv1.WorkerMessage] {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []frame[*aionv1.WorkerMessage]
	for _, f := range w.sent {
		if match(f.msg) {
			out = append(out, f)
		}
	}
	return out
}

// recvWhere returns the frames received that match, in order.
func (w *wire) recvWhere(match func(*aionv1.ServerMessage) bool) []frame[*aionv1.ServerMessage] {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []frame[*aionv1.ServerMessage]
	for _, f := range w.recv {
		if match(f.msg) {
			out = append(out, f)
		}
	}
	return out
}

// endedWith returns how the streams that have ended so far ended.
func (w *wire) endedWith() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []error
	for _, e := range w.ends {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

func (w *wire) streamCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams
}

// waitRecv waits until a received frame matches and returns it.
func (w *wire) waitRecv(t *testing.T, what string, match func(*aionv1.ServerMessage) bool) frame[*aionv1.ServerMessage] {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if got := w.recvWhere(match); len(got) > 0 {
			return got[0]
		}
	}
	t.Fatalf("the worker never received %s", what)
	return frame[*aionv1.ServerMessage]{}
}

// isResult, isHeartbeat and friends match frames about one activity.
func isResult(id string, attempt uint32) func(*aionv1.WorkerMessage) bool {
	return func(m *aionv1.WorkerMessage) bool {
		r := m.GetActivityResult()
		return r != nil && r.GetActivityId() == id && r.GetAttempt() == attempt
	}
}

func isHeartbeat(id string) func(*aionv1.WorkerMessage) bool {
	return func(m *aionv1.WorkerMessage) bool { return m.GetActivityHeartbeat().GetActivityId() == id }
}

func isResultAck(id string, attempt uint32) func(*aionv1.ServerMessage) bool {
	return func(m *aionv1.ServerMessage) bool {
		a := m.GetResultAck()
		return a != nil && a.GetActivityId() == id && a.GetAttempt() == attempt
	}
}
