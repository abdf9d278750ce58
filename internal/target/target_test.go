package target_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/target"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a gRPC health server on a loopback port.
func serve(t *testing.T) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	return lis.Addr().String(), s.Stop
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func check(ctx context.Context, cc *grpc.ClientConn) error {
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	return err
}

func TestAListFailsOverToALiveServer(t *testing.T) {
	t.Parallel()
	live, stopLive := serve(t)
	defer stopLive()
	other, stopOther := serve(t)
	cc, err := target.Dial(deadAddr(t)+", "+live+","+other, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := check(ctx, cc); err != nil {
		t.Fatalf("with one dead address in the list: %v", err)
	}
	stopOther() // whichever was in use, one live server remains
	for {
		if err := check(ctx, cc); err == nil {
			return
		} else if ctx.Err() != nil {
			t.Fatalf("after one server stopped: %v", err)
		}
	}
}

// serveRecording is serve with an interceptor that records each call's
// authorization metadata.
func serveRecording(t *testing.T) (addr string, seen <-chan []string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []string, 8)
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		ch <- md.Get("authorization")
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	return lis.Addr().String(), ch, s.Stop
}

func TestDialSDKSendsTheTokenOnEveryCallAndNoneWithout(t *testing.T) {
	t.Parallel()
	addr, seen, stop := serveRecording(t)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		token string
		want  string
	}{
		{"s3cret", "Bearer s3cret"},
		{"", ""},
	} {
		cc, err := target.DialSDK(addr, tc.token)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := check(ctx, cc); err != nil {
				t.Fatalf("token %q: %v", tc.token, err)
			}
			if got := strings.Join(<-seen, ","); got != tc.want {
				t.Errorf("token %q: the server saw authorization %q, want %q", tc.token, got, tc.want)
			}
		}
		cc.Close()
	}
}

func TestAListRefusesAMalformedEntry(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:1,", "127.0.0.1:1,nohostport", ",127.0.0.1:1"} {
		if cc, err := target.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			cc.Close()
			t.Errorf("Dial(%q) accepted", addr)
		}
	}
}
