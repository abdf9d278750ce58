package worker_test

import (
	"context"
	"log"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/servertest"
)

// exampleServer starts an aion server in this process for the examples:
// a loopback port, the embedded SQLite store in a temporary directory.
// stop shuts it down.
func exampleServer() (addr string, stop func()) { return servertest.Background() }

// run schedules an activity on the server at addr, as a program using the
// client package would, and waits for it to end.
func run(addr string, opts client.ScheduleOptions, input any) *client.Activity {
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	h, err := client.Schedule(ctx, c, opts, input)
	if err != nil {
		log.Fatal(err)
	}
	a, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return a
}

// waitRunning waits until a worker runs the activity, so that an
// intervention reaches it.
func waitRunning(ctx context.Context, c *client.Client, namespace, id string) {
	for {
		a, err := c.Get(ctx, namespace, id)
		if err != nil {
			log.Fatal(err)
		}
		if a.State == client.StateRunning {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
