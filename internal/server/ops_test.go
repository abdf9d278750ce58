package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// scrape returns the value of every sample of /metrics whose name and
// labels match, keyed by the whole series text.
func (b *bundle) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	return scrapeAt(t, b.srv.HTTPAddr())
}

// scrapeAt reads the /metrics of the server at httpAddr into series → value.
func scrapeAt(t *testing.T, httpAddr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountAKnownWorkload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"m"}, ActivityTypes: []string{"ok", "flaky"}, Slots: 4})
	b.mustConnect(t, &aionv1.Register{Namespaces: []string{"m", "m2"}, ActivityTypes: []string{"other"}, Slots: 1})
	retry := &aionv1.RetryPolicy{InitialInterval: durationpb.New(10 * time.Millisecond), MaximumAttempts: 2}
	for i := range 3 {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "m", Id: fmt.Sprintf("ok-%d", i), ActivityType: "ok"})
	}
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "m", Id: "flaky", ActivityType: "flaky", RetryPolicy: retry})
	// Repeating a schedule is not a new activity.
	b.schedule(t, &aionv1.ScheduleRequest{Namespace: "m", Id: "ok-0", ActivityType: "ok"})
	for range 3 {
		w.complete(w.nextTask(), nil)
	}
	w.fail(w.nextTask(), "io", true) // flaky attempt 1: retried
	w.fail(w.nextTask(), "io", true) // attempt 2: no attempts left
	b.wait(t, "m", "flaky")
	// Backlog: two activities nobody serves, in pool m/backlogged, one of
	// them urgent.
	scheduling := time.Now()
	for i := range 2 {
		b.schedule(t, &aionv1.ScheduleRequest{Namespace: "m", Id: fmt.Sprintf("wait-%d", i), TaskQueue: "backlogged", ActivityType: "ok",
			Priority: int32(1 + 2*i)})
	}

	want := map[string]float64{
		`aion_activities_scheduled_total{namespace="m"}`:                                          6,
		`aion_attempts_started_total{namespace="m"}`:                                              5,
		`aion_activities_closed_total{namespace="m",state="completed"}`:                           3,
		`aion_activities_closed_total{namespace="m",state="failed"}`:                              1,
		`aion_activities_retried_total{namespace="m"}`:                                            1,
		`aion_attempt_duration_seconds_count{namespace="m",outcome="failed"}`:                     2,
		`aion_schedule_to_start_seconds_count{namespace="m"}`:                                     5,
		`aion_workers_connected{namespace="m"}`:                                                   2,
		`aion_workers_connected{namespace="m2"}`:                                                  1,
		`aion_backlog_activities{namespace="m",task_queue="backlogged"}`:                          2,
		`aion_backlog_by_priority_activities{namespace="m",priority="1",task_queue="backlogged"}`: 1,
		`aion_backlog_by_priority_activities{namespace="m",priority="3",task_queue="backlogged"}`: 1,
		`aion_grpc_requests_total{code="OK",method="ActivityService/Schedule"}`:                   7,
	}
	// Wait until every series has caught up with the workload and the
	// backlog has aged 50ms.
	ageSeries := `aion_backlog_oldest_age_seconds{namespace="m",task_queue="backlogged"}`
	var m map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m = b.scrape(t)
		caughtUp := m[ageSeries] >= 0.05
		for series, v := range want {
			caughtUp = caughtUp && m[series] == v
		}
		if caughtUp || time.Now().After(deadline) {
			break
		}
	}
	for series, v := range want {
		if got, ok := m[series]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, v)
		}
	}
	// The oldest is no older than the time since the test scheduled it.
	if age, most := m[ageSeries], time.Since(scheduling).Seconds(); age < 0.05 || age > most {
		t.Errorf("oldest backlog age = %vs, want between 50ms and the %vs since it was scheduled", age, most)
	}
	if m["aion_store_commit_batch_size_count"] < 1 {
		t.Error("no group commit observed")
	}
	for series := range m {
		if strings.Contains(series, "activity_id") || strings.Contains(series, "worker_id") {
			t.Errorf("unbounded label in %s", series)
		}
	}

	w.cancel() // a disconnect is counted by reason
	deadline := time.Now().Add(5 * time.Second)
	for b.scrape(t)[`aion_worker_disconnects_total{reason="disconnect"}`] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("disconnect not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watchEvents reads ClusterService.Watch into a channel.
func (b *bundle) watch(t *testing.T) <-chan *aionv1.ClusterEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := aionv1.NewClusterServiceClient(b.cc).Watch(ctx, &aionv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *aionv1.ClusterEvent, 1024)
	go func() {
		defer close(ch)
		for {
			e, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- e
		}
	}()
	return ch
}

func nextDelta(t *testing.T, ch <-chan *aionv1.ClusterEvent) *aionv1.ClusterEvent {
	t.Helper()
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("watch ended")
			}
			if e.GetPoolStats() != nil {
				continue // sampled every second; not a topology delta
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
	}
}

func TestWatchSendsSnapshotThenExactDeltas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"pre"}, ActivityTypes: []string{"t"}})
	ch := b.watch(t)
	first := nextDelta(t, ch)
	snap := first.GetSnapshot()
	if snap == nil || len(snap.GetWorkers()) != 1 || snap.GetWorkers()[0].GetId() != before.id || len(snap.GetNamespaces()) != 1 {
		t.Fatalf("first event = %v, want a snapshot with the one worker and namespace", first)
	}
	seq := first.GetSequence()

	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"fresh"}, TaskQueue: "q", Node: "n1", ActivityTypes: []string{"t"}, Slots: 3})
	b.namespaces.SetPlacement(ctx, &aionv1.SetPlacementRequest{Name: "fresh",
		Placement: &aionv1.Placement{Mode: aionv1.PlacementMode_PLACEMENT_MODE_PREFER, Nodes: []string{"n1"}}})
	aionv1.NewClusterServiceClient(b.cc).DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: w.id})
	w.cancel()

	check := []func(*aionv1.ClusterEvent) bool{
		func(e *aionv1.ClusterEvent) bool { return e.GetNamespaceCreated().GetNamespace().GetName() == "fresh" },
		func(e *aionv1.ClusterEvent) bool {
			c := e.GetWorkerConnected().GetWorker()
			return c.GetId() == w.id && c.GetNode() == "n1" && c.GetTaskQueue() == "q" && c.GetSlots() == 3 && c.GetTransport() == "grpc"
		},
		func(e *aionv1.ClusterEvent) bool {
			return e.GetPlacementChanged().GetNamespace().GetPlacement().GetMode() == aionv1.PlacementMode_PLACEMENT_MODE_PREFER
		},
		func(e *aionv1.ClusterEvent) bool { return e.GetWorkerDraining().GetWorkerId() == w.id },
		func(e *aionv1.ClusterEvent) bool {
			d := e.GetWorkerDisconnected()
			return d.GetWorkerId() == w.id && d.GetReason() == aionv1.DisconnectReason_DISCONNECT_REASON_DRAINED
		},
		func(e *aionv1.ClusterEvent) bool {
			d := e.GetWorkerDisconnected()
			return d.GetWorkerId() == before.id && d.GetReason() == aionv1.DisconnectReason_DISCONNECT_REASON_DISCONNECT
		},
	}
	for i, ok := range check {
		if i == len(check)-1 {
			before.cancel() // only now, so the two departures cannot swap
		}
		e := nextDelta(t, ch)
		if e.GetSequence() <= seq {
			t.Fatalf("delta %d has sequence %d after %d", i, e.GetSequence(), seq)
		}
		seq = e.GetSequence()
		if !ok(e) {
			t.Fatalf("delta %d = %v", i, e)
		}
	}
}

func TestJSONAPIMirrorsTheServices(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := "http://" + b.srv.HTTPAddr() + "/api/v1"
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	if code, out := do("POST", "/namespaces", `{"name":"web"}`); code != 200 || out["created"] != true {
		t.Fatalf("create: %d %v", code, out)
	}
	if code, out := do("PUT", "/namespaces/web/placement", `{"mode":"PLACEMENT_MODE_PINNED","nodes":["n1"]}`); code != 200 ||
		!strings.Contains(fmt.Sprint(out), "PLACEMENT_MODE_PINNED") {
		t.Fatalf("place: %d %v", code, out)
	}
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"web"}, Node: "n1", ActivityTypes: []string{"t"}, Slots: 2})
	if code, out := do("GET", "/workers", ""); code != 200 || len(out["workers"].([]any)) != 1 {
		t.Fatalf("workers: %d %v", code, out)
	}
	if code, out := do("POST", "/activities", `{"namespace":"web","id":"a1","activity_type":"t","payload":"e30="}`); code != 200 {
		t.Fatalf("schedule: %d %v", code, out)
	}
	w.complete(w.nextTask(), []byte(`"done"`))
	b.wait(t, "web", "a1")
	code, out := do("GET", "/activities/web/a1", "")
	act, _ := out["activity"].(map[string]any)
	if code != 200 || act["state"] != "ACTIVITY_STATE_COMPLETED" || len(act["attempts"].([]any)) != 1 {
		t.Fatalf("get: %d %v", code, out)
	}
	if code, out := do("GET", "/activities?namespace=web&state=completed", ""); code != 200 || len(out["activities"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, out)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
		names              string
	}{
		{"GET", "/activities/web/missing", "", 404, "missing"},
		{"GET", "/activities?namespace=web&state=sideways", "", 400, "state"},
		{"POST", "/namespaces", `{"name":"bad name"}`, 400, "name"},
		{"POST", "/namespaces", `{not json`, 400, "body"},
		{"PUT", "/namespaces/never/placement", `{"mode":"PLACEMENT_MODE_PREFER","nodes":["x"]}`, 404, "never"},
		{"POST", "/workers/999/drain", "", 404, "999"},
		{"POST", "/activities", `{"namespace":"web","id":"a1","activity_type":"t","payload":"different"}`, 400, "payload"},
	} {
		code, out := do(c.method, c.path, c.body)
		if code != c.code || !strings.Contains(fmt.Sprint(out["message"]), c.names) {
			t.Errorf("%s %s: %d %v, want %d naming %s", c.method, c.path, code, out, c.code, c.names)
		}
	}
}

func TestEventStreamOverSSE(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.srv.HTTPAddr()+"/api/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	want := func(re string) {
		t.Helper()
		r := regexp.MustCompile(re)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended before %s", re)
				}
				if r.MatchString(l) {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no line matching %s", re)
			}
		}
	}
	want(`^event: snapshot$`)
	w := b.mustConnect(t, &aionv1.Register{Namespaces: []string{"sse"}, ActivityTypes: []string{"t"}})
	want(`^event: namespace_created$`)
	want(`^event: worker_connected$`)
	want(fmt.Sprintf(`^data: .*"id":"%d"`, w.id))
	w.cancel()
	want(`^event: worker_disconnected$`)
	want(`"reason":"DISCONNECT_REASON_DISCONNECT"`)
}
