package attack

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc"
)

// stalledWindow is the smallest HTTP/2 window gRPC accepts. Setting it
// turns off gRPC's bandwidth estimation, so the stream's window really
// stays this small and the server's writes stop once it is full.
const stalledWindow = 64<<10 - 1

// stalledReader runs Attackers workers that each register, take one task,
// then stop reading their stream and send pings as fast as the stream takes
// them. Each stays stalled until the server drops it (then a new one
// starts) or the attack ends.
func stalledReader(ctx context.Context, e *env) {
	c, err := client.Dial(ctx, e.srv.grpcAddr, client.WithToken(e.srv.keys.attackClient))
	if err != nil {
		e.failed(ctx, "client", err)
		return
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range e.o.Attackers {
		wg.Go(func() {
			queue := fmt.Sprintf("stalled-%d", i)
			for n := 0; n < e.o.MaxRequests && ctx.Err() == nil; n++ {
				if !stallOnce(ctx, e, c, queue) && !pause(ctx, 100*time.Millisecond) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// stallOnce runs one stalled worker to its end; false when it could not
// get as far as stalling.
func stallOnce(ctx context.Context, e *env, c *client.Client, queue string) bool {
	ws, id, err := connectWorker(ctx, e, queue,
		grpc.WithInitialWindowSize(stalledWindow), grpc.WithInitialConnWindowSize(stalledWindow))
	if err != nil {
		e.failed(ctx, "register", err)
		return false
	}
	defer ws.close()
	h, err := scheduleFor(ctx, c, queue, 0)
	if err != nil {
		e.failed(ctx, "schedule", err)
		return false
	}
	t, err := ws.task()
	if err != nil {
		e.failed(ctx, "task", err)
		return false
	}
	e.tally.add("tasks taken and never answered", 1)

	// From here on nothing reads the stream.
	stalledAt := time.Now()
	var pings atomic.Int64
	var endedAfter atomic.Int64 // nanoseconds; 0 while the stream is open
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		ping := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{}}}
		for n := 0; n < e.o.MaxRequests; n++ {
			ping.GetPing().Nonce = uint64(n)
			if err := ws.stream.SendMsg(ping); err != nil {
				if ctx.Err() == nil {
					endedAfter.Store(int64(time.Since(stalledAt)))
				}
				return
			}
			pings.Add(1)
			e.tally.sent.Add(1)
		}
	}()

	s := Stalled{StillListed: true}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for s.StillListed && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			listed, err := workerListed(ctx, e.admin, id)
			if err == nil && !listed {
				s.StillListed = false
				s.DroppedAfterS = time.Since(stalledAt).Seconds()
			}
		}
	}
	s.HeldForS = time.Since(stalledAt).Seconds()
	// The stream may end just after the worker leaves the list.
	if !s.StillListed {
		select {
		case <-flooded:
		case <-time.After(2 * time.Second):
		}
	}
	s.StreamEndedAfterS = time.Duration(endedAfter.Load()).Seconds()
	ws.close()
	<-flooded
	s.Pings = pings.Load()

	// Was the attempt it held given up and the activity made ready again?
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if a, err := c.Get(gctx, attackerNS, h.ID); err == nil {
		s.Retried = attemptReleased(a, t.GetAttempt(), s.StillListed)
	}
	if s.StillListed {
		e.tally.add("stalled worker: still listed at the end", 1)
	} else {
		e.tally.add("stalled worker: dropped by the server", 1)
	}
	e.mu.Lock()
	e.stalled = append(e.stalled, s)
	e.mu.Unlock()
	return true
}

// attemptReleased reports whether attempt of a ended while its worker was
// still stalled (when stillListed: before the attack let go of it) and the
// activity went on to another attempt or waits for one.
func attemptReleased(a *client.Activity, attempt uint32, stillListed bool) bool {
	if stillListed {
		// The attack's own disconnect may have released it just now; only
		// the server giving up while the worker was stalled counts.
		return false
	}
	if a.Attempt > attempt {
		return true
	}
	for _, at := range a.Attempts {
		if at.Number == attempt {
			return at.Outcome != client.OutcomeRunning && !a.State.Terminal()
		}
	}
	return false
}

// workerListed reports whether the server lists worker id.
func workerListed(ctx context.Context, admin *client.Client, id uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ws, err := admin.ListWorkers(ctx, attackerNS)
	if err != nil {
		return false, err
	}
	for _, w := range ws {
		if w.ID == id {
			return true, nil
		}
	}
	return false, nil
}
