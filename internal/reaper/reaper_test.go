package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/reaper"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"github.com/aion-run/aion/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait for a pass, so a lost one fails the test with
// a message instead of hanging it.
const patience = 30 * time.Second

// epoch is where every test's fake clock starts.
var epoch = time.Date(2030, 1, 7, 9, 0, 0, 0, time.UTC)

// backends open a fresh store of each kind.
var backends = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"sqlite", func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(t *testing.T) store.Store {
		s, err := postgres.Open(context.Background(), pgtest.Fresh(t, 4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// recorder is an Observer that keeps what it is told and hands each pass
// to the test.
type recorder struct {
	mu     sync.Mutex
	reaped map[string]int // by "namespace/kind"
	max    int            // the largest single report
	passes chan reaper.Pass
}

func newRecorder() *recorder {
	return &recorder{reaped: map[string]int{}, passes: make(chan reaper.Pass, 16)}
}

func (r *recorder) Reaped(ns string, k reaper.Kind, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reaped[ns+"/"+string(k)] += n
	r.max = max(r.max, n)
}

func (r *recorder) Passed(p reaper.Pass) { r.passes <- p }

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped[key]
}

// harness runs a reaper on a fake clock over one store.
type harness struct {
	t   *testing.T
	st  store.Store
	clk *clock.Fake
	obs *recorder
	r   *reaper.Reaper
}

func start(t *testing.T, st store.Store, interval time.Duration, batch int) *harness {
	h := &harness{t: t, st: st, clk: clock.NewFake(epoch), obs: newRecorder()}
	h.r = reaper.New(reaper.Config{Store: st, Clock: h.clk, Interval: interval, Batch: batch, Observer: h.obs})
	if err := h.r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.r.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return h
}

// advance moves the clock to at, once the reaper waits for its next pass,
// and returns that pass.
func (h *harness) advance(at time.Time) reaper.Pass {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := h.clk.BlockUntil(ctx, 1); err != nil {
		h.t.Fatalf("reaper never waited for its next pass: %v", err)
	}
	h.clk.AdvanceTo(at)
	select {
	case p := <-h.obs.passes:
		if p.Err != nil {
			h.t.Fatalf("pass at %v: %v", at, p.Err)
		}
		return p
	case <-ctx.Done():
		h.t.Fatalf("no pass after moving the clock to %v", at)
		return reaper.Pass{}
	}
}

func mustApply(t *testing.T, st store.Store, ws ...store.Write) {
	t.Helper()
	changed, err := st.Apply(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range changed {
		if !c {
			t.Fatalf("write %d (%T) changed nothing", i, ws[i])
		}
	}
}

func activity(ns, id string, at time.Time) store.Activity {
	return store.Activity{Namespace: ns, ID: id, TaskQueue: "default", ActivityType: "echo", Payload: []byte(`{}`),
		Fingerprint: "fp-" + id, State: store.StateScheduled, ScheduledAt: at, ReadyAt: at}
}

// closedActivity inserts an activity of ns and completes it at closedAt.
func closedActivity(t *testing.T, st store.Store, ns, id string, closedAt time.Time) {
	t.Helper()
	mustApply(t, st, store.InsertActivity{Activity: activity(ns, id, closedAt.Add(-time.Second))})
	mustApply(t, st, store.EndAttempt{Namespace: ns, ID: id, StartedAt: closedAt.Add(-time.Second),
		Attempt: &store.Attempt{Number: 1, WorkerID: 1, StartedAt: closedAt.Add(-time.Second), EndedAt: closedAt,
			Outcome: store.OutcomeCompleted},
		State: store.StateCompleted, Result: []byte(`"ok"`), ClosedAt: closedAt})
}

// closedRun starts a run of ns and completes it at closedAt.
func closedRun(t *testing.T, st store.Store, ns, id string, closedAt time.Time) {
	t.Helper()
	mustApply(t, st, store.InsertRun{Run: store.Run{Namespace: ns, WorkflowID: "wf-" + id, RunID: id, WorkflowType: "order",
		TaskQueue: "default", Status: store.RunRunning, Fingerprint: "fp-" + id, StartedAt: closedAt.Add(-time.Second)},
		Events: []store.Event{{Seq: 1, Data: []byte("started")}}})
	mustApply(t, st, store.AppendEvents{Namespace: ns, RunID: id, After: 1, Events: []store.Event{{Seq: 2, Data: []byte("closed")}},
		Update: store.RunUpdate{Status: store.RunCompleted, ClosedAt: closedAt}})
}

func exists(t *testing.T, st store.Store, kind reaper.Kind, ns, id string) bool {
	t.Helper()
	var err error
	if kind == reaper.KindActivity {
		_, err = st.GetActivity(context.Background(), ns, id)
	} else {
		_, err = st.GetRun(context.Background(), ns, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func register(t *testing.T, st store.Store, ns string, r store.Retention) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := st.RegisterNamespace(ctx, ns, store.OriginExplicit); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetRetention(ctx, ns, r); err != nil {
		t.Fatal(err)
	}
}

func TestPassesDeleteClosedWorkOnlyOnceItsNamespacesRetentionPassed(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			register(t, st, "short", store.Retention(time.Minute))
			register(t, st, "long", 0) // the default: a week
			for _, ns := range []string{"short", "long"} {
				closedActivity(t, st, ns, "done", epoch)
				closedRun(t, st, ns, "run", epoch)
			}
			// Open work far older than any retention is kept.
			mustApply(t, st, store.InsertActivity{Activity: activity("short", "waiting", epoch.Add(-30*24*time.Hour))})
			mustApply(t, st, store.InsertRun{Run: store.Run{Namespace: "short", WorkflowID: "wf-open", RunID: "open",
				WorkflowType: "order", TaskQueue: "default", Status: store.RunRunning, Fingerprint: "fp-open",
				StartedAt: epoch.Add(-30 * 24 * time.Hour)}, Events: []store.Event{{Seq: 1, Data: []byte("started")}}})

			h := start(t, st, 10*time.Second, 100)
			if p := h.advance(epoch.Add(50 * time.Second)); p.Activities != 0 || p.Runs != 0 {
				t.Fatalf("pass 50s after the close reaped %+v; the retention is a minute", p)
			}
			if !exists(t, st, reaper.KindActivity, "short", "done") || !exists(t, st, reaper.KindRun, "short", "run") {
				t.Fatal("work reaped before its retention passed")
			}
			if p := h.advance(epoch.Add(61 * time.Second)); p.Activities != 1 || p.Runs != 1 {
				t.Fatalf("pass 61s after the close reaped %+v, want 1 activity and 1 run", p)
			}
			if exists(t, st, reaper.KindActivity, "short", "done") || exists(t, st, reaper.KindRun, "short", "run") {
				t.Fatal("closed work of namespace short outlived its one-minute retention")
			}
			if atts, err := st.ListAttempts(context.Background(), "short", "done"); err == nil && len(atts) != 0 {
				t.Fatalf("attempts of a reaped activity remain: %+v", atts)
			}
			for _, w := range []struct {
				kind   reaper.Kind
				ns, id string
			}{{reaper.KindActivity, "short", "waiting"}, {reaper.KindRun, "short", "open"},
				{reaper.KindActivity, "long", "done"}, {reaper.KindRun, "long", "run"}} {
				if !exists(t, st, w.kind, w.ns, w.id) {
					t.Errorf("%s %s/%s was reaped; it is open or within its retention", w.kind, w.ns, w.id)
				}
			}
			if got := h.obs.count("short/activity") + h.obs.count("short/run"); got != 2 {
				t.Fatalf("observer told of %d reaped rows of namespace short, want 2", got)
			}
			// A week on, the default retention has passed too.
			if p := h.advance(epoch.Add(7*24*time.Hour + time.Second)); p.Activities != 1 || p.Runs != 1 {
				t.Fatalf("pass a week after the close reaped %+v, want namespace long's activity and run", p)
			}
			if !exists(t, st, reaper.KindActivity, "short", "waiting") {
				t.Fatal("an open activity older than every retention was reaped")
			}
		})
	}
}

func TestAPassDeletesInBatchesOfAtMostTheBatchSize(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := b.open(t)
			register(t, st, "ns", store.Retention(time.Minute))
			for i := range 7 {
				closedActivity(t, st, "ns", fmt.Sprintf("a%d", i), epoch.Add(time.Duration(i)*time.Millisecond))
			}
			h := start(t, st, time.Minute, 3)
			p := h.advance(epoch.Add(2 * time.Minute))
			if p.Activities != 7 {
				t.Fatalf("pass reaped %d activities, want all 7", p.Activities)
			}
			// 3 + 3 + 1 activities, then one empty batch of runs.
			if p.Batches != 4 {
				t.Fatalf("pass took %d batches, want 4 (3+3+1 activities, 0 runs)", p.Batches)
			}
			if h.obs.max > 3 {
				t.Fatalf("one batch deleted %d rows; the batch size is 3", h.obs.max)
			}
		})
	}
}

func TestStopEndsAPassWaitingForItsInterval(t *testing.T) {
	t.Parallel()
	st := backends[0].open(t)
	clk := clock.NewFake(epoch)
	r := reaper.New(reaper.Config{Store: st, Clock: clk})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("a second Start did not fail")
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// slowStore is a real store whose reaping batches take perRow of the fake
// clock for each row asked for, as a loaded machine's would, and which
// records the batch sizes asked for.
type slowStore struct {
	store.Store
	clk    *clock.Fake
	perRow time.Duration
	mu     sync.Mutex
	// limits are the batch sizes asked for, in order.
	limits []int
}

func (s *slowStore) ReapActivities(ctx context.Context, ns string, cutoff time.Time, limit int) (int, error) {
	s.mu.Lock()
	s.limits = append(s.limits, limit)
	s.mu.Unlock()
	s.clk.Advance(time.Duration(limit) * s.perRow)
	return s.Store.ReapActivities(ctx, ns, cutoff, limit)
}

func TestBatchesAdaptToTheTargetBetweenTheFloorAndTheBatchSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		perRow time.Duration
		n      int
		want   []int
	}{
		// 100 rows take 100ms against a 10ms target: halve to the floor
		// of 50 and stay there, however slow.
		{"SlowHalvesDownToTheFloor", time.Millisecond, 400, []int{100, 50, 50, 50, 50, 50, 50, 50}},
		// 100 rows take 1ms: double up to the batch size of 500.
		{"FastDoublesUpToTheBatchSize", 10 * time.Microsecond, 1300, []int{100, 200, 400, 500, 500}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := backends[0].open(t)
			register(t, base, "ns", store.Retention(time.Minute))
			n := c.n
			var inserts, ends []store.Write
			for i := range n {
				id := fmt.Sprintf("a%04d", i)
				inserts = append(inserts, store.InsertActivity{Activity: activity("ns", id, epoch.Add(-time.Second))})
				ends = append(ends, store.EndAttempt{Namespace: "ns", ID: id, StartedAt: epoch.Add(-time.Second),
					State: store.StateCompleted, ClosedAt: epoch})
			}
			mustApply(t, base, inserts...)
			mustApply(t, base, ends...)

			clk := clock.NewFake(epoch)
			st := &slowStore{Store: base, clk: clk, perRow: c.perRow}
			obs := newRecorder()
			r := reaper.New(reaper.Config{Store: st, Clock: clk, Interval: time.Hour, Batch: 500,
				BatchTarget: 10 * time.Millisecond, Observer: obs})
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := r.Stop(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			if err := clk.BlockUntil(ctx, 1); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Hour)
			// The pass pauses after each batch as long as it took: let the
			// fake time run until it reports.
			var p reaper.Pass
			for done := false; !done; {
				select {
				case p = <-obs.passes:
					done = true
				case <-ctx.Done():
					t.Fatal("no pass")
				default:
					if err := clk.BlockUntil(ctx, 1); err != nil {
						t.Fatal(err)
					}
					clk.Advance(time.Millisecond)
				}
			}
			if p.Err != nil || p.Activities != n {
				t.Fatalf("pass reaped %d activities (%v), want all %d", p.Activities, p.Err, n)
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if !slices.Equal(st.limits, c.want) {
				t.Fatalf("batch sizes %v, want %v", st.limits, c.want)
			}
		})
	}
}
