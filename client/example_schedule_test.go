package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aion-run/aion/client"
)

// A schedule runs an activity every night at 02:00 Berlin time; Trigger
// fires it once now instead of waiting for the night. What a tick starts is
// named by the schedule and the tick's time, so each tick fires once.
func ExampleClient_CreateSchedule() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	input, err := client.EncodePayload(map[string]string{"report": "daily"})
	if err != nil {
		log.Fatal(err)
	}
	s, _, err := c.CreateSchedule(ctx, client.ScheduleDefinition{
		Namespace: "reports",
		ID:        "nightly-report",
		Spec:      client.ScheduleSpec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"},
		Action:    client.ScheduleAction{ActivityType: "echo", Input: input},
		Policy:    client.SchedulePolicy{Overlap: client.OverlapSkip, CatchUp: client.CatchUpOne},
	})
	if err != nil {
		log.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.ID, "next fires at", s.Upcoming[0].Nominal.In(berlin).Format("15:04"), "Berlin time")

	s, err = c.TriggerSchedule(ctx, "reports", "nightly-report", "")
	if err != nil {
		log.Fatal(err)
	}
	last := s.Recent[len(s.Recent)-1]
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	echoed, err := client.WaitResult[map[string]string](waitCtx, c, "reports", last.ActionID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(last.Origin, last.Outcome, echoed["report"])
	// Output:
	// nightly-report next fires at 02:00 Berlin time
	// trigger started daily
}
