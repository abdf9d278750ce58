package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"github.com/aion-run/aion/internal/store/sqlite"
)

// nsStore is a namespace store that can be closed.
type nsStore interface {
	store.NamespaceStore
	Close() error
}

// stores opens each backend the caps must hold on: the SQLite file and a
// PostgreSQL database (skipped when PostgreSQL is unreachable).
var stores = []struct {
	name string
	open func(t *testing.T) nsStore
}{
	{"SQLite", func(t *testing.T) nsStore {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"PostgreSQL", func(t *testing.T) nsStore {
		s, err := postgres.Open(context.Background(), pgtest.Fresh(t, 4))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// eachStore runs f once per backend, with a fresh store.
func eachStore(t *testing.T, f func(t *testing.T, s nsStore)) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.open(t)
			t.Cleanup(func() { s.Close() })
			f(t, s)
		})
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func held(t *testing.T, s store.NamespaceStore) []string {
	t.Helper()
	all, err := s.ListNamespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ns := range all {
		out = append(out, ns.Name)
	}
	return out
}

// wantLimit checks err is a cap refusal naming every part.
func wantLimit(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, namespace.ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %s", err, p)
		}
	}
}

// The attack: one registration listing thousands of namespaces minted them
// all. Past the per-request cap it is refused whole; nothing is minted.
func TestRegistrationMintingPastThePerRequestCapIsRefusedWhole(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		ctx := context.Background()
		m := namespace.NewMinter(s, namespace.Open, nil)
		m.SetLimits(namespace.Limits{PerRequest: 3})
		err := m.AdmitWorker(ctx, names("flood", 4), "")
		wantLimit(t, err, "4 new namespaces", "the 3 one request may", "--max-mint-per-request")
		if got := held(t, s); len(got) != 0 {
			t.Fatalf("a refused registration minted %v", got)
		}
		// Namespaces that exist do not count: 2 existing and 3 new pass.
		if _, _, err := m.Create(ctx, "old-1"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.Create(ctx, "old-2"); err != nil {
			t.Fatal(err)
		}
		if err := m.AdmitWorker(ctx, append(names("new", 3), "old-1", "old-2"), ""); err != nil {
			t.Fatalf("3 new and 2 existing: %v", err)
		}
		if got := held(t, s); len(got) != 5 {
			t.Fatalf("held %v, want 5", got)
		}
	})
}

func TestMintingPastTheTotalCapIsRefusedWhole(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		ctx := context.Background()
		// Three namespaces exist before the minter starts: they count.
		for _, n := range names("before", 3) {
			if _, _, err := s.RegisterNamespace(ctx, n, store.OriginExplicit); err != nil {
				t.Fatal(err)
			}
		}
		m := namespace.NewMinter(s, namespace.Open, nil)
		m.SetLimits(namespace.Limits{Total: 5})
		_, err := m.Ensure(ctx, names("w", 3), store.OriginWorker)
		wantLimit(t, err, "3 new namespaces would make 6", "the 5 the server may hold", "--max-namespaces")
		if got := held(t, s); len(got) != 3 {
			t.Fatalf("a refused mint left %v", got)
		}
		if _, err := m.Ensure(ctx, names("w", 2), store.OriginWorker); err != nil {
			t.Fatalf("minting up to the cap: %v", err)
		}
		// Full: schedules and explicit creates of new names are refused;
		// existing names stay usable and re-creating one is idempotent.
		_, err = m.Ensure(ctx, []string{"one-more"}, store.OriginSchedule)
		wantLimit(t, err, "--max-namespaces")
		_, _, err = m.Create(ctx, "explicit")
		wantLimit(t, err, `create namespace "explicit"`, "--max-namespaces")
		if _, err := m.Ensure(ctx, []string{"before-0", "w-1"}, store.OriginSchedule); err != nil {
			t.Fatalf("existing namespaces at the cap: %v", err)
		}
		if _, created, err := m.Create(ctx, "before-2"); err != nil || created {
			t.Fatalf("re-creating an existing namespace at the cap: created=%v err=%v", created, err)
		}
		if got := held(t, s); len(got) != 5 {
			t.Fatalf("held %v, want 5", got)
		}
	})
}

// A namespace another server of a cluster created counts once the minter
// hears of it.
func TestNamespacesAnnouncedByOtherServersCount(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		ctx := context.Background()
		m := namespace.NewMinter(s, namespace.Open, nil)
		m.SetLimits(namespace.Limits{Total: 2})
		if _, err := m.Ensure(ctx, []string{"here"}, store.OriginWorker); err != nil {
			t.Fatal(err)
		}
		other, _, err := s.RegisterNamespace(ctx, "there", store.OriginWorker)
		if err != nil {
			t.Fatal(err)
		}
		m.Note(other)
		_, err = m.Ensure(ctx, []string{"third"}, store.OriginWorker)
		wantLimit(t, err, "would make 3")
	})
}

func TestScheduleBatchSharesOnePerRequestBudget(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		m := namespace.NewMinter(s, namespace.Open, nil)
		m.SetLimits(namespace.Limits{PerRequest: 2})
		batch := namespace.OneRequest(context.Background())
		for _, n := range []string{"b-0", "b-1", "b-1"} { // the repeat mints nothing
			if _, err := m.Ensure(batch, []string{n}, store.OriginSchedule); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		}
		_, err := m.Ensure(batch, []string{"b-2"}, store.OriginSchedule)
		wantLimit(t, err, "3 new namespaces", "--max-mint-per-request")
		// Another request has its own budget.
		if _, err := m.Ensure(namespace.OneRequest(context.Background()), []string{"b-2"}, store.OriginSchedule); err != nil {
			t.Fatalf("a second request: %v", err)
		}
		if got := held(t, s); !slices.Equal(got, []string{"b-0", "b-1", "b-2"}) {
			t.Fatalf("held %v", got)
		}
	})
}

// Concurrent requests on one server cannot together pass the total cap.
func TestConcurrentMintsStopAtTheTotalCap(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		m := namespace.NewMinter(s, namespace.Open, nil)
		m.SetLimits(namespace.Limits{Total: 10})
		var wg sync.WaitGroup
		errs := make([]error, 30)
		for i := range errs {
			wg.Go(func() {
				errs[i] = m.AdmitWorker(context.Background(), []string{fmt.Sprintf("c-%d", i)}, "")
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, namespace.ErrLimit):
				t.Fatalf("unexpected refusal: %v", err)
			}
		}
		if got := held(t, s); ok != 10 || len(got) != 10 {
			t.Fatalf("%d registrations admitted, %d namespaces held; want 10 and 10", ok, len(got))
		}
	})
}

// A registration refused by placement mints none of its new namespaces.
func TestPlacementRefusalMintsNothing(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		ctx := context.Background()
		m := namespace.NewMinter(s, namespace.Open, nil)
		if _, _, err := m.Create(ctx, "gpu"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.SetPlacement(ctx, "gpu", store.Placement{Mode: store.Pinned, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
		// "aaa" sorts before "gpu", so a mint-as-you-go minter would
		// have written it before meeting the pinned namespace.
		err := m.AdmitWorker(ctx, []string{"aaa", "gpu"}, "n2")
		if !errors.Is(err, namespace.ErrPlacement) {
			t.Fatalf("err = %v, want ErrPlacement", err)
		}
		if got := held(t, s); !slices.Equal(got, []string{"gpu"}) {
			t.Fatalf("a refused registration minted: %v", got)
		}
	})
}

func TestCapsDoNotApplyUnderClosedOrWhenZero(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s nsStore) {
		ctx := context.Background()
		m := namespace.NewMinter(s, namespace.Open, nil)
		if err := m.AdmitWorker(ctx, names("free", 150), ""); err != nil {
			t.Fatalf("no caps: %v", err)
		}
		closed := namespace.NewMinter(s, namespace.Closed, nil)
		closed.SetLimits(namespace.Limits{PerRequest: 1, Total: 1})
		if err := closed.AdmitWorker(ctx, names("free", 150), ""); err != nil {
			t.Fatalf("closed minter over existing namespaces: %v", err)
		}
		if err := closed.AdmitWorker(ctx, []string{"free-0", "ghost"}, ""); !errors.Is(err, namespace.ErrUnknown) {
			t.Fatalf("closed minter, unknown name: %v, want ErrUnknown", err)
		}
	})
}

func TestAWorkerMayServeUpToMaxWorkerNamespaces(t *testing.T) {
	t.Parallel()
	set, err := namespace.AuthorizeWorker(namespace.Anyone("ops"), names("n", namespace.MaxWorkerNamespaces))
	if err != nil || len(set) != namespace.MaxWorkerNamespaces {
		t.Fatalf("%d namespaces: %d authorized, %v", namespace.MaxWorkerNamespaces, len(set), err)
	}
}
