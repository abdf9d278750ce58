package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// keyedRun is an open run of workflow type typ with concurrency key key.
func keyedRun(ns, id, typ, key string) store.Run {
	r := newRun(ns, "wf-"+id, id)
	r.WorkflowType = typ
	r.Flow.ConcurrencyKey = key
	return r
}

// admit calls AdmitRun and fails the test on an error.
func admit(t *testing.T, s store.Store, ns, id string, limit int) (bool, int) {
	t.Helper()
	ok, n, err := s.AdmitRun(context.Background(), ns, id, limit)
	if err != nil {
		t.Fatalf("admit %s/%s with limit %d: %v", ns, id, limit, err)
	}
	return ok, n
}

func runAdmit(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("AdmitRunRespectsTheLimitPerKeyAndTypeAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, r := range []store.Run{
			keyedRun("a", "k1", "order", "k"), keyedRun("a", "k2", "order", "k"), keyedRun("a", "k3", "order", "k"),
			keyedRun("a", "j1", "order", "j"), keyedRun("a", "ship1", "ship", "k"), keyedRun("b", "b1", "order", "k"),
			keyedRun("a", "free1", "order", ""), keyedRun("a", "free2", "order", ""),
		} {
			startRun(t, s, r, 1)
		}
		steps := []struct {
			ns, id    string
			limit     int
			wantOK    bool
			wantCount int
		}{
			{"a", "k1", 2, true, 1},
			{"a", "k2", 2, true, 2},
			{"a", "k3", 2, false, 2},   // the key is full
			{"a", "k1", 2, true, 2},    // already admitted: still true, counted once
			{"a", "k1", 1, true, 2},    // a lowered limit does not take an admission back
			{"a", "j1", 2, true, 1},    // another key of the type
			{"a", "ship1", 1, true, 1}, // the same key of another type
			{"b", "b1", 1, true, 1},    // the same key and type in another namespace
			{"a", "free1", 1, true, 0}, // no key: never held
			{"a", "free2", 1, true, 0},
			{"a", "k3", 3, true, 3}, // a raised limit lets it in
		}
		for _, st := range steps {
			ok, n := admit(t, s, st.ns, st.id, st.limit)
			if ok != st.wantOK || n != st.wantCount {
				t.Fatalf("admit %s/%s limit %d = %v, %d; want %v, %d", st.ns, st.id, st.limit, ok, n, st.wantOK, st.wantCount)
			}
		}
	})

	t.Run("AdmitRunWithoutLimitCountsForALimitSetLater", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i := range 3 {
			startRun(t, s, keyedRun("a", fmt.Sprintf("r%d", i), "order", "k"), 1)
		}
		for i, want := range []int{1, 2} {
			if ok, n := admit(t, s, "a", fmt.Sprintf("r%d", i), 0); !ok || n != want {
				t.Fatalf("admit r%d without a limit = %v, %d; want true, %d", i, ok, n, want)
			}
		}
		if ok, n := admit(t, s, "a", "r2", 2); ok || n != 2 {
			t.Fatalf("admit r2 with limit 2 after two admitted without one = %v, %d; want false, 2", ok, n)
		}
	})

	t.Run("ClosingAnAdmittedRunFreesItsSlot", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, id := range []string{"r1", "r2", "r3"} {
			startRun(t, s, keyedRun("a", id, "order", "k"), 1)
		}
		admit(t, s, "a", "r1", 1)
		if ok, _ := admit(t, s, "a", "r2", 1); ok {
			t.Fatal("r2 admitted while r1 holds the only slot")
		}
		closeRun(t, s, "a", "r1", 1, store.RunCompleted)
		if ok, n := admit(t, s, "a", "r2", 1); !ok || n != 1 {
			t.Fatalf("admit r2 after r1 closed = %v, %d; want true, 1", ok, n)
		}
		// A closed run is no longer admissible: it is not open.
		if _, _, err := s.AdmitRun(ctx, "a", "r1", 1); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("admit closed r1: %v, want ErrNotFound", err)
		}
		if _, _, err := s.AdmitRun(ctx, "a", "missing", 1); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("admit a missing run: %v, want ErrNotFound", err)
		}
		// A held run that never was admitted frees nothing when it closes.
		closeRun(t, s, "a", "r3", 1, store.RunTerminated)
		startRun(t, s, keyedRun("a", "r4", "order", "k"), 1)
		if ok, n := admit(t, s, "a", "r4", 2); !ok || n != 2 {
			t.Fatalf("admit r4 with limit 2 = %v, %d; want true, 2 (r2 and r4)", ok, n)
		}
	})

	t.Run("ConcurrentAdmissionsNeverExceedTheLimit", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const runs, limit = 12, 3
		for i := range runs {
			startRun(t, s, keyedRun("a", fmt.Sprintf("r%02d", i), "order", "k"), 1)
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			got  int
			errs []error
		)
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, n, err := s.AdmitRun(ctx, "a", fmt.Sprintf("r%02d", i), limit)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if n > limit {
					errs = append(errs, fmt.Errorf("r%02d saw %d admitted, over the limit %d", i, n, limit))
				}
				if ok {
					got++
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		if got != limit {
			t.Fatalf("%d runs admitted at once, want %d", got, limit)
		}
	})
}
