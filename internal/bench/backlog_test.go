package bench_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/bench"
)

func TestBacklogRefusesBadOptionsBeforeStartingAServer(t *testing.T) {
	t.Parallel()
	good := bench.BacklogOptions{Binary: "/nonexistent/aion", Activities: 10, Batch: 10, Concurrency: 1, Payload: 16, Slots: 1}
	for _, tc := range []struct {
		name  string
		spoil func(*bench.BacklogOptions)
		want  string
	}{
		{"batch over 1000", func(o *bench.BacklogOptions) { o.Batch = 1001 }, "batch: 1001"},
		{"no batch", func(o *bench.BacklogOptions) { o.Batch = 0 }, "batch: 0"},
		{"no activities", func(o *bench.BacklogOptions) { o.Activities = 0 }, "activities 0"},
		{"no slots", func(o *bench.BacklogOptions) { o.Slots = 0 }, "slots 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := good
			tc.spoil(&o)
			_, err := bench.RunBacklog(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunBacklog: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
