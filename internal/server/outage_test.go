package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// cutter forwards TCP connections to a backend until Cut closes the
// listener and every connection: the database "goes away".
type cutter struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool // set by Cut: a connection accepted meanwhile is closed, not forwarded
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, backend string) *cutter {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{lis: lis}
	c.wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			if c.cut {
				c.mu.Unlock()
				in.Close()
				out.Close()
				continue
			}
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			c.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			c.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(c.Cut)
	return c
}

// Cut drops every connection and refuses new ones.
func (c *cutter) Cut() {
	c.lis.Close()
	c.mu.Lock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// When the database goes away, schedules fail as Unavailable (nothing is
// acknowledged), and a server that cannot renew its lease stops itself
// before the others could take its work over.
func TestClusterServerStopsWhenTheDatabaseGoesAway(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Fresh(t, 0)
	i := strings.Index(dsn, "@") + 1
	j := i + strings.IndexAny(dsn[i:], "/")
	proxy := newCutter(t, dsn[i:j])
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.Store, cfg.ServerName, cfg.Lease = dsn[:i]+proxy.lis.Addr().String()+dsn[j:], "cut-off", time.Second
	srv, err := startServer(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second server on the database itself sees the first's lease run out.
	survivorCfg := cfg
	survivorCfg.DataDir, survivorCfg.Store, survivorCfg.ServerName = t.TempDir(), dsn, "survivor"
	survivor, err := startServer(context.Background(), survivorCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = survivor.Stop(sctx)
	})
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	activities := aionv1.NewActivityServiceClient(cc)
	ctx := context.Background()
	if _, err := activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "o", Id: "before", ActivityType: "t"}); err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	cut := time.Now()
	_, err = activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "o", Id: "during", ActivityType: "t"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("schedule with the database gone: %v, want Unavailable", err)
	}
	select {
	case err := <-srv.Err():
		if !strings.Contains(err.Error(), "cluster membership") {
			t.Fatalf("server stopped with %v", err)
		}
		// It stops three quarters of a lease after its last renewal (so
		// within one lease of the cut), before a reaper may act; the bound
		// here leaves room for a loaded machine.
		took := time.Since(cut)
		t.Logf("server stopped %v after the database went away (lease %v)", took.Round(time.Millisecond), cfg.Lease)
		if took > cfg.Lease+cfg.Lease/2 {
			t.Fatalf("server stopped %v after the cut, well past its lease of %v", took, cfg.Lease)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept running without its database")
	}
	// Its metrics say why; the survivor's, that it reaped the lost server.
	if m := scrapeAt(t, srv.HTTPAddr()); m["aion_cluster_leases_lost_total"] != 1 || m["aion_cluster_lease_renewal_failures_total"] < 1 {
		t.Errorf("lost server's lease metrics: lost %v, renewal failures %v; want 1 and at least 1",
			m["aion_cluster_leases_lost_total"], m["aion_cluster_lease_renewal_failures_total"])
	}
	for deadline := time.Now().Add(10 * time.Second); scrapeAt(t, survivor.HTTPAddr())["aion_cluster_servers_reaped_total"] != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor did not count the lost server as reaped: %v", scrapeAt(t, survivor.HTTPAddr())["aion_cluster_servers_reaped_total"])
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Stop(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("shutdown without a database: %v", err) // leaving the cluster cannot succeed now
	}
}
