package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
)

// TestWALCutShortAfterSIGKILLIsRefusedThenAcceptedLoudly performs the
// attack on a real server process: acknowledged activities, a SIGKILL that
// leaves them in the write-ahead log, the log cut to half its size. SQLite
// alone opens what is left without a word; the server refuses to start,
// saying how many acknowledged activities are gone, and with
// --accept-data-loss starts and logs the same count at error level.
func TestWALCutShortAfterSIGKILLIsRefusedThenAcceptedLoudly(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	// 120 commits of one activity each stay well under SQLite's automatic
	// checkpoint (1,000 pages), so every one of them is in the log when the
	// process dies, and the cut drops the later ones.
	const acknowledged = 120
	for i := range acknowledged {
		c.schedule(client.ScheduleOptions{Namespace: "orders", ID: fmt.Sprintf("order-%03d", i), ActivityType: "ship"}, echo{Hello: "x"})
	}
	c.server.signal(syscall.SIGKILL)
	c.server.exit(10 * time.Second)

	wal := filepath.Join(c.dataDir, "aion.db-wal")
	info, err := os.Stat(wal)
	if err != nil || info.Size() == 0 {
		t.Fatalf("SIGKILL left no write-ahead log to damage: %v", err)
	}
	t.Logf("write-ahead log: %d bytes", info.Size())
	if err := os.Truncate(wal, info.Size()/2); err != nil {
		t.Fatal(err)
	}

	args := []string{"server", "--grpc-addr", c.grpc, "--http-addr", c.http, "--data-dir", c.dataDir, "--sqlite-sync", "normal"}
	refused := start(t, "server#refused", args...)
	if code := refused.exit(30 * time.Second); code != 1 {
		t.Fatalf("server on a cut write-ahead log exited %d, want 1:\n%s", code, refused.output())
	}
	out := refused.output()
	m := regexp.MustCompile(`(\d+) acknowledged commits \(\d+ writes, (\d+) activities\) are gone`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, wal) || !strings.Contains(out, "--accept-data-loss") {
		t.Fatalf("refusal does not name the log, the loss and the flag:\n%s", out)
	}
	lost, _ := strconv.Atoi(m[2])
	if lost == 0 {
		t.Fatalf("refusal counts no lost activity:\n%s", out)
	}

	c.extra = append(c.extra, "--accept-data-loss")
	c.boot()
	line := c.server.waitLine(regexp.MustCompile(`level=ERROR .*lost_activities=(\d+)`), 10*time.Second)
	if line[1] != m[2] {
		t.Fatalf("accepted start logged %s lost activities, the refusal said %s", line[1], m[2])
	}
	left := 0
	for a, err := range c.client.ListAll(context.Background(), client.ListOptions{Namespace: "orders", PageSize: 100}) {
		if err != nil {
			t.Fatal(err)
		}
		if a != nil {
			left++
		}
	}
	t.Logf("%d acknowledged, %d left after the cut, %d reported lost", acknowledged, left, lost)
	if left+lost != acknowledged {
		t.Fatalf("%d left and %d reported lost, want them to add up to the %d acknowledged", left, lost, acknowledged)
	}
}
