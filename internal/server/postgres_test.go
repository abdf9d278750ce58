package server_test

import (
	"context"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/pgtest"
	"github.com/aion-run/aion/internal/server"
)

// freshPostgres is an empty database for t.
func freshPostgres(t *testing.T) string { return pgtest.Fresh(t, 0) }

// The server runs on PostgreSQL as on SQLite: schedule, dispatch, complete,
// and recover open work after a restart.
func TestServerOnPostgres(t *testing.T) {
	t.Parallel()
	dsn := freshPostgres(t)
	onPG := func(c *server.Config) { c.Store = dsn; c.DrainTimeout = 100 * time.Millisecond }
	b := setup(t, onPG)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"pg"}, ActivityTypes: []string{"t"}, Slots: 2})
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "pg", Id: "one", ActivityType: "t"})
	w.complete(w.nextTask(), []byte(`"on postgres"`))
	if a := b.wait(t, "pg", "one"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED || string(a.GetResult()) != `"on postgres"` {
		t.Fatalf("activity = %v", a)
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "pg", Id: "later", ActivityType: "nobody-yet"})
	if err := b.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := setup(t, onPG)
	w2 := b2.mustConnect(t, &aionv1.Register{Namespaces: []string{"pg"}, ActivityTypes: []string{"nobody-yet"}, Slots: 1})
	task := w2.nextTask()
	if task.GetActivityId() != "later" {
		t.Fatalf("after restart on the same database the worker got %v", task)
	}
	w2.complete(task, nil)
	b2.wait(t, "pg", "later")
}
