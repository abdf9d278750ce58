package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/sqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gated is a real SQLite store whose Apply records each transaction's
// activity ids and, for the first one, waits until released, so a test can
// queue writes behind a commit in progress.
type gated struct {
	*sqlite.Store
	started, release chan struct{}
	once             sync.Once

	mu  sync.Mutex
	txs [][]string
}

func (g *gated) Apply(ctx context.Context, ws []store.Write) ([]bool, error) {
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.(store.InsertActivity).Activity.ID)
	}
	g.mu.Lock()
	g.txs = append(g.txs, ids)
	g.mu.Unlock()
	g.once.Do(func() {
		close(g.started)
		<-g.release
	})
	return g.Store.Apply(ctx, ws)
}

func setup(t *testing.T) (*gated, *store.Committer) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "aion.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g := &gated{Store: s, started: make(chan struct{}), release: make(chan struct{})}
	c := store.NewCommitter(g, store.CommitterOptions{})
	t.Cleanup(c.Close)
	return g, c
}

func insert(ns, id string, payload int) store.Write {
	return store.InsertActivity{Activity: store.Activity{Namespace: ns, ID: id, TaskQueue: "q", ActivityType: "t",
		Payload: make([]byte, payload), State: store.ActivityState("scheduled"), Attempt: 1}}
}

// Writes queued behind a commit in progress: each case lists them in
// submission order and the transactions they must form after it.
func TestCommitterTakesBulkyWritesInTurnsAndKeepsOrderWithinANamespace(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	cases := []struct {
		name   string
		writes []store.Write
		want   [][]string
	}{{
		name:   "small writes share one transaction in order",
		writes: []store.Write{insert("a", "a1", 10), insert("b", "b1", 10), insert("a", "a2", 10)},
		want:   [][]string{{"a1", "b1", "a2"}},
	}, {
		name: "a small write waits for at most one bulky transaction",
		writes: []store.Write{insert("attacker", "big1", 2*mib), insert("honest", "h1", 10),
			insert("attacker", "big2", 2*mib), insert("attacker", "small-after-big", 10), insert("honest", "h2", 10)},
		want: [][]string{{"big1"}, {"h1", "h2"}, {"big2"}, {"small-after-big"}},
	}, {
		name: "bulky writes share a transaction up to the byte budget",
		writes: []store.Write{insert("a", "a1", 300<<10), insert("b", "b1", 300<<10), insert("a", "a2", 300<<10),
			insert("b", "b2", 300<<10)},
		want: [][]string{{"a1", "b1", "a2"}, {"b2"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, c := setup(t)
			ctx := context.Background()
			first := make(chan error, 1)
			c.Submit(insert("first", "first", 10), func(_ bool, err error) { first <- err })
			<-g.started
			var wg sync.WaitGroup
			errs := make([]error, len(tc.writes))
			for i, w := range tc.writes {
				wg.Add(1)
				c.Submit(w, func(_ bool, err error) { errs[i] = err; wg.Done() })
			}
			close(g.release)
			wg.Wait()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			g.mu.Lock()
			got := g.txs[1:]
			g.mu.Unlock()
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("transactions %v, want %v", got, tc.want)
			}
			for _, w := range tc.writes {
				a := w.(store.InsertActivity).Activity
				stored, err := g.GetActivity(ctx, a.Namespace, a.ID)
				if err != nil || len(stored.Payload) != len(a.Payload) {
					t.Fatalf("%s/%s not stored whole: %d bytes, %v", a.Namespace, a.ID, len(stored.Payload), err)
				}
			}
		})
	}
}

// A flood of bulky writes from one namespace never starves another's: each
// of the other's small writes commits before the flood's next bulky write
// once it is queued.
func TestCommitterFloodOfBulkyWritesLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	g, c := setup(t)
	first := make(chan error, 1)
	c.Submit(insert("first", "first", 10), func(_ bool, err error) { first <- err })
	<-g.started
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		c.Submit(insert("flood", fmt.Sprintf("big%d", i), 1<<20), func(bool, error) { wg.Done() })
		c.Submit(insert("honest", fmt.Sprintf("h%d", i), 100), func(bool, error) { wg.Done() })
	}
	close(g.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, tx := range g.txs[1:] {
		joined := strings.Join(tx, ",")
		if strings.Contains(joined, "big") && strings.Contains(joined, "h") {
			t.Fatalf("transaction %d mixes bulky and small writes: %s", i, joined)
		}
		if strings.Contains(joined, "h") && i > 1 {
			t.Fatalf("honest writes waited for %d transactions: %v", i, g.txs[1:])
		}
	}
}

// Flush returns only once every write submitted before it is done, also
// when the committer takes a later small write before an earlier bulky one.
func TestFlushReturnsOnlyOnceEveryEarlierWriteIsDone(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, 2 << 20} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			t.Parallel()
			g, c := setup(t)
			var (
				mu     sync.Mutex
				events []string
			)
			event := func(e string) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
			first := make(chan error, 1)
			c.Submit(insert("first", "first", 10), func(_ bool, err error) { first <- err })
			<-g.started // the first transaction is in progress, held
			for i := range 3 {
				c.Submit(insert("a", fmt.Sprintf("a%d", i), size), func(_ bool, err error) {
					if err != nil {
						t.Errorf("a%d: %v", i, err)
					}
					event(fmt.Sprintf("a%d", i))
				})
			}
			flushed := make(chan error, 1)
			go func() { flushed <- c.Flush(context.Background()) }()
			// Queued behind the bulky writes, the flush mark must not go
			// with a transaction of small writes taken before them.
			for store.Pending(c) < 4 {
				runtime.Gosched()
			}
			close(g.release)
			if err := <-flushed; err != nil {
				t.Fatalf("flush: %v", err)
			}
			event("flush")
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range 3 {
				if !slices.Contains(events, fmt.Sprintf("a%d", i)) || slices.Index(events, fmt.Sprintf("a%d", i)) > slices.Index(events, "flush") {
					t.Fatalf("events %v: flush returned before a%d was done", events, i)
				}
			}
		})
	}
}

func TestFlushAfterCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	c.Close()
	if err := c.Flush(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("flush after close: %v, want ErrClosed", err)
	}
}
