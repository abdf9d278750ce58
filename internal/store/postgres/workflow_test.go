package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An owned append applies only to a run that server holds; an unowned one
// applies whoever holds the run; closing the run leaves it without an
// owner. The test sets the owner in the database; ClaimRuns is covered by
// the cluster conformance suite.
func TestOwnedAppendsApplyOnlyForTheOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s := open(t, dsn)
	db, err := pgxpool.New(ctx, dsn) // a pool: dsn carries pool settings
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range []string{"owned", "free"} {
		got, err := s.Apply(ctx, []store.Write{store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: "wf-" + id, RunID: id}}})
		if err != nil || !got[0] {
			t.Fatalf("insert run %s: %v, %v", id, got, err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE runs SET owner = 5 WHERE run_id = 'owned'`); err != nil {
		t.Fatal(err)
	}
	ev := func(seq int64) []store.Event { return []store.Event{{Seq: seq, Data: []byte("e")}} }
	steps := []struct {
		name string
		w    store.AppendEvents
		want bool
	}{
		{"another server on an owned run", store.AppendEvents{Namespace: "ns", RunID: "owned", After: 0, Events: ev(1), Owner: 6}, false},
		{"the owner", store.AppendEvents{Namespace: "ns", RunID: "owned", After: 0, Events: ev(1), Owner: 5}, true},
		{"an unowned write on an owned run", store.AppendEvents{Namespace: "ns", RunID: "owned", After: 1, Events: ev(2)}, true},
		{"the owner closing", store.AppendEvents{Namespace: "ns", RunID: "owned", After: 2, Events: ev(3), Owner: 5,
			Update: store.RunUpdate{Status: store.RunCompleted}}, true},
		{"a server on a run nobody holds", store.AppendEvents{Namespace: "ns", RunID: "free", After: 0, Events: ev(1), Owner: 6}, false},
	}
	for _, st := range steps {
		got, err := s.Apply(ctx, []store.Write{st.w})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got[0] != st.want {
			t.Fatalf("%s: changed = %v, want %v", st.name, got[0], st.want)
		}
	}
	r, err := s.GetRun(ctx, "ns", "owned")
	if err != nil || r.HistoryLength != 3 || r.Status != store.RunCompleted {
		t.Fatalf("owned run after the appends: %+v, %v", r, err)
	}
	var owner int64
	if err := db.QueryRow(ctx, `SELECT owner FROM runs WHERE run_id = 'owned'`).Scan(&owner); err != nil || owner != 0 {
		t.Fatalf("owner of the closed run = %d, %v; want 0", owner, err)
	}
}

// Servers of a cluster, each with its own store on the shared database,
// racing to start one workflow id: exactly one run is recorded.
func TestConcurrentStartsFromSeveralServersRecordOneRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	const servers, rounds = 3, 10
	var all []store.Store
	for range servers {
		all = append(all, open(t, dsn))
	}
	for round := range rounds {
		wf := fmt.Sprintf("wf-%d", round)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  int
			errs []error
		)
		start := make(chan struct{})
		for i, s := range all {
			wg.Go(func() {
				<-start
				got, err := s.Apply(ctx, []store.Write{store.InsertRun{Run: store.Run{Namespace: "ns", WorkflowID: wf,
					RunID: fmt.Sprintf("%s-server-%d", wf, i)}, Events: []store.Event{{Seq: 1, Data: []byte("started")}}}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if got[0] {
					won++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 || won != 1 {
			t.Fatalf("round %d: %d of %d servers started %s (errors %v), want exactly 1", round, won, servers, wf, errs)
		}
		runs, err := all[0].ListRuns(ctx, store.RunFilter{Namespace: "ns", WorkflowID: wf})
		if err != nil || len(runs) != 1 {
			t.Fatalf("round %d: runs of %s = %d, %v; want 1", round, wf, len(runs), err)
		}
	}
}
