package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Attacks on memory and connections, each against a real server on
// loopback. Timeouts are configured short and the tests wait for the event
// (a close, a drop), with a generous guard that only a broken build reaches.

const guard = 10 * time.Second

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readToEOF reads until the server closes the connection; it fails the test
// if the guard passes first.
func readToEOF(t *testing.T, conn net.Conn, r io.Reader) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(guard))
	b, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v (read %d bytes)", guard, len(b))
	}
	return b
}

func TestGRPCConnectionThatNeverHandshakesIsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.Conn.GRPCHandshakeTimeout = 200 * time.Millisecond })
	conn := dial(t, b.srv.GRPCAddr())
	// The client says nothing: no HTTP/2 preface. The server's own
	// settings frame may arrive, then the close.
	readToEOF(t, conn, conn)
}

func TestGRPCIdleConnectionIsClosedAndClientsReconnect(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.Conn.GRPCIdleTimeout = 300 * time.Millisecond })
	cc, err := grpc.NewClient(b.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ns := aionv1.NewNamespaceServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if _, err := ns.List(ctx, &aionv1.ListNamespacesRequest{}); err != nil {
		t.Fatal(err)
	}
	for st := cc.GetState(); st == connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			t.Fatalf("an idle connection stayed open for %v", guard)
		}
	}
	// The next call dials again, transparently.
	if _, err := ns.List(ctx, &aionv1.ListNamespacesRequest{}); err != nil {
		t.Fatalf("a call after the idle close: %v", err)
	}
}

func TestHTTPKeepAliveConnectionIdlePastIdleTimeoutIsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.Conn.HTTPIdleTimeout = 200 * time.Millisecond })
	conn := dial(t, b.srv.HTTPAddr())
	fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: aion\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if rest := readToEOF(t, conn, br); len(rest) != 0 {
		t.Fatalf("after the response: %q", rest)
	}
}

// scheduleQuiet is bundle.schedule without the request (and its payload)
// in the failure message.
func scheduleQuiet(t *testing.T, b *bundle, ns, id string, payload []byte) *aionv1.Activity {
	t.Helper()
	resp, err := b.activities.Schedule(context.Background(), &aionv1.ScheduleRequest{Namespace: ns, Id: id,
		ActivityType: "nobody", Payload: payload})
	if err != nil {
		t.Fatalf("schedule %s/%s with %d payload bytes: %v", ns, id, len(payload), err)
	}
	return resp.GetActivity()
}

// scheduleLarge schedules n activities with payloads just under the 2 MiB
// limit that no worker serves, and returns their payloads by id.
func scheduleLarge(t *testing.T, b *bundle, ns string, n int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i := range n {
		p := bytes.Repeat([]byte{byte('a' + i)}, 2<<20-4096)
		id := fmt.Sprint("big-", i)
		scheduleQuiet(t, b, ns, id, p)
		out[id] = p
	}
	return out
}

// A client that requests a large response and does not read it is cut off
// once the write timeout passes, rather than holding its connection.
func TestHTTPSlowReaderOfALargeResponseIsCutAfterTheWriteTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) {
		c.Conn.HTTPWriteTimeout = 300 * time.Millisecond
		c.MaxListBytes = 64 << 20
	})
	scheduleLarge(t, b, "big", 6) // about 16 MB of JSON: more than the kernel buffers
	conn := dial(t, b.srv.HTTPAddr())
	fmt.Fprint(conn, "GET /api/v1/activities?namespace=big&include_payloads=true HTTP/1.1\r\nHost: aion\r\n\r\n")
	servertest.Eventually(t, "the request to arrive", func() bool { return b.srv.HTTPConnections() == 1 })
	// The connection closes once the handler returns, after it has read
	// and encoded the whole page (the writes after the deadline fail at
	// once): 5 to 8 s of a test run with -race on 2 cores, longer with the
	// package's other tests beside it.
	servertest.EventuallyWithin(t, time.Minute, "the server to cut the connection off",
		func() bool { return b.srv.HTTPConnections() == 0 })
	// What the kernel buffered is all there is: not a whole response (it
	// may end anywhere, even before the status line when the deadline
	// passed while the page was being built).
	raw := readToEOF(t, conn, conn)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatalf("read a whole response of %d bytes; want it cut off", len(raw))
	}
}

func bigPoolSample(n int) events.Event {
	pools := make([]events.Pool, n)
	for i := range pools {
		pools[i] = events.Pool{Namespace: fmt.Sprint("tenant-", i), TaskQueue: "default", Backlog: i}
	}
	return events.Event{Kind: events.PoolStatsUpdated, Pools: pools}
}

// An event-stream client that stops reading is cut off once a write has
// waited past the write timeout, without reading a byte: here it never
// falls behind the bus far enough to be dropped (the events published fill
// the socket buffers but fit in the bus's ring).
func TestEventStreamClientThatStopsReadingIsCutOffByTheWriteTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.Conn.HTTPWriteTimeout = 300 * time.Millisecond })
	bus := b.srv.Events()
	conn := dial(t, b.srv.HTTPAddr())
	fmt.Fprint(conn, "GET /api/v1/events HTTP/1.1\r\nHost: aion\r\n\r\n")
	servertest.Eventually(t, "the event stream to subscribe", func() bool { return bus.Subscribers() == 1 })
	sample := bigPoolSample(1000) // about 90 KB of JSON
	for range 90 {
		bus.Publish(sample)
	}
	servertest.Eventually(t, "the server to close the stream", func() bool { return b.srv.HTTPConnections() == 0 })
	if n := bus.Dropped(); n != 0 {
		t.Fatalf("%d subscribers dropped; want the write timeout, not the bus, to end the stream", n)
	}
	readToEOF(t, conn, conn)
}

// An event-stream client that falls behind the bus by more than its bound
// is dropped (publishers never wait for it), told so, and its connection
// closed, without the client reading a byte; a new subscriber gets a fresh
// snapshot.
func TestEventStreamClientThatFallsBehindIsDroppedAndDisconnected(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *server.Config) { c.Conn.HTTPWriteTimeout = 300 * time.Millisecond })
	bus := b.srv.Events()
	conn := dial(t, b.srv.HTTPAddr())
	fmt.Fprint(conn, "GET /api/v1/events HTTP/1.1\r\nHost: aion\r\n\r\n")
	servertest.Eventually(t, "the event stream to subscribe", func() bool { return bus.Subscribers() == 1 })
	sample := bigPoolSample(200)
	for i := 0; bus.Dropped() == 0; i++ {
		if i == 1_000_000 {
			t.Fatalf("a subscriber that reads nothing was not dropped after %d events", i)
		}
		bus.Publish(sample)
	}
	if n := bus.Subscribers(); n != 0 {
		t.Fatalf("%d subscribers after the drop", n)
	}
	servertest.Eventually(t, "the server to close the stream", func() bool { return b.srv.HTTPConnections() == 0 })
	readToEOF(t, conn, conn)

	// The stream still serves a client that reads: it gets a fresh snapshot.
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.srv.HTTPAddr()+"/api/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "id: ") {
		t.Fatalf("a new subscriber's first line: %q, %v", line, err)
	}
}

// Listing activities whose payloads are 2 MiB each returns no payloads
// unless asked, and a page with payloads stops at the byte bound with a
// token for the rest.
func TestListLeavesPayloadsOutUnlessAskedAndStopsAtTheByteBound(t *testing.T) {
	t.Parallel()
	b := setup(t) // the default bound: 4 MiB per page
	want := scheduleLarge(t, b, "big", 5)
	ctx := context.Background()

	light, err := b.activities.List(ctx, &aionv1.ListActivitiesRequest{Namespace: "big", PageSize: 1000})
	if err != nil {
		t.Fatalf("list without payloads: %v", err)
	}
	if n := len(light.GetActivities()); n != 5 || light.GetNextPageToken() != "" {
		t.Fatalf("list without payloads: %d activities, next %q; want all 5 on one page", n, light.GetNextPageToken())
	}
	for _, a := range light.GetActivities() {
		if a.GetPayload() != nil || a.GetPayloadSize() != uint64(len(want[a.GetId()])) {
			t.Fatalf("%s listed with %d payload bytes, payload_size %d; want none and %d", a.GetId(), len(a.GetPayload()),
				a.GetPayloadSize(), len(want[a.GetId()]))
		}
	}
	if size := proto.Size(light); size > 64<<10 {
		t.Fatalf("a page of 5 activities without payloads is %d bytes", size)
	}

	got := map[string][]byte{}
	pages := 0
	req := &aionv1.ListActivitiesRequest{Namespace: "big", PageSize: 1000, IncludePayloads: true}
	for {
		page, err := b.activities.List(ctx, req, grpc.MaxCallRecvMsgSize(64<<20))
		if err != nil {
			t.Fatalf("list with payloads, page %d: %v", pages+1, err)
		}
		pages++
		if size := proto.Size(page); len(page.GetActivities()) > 1 && size > 4<<20+64<<10 {
			t.Fatalf("page %d: %d activities in %d bytes, past the 4 MiB bound", pages, len(page.GetActivities()), size)
		}
		for _, a := range page.GetActivities() {
			got[a.GetId()] = a.GetPayload()
		}
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	if pages < 3 || len(got) != 5 {
		t.Fatalf("with payloads: %d activities over %d pages; want 5 over at least 3 (two 2 MiB payloads per 4 MiB page)", len(got), pages)
	}
	for id, p := range want {
		if !bytes.Equal(got[id], p) {
			t.Fatalf("%s: listed payload of %d bytes differs from the one scheduled", id, len(got[id]))
		}
	}

	// The JSON API: no payloads by default, include_payloads=true for them.
	var out struct {
		Activities []map[string]any `json:"activities"`
		Next       string           `json:"next_page_token"`
	}
	get := func(query string) int {
		t.Helper()
		resp, err := http.Get("http://" + b.srv.HTTPAddr() + "/api/v1/activities?namespace=big&" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		out.Activities, out.Next = nil, ""
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return len(raw)
	}
	if n := get("page_size=1000"); n > 64<<10 || len(out.Activities) != 5 || out.Activities[0]["payload"] != nil ||
		out.Activities[0]["payload_size"] == nil {
		t.Fatalf("GET without payloads: %d bytes, %d activities, first %v", n, len(out.Activities), out.Activities[0])
	}
	if get("page_size=1000&include_payloads=true"); len(out.Activities) != 2 || out.Activities[0]["payload"] == nil || out.Next == "" {
		t.Fatalf("GET with payloads: %d activities, next %q; want 2 with payloads and a token", len(out.Activities), out.Next)
	}
	resp, err := http.Get("http://" + b.srv.HTTPAddr() + "/api/v1/activities?namespace=big&include_payloads=maybe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("include_payloads=maybe: %d, want 400", resp.StatusCode)
	}
}

func TestPendingBytesCapIsOnByDefault(t *testing.T) {
	t.Parallel()
	d := server.Defaults()
	if d.MaxPendingBytesPerNamespace <= 0 || d.MaxListBytes <= 0 {
		t.Fatalf("defaults: pending bytes cap %d, list bytes %d; want both set", d.MaxPendingBytesPerNamespace, d.MaxListBytes)
	}
	c := d.Conn
	if c.GRPCHandshakeTimeout <= 0 || c.GRPCIdleTimeout <= 0 || c.HTTPReadHeaderTimeout <= 0 || c.HTTPReadTimeout <= 0 ||
		c.HTTPWriteTimeout <= 0 || c.HTTPIdleTimeout <= 0 || c.GRPCMaxStreams == 0 {
		t.Fatalf("default connection limits %+v: want every one set", c)
	}
}

// testPendingBytesCap fills namespace "capped" of a server whose cap is 3
// MiB. freed says whether closing an activity frees its bytes at once (in
// cluster mode they are freed at the next sample of the store).
func testPendingBytesCap(t *testing.T, b *bundle, freed bool) {
	t.Helper()
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 2<<20-4096)
	scheduleQuiet(t, b, "capped", "first", big)
	_, err := b.activities.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "capped", Id: "over", ActivityType: "nobody", Payload: big})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(msg, `"capped"`) ||
		!strings.Contains(msg, "3145728") || !strings.Contains(msg, "--max-pending-bytes-per-namespace") {
		t.Fatalf("past the pending bytes cap: %v; want ResourceExhausted naming the namespace, the cap and the flag", err)
	}
	if _, err := b.activities.Get(ctx, &aionv1.GetActivityRequest{Namespace: "capped", Id: "over"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused activity exists: %v", err)
	}
	// In a batch, only the request past the cap is refused.
	res, err := b.activities.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: []*aionv1.ScheduleRequest{
		{Namespace: "capped", Id: "small", ActivityType: "nobody", Payload: []byte("fits")},
		{Namespace: "capped", Id: "over", ActivityType: "nobody", Payload: big},
		{Namespace: "other", Id: "big", ActivityType: "nobody", Payload: big},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.GetResults()
	if r[0].GetActivity() == nil || codes.Code(r[1].GetError().GetCode()) != codes.ResourceExhausted || r[2].GetActivity() == nil {
		t.Fatalf("batch results: %v, %v, %v", r[0].GetActivity().GetId(), r[1].GetError(), r[2].GetActivity().GetId())
	}
	if !freed {
		return
	}
	// Closing an activity gives its bytes back.
	if _, err := b.activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "capped", Id: "first"}); err != nil {
		t.Fatal(err)
	}
	scheduleQuiet(t, b, "capped", "after", big)
}

func TestPendingBytesCapRefusesScheduleAndChangesNothing(t *testing.T) {
	t.Parallel()
	testPendingBytesCap(t, setup(t, func(c *server.Config) { c.MaxPendingBytesPerNamespace = 3 << 20 }), true)
}

func TestPendingBytesCapHoldsInClusterMode(t *testing.T) {
	t.Parallel()
	dsn := freshPostgres(t)
	b := setup(t, func(c *server.Config) {
		c.Store, c.ServerName, c.Lease, c.DrainTimeout = dsn, "a", 2*time.Second, 200*time.Millisecond
		c.MaxPendingBytesPerNamespace = 3 << 20
	})
	testPendingBytesCap(t, b, false)
}

// Activities waiting with large payloads are not held in memory: the
// payloads are read back from the store when an attempt starts, and arrive
// whole, as scheduled and after a restart.
func TestLargeWaitingPayloadsAreDeliveredWholeFromTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := setup(t, func(c *server.Config) { c.DataDir = dir })
	receive := func(b *bundle, ns string, want map[string][]byte) {
		t.Helper()
		w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{ns}, ActivityTypes: []string{"nobody"}, Slots: 10})
		defer w.cancel()
		for range want {
			task := w.nextTask()
			if p := want[task.GetActivityId()]; !bytes.Equal(task.GetPayload(), p) {
				t.Fatalf("task %s: %d payload bytes, want the %d scheduled", task.GetActivityId(), len(task.GetPayload()), len(p))
			}
		}
	}

	now := scheduleLarge(t, b, "now", 3)
	now["small"] = []byte("tiny")
	scheduleQuiet(t, b, "now", "small", now["small"])
	again := scheduleQuiet(t, b, "now", "big-0", now["big-0"])
	if !bytes.Equal(again.GetPayload(), now["big-0"]) {
		t.Fatalf("scheduling big-0 again answered with %d payload bytes", len(again.GetPayload()))
	}
	got, err := b.activities.Get(context.Background(), &aionv1.GetActivityRequest{Namespace: "now", Id: "big-1"})
	if err != nil || !bytes.Equal(got.GetActivity().GetPayload(), now["big-1"]) {
		t.Fatalf("get big-1: %d payload bytes, %v", len(got.GetActivity().GetPayload()), err)
	}
	receive(b, "now", now)

	// Restart before any worker came: recovery leaves large payloads in
	// the store too.
	later := scheduleLarge(t, b, "later", 2)
	if err := b.srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	receive(setup(t, func(c *server.Config) { c.DataDir = dir }), "later", later)
}

// BenchmarkPendingLargePayloadsHeap reports the heap a server keeps for
// 145 waiting activities of 2 MiB each (290 MiB of payloads), measured
// after a collection, as MB-held.
func BenchmarkPendingLargePayloadsHeap(b *testing.B) {
	ctx := context.Background()
	payload := bytes.Repeat([]byte("p"), 2<<20-4096)
	for b.Loop() {
		srv, err := startServer(ctx, servertest.Config(b.TempDir()), nil)
		if err != nil {
			b.Fatal(err)
		}
		cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		acts := aionv1.NewActivityServiceClient(cc)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range 145 {
			if _, err := acts.Schedule(ctx, &aionv1.ScheduleRequest{Namespace: "bench", Id: fmt.Sprint(i),
				ActivityType: "nobody", Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "MB-held")
		cc.Close()
		if err := srv.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
