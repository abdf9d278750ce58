package console

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/server"
)

// TestConsoleRebuildsAfterReconnect restarts the server under an open
// console: the page shows that it lost the stream, reconnects by itself,
// and rebuilds from the new server's snapshot, so a worker of the old
// server is gone and the new server's worker and namespaces show.
func TestConsoleRebuildsAfterReconnect(t *testing.T) {
	dataDir := t.TempDir()
	first := startServer(t, func(c *server.Config) { c.DataDir = dataDir; c.DrainTimeout = 200 * time.Millisecond })
	grpcAddr, httpAddr := first.GRPCAddr(), first.HTTPAddr()
	p := openBrowser(t, httpAddr)
	p.open("/")
	p.waitFor("event stream live", `document.getElementById("conn").dataset.state === "live"`, 10*time.Second)
	must[any](p, `window.aionTestMarker = "same page"`)

	// Two workers on the old server. Worker ids restart with the server,
	// so the new server's single worker reuses the first id: its row must
	// then show the new worker's data, and the second row must go.
	before := func(int) []string { return []string{"before"} }
	old := slices.Clone(connectFleetIn(t, grpcAddr, 2, 2, before).workers)
	slices.SortFunc(old, func(a, b *fleetWorker) int { return cmp.Compare(a.id, b.id) })
	for _, w := range old {
		p.waitFor("old worker row", exists(workerRow(w.id)), 10*time.Second)
	}
	p.waitFor("namespace before", exists(`#namespaces-body tr[data-namespace="before"]`), 10*time.Second)

	if err := first.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	p.waitFor("lost stream shown", `document.getElementById("conn").dataset.state === "reconnecting"`, 10*time.Second)

	second := startServer(t, func(c *server.Config) { c.DataDir, c.GRPCAddr, c.HTTPAddr = dataDir, grpcAddr, httpAddr })
	w := connectFleetIn(t, second.GRPCAddr(), 1, 1, func(int) []string { return []string{"after"} }).workers[0]
	if w.id != old[0].id {
		t.Fatalf("new server gave worker id %d, want %d (ids restart with the server)", w.id, old[0].id)
	}
	p.waitFor("live again", `document.getElementById("conn").dataset.state === "live"`, 20*time.Second)
	p.waitFor("reused row shows the new worker", textOf(workerRow(w.id)+` [data-col="namespaces"]`)+` === "after"`, 10*time.Second)
	p.waitFor("old server's other worker gone", `!(`+exists(workerRow(old[1].id))+`)`, 10*time.Second)
	p.waitFor("namespace after", exists(`#namespaces-body tr[data-namespace="after"]`), 10*time.Second)
	if p.count(`#namespaces-body tr[data-namespace="before"]`) != 1 {
		t.Error("namespace before (in the store) missing after the reconnect")
	}
	if n := p.count(`#event-feed li[data-kind="snapshot"]`); n < 2 {
		t.Errorf("feed shows %d snapshots, want one per connection (2 or more)", n)
	}
	if marker := must[string](p, `window.aionTestMarker || ""`); marker != "same page" {
		t.Error("the page was reloaded during the test")
	}
}

func workerRow(id uint64) string {
	return `#workers-body [data-worker-id="` + strconv.FormatUint(id, 10) + `"]`
}
