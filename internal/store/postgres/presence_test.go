package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/cluster"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
)

// A server whose process is gone while its lease still runs (its store
// closed without leaving, as a killed process's connections close) is
// replaced at once by a server of its name, and the gone server's ID is
// fenced: it renews, claims and ends nothing, and the attempt it ran is
// recorded lost and runs again under the new server.
func TestAGoneServerIsReplacedAtOnceAndStaysFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	st := open(t, dsn)

	old, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := old.JoinCluster(ctx, store.JoinRequest{Name: "a", Addr: "127.0.0.1:1", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	act := store.Activity{Namespace: "ns", ID: "job", TaskQueue: "q", ActivityType: "echo", Payload: []byte(`{}`),
		Fingerprint: "fp", Timeouts: store.Timeouts{StartToClose: time.Minute}, State: store.StateScheduled,
		ScheduledAt: now, ReadyAt: now}
	if _, err := st.Apply(ctx, []store.Write{store.InsertActivity{Activity: act}}); err != nil {
		t.Fatal(err)
	}
	claim := func(s *postgres.Store, owner store.ServerID) []store.Activity {
		t.Helper()
		got, err := s.ClaimActivities(ctx, store.ClaimRequest{Owner: owner, Now: time.Now(), Claims: []store.Claim{
			{Namespace: "ns", TaskQueue: "q", ActivityType: "echo", Workers: []uint64{7}}}})
		if err != nil {
			t.Fatalf("claim as server %d: %v", owner, err)
		}
		return got[0].Activities
	}
	if got := claim(old, gone.ID); len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("the first server claimed %+v, want attempt 1 of the activity", got)
	}
	old.Close() // no LeaveCluster: the process is gone, its lease runs for an hour

	// The restart under the same name is ready once the old session has
	// ended, long before the lease would have run out.
	jctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	began := time.Now()
	self, err := cluster.Join(jctx, st, store.JoinRequest{Name: "a", Addr: "127.0.0.1:1", Lease: time.Hour}, nil)
	if err != nil {
		t.Fatalf("join under the name of a gone server: %v after %v, want it taken over at once", err, time.Since(began))
	}
	if self.ID <= gone.ID {
		t.Fatalf("joined as server %d, want a new ID after %d", self.ID, gone.ID)
	}

	// Fencing: the gone server's ID renews, claims and ends nothing.
	if err := st.RenewLease(ctx, gone.ID, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("renewal of the replaced server: %v, want ErrLeaseLost", err)
	}
	end := store.EndAttempt{Namespace: "ns", ID: "job", State: store.StateCompleted, Result: []byte(`late`),
		StartedAt: now, ClosedAt: time.Now(), Owner: gone.ID,
		Attempt: &store.Attempt{Number: 1, WorkerID: 7, StartedAt: now, EndedAt: time.Now(), Outcome: store.OutcomeCompleted}}
	changed, err := st.Apply(ctx, []store.Write{end})
	if err != nil || changed[0] {
		t.Fatalf("late result of the replaced server: changed %v, err %v; want it refused", changed, err)
	}
	if got := claim(st, gone.ID); len(got) != 0 {
		t.Fatalf("the replaced server claimed %+v, want nothing", got)
	}
	atts, err := st.ListAttempts(ctx, "ns", "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || atts[0].Outcome != store.OutcomeFailed || atts[0].Failure == nil || atts[0].Failure.Type != "server_lost" {
		t.Fatalf("attempts %+v, want attempt 1 recorded lost (server_lost)", atts)
	}
	if got := claim(st, self.ID); len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("the new server claimed %+v, want attempt 2 of the activity", got)
	}

	// The new server is present: another start under its name is refused.
	third := open(t, dsn)
	if _, err := third.JoinCluster(ctx, store.JoinRequest{Name: "a", Lease: time.Hour}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("join under the name of a live server: %v, want ErrNameTaken", err)
	}
}

// A server that left ends its presence; one that is still open keeps its
// name even when its lease is long, and a name is refused to a second
// start while its holder lives.
func TestALiveServerKeepsItsNameAndLeavingFreesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	first, err := a.JoinCluster(ctx, store.JoinRequest{Name: "x", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.JoinCluster(ctx, store.JoinRequest{Name: "x", Lease: time.Hour}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("join under a live server's name: %v, want ErrNameTaken", err)
	}
	if err := a.LeaveCluster(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JoinCluster(ctx, store.JoinRequest{Name: "x", Lease: time.Hour}); err != nil {
		t.Fatalf("join after the holder left: %v", err)
	}
	if _, err := a.JoinCluster(ctx, store.JoinRequest{Name: "x", Lease: time.Hour}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("join under the name the other store now holds: %v, want ErrNameTaken", err)
	}
}
