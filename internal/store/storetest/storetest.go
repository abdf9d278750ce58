// Package storetest is the conformance suite every store backend must pass.
// A backend's own test calls Run with a constructor that opens a fresh, empty
// store for each subtest.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// Opener returns a fresh, empty store; it registers its own cleanup on t.
type Opener func(t *testing.T) store.Store

// Run runs the whole conformance suite against the backend that open makes.
func Run(t *testing.T, open Opener) {
	t.Helper()
	t.Run("Namespace", func(t *testing.T) {
		t.Parallel()
		runNamespace(t, open)
	})
	t.Run("Activity", func(t *testing.T) {
		t.Parallel()
		runActivity(t, open)
	})
	t.Run("Workflow", func(t *testing.T) {
		t.Parallel()
		runWorkflow(t, open)
	})
	t.Run("Schedule", func(t *testing.T) {
		t.Parallel()
		runSchedule(t, open)
	})
	t.Run("Flow", func(t *testing.T) {
		t.Parallel()
		runFlow(t, open)
	})
	t.Run("Admit", func(t *testing.T) {
		t.Parallel()
		runAdmit(t, open)
	})
	t.Run("Retention", func(t *testing.T) {
		t.Parallel()
		runRetention(t, open)
	})
}

func runNamespace(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("RegisterCreatesThenIsIdempotent", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		before := time.Now().Add(-time.Second)
		first, created, err := s.RegisterNamespace(ctx, "orders", store.OriginWorker)
		if err != nil {
			t.Fatalf("first register: %v", err)
		}
		if !created {
			t.Fatal("first register: created = false, want true")
		}
		if first.Name != "orders" || first.Origin != store.OriginWorker {
			t.Fatalf("first register: got %+v", first)
		}
		if first.Placement.Mode != store.Unplaced || len(first.Placement.Nodes) != 0 {
			t.Fatalf("new namespace placement = %v, want unplaced", first.Placement)
		}
		if first.CreatedAt.Before(before) || !first.LastSeenAt.Equal(first.CreatedAt) {
			t.Fatalf("new namespace times: created %v last seen %v", first.CreatedAt, first.LastSeenAt)
		}

		again, created, err := s.RegisterNamespace(ctx, "orders", store.OriginSchedule)
		if err != nil {
			t.Fatalf("second register: %v", err)
		}
		if created {
			t.Fatal("second register: created = true, want false")
		}
		if again.Origin != store.OriginWorker {
			t.Fatalf("second register changed origin to %q; the first origin must stay", again.Origin)
		}
		if !again.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("second register changed created time %v -> %v", first.CreatedAt, again.CreatedAt)
		}
		if again.LastSeenAt.Before(first.LastSeenAt) {
			t.Fatalf("last seen went backwards: %v -> %v", first.LastSeenAt, again.LastSeenAt)
		}
		all, err := s.ListNamespaces(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(all) != 1 {
			t.Fatalf("list after two registers of one name: %d records, want 1", len(all))
		}
	})

	t.Run("RegisterRejectsUnknownOrigin", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, _, err := s.RegisterNamespace(ctx, "x", store.Origin("bogus")); err == nil {
			t.Fatal("register with origin \"bogus\": no error")
		}
		if _, err := s.GetNamespace(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused register left a record behind: %v", err)
		}
	})

	t.Run("GetMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		_, err := s.GetNamespace(ctx, "ghost")
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get missing: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("NamesAreNotNormalized", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, name := range []string{"Tenant", "tenant", "tenant "} {
			if _, created, err := s.RegisterNamespace(ctx, name, store.OriginExplicit); err != nil || !created {
				t.Fatalf("register %q: created=%v err=%v", name, created, err)
			}
		}
		all, err := s.ListNamespaces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 {
			t.Fatalf("three distinct names stored as %d records", len(all))
		}
	})

	t.Run("ListIsOrderedByName", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, name := range []string{"charlie", "alpha", "bravo"} {
			if _, _, err := s.RegisterNamespace(ctx, name, store.OriginExplicit); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.ListNamespaces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ns := range all {
			got = append(got, ns.Name)
		}
		if fmt.Sprint(got) != "[alpha bravo charlie]" {
			t.Fatalf("list order = %v", got)
		}
	})

	t.Run("SetPlacement", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, _, err := s.RegisterNamespace(ctx, "gpu", store.OriginExplicit); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			in   store.Placement
			want string
		}{
			{store.Placement{Mode: store.Pinned, Nodes: []string{"n2", "n1", "n2"}}, "pinned{n1,n2}"},
			{store.Placement{Mode: store.Prefer, Nodes: []string{"n3"}}, "prefer{n3}"},
			{store.Placement{Mode: store.Unplaced}, "unplaced"},
		}
		for _, c := range cases {
			got, err := s.SetPlacement(ctx, "gpu", c.in)
			if err != nil {
				t.Fatalf("set %v: %v", c.in, err)
			}
			if got.Placement.String() != c.want {
				t.Fatalf("set %v: returned %v, want %s", c.in, got.Placement, c.want)
			}
			read, err := s.GetNamespace(ctx, "gpu")
			if err != nil {
				t.Fatal(err)
			}
			if read.Placement.String() != c.want {
				t.Fatalf("set %v: read back %v, want %s", c.in, read.Placement, c.want)
			}
		}
	})

	t.Run("SetPlacementRefusesBadInputAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if _, _, err := s.RegisterNamespace(ctx, "gpu", store.OriginExplicit); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetPlacement(ctx, "gpu", store.Placement{Mode: store.Pinned, Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
		bad := []store.Placement{
			{Mode: store.Pinned},
			{Mode: store.Prefer, Nodes: []string{""}},
			{Mode: store.Unplaced, Nodes: []string{"n1"}},
			{Mode: "sideways", Nodes: []string{"n1"}},
		}
		for _, p := range bad {
			if _, err := s.SetPlacement(ctx, "gpu", p); err == nil {
				t.Errorf("set %+v: no error", p)
			}
		}
		read, err := s.GetNamespace(ctx, "gpu")
		if err != nil {
			t.Fatal(err)
		}
		if read.Placement.String() != "pinned{n1}" {
			t.Fatalf("refused placements changed the record to %v", read.Placement)
		}
	})

	t.Run("SetPlacementOnMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		_, err := s.SetPlacement(ctx, "ghost", store.Placement{Mode: store.Prefer, Nodes: []string{"n1"}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("set placement on missing: err = %v, want ErrNotFound", err)
		}
		if _, err := s.GetNamespace(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("set placement on missing created a record: %v", err)
		}
	})

	t.Run("ConcurrentFirstRegistrationsCreateOneRecord", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const racers = 16
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			errs    []error
		)
		start := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-start
				_, c, err := s.RegisterNamespace(ctx, "rush", store.OriginWorker)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if c {
					created++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("concurrent registers failed: %v", errs)
		}
		if created != 1 {
			t.Fatalf("%d of %d concurrent first registrations reported created, want exactly 1", created, racers)
		}
		all, err := s.ListNamespaces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 1 {
			t.Fatalf("concurrent first registrations left %d records, want 1", len(all))
		}
	})

	t.Run("CanceledContextChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := s.RegisterNamespace(cctx, "late", store.OriginExplicit); err == nil {
			t.Fatal("register with a canceled context: no error")
		}
		if _, err := s.GetNamespace(ctx, "late"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("register with a canceled context left a record: %v", err)
		}
	})
}
