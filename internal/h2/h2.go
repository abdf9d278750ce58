// Package h2 serves the streams of one gRPC method (the worker plane's
// Connect) over HTTP/2 with one goroutine per connection, where grpc-go's
// server transport keeps three (reader, writer, keepalive) besides each
// stream's handler.
//
// It shares a listener with a grpc.Server: the first call on a connection
// decides who serves it. A connection whose first call is the method stays
// here, and every later call on it, to whatever method, is served here too
// (Handle dispatches); any other connection is handed over whole, its bytes
// so far replayed, to the grpc.Server (Handoff).
package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
)

// Config is what a Server serves and its limits. Zero limits take the
// defaults named on each.
type Config struct {
	// Method is the full method, e.g. "/pkg.Service/Method", whose call,
	// first on a connection, keeps the connection here.
	Method string
	// Admit decides a new call from its method and headers, as a gRPC tap
	// does; the context it returns is the stream's. An error ends the call
	// with that error's status before Handle is called.
	Admit func(ctx context.Context, method string, md metadata.MD) (context.Context, error)
	// Handle runs one call, to any method (Stream.Method), on a goroutine
	// of its own; its error is the status the call ends with (nil: OK).
	Handle func(s *Stream) error
	// Handoff takes a connection whose first call is not Method; reading
	// it yields every byte the client sent, from the preface on.
	Handoff func(net.Conn)
	// Codec encodes and decodes messages ("proto" when nil).
	Codec encoding.CodecV2
	// TLS, when set, is the server's TLS configuration: every connection
	// is shaken hands with first ("h2" is added to its protocols), within
	// the handshake timeout. A connection handed off is so already; see
	// TLSInfo.
	TLS *tls.Config

	// MaxStreams caps the streams open at once on a connection (0: 1000).
	MaxStreams uint32
	// StreamWindow and ConnWindow are the receive flow-control windows
	// (0: 64 KiB and 1 MiB).
	StreamWindow, ConnWindow uint32
	// MaxRecvMsgSize bounds one received message (0: 4 MiB).
	MaxRecvMsgSize int
	// MaxHeaderListSize bounds a call's headers (0: 16 KiB).
	MaxHeaderListSize uint32
	// HandshakeTimeout bounds the wait for the preface and first SETTINGS
	// (0: none).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a kept connection without streams for this long
	// (0: never).
	IdleTimeout time.Duration
	// KeepaliveTime is the silence after which the server pings a kept
	// connection, KeepaliveTimeout how long it waits for the answer before
	// closing it (0: 2 hours and 20 s, grpc-go's defaults).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// WriteTimeout closes a connection a write to which blocks this long
	// (0: 20 s).
	WriteTimeout time.Duration
	// Clock times the keepalive and idle checks (clock.Real when nil).
	Clock clock.Clock
}

func (c *Config) defaults() {
	if c.Codec == nil {
		c.Codec = encoding.GetCodecV2("proto")
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 1000
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = 64 << 10
	}
	if c.ConnWindow == 0 {
		c.ConnWindow = 1 << 20
	}
	c.ConnWindow = max(c.ConnWindow, defaultWindow)
	if c.MaxRecvMsgSize == 0 {
		c.MaxRecvMsgSize = 4 << 20
	}
	if c.MaxHeaderListSize == 0 {
		c.MaxHeaderListSize = 16 << 10
	}
	if c.KeepaliveTime == 0 {
		c.KeepaliveTime = 2 * time.Hour
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = 20 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 20 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
}

// ErrServerClosed is returned by Serve once Shutdown or Close was called.
var ErrServerClosed = errors.New("h2: server closed")

// Server accepts connections and serves Method's streams on those whose
// first call is to it.
type Server struct {
	cfg Config
	tls *tls.Config

	mu       sync.Mutex
	lis      net.Listener
	conns    map[*conn]struct{}
	closed   bool
	connDone chan struct{} // signalled whenever a connection ends
	wg       sync.WaitGroup
	stopTick context.CancelFunc
}

// NewServer returns a server for cfg; Method, Admit, Handle and Handoff are
// required.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Method == "" || cfg.Admit == nil || cfg.Handle == nil || cfg.Handoff == nil {
		return nil, errors.New("h2: Method, Admit, Handle and Handoff are all required")
	}
	cfg.defaults()
	s := &Server{cfg: cfg, conns: make(map[*conn]struct{}), connDone: make(chan struct{}, 1)}
	if cfg.TLS != nil {
		s.tls = cfg.TLS.Clone()
		if !slices.Contains(s.tls.NextProtos, "h2") {
			s.tls.NextProtos = append([]string{"h2"}, s.tls.NextProtos...)
		}
	}
	return s, nil
}

// Serve accepts connections on lis until it fails or the server is shut
// down; then it returns ErrServerClosed. It closes lis.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = lis.Close()
		return ErrServerClosed
	}
	s.lis = lis
	ctx, cancel := context.WithCancel(context.Background())
	s.stopTick = cancel
	s.wg.Add(1)
	s.mu.Unlock()
	go s.watch(ctx)
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			_ = s.Close()
			return fmt.Errorf("h2: accept: %w", err)
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// forget drops an ended connection.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	select {
	case s.connDone <- struct{}{}:
	default:
	}
	s.wg.Done()
}

// Connections reports how many connections this server holds (kept, or
// still deciding).
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Shutdown stops accepting, tells every kept connection no new stream is
// taken (GOAWAY), and waits until their streams have ended and they have
// closed, or until ctx ends; then it closes what is left. Connections handed
// off are the grpc.Server's to stop.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	for _, c := range s.snapshot() {
		c.goAway(errNo, "server shutting down")
	}
	for s.Connections() > 0 && ctx.Err() == nil {
		select {
		case <-s.connDone:
		case <-ctx.Done():
		}
	}
	err := s.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Close stops accepting and closes every connection at once, ending their
// streams; it returns once every goroutine of the server has ended, the
// streams' handlers included (their contexts end, and their receives and
// sends fail).
func (s *Server) Close() error {
	s.stopAccepting()
	for _, c := range s.snapshot() {
		c.kill(errors.New("server closed"))
	}
	s.wg.Wait()
	return nil
}

func (s *Server) stopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.lis != nil {
		_ = s.lis.Close()
	}
	if s.stopTick != nil {
		s.stopTick()
	}
}

func (s *Server) snapshot() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// watchEvery is how often kept connections are checked for silence and
// idleness: one goroutine for all of them, none per connection.
const watchEvery = time.Second

// watch pings connections that have gone silent, closes those whose ping
// went unanswered, and closes those idle past the idle timeout.
func (s *Server) watch(ctx context.Context) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			for _, c := range s.snapshot() {
				c.check(now)
			}
		}
	}
}

// Handoff is a net.Listener that yields the connections a Server hands
// off, for a grpc.Server to Serve.
type Handoff struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewHandoff returns a listener reporting addr as its address.
func NewHandoff(addr net.Addr) *Handoff {
	return &Handoff{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Give hands c to the listener's Accept; once the listener is closed, c is
// closed instead.
func (h *Handoff) Give(c net.Conn) {
	select {
	case h.conns <- c:
	case <-h.done:
		_ = c.Close()
	}
}

// Accept returns the next connection handed off.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept.
func (h *Handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr is the shared listener's address.
func (h *Handoff) Addr() net.Addr { return h.addr }
