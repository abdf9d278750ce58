package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/servertest"
)

// Keep a namespace's closed activities and runs for three days instead of
// the default week, read the retention back, refuse one out of range, and
// restore the default with 0.
func ExampleClient_SetRetention() {
	addr, stop := servertest.Background()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, _, err := c.CreateNamespace(ctx, "billing"); err != nil {
		log.Fatal(err)
	}
	ns, err := c.GetNamespace(ctx, "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new:", ns.Retention)

	if ns, err = c.SetRetention(ctx, "billing", 72*time.Hour); err != nil {
		log.Fatal(err)
	}
	fmt.Println("set:", ns.Retention)

	// Under a minute is refused, naming the value; the retention stays.
	_, err = c.SetRetention(ctx, "billing", 30*time.Second)
	st := status.Convert(err)
	fmt.Println("refused:", st.Code(), st.Message())
	if ns, err = c.GetNamespace(ctx, "billing"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("kept:", ns.Retention)

	if ns, err = c.SetRetention(ctx, "billing", 0); err != nil {
		log.Fatal(err)
	}
	fmt.Println("default:", ns.Retention)

	_, err = c.SetRetention(ctx, "never-made", time.Hour)
	fmt.Println("unknown:", status.Code(err))
	// Output:
	// new: 168h0m0s
	// set: 72h0m0s
	// refused: InvalidArgument retention: 30s: out of range, must be between 1m0s and 87600h0m0s: invalid argument
	// kept: 72h0m0s
	// default: 168h0m0s
	// unknown: NotFound
}
