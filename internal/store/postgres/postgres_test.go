package postgres_test

import (
	"context"
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

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	t.Parallel()
	dsn := freshDatabase(t)
	const nodes = 4
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stores []*postgres.Store
		errs   []error
	)
	start := make(chan struct{})
	for range nodes {
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
		t.Fatalf("%d of %d concurrent opens failed: %v", len(errs), nodes, errs)
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
