package server

import (
	"sync"
	"testing"
)

// Work run aside has returned when run does, and the goroutine that ran it
// waits for the next piece instead of ending.
func TestAsideWorkIsDoneOnReturnAndItsGoroutineKept(t *testing.T) {
	t.Parallel()
	var a asides
	defer a.close()
	done := false
	a.run(func() { done = true })
	if !done {
		t.Fatal("run returned before its work was done")
	}
	if n := a.idleCount(); n != 1 {
		t.Fatalf("%d goroutines idle after one piece of work, want 1", n)
	}
	// The next piece takes the idle goroutine rather than starting another.
	var during int
	a.run(func() { during = a.idleCount() })
	if during != 0 || a.idleCount() != 1 {
		t.Fatalf("idle during the second piece %d, after %d; want 0 and 1 (the same goroutine reused)", during, a.idleCount())
	}
}

// Pieces of work that wait for each other all run at once, each on a
// goroutine of its own, and no more goroutines than the bound stay idle.
func TestAsidesRunConcurrentWorkAtOnceAndKeepABoundedNumber(t *testing.T) {
	t.Parallel()
	var a asides
	defer a.close()
	const n = maxIdleAsides + 20
	var all sync.WaitGroup
	all.Add(n)
	var callers sync.WaitGroup
	for range n {
		callers.Add(1)
		go func() {
			defer callers.Done()
			a.run(func() {
				all.Done()
				all.Wait() // returns only once every piece has started
			})
		}()
	}
	callers.Wait()
	if got := a.idleCount(); got != maxIdleAsides {
		t.Fatalf("%d goroutines idle after %d pieces at once, want the bound %d", got, n, maxIdleAsides)
	}
}

// Closing ends the idle goroutines; work run after it runs on the caller.
func TestClosedAsidesRunWorkOnTheCaller(t *testing.T) {
	t.Parallel()
	var a asides
	a.run(func() {})
	a.close()
	if n := a.idleCount(); n != 0 {
		t.Fatalf("%d goroutines idle after close", n)
	}
	ran := false
	a.run(func() { ran = true })
	if !ran || a.idleCount() != 0 {
		t.Fatalf("after close: ran %v, %d idle; want the work run and nothing kept", ran, a.idleCount())
	}
}
