package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/store"
)

// spillBench is a bench whose engine holds window ready activities per
// flow in memory.
func spillBench(t *testing.T, window int) *bench {
	t.Helper()
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db"), window: window}
	b.start()
	t.Cleanup(b.stop)
	return b
}

// held counts the activities the engine holds in memory, and those it
// counts as waiting in the store.
func (b *bench) held() (inMemory, inStore int) {
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	return len(b.eng.open), b.eng.spilled
}

// scheduleN schedules n activities a0..a(n-1) in one batch and returns their ids.
func (b *bench) scheduleN(n int, to store.Timeouts) []string {
	b.t.Helper()
	reqs := make([]Request, n)
	ids := make([]string, n)
	for i := range reqs {
		ids[i] = fmt.Sprintf("a%03d", i)
		reqs[i] = request(ids[i], to, store.RetryPolicy{})
	}
	for i, r := range b.eng.ScheduleBatch(context.Background(), anyone, reqs) {
		if r.Err != nil {
			b.t.Fatalf("schedule %s: %v", ids[i], r.Err)
		}
	}
	return ids
}

// runAll has a one-slot worker run every task it is sent until want have
// run, and fails the test unless they ran exactly once each, in order.
func (b *bench) runAll(fw *fakeWorker, want []string) {
	b.t.Helper()
	for i, id := range want {
		task := fw.task()
		if task.ActivityID != id || task.Attempt != 1 {
			b.t.Fatalf("task %d: %s#%d, want %s#1", i, task.ActivityID, task.Attempt, id)
		}
		fw.complete(task.ActivityID, task.Attempt, `"ok"`)
	}
	idle(b.t, fw.conn.tasks, "task after all ran")
	for _, id := range want {
		if v := b.get(id); v.Activity.State != store.StateCompleted || len(v.Attempts) != 1 {
			b.t.Fatalf("%s: %s after %d attempts, want completed after 1", id, v.Activity.State, len(v.Attempts))
		}
	}
}

func TestAPoolTenWindowsDeepRunsEveryActivityOnceInOrder(t *testing.T) {
	t.Parallel()
	const window = 8
	b := spillBench(t, window)
	ids := b.scheduleN(10*window, store.Timeouts{})
	inMemory, inStore := b.held()
	if inMemory != window || inStore != 9*window {
		t.Fatalf("held %d in memory and %d in the store, want %d and %d", inMemory, inStore, window, 9*window)
	}
	backlog := b.eng.Backlog()
	if len(backlog) != 1 || backlog[0].Waiting != 10*window {
		t.Fatalf("backlog %+v, want %d waiting", backlog, 10*window)
	}
	b.runAll(b.join(1), ids)
	if inMemory, inStore := b.held(); inMemory != 0 || inStore != 0 {
		t.Fatalf("after all ran: %d in memory, %d in the store, want none", inMemory, inStore)
	}
}

func TestARestartPagesWaitingWorkInsteadOfLoadingIt(t *testing.T) {
	t.Parallel()
	const window = 8
	b := spillBench(t, window)
	ids := b.scheduleN(10*window, store.Timeouts{})
	b.restart()
	b.eng.mu.Lock()
	pending := b.eng.pending["ns"]
	b.eng.mu.Unlock()
	if pending != 10*window {
		t.Fatalf("pending after the restart: %d, want %d", pending, 10*window)
	}
	// Each page is at most a window; what is held never passes two.
	if inMemory, _ := b.held(); inMemory > 2*window {
		t.Fatalf("held %d in memory after the restart, want at most %d", inMemory, 2*window)
	}
	b.runAll(b.join(1), ids)
}

func TestCancelOfAnActivityWaitingInTheStoreClosesItThere(t *testing.T) {
	t.Parallel()
	const window = 4
	b := spillBench(t, window)
	ids := b.scheduleN(3*window, store.Timeouts{})
	last := ids[len(ids)-1]
	waited := make(chan View, 1)
	go func() { waited <- b.wait(last) }()
	v, err := b.eng.Cancel(context.Background(), anyone, "ns", last, "no longer needed")
	if err != nil {
		t.Fatalf("cancel %s: %v", last, err)
	}
	if v.Activity.State != store.StateCanceled || v.Activity.Failure.Message != "no longer needed" {
		t.Fatalf("cancel returned %s %+v", v.Activity.State, v.Activity.Failure)
	}
	if w := recv(t, waited, "wait's end"); w.Activity.State != store.StateCanceled {
		t.Fatalf("wait returned %s, want canceled", w.Activity.State)
	}
	if _, err := b.eng.Cancel(context.Background(), anyone, "ns", last, ""); err != nil {
		t.Fatalf("cancel again: %v", err)
	}
	b.eng.mu.Lock()
	pending := b.eng.pending["ns"]
	b.eng.mu.Unlock()
	if pending != len(ids)-1 {
		t.Fatalf("pending after the cancel: %d, want %d", pending, len(ids)-1)
	}
	b.runAll(b.join(1), ids[:len(ids)-1])
}

func TestScheduleToCloseOfAnActivityWaitingInTheStoreTimesItOut(t *testing.T) {
	t.Parallel()
	const window = 4
	b := spillBench(t, window)
	ids := b.scheduleN(3*window, store.Timeouts{ScheduleToClose: time.Minute, ScheduleToStart: time.Hour})
	b.advance(time.Minute)
	for _, id := range ids {
		v := b.wait(id)
		if v.Activity.State != store.StateTimedOut || v.Activity.Failure.Type != FailureScheduleToClose {
			t.Fatalf("%s: %s %+v, want timed out by schedule-to-close", id, v.Activity.State, v.Activity.Failure)
		}
	}
	if inMemory, inStore := b.held(); inMemory != 0 || inStore != 0 {
		t.Fatalf("after the timeouts: %d in memory, %d in the store, want none", inMemory, inStore)
	}
	fw := b.join(1)
	idle(t, fw.conn.tasks, "task of a timed-out activity")
}

func TestWhyAndGetOfAnActivityWaitingInTheStore(t *testing.T) {
	t.Parallel()
	const window = 2
	b := spillBench(t, window)
	ids := b.scheduleN(3*window, store.Timeouts{})
	last := ids[len(ids)-1]
	if v := b.get(last); v.Activity.State != store.StateScheduled || string(v.Activity.Payload) != `"in"` {
		t.Fatalf("get %s: %s %q", last, v.Activity.State, v.Activity.Payload)
	}
	ex, err := b.eng.Why(context.Background(), anyone, "ns", last)
	if err != nil || ex.Reason != WhyNoWorker {
		t.Fatalf("why %s: %+v %v, want no worker", last, ex, err)
	}
	w, err := b.eng.Waiting(context.Background(), anyone, "ns")
	if err != nil || len(w.Groups) != 1 || w.Groups[0].Count != len(ids) {
		t.Fatalf("waiting: %+v %v, want one group of %d", w, err, len(ids))
	}
	if _, err := b.eng.Get(context.Background(), anyone, "ns", "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of an unknown id: %v", err)
	}
}

// With both keys' work mostly in the store (window 4), keys of weights 3
// and 1 still share starts 3:1 and each key's work starts oldest first:
// dispatch waits for a key's page rather than give its turns away.
func TestKeysWaitingInTheStoreKeepTheirShares(t *testing.T) {
	t.Parallel()
	b := spillBench(t, 4)
	b.scheduleAll(backlog("heavy", "heavy", 3, 200))
	b.scheduleAll(backlog("light", "light", 1, 200))
	if _, inStore := b.held(); inStore != 2*(200-4) {
		t.Fatalf("%d in the store, want %d", inStore, 2*(200-4))
	}
	ids := b.joinWide(200).started(200)
	heavy := 0
	next := map[string]int{}
	for _, id := range ids {
		prefix, _, _ := strings.Cut(id, "-")
		if want := fmt.Sprintf("%s-%05d", prefix, next[prefix]); id != want {
			t.Fatalf("started %s, want %s: a key's work starts oldest first", id, want)
		}
		next[prefix]++
		if prefix == "heavy" {
			heavy++
		}
	}
	if heavy != 150 {
		t.Fatalf("heavy:light started %d:%d, want 150:50", heavy, len(ids)-heavy)
	}
}

// A Wait on an activity waiting in the store returns once it ran, after it
// was paged in.
func TestWaitOnAnActivityInTheStoreReturnsWhenItCloses(t *testing.T) {
	t.Parallel()
	b := spillBench(t, 2)
	ids := b.scheduleN(8, store.Timeouts{})
	last := ids[len(ids)-1]
	waited := make(chan View, 1)
	go func() { waited <- b.wait(last) }()
	b.runAll(b.join(1), ids)
	if v := recv(t, waited, "wait's end"); v.Activity.State != store.StateCompleted {
		t.Fatalf("wait returned %s, want completed", v.Activity.State)
	}
}

// After a restart the byte cap counts the payloads of the work waiting in
// the store: they are summed after the engine is ready.
func TestByteCapCountsWorkWaitingInTheStoreAfterARestart(t *testing.T) {
	t.Parallel()
	b := &bench{t: t, clk: clock.NewFake(epoch), path: filepath.Join(t.TempDir(), "aion.db"), window: 2, maxPendingBytes: 1 << 20}
	b.start()
	t.Cleanup(b.stop)
	ids := b.scheduleN(10, store.Timeouts{})
	want := int64(10 * len(`"in"`))
	b.restart()
	deadline := time.Now().Add(patience)
	for {
		b.eng.mu.Lock()
		got := b.eng.pendingBytes["ns"]
		b.eng.mu.Unlock()
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending bytes after the restart: %d, want %d", got, want)
		}
		time.Sleep(time.Millisecond)
	}
	b.runAll(b.join(1), ids)
	b.eng.mu.Lock()
	defer b.eng.mu.Unlock()
	if got := b.eng.pendingBytes["ns"]; got != 0 {
		t.Fatalf("pending bytes after all ran: %d, want 0", got)
	}
}
