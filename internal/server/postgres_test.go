package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/jackc/pgx/v5"
)

// freshPostgres creates an empty database for one test and drops it after.
// Unreachable PostgreSQL fails the test under CI=true and skips it elsewhere.
func freshPostgres(t *testing.T) string {
	t.Helper()
	admin := os.Getenv("AION_TEST_POSTGRES")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is unreachable and CI=true requires these tests to run: %v", err)
		}
		t.Skipf("PostgreSQL unreachable (%v); start it on 127.0.0.1:5432 or set AION_TEST_POSTGRES to run this test", err)
	}
	defer conn.Close(ctx)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "aion_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	i := strings.LastIndex(admin, "/")
	rest := ""
	if q := strings.IndexByte(admin[i:], '?'); q >= 0 {
		rest = admin[i+q:]
	}
	return admin[:i+1] + name + rest
}

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
	if err := b.srv.Shutdown(context.Background()); err != nil {
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
