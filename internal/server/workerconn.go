package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"math"
	"net"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/h2"
	"github.com/aion-run/aion/internal/limit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// The values of --worker-transport.
const (
	// WorkerTransportGRPC serves every connection on grpc-go's transport:
	// the default.
	WorkerTransportGRPC = "grpc"
	// WorkerTransportLean serves connections whose first call is a
	// worker's Connect on aion's own HTTP/2 transport (internal/h2):
	// experimental, for its memory per worker, until it holds against
	// every attack grpc-go's does.
	WorkerTransportLean = "lean"
)

// leanTransport builds the transport that serves worker streams on
// connections whose first call is Connect (see internal/h2), sharing the
// gRPC listener with s.grpc, or returns nil when grpc-go serves every
// connection (--worker-transport grpc, the default). Under TLS it shakes
// hands with every connection first; s.grpc takes the ones it hands off as
// they are (see handedCreds).
//
// Every call on such a connection is served here, a worker's stream or not
// (serveCall). Each such connection costs one goroutine and a few KiB of
// buffers and state, and a worker's stream no goroutine while it waits (see
// session), where grpc-go keeps three goroutines a connection (reader,
// writer, keepalive), one a stream, and its per-connection structures. A
// call is served as grpc-go would serve it: the same tap decision
// (admitCall), interceptors, decoder and limits.
func (s *Server) leanTransport() (*h2.Server, *h2.Handoff) {
	if s.cfg.Conn.WorkerTransport != WorkerTransportLean {
		return nil, nil
	}
	handoff := h2.NewHandoff(s.grpcLis.Addr())
	srv, err := h2.NewServer(h2.Config{
		Method: aionv1.WorkerService_Connect_FullMethodName,
		Admit: func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
			return s.admitCall(ctx, &tap.Info{FullMethodName: method, Header: md})
		},
		Handle:            s.serveCall,
		Handoff:           handoff.Give,
		Codec:             s.decoder,
		TLS:               s.tls,
		MaxStreams:        cmp.Or(s.cfg.Conn.GRPCMaxStreams, math.MaxUint32), // 0: no cap, as grpc-go
		StreamWindow:      streamWindow,
		ConnWindow:        connWindow,
		MaxRecvMsgSize:    limit.Message,
		MaxHeaderListSize: limit.Metadata,
		HandshakeTimeout:  s.cfg.Conn.GRPCHandshakeTimeout,
		IdleTimeout:       s.cfg.Conn.GRPCIdleTimeout,
		KeepaliveTime:     keepaliveTime,
		KeepaliveTimeout:  keepaliveTimeout,
	})
	if err != nil {
		panic(err) // every field it requires is set above
	}
	return srv, handoff
}

// serveCall serves one call on a connection of the lean transport as
// grpc-go serves it: the registered handler behind the same interceptors.
func (s *Server) serveCall(st *h2.Stream) error {
	m, ok := s.methods[st.Method()]
	switch {
	case !ok:
		if err := refusal(st.Context()); err != nil {
			return err
		}
		return status.Errorf(codes.Unimplemented, "unknown method %s", st.Method())
	case m.unary != nil:
		resp, err := m.unary.Handler(m.impl, st.Context(), requestOf(st).RecvMsg, s.unaryIntercept)
		if err != nil {
			return err
		}
		return st.SendMsg(resp)
	}
	info := &grpc.StreamServerInfo{FullMethod: st.Method(), IsClientStream: m.stream.ClientStreams, IsServerStream: m.stream.ServerStreams}
	var ss grpc.ServerStream = st
	if !m.stream.ClientStreams {
		ss = requestOf(st)
	}
	return s.streamIntercept(m.impl, ss, info, m.stream.Handler)
}

// oneRequest is the stream of a call that takes exactly one request: a
// client that ends its side before sending it gets Internal, as grpc-go
// answers such a call, instead of an end the handler would take for none.
type oneRequest struct{ *h2.Stream }

func requestOf(st *h2.Stream) oneRequest { return oneRequest{st} }

func (s oneRequest) RecvMsg(v any) error {
	if err := s.Stream.RecvMsg(v); !errors.Is(err, io.EOF) {
		return err
	}
	return status.Error(codes.Internal, "the call ended before its request")
}

// handedCreds are the gRPC server's TLS credentials when the lean transport
// runs: a connection it handed off has finished its TLS handshake already,
// and is taken as it is, with that handshake's state.
type handedCreds struct {
	credentials.TransportCredentials
}

func (h handedCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if info, ok := h2.TLSInfo(c); ok {
		return c, info, nil
	}
	return h.TransportCredentials.ServerHandshake(c)
}

func (h handedCreds) Clone() credentials.TransportCredentials {
	return handedCreds{h.TransportCredentials.Clone()}
}
