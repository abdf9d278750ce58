package attack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// consoleScript is the console's largest asset (web/static/assets).
const consoleScript = "/assets/console.js"

// slowReadBuffer is the receive buffer of a slow or non-reading
// connection, so the server's writes back up quickly.
const slowReadBuffer = 4096

// heldConn is one connection the attack holds open.
type heldConn struct {
	conn net.Conn
	// opened is when its request was written.
	opened time.Time
	// closed is set when a read saw the server close the connection, and
	// closedAfter (nanoseconds after opened) when watchClose saw it.
	closed      atomic.Bool
	closedAfter atomic.Int64
}

// connections holds IdleConns TCP connections to the gRPC port that never
// send a byte, SlowReaders requests for the console's script read a byte
// a second, and SSEClients subscriptions to the event stream (admin key)
// that are never read, for the whole attack; meanwhile Attackers loops
// register and drop a worker over and over, so the event stream has events
// to deliver, and count the registrations.
func connections(ctx context.Context, e *env) {
	var wg sync.WaitGroup
	idle := e.openMany(ctx, e.o.IdleConns, "idle gRPC", e.srv.grpcAddr, 0, nil)
	slow := e.openMany(ctx, e.o.SlowReaders, "slow reader", e.srv.httpAddr, slowReadBuffer,
		fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", consoleScript, e.srv.httpAddr))
	sse := e.openMany(ctx, e.o.SSEClients, "event stream", e.srv.httpAddr, slowReadBuffer,
		fmt.Appendf(nil, "GET /api/v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n",
			e.srv.httpAddr, e.srv.keys.admin))
	opened := time.Now()

	// Idle connections: a read waits for the server to close them (it
	// sends its settings first; they are discarded).
	for _, h := range idle {
		wg.Go(func() { watchClose(h, 512, 0) })
	}
	// Slow readers: one byte a second.
	for _, h := range slow {
		wg.Go(func() { watchClose(h, 1, time.Second) })
	}
	var registrations atomic.Int64
	for range e.o.Attackers {
		wg.Go(func() { churn(ctx, e, &registrations) })
	}
	<-ctx.Done()
	held := time.Since(opened)
	// Event-stream clients never read; whether the server closed one shows
	// once what it sent is drained.
	for _, h := range sse {
		wg.Go(func() { drainClosed(h) })
	}
	for _, group := range [][]*heldConn{idle, slow} {
		for _, h := range group {
			h.conn.Close() // ends the watchers
		}
	}
	wg.Wait()
	for _, g := range []struct {
		label string
		conns []*heldConn
	}{{"idle gRPC", idle}, {"slow reader", slow}, {"event stream", sse}} {
		for _, h := range g.conns {
			if h.closed.Load() {
				e.tally.add(g.label+": closed by the server", 1)
			} else {
				e.tally.add(g.label+": held open to the end", 1)
			}
			h.conn.Close()
		}
	}
	n := registrations.Load()
	e.note("connections held %.1f s; %d worker registrations meanwhile (%.0f per second)", held.Seconds(), n, float64(n)/held.Seconds())
}

// openMany opens n connections to addr from 32 dialers at once and sends
// request on each; a receive buffer of rcvbuf bytes when rcvbuf > 0.
func (e *env) openMany(ctx context.Context, n int, label, addr string, rcvbuf int, request []byte) []*heldConn {
	out := make([]*heldConn, 0, n)
	var mu sync.Mutex
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range min(n, 32) {
		wg.Go(func() {
			for range next {
				h, err := open(ctx, addr, rcvbuf, request)
				e.tally.sent.Add(1)
				if err != nil {
					e.failed(ctx, label+": open failed", err)
					continue
				}
				mu.Lock()
				out = append(out, h)
				mu.Unlock()
			}
		})
	}
	for range n {
		if ctx.Err() != nil {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return out
}

func open(ctx context.Context, addr string, rcvbuf int, request []byte) (*heldConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if rcvbuf > 0 {
		if err := c.(*net.TCPConn).SetReadBuffer(rcvbuf); err != nil {
			c.Close()
			return nil, err
		}
	}
	if len(request) > 0 {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		// The attack's end also ends a write the server is slow to take.
		stop := context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Now()) })
		_, err := c.Write(request)
		stop()
		if err != nil {
			c.Close()
			return nil, err
		}
		_ = c.SetWriteDeadline(time.Time{})
	}
	return &heldConn{conn: c, opened: time.Now()}, nil
}

// watchClose reads chunk bytes at a time, every gap, until the connection
// ends; an end the attack did not cause is the server closing it.
func watchClose(h *heldConn, chunk int, gap time.Duration) {
	buf := make([]byte, chunk)
	for {
		if _, err := h.conn.Read(buf); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				h.closedAfter.Store(int64(time.Since(h.opened)))
				h.closed.Store(true)
			}
			return
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
}

// drainClosed reads what the server queued on a connection that was never
// read, for a short while, and records whether the server had closed it.
func drainClosed(h *heldConn) {
	_ = h.conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 32<<10)
	for {
		if _, err := h.conn.Read(buf); err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				h.closed.Store(true)
			}
			return
		}
	}
}

// churn registers a worker in the attacker's namespace and drops it, over
// and over, counting the registrations the server acknowledged.
func churn(ctx context.Context, e *env, registrations *atomic.Int64) {
	cc, err := dial(e.srv.grpcAddr, e.srv.keys.attackWorker)
	if err != nil {
		e.failed(ctx, "register", err)
		return
	}
	defer cc.Close()
	reg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{attackerNS}, TaskQueue: "churn", ActivityTypes: []string{"x"}, Slots: 1, Identity: "attacker-churn"}}}
	for range e.o.MaxRequests {
		if ctx.Err() != nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e.tally.sent.Add(1)
		err := func() error {
			st, err := cc.NewStream(sctx, &aionv1.WorkerService_ServiceDesc.Streams[0], connectMethod)
			if err != nil {
				return err
			}
			if err := st.SendMsg(reg); err != nil {
				return err
			}
			m := new(aionv1.ServerMessage)
			if err := st.RecvMsg(m); err != nil {
				return err
			}
			if m.GetRegisterAck() == nil {
				return fmt.Errorf("first frame %v, want register_ack", m)
			}
			registrations.Add(1)
			return nil
		}()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.failed(ctx, "register", err)
			pause(ctx, 10*time.Millisecond)
		}
	}
}
