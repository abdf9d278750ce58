package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// New waiting activities inserted together get the wait deadline that one
// inserted alone gets from SQL: the earlier of schedule-to-close from the
// scheduled time and schedule-to-start from the ready time, or none.
func TestInsertsTogetherKeepTheWaitDeadlineOfOneAlone(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t, 2)
	scheduled := time.Unix(1_700_000_000, 123)
	cases := []store.Timeouts{
		{},
		{ScheduleToClose: time.Hour},
		{ScheduleToStart: time.Minute},
		{ScheduleToClose: time.Hour, ScheduleToStart: time.Minute},
		{ScheduleToClose: time.Second, ScheduleToStart: time.Hour},
		{StartToClose: time.Minute, Heartbeat: time.Second},
	}
	activity := func(prefix string, i int, to store.Timeouts) store.Write {
		return store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: fmt.Sprintf("%s-%d", prefix, i),
			TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled, Timeouts: to,
			ScheduledAt: scheduled, ReadyAt: scheduled.Add(10 * time.Minute)}}
	}
	var together []store.Write
	for i, to := range cases {
		if _, err := s.Apply(ctx, []store.Write{activity("alone", i, to)}); err != nil {
			t.Fatal(err)
		}
		together = append(together, activity("together", i, to))
	}
	if st := stretches(together); st[0] != (stretch{end: len(cases)}) {
		t.Fatalf("the inserts are not one stretch: %v", st)
	}
	if _, err := s.Apply(ctx, together); err != nil {
		t.Fatal(err)
	}
	for i, to := range cases {
		var alone, with int64
		if err := s.pool.QueryRow(ctx, `SELECT
				(SELECT wait_deadline FROM activities WHERE id = $1), (SELECT wait_deadline FROM activities WHERE id = $2)`,
			fmt.Sprintf("alone-%d", i), fmt.Sprintf("together-%d", i)).Scan(&alone, &with); err != nil {
			t.Fatal(err)
		}
		if alone != with {
			t.Errorf("timeouts %+v: wait deadline %d inserted together, %d alone", to, with, alone)
		}
	}
}
