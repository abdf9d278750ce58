package h2_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/h2"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers each request of a full-duplex call with its payload, or
// with one response of each size asked for, or ends with the status asked
// for; unary calls echo too.
type echo struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echo) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (echo) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if s := req.GetResponseStatus(); s != nil {
			return status.Error(codes.Code(s.Code), s.Message)
		}
		if len(req.ResponseParameters) == 0 {
			if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
				return err
			}
		}
		for _, p := range req.ResponseParameters {
			if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, p.Size)}}); err != nil {
				return err
			}
		}
	}
}

type bundle struct {
	srv     *h2.Server
	grpc    *grpc.Server
	addr    string
	kept    atomic.Int64 // streams served here
	admitMu sync.Mutex
	admitMD metadata.MD
	handle  func(*h2.Stream) error // overrides the echo when set
	refuse  error
	roots   *x509.CertPool // set: serve and dial over TLS
}

type option func(*h2.Config, *bundle)

// withTLS serves over TLS with a fresh self-signed certificate for
// 127.0.0.1, and dials trusting it.
func withTLS(t *testing.T) option {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *h2.Config, b *bundle) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, MinVersion: tls.VersionTLS12}
		b.roots = x509.NewCertPool()
		b.roots.AddCert(leaf)
	}
}

func setup(t *testing.T, opts ...option) *bundle {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{addr: lis.Addr().String()}
	handoff := h2.NewHandoff(lis.Addr())
	desc := testgrpc.TestService_ServiceDesc.Streams[2]  // FullDuplexCall
	unary := testgrpc.TestService_ServiceDesc.Methods[1] // UnaryCall
	if unary.MethodName != "UnaryCall" || desc.StreamName != "FullDuplexCall" {
		t.Fatalf("grpc_testing's service changed: %s, %s", unary.MethodName, desc.StreamName)
	}
	cfg := h2.Config{
		Method: testgrpc.TestService_FullDuplexCall_FullMethodName,
		Admit: func(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
			b.admitMu.Lock()
			b.admitMD = md
			b.admitMu.Unlock()
			if b.refuse != nil {
				return nil, b.refuse
			}
			return ctx, nil
		},
		Handle: func(s *h2.Stream) error {
			b.kept.Add(1)
			if s.Method() == testgrpc.TestService_UnaryCall_FullMethodName {
				resp, err := unary.Handler(echo{}, s.Context(), s.RecvMsg, nil)
				if err != nil {
					return err
				}
				return s.SendMsg(resp)
			}
			if b.handle != nil {
				return b.handle(s)
			}
			return desc.Handler(echo{}, s)
		},
		Handoff: handoff.Give,
	}
	for _, o := range opts {
		o(&cfg, b)
	}
	var gopts []grpc.ServerOption
	if cfg.TLS != nil {
		gopts = append(gopts, grpc.Creds(handedTLS{}))
	}
	b.grpc = grpc.NewServer(gopts...)
	testgrpc.RegisterTestServiceServer(b.grpc, echo{})
	b.srv, err = h2.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.grpc.Serve(handoff) })
	wg.Go(func() { _ = b.srv.Serve(lis) })
	t.Cleanup(func() {
		_ = b.srv.Close()
		b.grpc.Stop()
		_ = handoff.Close()
		wg.Wait()
	})
	return b
}

func (b *bundle) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if b.roots != nil {
		creds = credentials.NewTLS(&tls.Config{RootCAs: b.roots, MinVersion: tls.VersionTLS12})
	}
	cc, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// handedTLS takes connections the h2 server handed off after its TLS
// handshake, as they are; it refuses any other.
type handedTLS struct {
	credentials.TransportCredentials
}

func (handedTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info, ok := h2.TLSInfo(c)
	if !ok {
		return nil, nil, errors.New("a connection that did not come through TLS")
	}
	return c, info, nil
}

func (handedTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func payload(n int) *testgrpc.Payload { return &testgrpc.Payload{Body: []byte(strings.Repeat("x", n))} }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStreamOnItsMethodIsServedHereWithItsMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var gotPeer atomic.Bool
	desc := testgrpc.TestService_ServiceDesc.Streams[2]
	b.handle = func(s *h2.Stream) error {
		_, ok := peer.FromContext(s.Context())
		gotPeer.Store(ok)
		return desc.Handler(echo{}, s)
	}
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-team", "blue", "x-token-bin", "\x00\x01")
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(i * 10)}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetPayload().GetBody()); got != i*10 {
			t.Fatalf("response %d: %d bytes, want %d", i, got, i*10)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF (status OK)", err)
	}
	if b.kept.Load() != 1 {
		t.Fatalf("%d streams served here, want 1", b.kept.Load())
	}
	b.admitMu.Lock()
	md := b.admitMD
	b.admitMu.Unlock()
	if got := md.Get("x-team"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("x-team = %q, want [blue]", got)
	}
	if got := md.Get("x-token-bin"); len(got) != 1 || got[0] != "\x00\x01" {
		t.Errorf("x-token-bin = %q, want the two bytes sent", got)
	}
	if !gotPeer.Load() {
		t.Error("the handler's context has no peer")
	}
}

func TestConnectionWhoseFirstCallIsAnotherMethodIsHandedOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := testgrpc.NewTestServiceClient(b.dial(t)).UnaryCall(ctxT(t), &testgrpc.SimpleRequest{Payload: payload(100)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetPayload().GetBody()) != 100 {
		t.Fatalf("echo of %d bytes, want 100", len(resp.GetPayload().GetBody()))
	}
	if b.kept.Load() != 0 {
		t.Fatalf("%d streams served here, want 0", b.kept.Load())
	}
	if n := b.srv.Connections(); n != 0 {
		t.Fatalf("the server still holds %d connections after handing off", n)
	}
}

func TestAnotherMethodOnAKeptConnectionIsServedThereToo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cc := b.dial(t)
	client := testgrpc.NewTestServiceClient(cc)
	stream, err := client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(n int) {
		t.Helper()
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(n)}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || len(resp.GetPayload().GetBody()) != n {
			t.Fatalf("echo: %v, %d bytes, want %d", err, len(resp.GetPayload().GetBody()), n)
		}
	}
	roundTrip(5)
	if _, err := client.UnaryCall(ctxT(t), &testgrpc.SimpleRequest{Payload: payload(7)}); err != nil {
		t.Fatalf("unary call after the stream: %v", err)
	}
	roundTrip(9)
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	if b.kept.Load() != 2 || b.srv.Connections() != 1 {
		t.Fatalf("%d calls served here on %d connections, want 2 on 1", b.kept.Load(), b.srv.Connections())
	}
}

func TestMessagesLargerThanTheWindowsCrossBothWays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1 << 20, 3 << 20, 17} {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{
			Payload:            payload(n),
			ResponseParameters: []*testgrpc.ResponseParameters{{Size: int32(n)}, {Size: 1}},
		}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []int{n, 1} {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if got := len(resp.GetPayload().GetBody()); got != want {
				t.Fatalf("response of %d bytes, want %d", got, want)
			}
		}
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v", err)
	}
}

func TestMessageOverTheLimitEndsTheStreamWithResourceExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *h2.Config, _ *bundle) { c.MaxRecvMsgSize = 1 << 20 })
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(2 << 20)})
	_, err = stream.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "vs. 1048576") {
		t.Fatalf("got %v, want ResourceExhausted naming the limit", err)
	}
}

func TestHandlerStatusReachesTheClientIntact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	msg := "naïve 100% refusal\nsecond line"
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.FailedPrecondition), Message: msg}})
	_, err = stream.Recv()
	if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != msg {
		t.Fatalf("got %v %q, want FailedPrecondition %q", s.Code(), s.Message(), msg)
	}
}

func TestAdmitRefusalEndsTheCallBeforeItsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ *h2.Config, b *bundle) {
		b.refuse = status.Error(codes.PermissionDenied, "worker token lacks the namespace")
	})
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || s.Message() != "worker token lacks the namespace" {
		t.Fatalf("got %v, want the refusal", err)
	}
	if b.kept.Load() != 0 {
		t.Fatal("the handler ran for a refused call")
	}
}

func TestWriteStatusFromElsewhereEndsBothSides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handlerErr := make(chan error, 1)
	b.handle = func(s *h2.Stream) error {
		ts := grpc.ServerTransportStreamFromContext(s.Context())
		w, ok := ts.(interface{ WriteStatus(*status.Status) error })
		if !ok {
			handlerErr <- errors.New("the transport stream has no WriteStatus")
			return nil
		}
		var m testgrpc.StreamingOutputCallRequest
		if err := s.RecvMsg(&m); err != nil {
			handlerErr <- err
			return err
		}
		go func() { _ = w.WriteStatus(status.New(codes.Unavailable, "worker timed out")) }()
		err := s.RecvMsg(&m)
		handlerErr <- err
		return err
	}
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{})
	_, err = stream.Recv()
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "worker timed out" {
		t.Fatalf("client got %v, want Unavailable: worker timed out", err)
	}
	if err := <-handlerErr; err == nil {
		t.Fatal("the handler's RecvMsg returned no error after the stream ended")
	}
}

func TestClientCancelAndDeadlineReachTheHandlersContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadline := make(chan time.Duration, 1)
	ended := make(chan error, 1)
	b.handle = func(s *h2.Stream) error {
		d, _ := s.Context().Deadline()
		deadline <- time.Until(d)
		<-s.Context().Done()
		ended <- s.Context().Err()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{}) // the headers go out with the first message
	if d := <-deadline; d < 59*time.Minute || d > time.Hour {
		t.Fatalf("handler's deadline is %v away, want about an hour", d)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler's context ended with %v, want canceled", err)
	}
}

func TestManyStreamsShareOneConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client := testgrpc.NewTestServiceClient(b.dial(t))
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			stream, err := client.FullDuplexCall(ctxT(t))
			if err != nil {
				errs <- err
				return
			}
			for j := range 10 {
				n := i*10 + j
				if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(n)}); err != nil {
					errs <- err
					return
				}
				resp, err := stream.Recv()
				if err != nil || len(resp.GetPayload().GetBody()) != n {
					errs <- errors.New("echo mismatch")
					return
				}
			}
			_ = stream.CloseSend()
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if b.kept.Load() != 50 {
		t.Fatalf("%d streams served here, want 50", b.kept.Load())
	}
	if n := b.srv.Connections(); n != 1 {
		t.Fatalf("%d connections, want the one", n)
	}
}

func TestShutdownWaitsForOpenStreams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(3)})
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.srv.Shutdown(ctxT(t)) }()
	// The stream still works while the server shuts down.
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(4)})
	if resp, err := stream.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 4 {
		t.Fatalf("during shutdown: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a stream open", err)
	default:
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestKeptConnectionWithoutStreamsClosesAfterTheIdleTimeout(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	b := setup(t, func(c *h2.Config, _ *bundle) {
		c.Clock = fake
		c.IdleTimeout = 5 * time.Minute
	})
	cc := b.dial(t)
	stream, err := testgrpc.NewTestServiceClient(cc).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(1)})
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v", err)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("client state %v, want READY", s)
	}
	changed := make(chan struct{})
	go func() {
		cc.WaitForStateChange(ctxT(t), connectivity.Ready)
		close(changed)
	}()
	// Four minutes of fake time leave the connection open; its silence is
	// not the client's fault while the server holds no stream.
	for range 240 {
		fake.Advance(time.Second)
	}
	if b.srv.Connections() != 1 {
		t.Fatalf("%d connections after 4 idle minutes, want 1", b.srv.Connections())
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("the connection is still open after 37 fake minutes without a stream")
		}
		fake.Advance(10 * time.Second)
		select {
		case <-changed:
			if b.kept.Load() != 1 {
				t.Fatalf("%d streams served, want 1", b.kept.Load())
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestOverTLSBothTheKeptAndTheHandedOffConnectionsServe(t *testing.T) {
	t.Parallel()
	b := setup(t, withTLS(t))
	var tlsPeer atomic.Bool
	desc := testgrpc.TestService_ServiceDesc.Streams[2]
	b.handle = func(s *h2.Stream) error {
		p, _ := peer.FromContext(s.Context())
		_, ok := p.AuthInfo.(credentials.TLSInfo)
		tlsPeer.Store(ok)
		return desc.Handler(echo{}, s)
	}
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(12)})
	if resp, err := stream.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 12 {
		t.Fatalf("stream over TLS: %v", err)
	}
	_ = stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v", err)
	}
	if !tlsPeer.Load() {
		t.Error("the kept stream's peer carries no TLS state")
	}
	// A second client whose first call is unary is handed off after the
	// handshake, and grpc-go serves it without shaking hands again.
	resp, err := testgrpc.NewTestServiceClient(b.dial(t)).UnaryCall(ctxT(t), &testgrpc.SimpleRequest{Payload: payload(33)})
	if err != nil || len(resp.GetPayload().GetBody()) != 33 {
		t.Fatalf("unary over TLS, handed off: %v", err)
	}
	if b.kept.Load() != 1 {
		t.Fatalf("%d calls served here, want the stream only", b.kept.Load())
	}
}

// rawClient opens a connection by hand, with x/net/http2's framer, and
// opens one FullDuplexCall stream on it, so the server keeps it.
func rawClient(t *testing.T, b *bundle) (*http2.Framer, net.Conn) {
	t.Helper()
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	fr.AllowIllegalWrites = true // the tests write what clients must not
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", b.addr},
		{":path", testgrpc.TestService_FullDuplexCall_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return fr, nc
}

func TestPingIsAnsweredAndAMalformedFrameEndsTheConnectionWithGoAway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fr, _ := rawClient(t, b)
	if err := fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	for acked := false; !acked; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the ping's answer: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			if p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
				t.Fatalf("ping answered with %v", p.Data)
			}
			acked = true
		}
	}
	if err := fr.WriteData(0, false, []byte("x")); err != nil { // DATA on stream 0
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol || !strings.Contains(string(g.DebugData()), "DATA on stream 0") {
				t.Fatalf("GOAWAY %v %q, want PROTOCOL_ERROR naming the fault", g.ErrCode, g.DebugData())
			}
			break
		}
	}
	if _, err := fr.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the GOAWAY: %v, want the connection closed", err)
	}
}

// grpcMessage is one length-prefixed gRPC message of a FullDuplexCall
// request carrying body as its payload.
func grpcMessage(t *testing.T, body string) []byte {
	t.Helper()
	b, err := proto.Marshal(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

func TestPaddingIsGivenBackSoPaddedMessagesNeverExhaustTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fr, _ := rawClient(t, b)
	const messages = 400 // with 200 bytes of padding each, past the 64 KiB window
	pad := make([]byte, 200)
	go func() {
		for range messages {
			if err := fr.WriteDataPadded(1, false, grpcMessage(t, "ping"), pad); err != nil {
				return
			}
		}
	}()
	echoed := 0
	for echoed < messages {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d echoes: %v", echoed, err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset (%v) after %d echoes", f.ErrCode, echoed)
		case *http2.DataFrame:
			echoed++ // each echo is one small message in one frame
		}
	}
}

func TestMessageCutShortByTheClientsEndIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan error, 1)
	b.handle = func(s *h2.Stream) error {
		var m testgrpc.StreamingOutputCallRequest
		err := s.RecvMsg(&m)
		got <- err
		return err
	}
	fr, _ := rawClient(t, b)
	whole := grpcMessage(t, "a message of some length")
	if err := fr.WriteData(1, true, whole[:len(whole)-4]); err != nil {
		t.Fatal(err)
	}
	err := <-got
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "inside a message") {
		t.Fatalf("RecvMsg: %v, want Internal naming the cut message", err)
	}
}

func TestHeadersSetByAHandlerThatSendsNoMessageStillReachTheClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle = func(s *h2.Stream) error {
		if err := s.SetHeader(metadata.Pairs("x-route", "blue")); err != nil {
			return err
		}
		return status.Error(codes.NotFound, "no such activity")
	}
	stream, err := testgrpc.NewTestServiceClient(b.dial(t)).FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{})
	if _, err := stream.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("Recv: %v, want NotFound", err)
	}
	md, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Get("x-route"); len(got) != 1 || got[0] != "blue" {
		t.Fatalf("x-route = %q, want [blue]", got)
	}
}

func TestReceiveHandsMessagesOverInOrderAndThenTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan string, 10)
	ended := make(chan error, 1)
	streams := make(chan *h2.Stream, 1)
	b.handle = func(s *h2.Stream) error {
		s.Receive(func(msg []byte) error {
			var m testgrpc.StreamingOutputCallRequest
			if err := proto.Unmarshal(msg, &m); err != nil {
				return err
			}
			if string(m.GetPayload().GetBody()) == "bad" {
				return status.Error(codes.InvalidArgument, "payload: bad")
			}
			got <- string(m.GetPayload().GetBody())
			return nil
		}, func(err error) {
			ended <- err
			if !errors.Is(err, io.EOF) {
				_ = s.WriteStatus(status.Convert(err)) // the taker writes the end
			}
		})
		streams <- s
		return h2.ErrDetached
	}
	client := testgrpc.NewTestServiceClient(b.dial(t))

	stream, err := client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two", "three"} {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	for _, want := range []string{"one", "two", "three"} {
		if g := <-got; g != want {
			t.Fatalf("delivered %q, want %q", g, want)
		}
	}
	if err := <-ended; !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v, want io.EOF", err)
	}
	st := <-streams
	// The stream stays open for the server to answer and end it.
	if err := st.SendMsg(&testgrpc.StreamingOutputCallResponse{Payload: payload(3)}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 3 {
		t.Fatalf("answer after the client's end: %v", err)
	}
	_ = st.WriteStatus(status.New(codes.OK, ""))
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the status: %v, want io.EOF", err)
	}

	// A message deliver refuses ends the delivery; the taker ends the stream
	// with its status.
	stream, err = client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte("bad")}})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("after a refused message: %v, want InvalidArgument", err)
	}
	if err := <-ended; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("end: %v, want the refusal", err)
	}
}
