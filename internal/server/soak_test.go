package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSoakWorkerChurn keeps 1,000 workers connecting and disconnecting for
// 60 seconds while activities flow. Every activity must complete; afterwards
// the registry holds no worker, triple or cursor, and the heap and goroutine
// counts come back near their baseline.
func TestSoakWorkerChurn(t *testing.T) {
	const (
		workers  = 1000
		duration = 60 * time.Second
		rate     = 100 // activities per second
	)
	b := setup(t, func(c *server.Config) { c.HeartbeatWindow = 30 * time.Second })
	ctx := context.Background()
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	stop := make(chan struct{})
	var connects, drops atomic.Int64
	var wg sync.WaitGroup
	// However the test ends, even by a failed check, the workers stop
	// before the server does, so a failure is reported instead of hanging.
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWorkers)
	for i := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			ns := fmt.Sprintf("soak-%d", i%10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				wctx, cancel := context.WithCancel(ctx)
				stream, err := b.workers.Connect(wctx)
				if err != nil {
					cancel()
					continue
				}
				err = stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
					Namespaces: []string{ns}, ActivityTypes: []string{"job"}, Slots: 2, Node: fmt.Sprintf("n%d", i%4)}}})
				if err != nil {
					cancel()
					continue
				}
				connects.Add(1)
				life := time.After(time.Duration(500+rng.IntN(4500)) * time.Millisecond)
				frames := make(chan *aionv1.ServerMessage)
				go func() {
					defer close(frames)
					for {
						m, err := stream.Recv()
						if err != nil {
							return
						}
						frames <- m
					}
				}()
			serve:
				for {
					select {
					case m, ok := <-frames:
						if !ok {
							break serve
						}
						if task := m.GetActivityTask(); task != nil {
							_ = stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
								Namespace: task.GetNamespace(), ActivityId: task.GetActivityId(), Attempt: task.GetAttempt(),
								Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}}}}})
						}
					case <-life:
						break serve
					case <-stop:
						break serve
					}
				}
				drops.Add(1)
				cancel() // abrupt: whatever it was running is lost and retried
				for range frames {
				}
			}
		})
	}

	// Schedule at a steady rate for the whole soak.
	var ids []string
	retry := &aionv1.RetryPolicy{InitialInterval: durationpb.New(50 * time.Millisecond), MaximumInterval: durationpb.New(time.Second)}
	tick := time.NewTicker(time.Second / rate)
	end := time.After(duration)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			id := fmt.Sprintf("a%d", i)
			b.schedule(t, &aionv1.ScheduleRequest{Namespace: fmt.Sprintf("soak-%d", i%10), Id: id, ActivityType: "job", RetryPolicy: retry})
			ids = append(ids, id)
			continue
		case <-end:
		}
		break
	}
	tick.Stop()
	// Let the churn finish the work before the workers leave for good.
	for i, id := range ids {
		a := b.wait(t, fmt.Sprintf("soak-%d", i%10), id)
		if a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED {
			t.Fatalf("%s ended %v", id, a.GetState())
		}
	}
	stopWorkers()

	deadline := time.Now().Add(20 * time.Second)
	for b.srv.Registry().Census() != (registry.Census{}) {
		if time.Now().After(deadline) {
			t.Fatalf("after the soak the registry holds %+v", b.srv.Registry().Census())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The goroutines kept for the streams' deep work (at most
	// maxIdleAsides, whatever the churn) are not counted as left over.
	var goroutines int
	var heap uint64
	for range 50 {
		runtime.GC()
		goroutines = runtime.NumGoroutine() - server.IdleAsides(b.srv)
		runtime.ReadMemStats(&ms)
		heap = ms.HeapAlloc
		if goroutines <= baseGoroutines+10 && heap < baseHeap+32<<20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("soak: workers=%d duration=%v activities=%d connects=%d disconnects=%d goroutines_before=%d after=%d heap_before_mb=%.1f after_mb=%.1f",
		workers, duration, len(ids), connects.Load(), drops.Load(), baseGoroutines, goroutines,
		float64(baseHeap)/(1<<20), float64(heap)/(1<<20))
	if goroutines > baseGoroutines+10 {
		t.Fatalf("goroutines: %d before, %d after", baseGoroutines, goroutines)
	}
	if heap > baseHeap+32<<20 {
		t.Fatalf("heap: %d MiB before, %d MiB after", baseHeap>>20, heap>>20)
	}
}
