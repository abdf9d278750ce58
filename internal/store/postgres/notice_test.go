package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
)

// heard collects what one server's listener hears.
type heard chan store.Notice

func listen(t *testing.T, s *postgres.Store, self store.ServerID) heard {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := make(heard, 64)
	done := make(chan error, 1)
	go func() {
		done <- s.ListenNotices(ctx, self, func(n store.Notice) {
			select {
			case h <- n:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("listen ended with %v", err)
		}
	})
	return h
}

// next waits for the next notice that is not a probe (see listening).
func (h heard) next(t *testing.T) store.Notice {
	t.Helper()
	for {
		select {
		case n := <-h:
			if n.Kind == store.NoticeNamespace && n.Name == "probe" {
				continue
			}
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no notice within 10s")
		}
	}
}

// listening waits until every listener hears notices: it publishes probes
// until each heard one, then a last notice each must hear.
func listening(t *testing.T, s *postgres.Store, hs ...heard) {
	t.Helper()
	ctx := context.Background()
	for _, h := range hs {
	probe:
		for {
			if err := s.PublishNotice(ctx, store.Notice{Kind: store.NoticeNamespace, Name: "probe"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h:
				break probe
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if err := s.PublishNotice(ctx, store.Notice{Kind: store.NoticeNamespace, Name: "ready"}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		for n := h.next(t); n.Kind != store.NoticeNamespace || n.Name != "ready"; n = h.next(t) {
		}
	}
}

// A work notice is Own only for the server that sent it through the store
// it listens on, when no other server joined that store: it tells that
// server nothing new, while every other server hears it as news.
func TestWorkNoticeIsOwnOnlyForItsSender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := freshDatabase(t)
	sa, sb := open(t, dsn), open(t, dsn)
	join := func(s *postgres.Store, name string) store.ServerID {
		rec, err := s.JoinCluster(ctx, store.JoinRequest{Name: name, Addr: "127.0.0.1:1", Lease: time.Minute})
		if err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
		return rec.ID
	}
	a, b := join(sa, "a"), join(sb, "b")
	ha, hb := listen(t, sa, a), listen(t, sb, b)
	listening(t, sa, ha, hb)

	now := time.Now()
	insert := func(s *postgres.Store, id string) {
		t.Helper()
		if _, err := s.Apply(ctx, []store.Write{store.InsertActivity{Activity: store.Activity{Namespace: "ns", ID: id,
			TaskQueue: "q", ActivityType: "t", Fingerprint: "f", State: store.StateScheduled,
			ScheduledAt: now, ReadyAt: now}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name       string
		send       func()
		ownA, ownB bool
	}{
		{"a's insert", func() { insert(sa, "1") }, true, false},
		{"b's insert", func() { insert(sb, "2") }, false, true},
		{"a's published notice", func() {
			if err := sa.PublishNotice(ctx, store.Notice{Kind: store.NoticeWork, Triples: [][3]string{{"ns", "q", "t"}}}); err != nil {
				t.Fatal(err)
			}
		}, true, false},
	} {
		tc.send()
		for _, l := range []struct {
			h   heard
			own bool
		}{{ha, tc.ownA}, {hb, tc.ownB}} {
			if n := l.h.next(t); n.Kind != store.NoticeWork || n.Own != l.own {
				t.Fatalf("%s: heard %+v, want a work notice with Own %v", tc.name, n, l.own)
			}
		}
	}

	// Once a second server joined a's store, the store cannot tell which
	// of them sent a notice: none is Own.
	join(sa, "c")
	insert(sa, "3")
	n := ha.next(t)
	for n.Kind == store.NoticeTopology { // c's join
		n = ha.next(t)
	}
	if n.Kind != store.NoticeWork || n.Own {
		t.Fatalf("a store two servers joined: heard %+v, want a work notice not Own", n)
	}
}
