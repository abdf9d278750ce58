package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
)

// sharedConn dials the rig's server once for Options.Conn, counting the
// TCP connections it opens; closed when the test ends.
func sharedConn(t *testing.T, addr string) (*grpc.ClientConn, *atomic.Int32) {
	t.Helper()
	var dials atomic.Int32
	cc, err := Dial(addr, append(servertest.FastReconnect(), grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", a)
	}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, &dials
}

// runShared runs a worker on cc until the test ends; Run's error is sent
// on the returned channel once it returns.
func runShared(t *testing.T, cc *grpc.ClientConn, opts Options, register func(*Worker)) <-chan error {
	t.Helper()
	opts.Conn = cc
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	opts.MinBackoff, opts.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	w, err := New("", opts)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	ctx, stop := context.WithCancel(context.Background())
	result, done := make(chan error, 1), make(chan struct{})
	go func() {
		result <- w.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return within 20s of its context ending")
		}
	})
	return result
}

// TestWorkersSharingAConnRunOnOneConnectionAndLeaveItOpen runs three
// workers on one connection from Dial: each runs its own activity, one TCP
// connection is opened for all three, and it stays usable after their Run
// calls return (the caller owns it).
func TestWorkersSharingAConnRunOnOneConnectionAndLeaveItOpen(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cc, dials := sharedConn(t, r.srv.Addr)
	var runs []<-chan error
	var stops []context.CancelFunc
	for i := range 3 {
		queue := fmt.Sprintf("q%d", i)
		ctx, stop := context.WithCancel(context.Background())
		w, err := New("", Options{Namespaces: []string{"ns"}, TaskQueue: queue, Conn: cc, Logger: testLogger(),
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		RegisterActivity(w, "whoami", func(context.Context, struct{}) (string, error) { return queue, nil })
		result, done := make(chan error, 1), make(chan struct{})
		go func() {
			result <- w.Run(ctx)
			close(done)
		}()
		stops, runs = append(stops, stop), append(runs, result)
		t.Cleanup(func() {
			stop()
			<-done
		})
	}
	for i := range 3 {
		queue := fmt.Sprintf("q%d", i)
		id := r.schedule(t, client.ScheduleOptions{TaskQueue: queue, ActivityType: "whoami"}, struct{}{})
		out, err := client.WaitResult[string](waitCtx(t), r.c, "ns", id)
		if err != nil || out != queue {
			t.Fatalf("activity on %s: %q, %v; want the result of that queue's worker", queue, out, err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("three workers on one Conn opened %d connections; want 1", n)
	}
	for i, stop := range stops {
		stop()
		select {
		case err := <-runs[i]:
			if err != nil {
				t.Fatalf("worker %d: Run = %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("worker %d: Run did not return", i)
		}
	}
	if s := cc.GetState(); s == connectivity.Shutdown {
		t.Fatalf("the shared connection is %v after the workers stopped; want it left open", s)
	}
}

// TestWorkerOnASharedConnSendsItsOwnToken: on a server that asks for
// tokens, a worker on a connection dialed without one registers with the
// token of its Options, and one without a token is refused.
func TestWorkerOnASharedConnSendsItsOwnToken(t *testing.T) {
	t.Parallel()
	const secret = "aion_shared-conn-test-secret"
	r := newRig(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = []auth.APIKey{{Name: "w", SHA256: auth.HashSecret(secret), Namespaces: []string{"ns"}, Roles: []auth.Role{auth.RoleWorker}}}
	})
	cc, _ := sharedConn(t, r.srv.Addr)
	runShared(t, cc, Options{Namespaces: []string{"ns"}, TaskQueue: "with-token", Token: secret}, echo)
	r.srv.WaitForWorker(t, nil)
	refused := runShared(t, cc, Options{Namespaces: []string{"ns"}, TaskQueue: "without"}, echo)
	select {
	case err := <-refused:
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Run of the worker without a token = %v; want Unauthenticated", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the worker without a token was not refused")
	}
}

// TestNewRefusesConnWithAnAddressOrDialOptions: a worker takes its
// connection from Options.Conn or dials address, not both, and dial
// options cannot apply to a connection already made.
func TestNewRefusesConnWithAnAddressOrDialOptions(t *testing.T) {
	t.Parallel()
	cc, err := Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, tc := range []struct {
		name    string
		address string
		opts    Options
		want    string
	}{
		{"both", "127.0.0.1:1", Options{Conn: cc}, `address "127.0.0.1:1" and Options.Conn both set`},
		{"dial options", "", Options{Conn: cc, DialOptions: servertest.FastReconnect()}, "Options.DialOptions set with Options.Conn"},
		{"neither", "", Options{}, "address is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Namespaces = []string{"ns"}
			if _, err := New(tc.address, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := Dial(""); err == nil || !strings.Contains(err.Error(), "address is empty") {
		t.Fatalf("Dial(\"\") = %v; want address is empty", err)
	}
}
