// Package servertest runs real aion servers for tests: the real gRPC
// services on a loopback port, the real SQLite file in the test's temporary
// directory. Nothing in it is a fake; it only saves each test the wiring.
//
//	srv := servertest.Start(t)
//	c, _ := client.Dial(ctx, srv.Addr)
//
// A server is stopped when the test ends (after the test's later cleanups,
// such as stopping a worker, have run). Restart stops it and starts a new one
// on the same address and data directory, as a process restart would.
//
// Config is the one test configuration: tests that start a server by hand
// start from it, and Background runs a server for runnable examples.
package servertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/server"
)

// Server is one running server and what a test needs to reach it again.
type Server struct {
	*server.Server
	// Addr is the gRPC address, host:port.
	Addr string
	// Config is the configuration it was started with; GRPCAddr is the
	// concrete address, so starting again with it reuses the port.
	Config server.Config

	mu   sync.Mutex
	left map[registry.WorkerID]registry.Reason // from the event bus
}

// Option adjusts the configuration before Start.
type Option func(*server.Config)

// AutoCreate sets the namespace auto-create policy.
func AutoCreate(p namespace.AutoCreate) Option {
	return func(c *server.Config) { c.AutoCreate = p }
}

// HeartbeatWindow sets how long a worker may stay silent; the server asks
// for pings every third of it.
func HeartbeatWindow(d time.Duration) Option {
	return func(c *server.Config) { c.HeartbeatWindow = d }
}

// DrainTimeout bounds how long Stop waits for in-flight work.
func DrainTimeout(d time.Duration) Option {
	return func(c *server.Config) { c.DrainTimeout = d }
}

// Config is the one configuration of a test server, which Start uses
// before options and which tests that start a server by hand begin from:
// loopback ports chosen by the kernel, the embedded SQLite store in
// dataDir with synchronous=normal (tests need not survive power loss), a
// 5s drain timeout.
func Config(dataDir string) server.Config {
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.SQLiteSync = "normal"
	cfg.DrainTimeout = 5 * time.Second
	return cfg
}

// Start runs a real server and shuts it down when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := Config(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	return start(t, cfg)
}

func start(t testing.TB, cfg server.Config) *Server {
	t.Helper()
	var (
		srv *server.Server
		err error
	)
	// A port given back by a previous server may be held for a moment by
	// someone else's outgoing connection; try again briefly.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		srv, err = server.New(context.Background(), cfg, Logger())
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("servertest: start server on %s: %v", cfg.GRPCAddr, err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Errorf("servertest: start server on %s: %v", cfg.GRPCAddr, err)
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("servertest: stop %s: %v", cfg.GRPCAddr, err)
		}
		t.FailNow()
	}
	cfg.GRPCAddr = srv.GRPCAddr()
	s := &Server{Server: srv, Addr: srv.GRPCAddr(), Config: cfg, left: make(map[registry.WorkerID]registry.Reason)}
	_, sub := srv.Events().Subscribe(1 << 12)
	watched := make(chan struct{})
	go s.watch(sub, watched)
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("servertest: stop %s: %v", s.Addr, err)
		}
		sub.Close()
		<-watched
	})
	return s
}

// Background starts a server outside a test, for runnable examples, which
// have no testing.T: the Config of a test server on a new temporary
// directory. stop shuts the server down and removes the directory. Either
// panics on failure, since an example has no other way to fail.
func Background() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "aion-example-")
	if err != nil {
		panic(fmt.Sprintf("servertest: temporary data directory: %v", err))
	}
	srv, err := server.New(context.Background(), Config(dir), Logger())
	if err == nil {
		if err = srv.Start(context.Background()); err != nil {
			err = errors.Join(err, srv.Stop(context.Background()))
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		panic(fmt.Sprintf("servertest: start server: %v", err))
	}
	return srv.GRPCAddr(), func() {
		defer os.RemoveAll(dir)
		if err := srv.Stop(context.Background()); err != nil {
			panic(fmt.Sprintf("servertest: shutdown %s: %v", srv.GRPCAddr(), err))
		}
	}
}

// watch records why each worker left, until the bus closes.
func (s *Server) watch(sub *events.Subscription, done chan<- struct{}) {
	defer close(done)
	for {
		e, err := sub.Next(context.Background())
		if err != nil {
			return
		}
		if e.Kind == events.WorkerDisconnected && e.Worker != nil {
			s.mu.Lock()
			s.left[e.Worker.ID] = e.Reason
			s.mu.Unlock()
		}
	}
}

// DisconnectReason waits until worker id has left and returns the reason
// the server recorded (disconnect, timeout, drained, deregistered).
func (s *Server) DisconnectReason(t testing.TB, id registry.WorkerID) registry.Reason {
	t.Helper()
	var r registry.Reason
	Eventually(t, fmt.Sprintf("worker %v to leave", id), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		var ok bool
		r, ok = s.left[id]
		return ok
	})
	return r
}

// Restart stops the server (draining its workers, as Stop does) and starts
// a new one on the same address and data directory.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("servertest: stop before restart: %v", err)
	}
	return s.StartAgain(t)
}

// StartAgain starts a new server with the same configuration (address and
// data directory included) after this one was shut down.
func (s *Server) StartAgain(t testing.TB) *Server {
	t.Helper()
	return start(t, s.Config)
}

// StopAsync starts Stop in a goroutine; the channel yields its result.
func (s *Server) StopAsync() <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Stop(context.Background()) }()
	return done
}

// Dial opens a plain gRPC connection to the server, closed when the test
// ends.
func (s *Server) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.Addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, FastReconnect()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// FastReconnect are dial options that let a gRPC channel reconnect within
// tens of milliseconds after its server went away, instead of backing off
// for seconds: tests restart servers and should not wait on that.
func FastReconnect() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})}
}

// WaitForWorker waits until a connected worker satisfies match and returns
// it. A nil match accepts any worker.
func (s *Server) WaitForWorker(t testing.TB, match func(registry.WorkerInfo) bool) registry.WorkerInfo {
	t.Helper()
	var seen []registry.WorkerInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		seen = s.Registry().Workers()
		for _, w := range seen {
			if match == nil || match(w) {
				return w
			}
		}
	}
	t.Fatalf("servertest: no matching worker registered within 10s; connected: %+v", seen)
	return registry.WorkerInfo{}
}

// Eventually polls cond every few milliseconds until it holds, failing the
// test with what after 10s.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, 10*time.Second, what, cond)
}

// EventuallyWithin is Eventually with its own deadline, for a condition that
// waits on work whose length grows with the machine's load.
func EventuallyWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", within, what)
}

// LogBuffer is a log sink that a server or a worker writes while the test
// reads it. The zero value is ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogger logs as Logger does when AION_TEST_LOG is set; otherwise it
// keeps the last records at info level and above and prints them with the
// test's output when the test fails, so a failure that shows only in CI
// comes with what the server said before it.
func TestLogger(t testing.TB) *slog.Logger {
	if os.Getenv("AION_TEST_LOG") != "" {
		return Logger()
	}
	r := &logRing{}
	t.Cleanup(func() {
		if t.Failed() {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Logf("the last %d server log records:\n%s", len(r.lines), bytes.Join(r.lines, nil))
		}
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// logRingSize is how many records TestLogger keeps.
const logRingSize = 200

// logRing keeps the last logRingSize records written to it; a slog text
// handler writes each record with one Write.
type logRing struct {
	mu    sync.Mutex
	lines [][]byte
}

func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == logRingSize {
		r.lines = r.lines[1:]
	}
	r.lines = append(r.lines, bytes.Clone(p))
	return len(p), nil
}

// Logger discards logs unless AION_TEST_LOG is set, then logs at debug
// level to stderr.
func Logger() *slog.Logger {
	if os.Getenv("AION_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
