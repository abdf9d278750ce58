package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
)

// TestSecondServerOnADataDirectoryIsRefusedWhileTheFirstServes starts a
// server, then `aion dev` and `aion server` on its data directory with
// ports of their own: each exits 1 naming the directory and the first
// server's pid, without serving, while the first goes on serving. A SIGKILL
// leaves no lock behind: a new server starts on the directory at once and
// finds what the first acknowledged.
func TestSecondServerOnADataDirectoryIsRefusedWhileTheFirstServes(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.schedule(client.ScheduleOptions{Namespace: "orders", ID: "before", ActivityType: "ship"}, echo{Hello: "x"})
	want := fmt.Sprintf("data directory %q is in use by another aion process (pid %d): stop it, or use another --data-dir",
		c.dataDir, c.server.cmd.Process.Pid)

	for _, command := range []string{"dev", "server"} {
		second := start(t, "second "+command, command, "--grpc-addr", freePort(t), "--http-addr", freePort(t),
			"--data-dir", c.dataDir, "--sqlite-sync", "normal")
		if code := second.exit(20 * time.Second); code != 1 {
			t.Fatalf("aion %s on a data directory in use exited %d, want 1:\n%s", command, code, second.output())
		}
		out := second.output()
		if !strings.Contains(out, want) {
			t.Fatalf("aion %s's refusal does not say %q:\n%s", command, want, out)
		}
		if strings.Contains(out, "msg=serving") {
			t.Fatalf("aion %s served before refusing:\n%s", command, out)
		}
		id := "after-" + command
		c.schedule(client.ScheduleOptions{Namespace: "orders", ID: id, ActivityType: "ship"}, echo{Hello: "x"})
		if _, err := c.client.Get(context.Background(), "orders", id); err != nil {
			t.Fatalf("the first server after refusing aion %s: %v", command, err)
		}
	}

	c.server.signal(syscall.SIGKILL)
	c.server.exit(10 * time.Second)
	c.boot() // same data dir: the killed process's lock went with it
	cl, err := client.Dial(context.Background(), c.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"before", "after-dev", "after-server"} {
		if _, err := cl.Get(ctx, "orders", id); err != nil {
			t.Fatalf("the server started after the SIGKILL: %v", err)
		}
	}
}
