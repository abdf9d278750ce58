// Package pgtest gives a test an empty PostgreSQL database of its own.
//
// The server is AION_TEST_POSTGRES (a URL or key=value DSN of a user that
// may create databases), by default the local PostgreSQL at 127.0.0.1:5432
// with user postgres. When it is unreachable the test fails under CI=true
// (there every test must run) and is skipped elsewhere, with a message that
// says how to run it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultServer is the PostgreSQL the tests use when AION_TEST_POSTGRES is unset.
const DefaultServer = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// live caps the test databases of one test binary that exist at once.
var live = make(chan struct{}, 8)

// Server returns the DSN of the server test databases are created on.
func Server() string {
	if dsn := os.Getenv("AION_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return DefaultServer
}

// Fresh creates an empty database with a random name, drops it when t ends,
// and returns its DSN; maxConns > 0 caps the pool of a store opened on it.
func Fresh(t testing.TB, maxConns int) string {
	t.Helper()
	base := Server()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("PostgreSQL is unreachable and CI=true requires the PostgreSQL tests to run: %v", err)
		}
		t.Skipf("PostgreSQL is unreachable (%v); to run this test start PostgreSQL on 127.0.0.1:5432 "+
			"(user postgres, trust auth) or set AION_TEST_POSTGRES to the DSN of a server where the user may create databases", err)
	}
	defer admin.Close(context.Background())

	live <- struct{}{}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "aion_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		<-live
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		defer func() { <-live }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return dsnFor(t, base, name, maxConns)
}

// dsnFor points base at database name, with a pool cap when maxConns > 0.
func dsnFor(t testing.TB, base, name string, maxConns int) string {
	t.Helper()
	if !strings.HasPrefix(base, "postgres://") && !strings.HasPrefix(base, "postgresql://") {
		dsn := base + " dbname=" + name // key=value form: later keys win
		if maxConns > 0 {
			dsn += " pool_max_conns=" + strconv.Itoa(maxConns)
		}
		return dsn
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("AION_TEST_POSTGRES is not a valid URL: %v", err)
	}
	u.Path = "/" + name
	if maxConns > 0 {
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(maxConns))
		u.RawQuery = q.Encode()
	}
	return u.String()
}
