package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
)

// A delayed activity is durable at once, waits as scheduled with its ready
// time, across a restart, and is started only at that time.
func TestDelayedActivityStartsAtItsReadyTimeEvenAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := request("later", store.Timeouts{}, store.RetryPolicy{})
	r.StartDelay = time.Hour
	rec := b.schedule(r)
	if rec.State != store.StateScheduled || !rec.ReadyAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("scheduled %s ready at %v, want scheduled, ready at %v", rec.State, rec.ReadyAt, epoch.Add(time.Hour))
	}
	if got := rec.Timeouts.ScheduleToClose; got != DefaultDefaults().Timeouts.ScheduleToClose+time.Hour {
		t.Fatalf("schedule-to-close %v, want the default counted from the ready time", got)
	}
	fw := b.join(1)
	idle(t, fw.conn.tasks, "task before the delayed start")

	b.restart()
	fw = b.join(1)
	b.advance(time.Hour - time.Second)
	idle(t, fw.conn.tasks, "task a second before the delayed start")
	if v := b.get("later"); v.Activity.State != store.StateScheduled || !v.Activity.ReadyAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("after the restart: %s ready at %v", v.Activity.State, v.Activity.ReadyAt)
	}
	b.advance(time.Second)
	task := fw.task()
	if task.ActivityID != "later" || !task.StartedAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("task %s started %v, want later at %v", task.ActivityID, task.StartedAt, epoch.Add(time.Hour))
	}
}

// A start time in the past is now; a start time ahead is a delay.
func TestStartTimeInThePastIsNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.join(1)
	r := request("past", store.Timeouts{}, store.RetryPolicy{})
	r.StartAt = epoch.Add(-time.Hour)
	b.schedule(r)
	if task := fw.task(); task.ActivityID != "past" {
		t.Fatalf("task %s, want past at once", task.ActivityID)
	}
	fw.complete("past", 1, "1")
	r = request("ahead", store.Timeouts{}, store.RetryPolicy{})
	r.StartAt = epoch.Add(10 * time.Minute)
	if rec := b.schedule(r); !rec.ReadyAt.Equal(epoch.Add(10 * time.Minute)) {
		t.Fatalf("ready at %v", rec.ReadyAt)
	}
	idle(t, fw.conn.tasks, "task before its start time")
	b.advance(10 * time.Minute)
	if task := fw.task(); task.ActivityID != "ahead" {
		t.Fatalf("task %s, want ahead", task.ActivityID)
	}
}

func TestDelayedStartRefusesContradictions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		field string
	}{
		{"both delay and time", func(r *Request) { r.StartDelay, r.StartAt = time.Minute, epoch.Add(time.Hour) }, "start_delay"},
		{"negative delay", func(r *Request) { r.StartDelay = -time.Second }, "start_delay"},
		{"life ends before the start", func(r *Request) {
			r.StartDelay, r.Timeouts.ScheduleToClose = time.Hour, 30*time.Minute
		}, "schedule_to_close_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request("x-"+strings.ReplaceAll(tc.name, " ", "-"), store.Timeouts{}, store.RetryPolicy{})
			tc.edit(&r)
			_, _, err := b.eng.Schedule(context.Background(), anyone, r)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("schedule: %v, want ErrInvalid naming %s", err, tc.field)
			}
			if _, err := b.eng.Get(context.Background(), anyone, "ns", r.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a refused schedule left %s behind: %v", r.ID, err)
			}
		})
	}
}

// A workflow started with a delay is durable at once; its first task is
// given at its ready time, across a restart.
func TestDelayedWorkflowGetsItsFirstTaskAtItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fw := b.joinWorkflows("v1", 10, "order")
	if _, _, err := b.eng.StartWorkflow(context.Background(), anyone, WorkflowRequest{Namespace: "ns", WorkflowID: "w",
		WorkflowType: "order", StartDelay: 30 * time.Minute}); err != nil {
		t.Fatalf("start: %v", err)
	}
	idle(t, fw.conn.wf, "workflow task before the delayed start")
	b.restart()
	fw = b.joinWorkflows("v1", 10, "order")
	b.advance(30*time.Minute - time.Second)
	idle(t, fw.conn.wf, "workflow task a second before the delayed start")
	b.advance(time.Second)
	task := fw.next()
	if task.GetWorkflowId() != "w" || !task.GetEvents()[0].GetWorkflowStarted().GetReadyTime().AsTime().Equal(epoch.Add(30*time.Minute)) {
		t.Fatalf("first task: %v", task.GetEvents()[0])
	}
	fw.mustAnswer(task, false, complete(`1`))
	b.waitWF("w")
}
