package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/store"
)

// With 10,000 priority-5 activities waiting and one slot, a priority-1
// activity scheduled afterwards starts next; within a priority the oldest
// goes first, and the order survives a restart.
func TestUrgentActivityOvertakesALowPriorityBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reqs := make([]Request, 10000)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("low-%05d", i), store.Timeouts{}, store.RetryPolicy{})
		reqs[i].Priority = 5
	}
	for _, res := range b.eng.ScheduleBatch(context.Background(), anyone, reqs) {
		if res.Err != nil {
			t.Fatalf("schedule the backlog: %v", res.Err)
		}
	}
	urgent := request("urgent", store.Timeouts{}, store.RetryPolicy{})
	urgent.Priority = 1
	b.schedule(urgent)
	normal := request("normal", store.Timeouts{}, store.RetryPolicy{}) // priority 0: the default 3
	b.schedule(normal)
	if ex := b.why("low-00000"); ex.Reason != WhyNoWorker {
		t.Fatalf("why the backlog waits: %s", ex.Reason)
	}

	b.restart()
	fw := b.join(1)
	for _, want := range []string{"urgent", "normal", "low-00000", "low-00001"} {
		task := fw.task()
		if task.ActivityID != want {
			t.Fatalf("started %s, want %s", task.ActivityID, want)
		}
		fw.complete(task.ActivityID, task.Attempt, "1")
	}
}

func TestPriorityOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []int{-1, 6, 100} {
		r := request(fmt.Sprintf("p%d", p), store.Timeouts{}, store.RetryPolicy{})
		r.Priority = p
		_, _, err := b.eng.Schedule(context.Background(), anyone, r)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("priority: %d", p)) {
			t.Fatalf("priority %d: %v, want ErrInvalid naming it", p, err)
		}
	}
}
