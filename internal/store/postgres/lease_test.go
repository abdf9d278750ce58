package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A claim of a server holds a lock on its membership row for as long as it
// runs, and a flow-limited claim can wait on another server's claim of the
// same type. The lease renewal must not queue behind it: a server whose
// claims wait would otherwise miss its renewals and lose its membership.
func TestALeaseRenewsWhileAClaimOfItsServerWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	st := open(t, dsn)
	self, err := st.JoinCluster(ctx, store.JoinRequest{Name: "a", Addr: "127.0.0.1:1", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	act := store.Activity{Namespace: "ns", ID: "job", TaskQueue: "q", ActivityType: "mail", Payload: []byte(`{}`),
		Fingerprint: "fp", Timeouts: store.Timeouts{StartToClose: time.Minute}, State: store.StateScheduled,
		ScheduledAt: now, ReadyAt: now}
	if _, err := st.Apply(ctx, []store.Write{store.InsertActivity{Activity: act}}); err != nil {
		t.Fatal(err)
	}

	// Another session holds the advisory lock that flow claims of
	// (ns, mail) take one at a time (class "flow"), as another server's
	// claim would.
	other, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2 || E'\n' || $3))`,
		0x666c6f77, "ns", "mail"); err != nil {
		t.Fatal(err)
	}

	claimed := make(chan error, 1)
	go func() {
		limit := store.FlowLimit{Namespace: "ns", Kind: store.FlowActivity, Type: "mail", Concurrency: 5}
		_, err := st.ClaimActivities(ctx, store.ClaimRequest{Owner: self.ID, Now: time.Now(), Claims: []store.Claim{
			{Namespace: "ns", TaskQueue: "q", ActivityType: "mail", Workers: []uint64{7}, Limit: &limit}}})
		claimed <- err
	}()
	// The claim has taken its membership lock and waits for the flow lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := other.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).
			Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim did not come to wait for the flow lock within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The claim waits until the flow lock is let go below, so any bound
	// tells a renewal that waits for it from one that does not; a long one
	// keeps a busy machine from failing the test.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.RenewLease(rctx, self.ID, time.Hour); err != nil {
		t.Fatalf("renew while the server's claim waits: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("the claim, once the flow lock was free: %v", err)
	}
}
