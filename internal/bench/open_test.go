package bench_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/bench"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
)

// storeLock holds the write lock of a running server's SQLite file from
// another connection, as a slow disk or a long transaction would: the
// server's commits wait until it is let go.
type storeLock struct {
	t    *testing.T
	conn *sql.Conn
	mu   sync.Mutex
	held bool
}

func newStoreLock(t *testing.T, srv *servertest.Server) *storeLock {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(srv.Config.DataDir, "aion.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := &storeLock{t: t, conn: conn}
	t.Cleanup(func() {
		l.release()
		conn.Close()
	})
	return l
}

// hold takes the lock; it may run on a bench goroutine, so it reports
// rather than stops the test.
func (l *storeLock) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		l.t.Errorf("hold the store's write lock: %v", err)
		return
	}
	l.held = true
}

func (l *storeLock) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	l.held = false
	if _, err := l.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		l.t.Errorf("release the store's write lock: %v", err)
	}
}

// setup starts a real server with opts and returns it with bench options
// aimed at it.
func setup(t *testing.T, opts ...servertest.Option) (*servertest.Server, bench.Options) {
	t.Helper()
	srv := servertest.Start(t, opts...)
	o := bench.Defaults()
	o.Address = srv.Addr
	return srv, o
}

func run(t *testing.T, o bench.Options) (bench.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return bench.Run(ctx, o)
}

// A server that cannot keep up: its store takes no commit until all the
// calls are out, and its one worker slot takes a while per task. With
// --rate and --concurrency 1 every call is still sent on schedule (all of
// them are outstanding at once, which no bench that waits for a call before
// sending the next could reach while the store holds), and the end-to-end
// latency, counted from each call's intended start, grows with the backlog
// instead of staying flat.
func TestOpenLoopLatencyGrowsWithTheBacklogOfAServerThatCannotKeepUp(t *testing.T) {
	t.Parallel()
	const (
		calls   = 60
		rate    = 200
		perTask = 10 * time.Millisecond // the worker's time per task, above the 5 ms between calls
	)
	srv, o := setup(t)
	lock := newStoreLock(t, srv)
	o.Activities, o.Rate, o.Concurrency, o.Workers, o.Slots = calls, rate, 1, 1, 1
	o = bench.WithHooks(o, bench.Hooks{
		Started: lock.hold,
		Issued: func(k int) {
			if k == calls-1 {
				lock.release() // every call is in flight by now
			}
		},
		Hold: func(ctx context.Context, _ *aionv1.ActivityTask) {
			select {
			case <-time.After(perTask):
			case <-ctx.Done():
			}
		},
	})
	rep, err := run(t, o)
	if err != nil {
		t.Fatalf("run: %v (report %+v)", err, rep)
	}
	if rep.Activities != calls || rep.Errors != 0 || rep.Calls != calls {
		t.Fatalf("report %+v, want %d activities completed in %d calls and no errors", rep, calls, calls)
	}
	if rep.MaxInFlight != calls {
		t.Errorf("at most %d calls in flight, want all %d: calls waited for earlier ones instead of going out on schedule", rep.MaxInFlight, calls)
	}
	tr := rep.EndToEndTrend
	t.Logf("end-to-end median by tenth of the schedule: %v ms; max %.1f ms", tr, rep.EndToEnd.Max)
	if len(tr) != 10 {
		t.Fatalf("end-to-end trend %v, want 10 tenths", tr)
	}
	// Each tenth waits behind 6 more tasks of 10 ms than the one before
	// and was due 30 ms later: its median should be about 30 ms higher, the
	// run's last tenth about 270 ms above its first.
	if tr[9] <= tr[0] {
		t.Errorf("end-to-end median by tenth %v ms: the last tenth is not slower than the first, the backlog does not show", tr)
	}
	// The task the worker took last waited for all the others: from any
	// intended start that is at least calls × perTask.
	if floor := float64(calls*perTask) / float64(time.Millisecond); rep.EndToEnd.Max < floor {
		t.Errorf("end-to-end max %.1f ms, want at least %.0f ms (every task before the last took %v)", rep.EndToEnd.Max, floor, perTask)
	}
}

// Failed calls, refused batch items and refused results are counted in
// errors, each activity once, and never in the completions per second.
func TestErrorsAreCountedAndNotCompleted(t *testing.T) {
	t.Parallel()
	const pendingCap = 4
	capped := func(c *server.Config) { c.MaxPendingPerNamespace = pendingCap }
	tests := []struct {
		name string
		// arrange sets up the server and the run.
		arrange       func(t *testing.T) bench.Options
		completed     int
		errors        int
		firstErrorHas string
	}{
		{
			name: "batch items past the namespace's pending cap",
			arrange: func(t *testing.T) bench.Options {
				_, o := setup(t, capped)
				o.Activities, o.Batch, o.Concurrency, o.Workers, o.Slots = 10, 10, 1, 1, 8
				return o
			},
			completed: pendingCap, errors: 10 - pendingCap, firstErrorHas: "not yet closed",
		},
		{
			// The store takes no commit until the refusals are back, so
			// exactly the first four calls the server sees are accepted.
			name: "unary calls past the namespace's pending cap",
			arrange: func(t *testing.T) bench.Options {
				srv, o := setup(t, capped)
				lock := newStoreLock(t, srv)
				var refused atomic.Int32
				o.Activities, o.Rate, o.Workers, o.Slots = 10, 1000, 1, 8
				return bench.WithHooks(o, bench.Hooks{
					Started: lock.hold,
					Answered: func(err error) {
						if err != nil && refused.Add(1) == 10-pendingCap {
							lock.release()
						}
					},
				})
			},
			completed: pendingCap, errors: 10 - pendingCap, firstErrorHas: "not yet closed",
		},
		{
			// The store takes no commit before the timeout: no call is
			// answered, and every activity counts as not completed.
			name: "activities not completed within the timeout",
			arrange: func(t *testing.T) bench.Options {
				srv, o := setup(t)
				lock := newStoreLock(t, srv)
				o.Activities, o.Concurrency, o.Workers, o.Slots, o.Timeout = 10, 2, 1, 2, 500*time.Millisecond
				return bench.WithHooks(o, bench.Hooks{Started: lock.hold})
			},
			completed: 0, errors: 10, firstErrorHas: "not finished within --timeout 500ms",
		},
		{
			// The first task is canceled while the worker runs it, so the
			// server refuses its result.
			name: "a result the server refuses",
			arrange: func(t *testing.T) bench.Options {
				srv, o := setup(t)
				client := aionv1.NewActivityServiceClient(srv.Dial(t))
				var first atomic.Bool
				o.Activities, o.Concurrency, o.Workers, o.Slots = 10, 2, 1, 1
				return bench.WithHooks(o, bench.Hooks{
					Hold: func(ctx context.Context, task *aionv1.ActivityTask) {
						if first.CompareAndSwap(false, true) {
							if _, err := client.Cancel(ctx, &aionv1.CancelRequest{Namespace: task.GetNamespace(), Id: task.GetActivityId()}); err != nil {
								t.Errorf("cancel %s: %v", task.GetActivityId(), err)
							}
						}
					},
				})
			},
			completed: 9, errors: 1, firstErrorHas: "refused",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.arrange(t)
			rep, err := run(t, o)
			if rep.Activities != tc.completed || rep.Errors != tc.errors || rep.Scheduled != o.Activities {
				t.Fatalf("report %+v (err %v), want %d completed and %d errors of %d", rep, err, tc.completed, tc.errors, o.Activities)
			}
			if rep.PerSec != float64(tc.completed)/rep.Seconds {
				t.Errorf("per_sec %.1f, want completions only: %d / %.3fs", rep.PerSec, tc.completed, rep.Seconds)
			}
			if !strings.Contains(rep.FirstError, tc.firstErrorHas) {
				t.Errorf("first error %q, want one with %q", rep.FirstError, tc.firstErrorHas)
			}
			if err == nil || !strings.Contains(err.Error(), "did not complete") {
				t.Errorf("run error %v, want one saying activities did not complete", err)
			}
		})
	}
}
