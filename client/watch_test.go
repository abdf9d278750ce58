package client

import (
	"context"
	"slices"
	"strings"
	"testing"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchN returns the first n events of a watch that are not pool samples,
// and the position after the last.
func watchN(t *testing.T, ctx context.Context, c *Client, n int, opts ...WatchOption) ([]*aionv1.ClusterEvent, WatchPosition) {
	t.Helper()
	var out []*aionv1.ClusterEvent
	var pos WatchPosition
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for e, err := range c.Watch(ctx, opts...) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if e.GetPoolStats() != nil {
			continue
		}
		pos = pos.Advance(e)
		out = append(out, e)
		if len(out) == n {
			break
		}
	}
	if len(out) != n {
		t.Fatalf("watch ended after %d events, want %d", len(out), n)
	}
	return out, pos
}

func createdName(e *aionv1.ClusterEvent) string {
	return e.GetNamespaceCreated().GetNamespace().GetName()
}

// A watch resumed from the position of the last event seen starts with a
// resumed event and then gets exactly the events missed; after the server
// restarted, the same position gets a fresh snapshot of the new stream,
// though the new one's sequence numbers pass the old position's.
func TestWatchAfterResumesOrStartsOverFromASnapshot(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	create := func(c *Client, names ...string) {
		t.Helper()
		for _, n := range names {
			if _, _, err := c.CreateNamespace(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}

	first, pos := watchN(t, ctx, e.c, 1)
	if first[0].GetSnapshot() == nil || pos.Epoch == "" {
		t.Fatalf("first event %v, want a snapshot naming its epoch", first[0])
	}
	create(e.c, "seen")
	// Resuming from the snapshot's position gets the one event after it.
	got, pos := watchN(t, ctx, e.c, 2, WatchAfter(pos))
	if got[0].GetResumed() == nil || got[0].GetSequence() != first[0].GetSequence() || createdName(got[1]) != "seen" {
		t.Fatalf("resumed from the snapshot: %v", got)
	}

	create(e.c, "missed-1", "missed-2")
	got, after := watchN(t, ctx, e.c, 3, WatchAfter(pos))
	if got[0].GetResumed() == nil || got[0].GetSequence() != pos.Sequence || got[0].GetEpoch() != pos.Epoch {
		t.Fatalf("first event resuming from %+v: %v, want resumed", pos, got[0])
	}
	for i, want := range []string{"missed-1", "missed-2"} {
		if e := got[i+1]; createdName(e) != want || e.GetSequence() != pos.Sequence+1+uint64(i) {
			t.Fatalf("event %d: %v, want #%d namespace_created %s", i+1, e, pos.Sequence+1+uint64(i), want)
		}
	}
	if after != (WatchPosition{Epoch: pos.Epoch, Sequence: pos.Sequence + 2}) {
		t.Fatalf("position after the missed events %+v", after)
	}

	e.srv.Restart(t)
	create(e.c, "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8")
	got, _ = watchN(t, ctx, e.c, 1, WatchAfter(after))
	snap := got[0]
	if snap.GetSnapshot() == nil || snap.GetEpoch() == "" || snap.GetEpoch() == after.Epoch || snap.GetSequence() <= after.Sequence {
		t.Fatalf("resuming %+v on the restarted server: %v, want a snapshot of a new epoch past #%d", after, snap, after.Sequence)
	}
	var names []string
	for _, ns := range snap.GetSnapshot().GetNamespaces() {
		names = append(names, ns.GetName())
	}
	for _, n := range []string{"seen", "missed-1", "missed-2", "r8"} {
		if !slices.Contains(names, n) {
			t.Fatalf("snapshot after the restart lacks %s: %v", n, names)
		}
	}
}

func TestWatchAfterAMalformedPositionIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxFor(t)
	for _, pos := range []WatchPosition{{Sequence: 4}, {Epoch: "not-an-epoch", Sequence: 4}} {
		for _, err := range e.c.Watch(ctx, WatchAfter(pos)) {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "epoch") {
				t.Fatalf("watch after %+v: %v, want InvalidArgument naming epoch", pos, err)
			}
			break
		}
	}
}
