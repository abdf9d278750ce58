package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/internal/store/sqlite"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startOn starts a server on dir and returns it with its log.
func startOn(t *testing.T, dir string, acceptLoss bool) (*server.Server, *servertest.LogBuffer, error) {
	t.Helper()
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", dir
	cfg.AcceptDataLoss = acceptLoss
	logs := &servertest.LogBuffer{}
	srv, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	return srv, logs, err
}

// withActivities runs a server on a new data directory, schedules n
// activities (each acknowledged), stops it cleanly and returns the directory.
func withActivities(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	srv, _, err := startOn(t, dir, false)
	if err != nil {
		t.Fatalf("start on a new data directory: %v", err)
	}
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	acts := aionv1.NewActivityServiceClient(cc)
	for i := range n {
		if _, err := acts.Schedule(context.Background(), &aionv1.ScheduleRequest{
			Namespace: "orders", Id: fmt.Sprintf("order-%d", i), ActivityType: "ship"}); err != nil {
			t.Fatalf("schedule: %v", err)
		}
	}
	cc.Close()
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sqlite.MarkPath(filepath.Join(dir, "aion.db"))); err != nil {
		t.Fatalf("a new data directory got no mark: %v", err)
	}
	return dir
}

func activityCount(t *testing.T, srv *server.Server) int {
	t.Helper()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := aionv1.NewActivityServiceClient(cc).List(context.Background(), &aionv1.ListActivitiesRequest{Namespace: "orders", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetActivities())
}

var damages = []struct {
	name    string
	damage  func(path string) error
	problem string
}{
	{"zero-length database", func(path string) error { return os.Truncate(path, 0) }, "is empty (0 bytes)"},
	{"missing database", os.Remove, "is missing"},
}

func TestServerRefusesAMissingOrEmptyDatabaseNamingItAndTheFlag(t *testing.T) {
	t.Parallel()
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dir := withActivities(t, 12)
			path := filepath.Join(dir, "aion.db")
			if err := d.damage(path); err != nil {
				t.Fatal(err)
			}
			srv, _, err := startOn(t, dir, false)
			if err == nil {
				n := activityCount(t, srv)
				srv.Stop(context.Background())
				t.Fatalf("started on a %s with %d of 12 acknowledged activities", d.name, n)
			}
			for _, want := range []string{path, d.problem, "12 activities", "--accept-data-loss"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if info, err := os.Stat(path); err == nil && info.Size() > 0 {
				t.Errorf("the refused start wrote %d bytes to %s", info.Size(), path)
			}
		})
	}
}

func TestServerWithAcceptDataLossStartsAndLogsWhatIsLost(t *testing.T) {
	t.Parallel()
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dir := withActivities(t, 7)
			if err := d.damage(filepath.Join(dir, "aion.db")); err != nil {
				t.Fatal(err)
			}
			srv, logs, err := startOn(t, dir, true)
			if err != nil {
				t.Fatalf("start accepting the loss: %v", err)
			}
			if n := activityCount(t, srv); n != 0 {
				t.Errorf("%d activities after the database was lost", n)
			}
			if err := srv.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "lost_activities=7") || !strings.Contains(out, d.problem) {
				t.Fatalf("no error-level report of the 7 lost activities:\n%s", out)
			}
			// Accepted once: the next plain start is clean.
			srv, logs, err = startOn(t, dir, false)
			if err != nil {
				t.Fatalf("start after the loss was accepted: %v", err)
			}
			srv.Stop(context.Background())
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("the accepted loss is reported again:\n%s", logs)
			}
		})
	}
}

func TestServerAdoptsADataDirectoryWithoutMark(t *testing.T) {
	t.Parallel()
	dir := withActivities(t, 5)
	path := filepath.Join(dir, "aion.db")
	// As a data directory written before marks existed.
	if err := os.Remove(sqlite.MarkPath(path)); err != nil {
		t.Fatal(err)
	}
	srv, _, err := startOn(t, dir, false)
	if err != nil {
		t.Fatalf("start on a data directory without mark: %v", err)
	}
	if n := activityCount(t, srv); n != 5 {
		t.Errorf("%d activities after adoption, want 5", n)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if srv, _, err := startOn(t, dir, false); err == nil {
		srv.Stop(context.Background())
		t.Fatal("an adopted database emptied afterwards was not refused")
	}
}
