package console

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The waiting panel counts a namespace's ready work by priority and
// fairness key, and follows it as work arrives.
func TestConsoleWaitingShowsWorkByPriorityAndKey(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	base := "http://" + srv.HTTPAddr()
	schedule := func(id, key string, priority int) {
		sendJSON(t, http.MethodPost, base+"/api/v1/activities", fmt.Sprintf(
			`{"namespace":"shop","id":%q,"activity_type":"render","fairness_key":%q,"priority":%d}`, id, key, priority))
	}
	for i := range 3 {
		schedule(fmt.Sprintf("x-%d", i), "tenant-x", 2)
	}
	schedule("y-0", "tenant-y", 4)

	p := openBrowser(t, srv.HTTPAddr())
	p.open("/")
	row := func(key string, priority int) string {
		return fmt.Sprintf(`#waiting-body tr[data-fairness-key=%q][data-priority="%d"]`, key, priority)
	}
	p.waitFor("tenant-x's group", exists(row("tenant-x", 2)), 15*time.Second)
	if got := p.text(row("tenant-x", 2) + ` td[data-col="count"]`); got != "3" {
		t.Errorf("tenant-x count = %q, want 3", got)
	}
	if got := p.text(row("tenant-y", 4) + ` td[data-col="count"]`); got != "1" {
		t.Errorf("tenant-y count = %q, want 1", got)
	}
	if got := p.text("#waiting-total"); got != "4" {
		t.Errorf("total = %q, want 4", got)
	}
	// New work shows on the next refresh.
	schedule("x-3", "tenant-x", 2)
	p.waitFor("tenant-x's group to grow", textOf(row("tenant-x", 2)+` td[data-col="count"]`)+` === "4"`, 10*time.Second)
	if got := p.text("#waiting-panel"); strings.Contains(got, "undefined") || strings.Contains(got, "NaN") || strings.Contains(got, "[object") {
		t.Errorf("the waiting panel shows a missing value: %q", got)
	}
	if errs := p.pageErrors(); len(errs) > 0 {
		t.Errorf("page errors: %v", errs)
	}
}
