package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"github.com/aion-run/aion/internal/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// freshDatabase is an empty database for t with a small pool.
func freshDatabase(t *testing.T) string { return pgtest.Fresh(t, 4) }

func open(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, freshDatabase(t))
	})
}

func TestClusterConformance(t *testing.T) {
	t.Parallel()
	storetest.RunCluster(t, func(t *testing.T) storetest.ClusterStore {
		return open(t, freshDatabase(t))
	})
}

// An unreachable database, at open or later, is store.ErrUnavailable:
// callers branch on it without knowing the driver.
func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	if s, err := postgres.Open(ctx, "postgres://postgres@"+closed+"/postgres?sslmode=disable&connect_timeout=2"); err == nil {
		s.Close()
		t.Fatal("open on a closed port: no error")
	} else if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("open on a closed port: %v, want ErrUnavailable", err)
	}

	// Through a proxy that is then cut: calls on the open store fail so.
	dsn := freshDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	u.Host = p.addr()
	s := open(t, u.String())
	if _, err := s.ListNamespaces(ctx); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.cut()
	if _, err := s.ListNamespaces(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("after the cut, list namespaces: %v, want ErrUnavailable", err)
	}
	if _, err := s.ListWorkers(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("after the cut, list workers: %v, want ErrUnavailable", err)
	}
}

// proxy forwards TCP connections to a database until cut, after which it
// closes every connection and refuses new ones.
type proxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis}
	p.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(d, c); d.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, d); c.Close() })
		}
	})
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) cut() {
	p.lis.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t)
	const servers = 4
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stores []*postgres.Store
		errs   []error
	)
	start := make(chan struct{})
	for range servers {
		wg.Go(func() {
			<-start
			s, err := postgres.Open(context.Background(), dsn)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			stores = append(stores, s)
		})
	}
	close(start)
	wg.Wait()
	for _, s := range stores {
		t.Cleanup(func() { s.Close() })
	}
	if len(errs) > 0 {
		t.Fatalf("%d of %d concurrent opens failed: %v", len(errs), servers, errs)
	}

	ctx := context.Background()
	conn, err := pgxpool.New(ctx, dsn) // a pool: dsn carries pool settings
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var count, highest int
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(version), 0) FROM schema_migrations`).Scan(&count, &highest); err != nil {
		t.Fatal(err)
	}
	if highest == 0 || count != highest {
		t.Fatalf("schema_migrations holds %d rows up to version %d, want each version once", count, highest)
	}

	// Every store works on the one schema.
	if _, created, err := stores[0].RegisterNamespace(ctx, "shared", store.OriginExplicit); err != nil || !created {
		t.Fatalf("register on store 0: created=%v err=%v", created, err)
	}
	for i, s := range stores[1:] {
		if _, created, err := s.RegisterNamespace(ctx, "shared", store.OriginWorker); err != nil || created {
			t.Fatalf("register on store %d: created=%v err=%v", i+1, created, err)
		}
	}
}

func TestRecordsSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RegisterNamespace(ctx, "orders", store.OriginWorker); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPlacement(ctx, "orders", store.Placement{Mode: store.Pinned, Nodes: []string{"gpu-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := open(t, dsn)
	ns, err := reopened.GetNamespace(ctx, "orders")
	if err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	if ns.Origin != store.OriginWorker || ns.Placement.String() != "pinned{gpu-1}" {
		t.Fatalf("after reopen: got %+v", ns)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	open(t, dsn).Close()
	conn, err := pgxpool.New(ctx, dsn) // a pool: dsn carries pool settings
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (1000000, now())`); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(ctx, dsn); err == nil {
		s.Close()
		t.Fatal("open of a database with a newer schema: no error")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open of a database with a newer schema: %v", err)
	}
}
