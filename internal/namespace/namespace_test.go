package namespace_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
)

func TestAuthorizeWorker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		id      namespace.Identity
		asked   []string
		want    []string
		wantErr error
		naming  string
	}{
		{"GrantedSetSortedAndDeduplicated", namespace.NewIdentity("w", "a", "b"), []string{"b", "a", "b"}, []string{"a", "b"}, nil, ""},
		{"AllGrantsAnything", namespace.Anyone("ops"), []string{"zeta"}, []string{"zeta"}, nil, ""},
		{"EmptySetRefused", namespace.Anyone("ops"), nil, nil, namespace.ErrInvalid, "namespaces"},
		{"EmptyNameRefused", namespace.Anyone("ops"), []string{"a", ""}, nil, namespace.ErrInvalid, "empty"},
		{"OneUngrantedRefusesWhole", namespace.NewIdentity("w", "a"), []string{"a", "b"}, nil, namespace.ErrPermissionDenied, `"b"`},
		{"NamesAreNotNormalized", namespace.NewIdentity("w", "tenant"), []string{"Tenant"}, nil, namespace.ErrPermissionDenied, `"Tenant"`},
		{"TooManyRefusedBeforeAnyCheck", namespace.Anyone("ops"), names("n", namespace.MaxWorkerNamespaces+1), nil, namespace.ErrInvalid, "1001 given, at most 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := namespace.AuthorizeWorker(c.id, c.asked)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), c.naming) {
				t.Fatalf("error %q does not name %s", err, c.naming)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("set = %v, want %v", got, c.want)
			}
		})
	}
}

type bundle struct {
	store *sqlite.Store
	mu    sync.Mutex
	made  []string // namespaces reported created by the minter
}

func setup(t *testing.T) *bundle {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &bundle{store: s}
}

func (b *bundle) minter(policy namespace.AutoCreate) *namespace.Minter {
	return namespace.NewMinter(b.store, policy, func(ns store.Namespace) {
		b.mu.Lock()
		b.made = append(b.made, ns.Name+"/"+string(ns.Origin))
		b.mu.Unlock()
	})
}

func TestOpenMintsOnceWithOriginAndReportsCreation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.minter(namespace.Open)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, []string{"a", "b"}, store.OriginSchedule); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(ctx, []string{"a"}, store.OriginWorker); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.made, []string{"a/schedule", "b/schedule"}) {
		t.Fatalf("created events = %v", b.made)
	}
	rec, err := b.store.GetNamespace(ctx, "a")
	if err != nil || rec.Origin != store.OriginSchedule {
		t.Fatalf("record a = %+v, %v; want origin schedule", rec, err)
	}
}

func TestClosedRefusesUnknownAndExplicitCreateStillWorks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.minter(namespace.Closed)
	ctx := context.Background()
	_, err := m.Ensure(ctx, []string{"ghost"}, store.OriginWorker)
	if !errors.Is(err, namespace.ErrUnknown) || !strings.Contains(err.Error(), `"ghost"`) {
		t.Fatalf("err = %v, want ErrUnknown naming ghost", err)
	}
	if _, err := b.store.GetNamespace(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("closed policy created ghost: %v", err)
	}
	rec, created, err := m.Create(ctx, "ghost")
	if err != nil || !created || rec.Origin != store.OriginExplicit {
		t.Fatalf("explicit create under closed: %+v created=%v err=%v", rec, created, err)
	}
	if _, created, _ := m.Create(ctx, "ghost"); created {
		t.Fatal("second explicit create reported created")
	}
	if _, err := m.Ensure(ctx, []string{"ghost"}, store.OriginWorker); err != nil {
		t.Fatalf("known namespace under closed: %v", err)
	}
	if !slices.Equal(b.made, []string{"ghost/explicit"}) {
		t.Fatalf("created events = %v", b.made)
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	ns := func(mode store.PlacementMode, nodes ...string) store.Namespace {
		return store.Namespace{Name: "iso", Placement: store.Placement{Mode: mode, Nodes: nodes}}
	}
	cases := []struct {
		name  string
		ns    store.Namespace
		node  string
		admit bool
	}{
		{"UnplacedNoNode", ns(store.Unplaced), "", true},
		{"PreferNoNode", ns(store.Prefer, "n1"), "", true},
		{"PreferOtherNode", ns(store.Prefer, "n1"), "n9", true},
		{"PinnedListedNode", ns(store.Pinned, "n1", "n2"), "n2", true},
		{"PinnedOtherNode", ns(store.Pinned, "n1"), "n2", false},
		{"PinnedNoNode", ns(store.Pinned, "n1"), "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := namespace.Admit(c.ns, c.node)
			if c.admit && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.admit && (!errors.Is(err, namespace.ErrPlacement) || !strings.Contains(err.Error(), `"iso"`)) {
				t.Fatalf("err = %v, want ErrPlacement naming the namespace", err)
			}
		})
	}
}

func TestParseAutoCreate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]namespace.AutoCreate{"open": namespace.Open, "closed": namespace.Closed} {
		if got, err := namespace.ParseAutoCreate(in); err != nil || got != want {
			t.Fatalf("parse %q = %q, %v", in, got, err)
		}
	}
	if _, err := namespace.ParseAutoCreate("Open"); err == nil || !strings.Contains(err.Error(), `"Open"`) {
		t.Fatalf("parse Open: err = %v, want a refusal naming the value", err)
	}
}

// The minter caches records; a placement change through it is seen at once.
func TestPlacementChangeReachesAdmissionAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.minter(namespace.Open)
	ctx := context.Background()
	if err := m.AdmitWorker(ctx, []string{"gpu"}, ""); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if _, err := m.SetPlacement(ctx, "gpu", store.Placement{Mode: store.Pinned, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.AdmitWorker(ctx, []string{"gpu"}, ""); !errors.Is(err, namespace.ErrPlacement) {
		t.Fatalf("node-less worker after pinning: %v, want ErrPlacement", err)
	}
	if err := m.AdmitWorker(ctx, []string{"gpu"}, "n1"); err != nil {
		t.Fatalf("n1 worker after pinning: %v", err)
	}
	if _, err := m.SetPlacement(ctx, "never", store.Placement{Mode: store.Prefer, Nodes: []string{"n"}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("placing an unknown namespace: %v", err)
	}
}
