package worker

import (
	"sync"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// outbox is the only writer of one stream: frames from any goroutine are
// queued (without bound, so a handler never blocks on a slow stream) and one
// sender goroutine writes them in order. gRPC streams do not allow
// concurrent SendMsg, nor CloseSend concurrent with SendMsg; both go through
// here.
type outbox struct {
	mu        sync.Mutex
	queue     []*aionv1.WorkerMessage
	closeSend bool // CloseSend once the queue is empty
	closed    bool // no more frames accepted
	wake      chan struct{}
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

// push queues a frame; false when the outbox is closed (the stream is gone
// or half-closed).
func (o *outbox) push(m *aionv1.WorkerMessage) bool {
	o.mu.Lock()
	if o.closed || o.closeSend {
		o.mu.Unlock()
		return false
	}
	o.queue = append(o.queue, m)
	o.mu.Unlock()
	o.signal()
	return true
}

// isOpen reports whether the outbox still takes frames.
func (o *outbox) isOpen() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.closed && !o.closeSend
}

// finish asks the sender to CloseSend after the frames already queued.
func (o *outbox) finish() {
	o.mu.Lock()
	o.closeSend = true
	o.mu.Unlock()
	o.signal()
}

// close drops whatever is queued and refuses new frames.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.queue = nil
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the queued frames and whether CloseSend is due after them.
func (o *outbox) take() (frames []*aionv1.WorkerMessage, closeSend, closed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	frames, o.queue = o.queue, nil
	return frames, o.closeSend, o.closed
}

// sendStream is the part of the gRPC stream the sender uses.
type sendStream interface {
	Send(*aionv1.WorkerMessage) error
	CloseSend() error
}

// run writes frames until the outbox is closed, CloseSend is done, or a Send
// fails; it returns the Send error, if any.
func (o *outbox) run(s sendStream, done <-chan struct{}) error {
	for {
		frames, closeSend, closed := o.take()
		if closed {
			return nil
		}
		for _, m := range frames {
			if err := s.Send(m); err != nil {
				o.close()
				return err
			}
		}
		if closeSend && len(frames) == 0 {
			o.close()
			return s.CloseSend()
		}
		if len(frames) > 0 {
			continue
		}
		select {
		case <-o.wake:
		case <-done:
			o.close()
			return nil
		}
	}
}
