package server

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Server-initiated keepalive on gRPC connections: a connection whose peer
// stopped answering (a vanished client holding a stream open) is closed
// after keepaliveTime plus keepaliveTimeout of silence.
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// The HTTP/2 receive windows of a call and of a connection (see
// connectionOptions); both transports use them.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// readBuffer is the size of a connection's read buffer, taken from a pool
// for each read and given back once its bytes are parsed. Idle workers'
// pings arrive on thousands of connections at once, so the pool's size
// follows the buffer's: gRPC's default of 32 KiB costs 32 KiB per
// connection read in the same moment. A frame larger than the buffer is
// read straight into its own memory.
const readBuffer = 8 << 10

// connectionOptions bounds what a gRPC connection may hold without making
// progress: a connection that never finishes its handshake is closed after
// the handshake timeout, one without calls after the idle timeout (clients
// reconnect on their next call; a worker's stream keeps its connection
// busy), and one whose peer stopped answering pings after the keepalive.
func connectionOptions(c ConnLimits) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if c.GRPCHandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(c.GRPCHandshakeTimeout))
	}
	if c.GRPCMaxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(c.GRPCMaxStreams))
	}
	// Fixed HTTP/2 windows (no bandwidth estimation, which grows them to
	// 16 MiB): a caller can push at most 64 KiB on a call, 1 MiB on its
	// connection, before the server reads on; so a call refused from its
	// headers costs the server little to discard. A message the server
	// reads opens its call's window to its whole size.
	opts = append(opts, grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow))
	opts = append(opts, grpc.ReadBufferSize(readBuffer))
	return append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionIdle: c.GRPCIdleTimeout, // 0 is grpc's "infinity"
		Time:              keepaliveTime,
		Timeout:           keepaliveTimeout,
	}))
}

// httpServer is the HTTP side's server with its connection timeouts; open
// counts its connections. The event stream, the one response without an
// end, extends its write deadline before each write (see serveEvents).
func httpServer(h http.Handler, c ConnLimits, open *atomic.Int64) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.HTTPReadHeaderTimeout,
		ReadTimeout:       c.HTTPReadTimeout,
		WriteTimeout:      c.HTTPWriteTimeout,
		IdleTimeout:       c.HTTPIdleTimeout,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
	}
}

// HTTPConnections reports how many connections the HTTP side holds open.
func (s *Server) HTTPConnections() int { return int(s.httpOpen.Load()) }
