package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// streamed is one event of a watch, with its SSE id ("" over gRPC).
type streamed struct {
	e  *aionv1.ClusterEvent
	id string
}

// watcher is one open watch: its first message, then the rest.
type watcher struct {
	first streamed
	ch    <-chan streamed
	stop  context.CancelFunc
}

// watchTransport opens a watch that resumes after seq of epoch ("" and 0
// for a fresh start), as token.
type watchTransport struct {
	name string
	open func(t *testing.T, b *bundle, token, epoch string, seq uint64) *watcher
}

var watchTransports = []watchTransport{
	{"gRPC Watch", openGRPCWatch},
	{"SSE with Last-Event-ID", func(t *testing.T, b *bundle, token, epoch string, seq uint64) *watcher {
		return openSSE(t, b, token, "Last-Event-ID", epoch, seq)
	}},
	{"SSE with ?after=", func(t *testing.T, b *bundle, token, epoch string, seq uint64) *watcher {
		return openSSE(t, b, token, "after", epoch, seq)
	}},
}

func openGRPCWatch(t *testing.T, b *bundle, token, epoch string, seq uint64) *watcher {
	t.Helper()
	if token != "" {
		b = b.as(t, token)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := aionv1.NewClusterServiceClient(b.cc).Watch(ctx, &aionv1.WatchRequest{AfterSequence: seq, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("watch after %s-%d: %v", epoch, seq, err)
	}
	ch := make(chan streamed, 8192)
	go func() {
		defer close(ch)
		for {
			e, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- streamed{e: e}
		}
	}()
	return &watcher{first: streamed{e: first}, ch: ch, stop: cancel}
}

// openSSE opens the event stream, naming the position in the header or
// query parameter how.
func openSSE(t *testing.T, b *bundle, token, how, epoch string, seq uint64) *watcher {
	t.Helper()
	u := "http://" + b.srv.HTTPAddr() + "/api/v1/events"
	pos := ""
	if epoch != "" {
		pos = epoch + "-" + fmt.Sprint(seq)
	}
	q := url.Values{}
	if how != "Last-Event-ID" && pos != "" {
		q.Set("after", pos)
	}
	if how == "after and access_token" && token != "" {
		// As the console sends it: an EventSource cannot set headers.
		q.Set("access_token", token)
		token = ""
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	if how == "Last-Event-ID" && pos != "" {
		req.Header.Set("Last-Event-ID", pos)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("event stream after %q: %d %s", pos, resp.StatusCode, body)
	}
	ch := make(chan streamed, 8192)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var id, kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && kind != "error":
				var e aionv1.ClusterEvent
				if err := protojson.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
					return
				}
				ch <- streamed{e: &e, id: kind + " " + id}
			}
		}
	}()
	select {
	case first, ok := <-ch:
		if !ok {
			t.Fatal("event stream ended before its first event")
		}
		return &watcher{first: first, ch: ch, stop: cancel}
	case <-time.After(10 * time.Second):
		t.Fatal("no first event within 10s")
		return nil
	}
}

// next returns the next event that is not a pool sample, checking that an
// SSE event's id is its position and its name its kind.
func (w *watcher) next(t *testing.T, epoch string) *aionv1.ClusterEvent {
	t.Helper()
	for {
		select {
		case s, ok := <-w.ch:
			if !ok {
				t.Fatal("watch ended")
			}
			if s.id != "" {
				if want := fmt.Sprintf("%s %s-%d", kindOf(s.e), epoch, s.e.GetSequence()); s.id != want {
					t.Fatalf("SSE event name and id %q, want %q", s.id, want)
				}
			}
			if s.e.GetPoolStats() != nil {
				continue
			}
			return s.e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
	}
}

// kindOf is an event's SSE event name.
func kindOf(e *aionv1.ClusterEvent) string {
	switch {
	case e.GetSnapshot() != nil:
		return "snapshot"
	case e.GetResumed() != nil:
		return "resumed"
	case e.GetNamespaceCreated() != nil:
		return "namespace_created"
	case e.GetPlacementChanged() != nil:
		return "placement_changed"
	case e.GetRunStarted() != nil:
		return "run_started"
	case e.GetPoolStats() != nil:
		return "pool_stats"
	}
	return fmt.Sprintf("%T", e.GetEvent())
}

// createNamespaces creates each namespace as admin, in order.
func createNamespaces(t *testing.T, b *bundle, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := b.namespaces.Create(context.Background(), &aionv1.CreateNamespaceRequest{Name: n}); err != nil {
			t.Fatalf("create %s: %v", n, err)
		}
	}
}

// wantCreated checks that the next events are the creations of names, at
// the sequences after from, one by one: nothing repeated, nothing missed.
func wantCreated(t *testing.T, w *watcher, epoch string, from uint64, names ...string) {
	t.Helper()
	for i, n := range names {
		e := w.next(t, epoch)
		if got := e.GetNamespaceCreated().GetNamespace().GetName(); got != n || e.GetSequence() != from+1+uint64(i) {
			t.Fatalf("event %d: #%d %v, want #%d namespace_created %s", i, e.GetSequence(), e, from+1+uint64(i), n)
		}
	}
}

// A watcher that reconnects with the position of the last event it saw
// gets a resumed first message and then exactly the events it missed; with
// a position the server no longer holds (evicted from the ring, or of a
// server since restarted) it gets a fresh snapshot instead, and says so.
func TestReconnectedWatchGetsExactlyTheMissedEventsOrAFreshSnapshot(t *testing.T) {
	t.Parallel()
	for _, tr := range watchTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			w := tr.open(t, b, "", "", 0)
			snap := w.first.e
			epoch := snap.GetEpoch()
			if snap.GetSnapshot() == nil || snap.GetResumed() != nil || len(epoch) != 16 {
				t.Fatalf("first message of a fresh watch = %v, want a snapshot naming its epoch", snap)
			}
			if w.first.id != "" && w.first.id != fmt.Sprintf("snapshot %s-%d", epoch, snap.GetSequence()) {
				t.Fatalf("snapshot SSE id %q", w.first.id)
			}
			createNamespaces(t, b, "seen")
			wantCreated(t, w, epoch, snap.GetSequence(), "seen")
			last := snap.GetSequence() + 1
			w.stop()

			createNamespaces(t, b, "missed-1", "missed-2", "missed-3")
			w = tr.open(t, b, "", epoch, last)
			if r := w.first.e; r.GetResumed() == nil || r.GetSnapshot() != nil || r.GetSequence() != last || r.GetEpoch() != epoch {
				t.Fatalf("first message after reconnecting from #%d = %v, want resumed at #%d of epoch %s", last, r, last, epoch)
			}
			if w.first.id != "" && w.first.id != fmt.Sprintf("resumed %s-%d", epoch, last) {
				t.Fatalf("resumed SSE id %q", w.first.id)
			}
			wantCreated(t, w, epoch, last, "missed-1", "missed-2", "missed-3")
			createNamespaces(t, b, "live")
			wantCreated(t, w, epoch, last+3, "live")
			last += 4
			w.stop()

			// More events than the ring holds: the position is gone.
			bus := b.srv.Events()
			for i := range events.RingEvents + 1 {
				bus.Publish(events.Event{Kind: events.RunStarted, Run: &events.Run{Namespace: "seen",
					WorkflowID: fmt.Sprint("wf-", i), RunID: "r", WorkflowType: "t", TaskQueue: "default"}})
			}
			now := bus.Seq()
			w = tr.open(t, b, "", epoch, last)
			s := w.first.e
			if s.GetSnapshot() == nil || s.GetResumed() != nil || s.GetSequence() != now || s.GetEpoch() != epoch {
				t.Fatalf("first message after reconnecting from evicted #%d = %v, want a snapshot at #%d", last, s, now)
			}
			var names []string
			for _, ns := range s.GetSnapshot().GetNamespaces() {
				names = append(names, ns.GetName())
			}
			for _, n := range []string{"seen", "missed-1", "missed-2", "missed-3", "live"} {
				if !slices.Contains(names, n) {
					t.Fatalf("snapshot namespaces %v lack %s", names, n)
				}
			}
			createNamespaces(t, b, "after-snapshot")
			wantCreated(t, w, epoch, now, "after-snapshot")
			w.stop()

			// A restarted server numbers its events from 1 again, under
			// another epoch: the old position gets a snapshot there.
			restarted := setup(t)
			createNamespaces(t, restarted, "r1", "r2", "r3", "r4", "r5", "r6")
			w = tr.open(t, restarted, "", epoch, 2)
			if s := w.first.e; s.GetSnapshot() == nil || s.GetEpoch() == epoch || s.GetSequence() != 6 {
				t.Fatalf("first message on a restarted server for the old epoch's #2 = %v, want a snapshot at #6 of a new epoch", s)
			}
			if got := len(w.first.e.GetSnapshot().GetNamespaces()); got != 6 {
				t.Fatalf("snapshot on the restarted server has %d namespaces, want 6", got)
			}
		})
	}
}

// Replayed events are scoped like live ones: a caller granted one
// namespace resumes to only that namespace's events, the sequence skipping
// the others'.
func TestResumedWatchSendsOnlyTheCallersNamespaces(t *testing.T) {
	t.Parallel()
	for _, tr := range append(slices.Clone(watchTransports), watchTransport{"SSE with ?after= and ?access_token=",
		func(t *testing.T, b *bundle, token, epoch string, seq uint64) *watcher {
			return openSSE(t, b, token, "after and access_token", epoch, seq)
		}}) {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *server.Config) {
				c.Auth.Mode = "token"
				c.Auth.Keys = []auth.APIKey{
					key("ops", "admin-secret", []auth.Role{auth.RoleAdmin}, "*"),
					key("a-admin", "a-admin-secret", []auth.Role{auth.RoleAdmin}, "tenant-a"),
				}
			})
			ops := b.as(t, "admin-secret")
			w := tr.open(t, b, "a-admin-secret", "", 0)
			epoch, from := w.first.e.GetEpoch(), w.first.e.GetSequence()
			w.stop()

			createNamespaces(t, ops, "tenant-b", "tenant-a", "tenant-c")
			if _, err := ops.namespaces.SetPlacement(context.Background(), &aionv1.SetPlacementRequest{Name: "tenant-a",
				Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PREFER, Nodes: []string{"n1"}}}); err != nil {
				t.Fatal(err)
			}
			w = tr.open(t, b, "a-admin-secret", epoch, from)
			if w.first.e.GetResumed() == nil {
				t.Fatalf("first message = %v, want resumed", w.first.e)
			}
			if e := w.next(t, epoch); e.GetNamespaceCreated().GetNamespace().GetName() != "tenant-a" || e.GetSequence() != from+2 {
				t.Fatalf("first replayed event = %v, want #%d namespace_created tenant-a (tenant-b's not sent)", e, from+2)
			}
			if e := w.next(t, epoch); e.GetPlacementChanged().GetNamespace().GetName() != "tenant-a" || e.GetSequence() != from+4 {
				t.Fatalf("second replayed event = %v, want #%d placement_changed tenant-a (tenant-c's not sent)", e, from+4)
			}
		})
	}
}

// A malformed position is refused, naming the field and the value, and
// nothing is subscribed.
func TestWatchRefusesAMalformedPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cluster := aionv1.NewClusterServiceClient(b.cc)
	for _, c := range []struct {
		req   *aionv1.WatchRequest
		names []string
	}{
		{&aionv1.WatchRequest{AfterSequence: 7}, []string{"epoch", "after_sequence 7"}},
		{&aionv1.WatchRequest{AfterSequence: 7, Epoch: "nope"}, []string{"epoch", `"nope"`}},
		{&aionv1.WatchRequest{Epoch: "0000000000000000"}, []string{"epoch", `"0000000000000000"`}},
		{&aionv1.WatchRequest{AfterSequence: 1, Epoch: "0123456789abcdeg"}, []string{"epoch", `"0123456789abcdeg"`}},
	} {
		stream, err := cluster.Watch(context.Background(), c.req)
		if err == nil {
			_, err = stream.Recv()
		}
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || !containsAll(msg, c.names) {
			t.Errorf("watch %v: %v, want InvalidArgument naming %v", c.req, err, c.names)
		}
	}
	base := "http://" + b.srv.HTTPAddr() + "/api/v1/events"
	for _, c := range []struct {
		header, query string
		names         []string
	}{
		{header: "12", names: []string{"Last-Event-ID", `"12"`}},
		{header: "0123456789abcdef-x", names: []string{"Last-Event-ID", `"x"`}},
		{header: "0123456789abcdef--1", names: []string{"Last-Event-ID", `"-1"`}},
		{query: "12", names: []string{"after", `"12"`}},
		{query: "zz-3", names: []string{"after", `"zz"`}},
	} {
		u := base
		if c.query != "" {
			u += "?after=" + url.QueryEscape(c.query)
		}
		req, _ := http.NewRequest("GET", u, nil)
		if c.header != "" {
			req.Header.Set("Last-Event-ID", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Code, Message string }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || body.Code != "InvalidArgument" || !containsAll(body.Message, c.names) {
			t.Errorf("events with Last-Event-ID %q, after %q: %d %+v (%v), want 400 naming %v", c.header, c.query, resp.StatusCode, body, err, c.names)
		}
	}
	if n := b.srv.Events().Subscribers(); n != 0 {
		t.Fatalf("%d subscribers after refused watches, want 0", n)
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
