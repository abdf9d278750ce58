package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/aion-run/aion/internal/store"
)

// cluster starts one server per name on one fresh PostgreSQL database. The
// servers keep the default lease: no test here waits one out, and a short
// one could run out on a loaded machine, ending a server mid-test.
func cluster(t *testing.T, names ...string) map[string]*bundle {
	t.Helper()
	return clusterOn(t, freshPostgres(t), names...)
}

func clusterOn(t *testing.T, dsn string, names ...string) map[string]*bundle {
	t.Helper()
	out := map[string]*bundle{}
	for _, n := range names {
		out[n] = setup(t, func(c *server.Config) {
			c.Store, c.ServerName, c.DrainTimeout = dsn, n, 200*time.Millisecond
		})
	}
	return out
}

func TestClusterRoutesWorkAcrossServers(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b", "c")
	plain := c["b"].mustConnect(t, &aionv1.Register{Namespaces: []string{"x"}, ActivityTypes: []string{"t"}, Slots: 4})
	gpu := c["c"].mustConnect(t, &aionv1.Register{Namespaces: []string{"x"}, ActivityTypes: []string{"t"}, Node: "gpu", Slots: 4})

	// Unpinned work scheduled on a reaches the workers of b and c; pinned
	// work reaches only c's gpu worker.
	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "x", Id: "pinned", ActivityType: "t", Node: "gpu"})
	task := gpu.nextTask()
	if task.GetActivityId() != "pinned" || task.GetNode() != "gpu" {
		t.Fatalf("gpu worker got %v", task)
	}
	gpu.complete(task, []byte(`"on c"`))
	if a := c["a"].wait(t, "x", "pinned"); a.GetState() != aionv1.ActivityState_ACTIVITY_STATE_COMPLETED || string(a.GetResult()) != `"on c"` {
		t.Fatalf("pinned activity seen from a: %v", a)
	}

	// With the gpu worker full, pinned work waits rather than go to b's
	// worker, which has free slots: unpinned work scheduled after it reaches
	// b's worker first, and p5 is still waiting then.
	for _, id := range []string{"p1", "p2", "p3", "p4", "p5"} {
		c["b"].schedule(t, &aionv1.ScheduleRequest{Namespace: "x", Id: id, ActivityType: "t", Node: "gpu"})
	}
	var held []*aionv1.ActivityTask
	for range 4 {
		held = append(held, gpu.nextTask())
	}
	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "x", Id: "free", ActivityType: "t"})
	task = plain.nextTask()
	if task.GetActivityId() != "free" { // the first task b's worker ever got
		t.Fatalf("b's worker got %v", task)
	}
	got, err := c["a"].activities.Get(context.Background(), &aionv1.GetActivityRequest{Namespace: "x", Id: "p5"})
	if err != nil || got.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_SCHEDULED {
		t.Fatalf("pinned activity with its node's worker full: %v, %v", got, err)
	}
	plain.complete(task, []byte(`"on b"`))
	if a := c["c"].wait(t, "x", "free"); string(a.GetResult()) != `"on b"` {
		t.Fatalf("activity seen from c: %v", a)
	}
	gpu.complete(held[0], nil)
	if next := gpu.nextTask(); next.GetActivityId() != "p5" {
		t.Fatalf("after a slot freed the gpu worker got %v", next)
	}
}

func TestClusterControlReachesWorkersOfOtherServers(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b")
	ctx := context.Background()
	w := c["b"].mustConnect(t, &aionv1.Register{Namespaces: []string{"ctl"}, ActivityTypes: []string{"long"}, Slots: 2,
		Capabilities: []aionv1.InterventionPrimitive{aionv1.InterventionPrimitive_INTERVENTION_PRIMITIVE_INJECT_MESSAGE}})
	clusterA := aionv1.NewClusterServiceClient(c["a"].cc)

	// a lists b's worker, naming its server, once b published it.
	var listed *aionv1.Worker
	servertest.Eventually(t, "a to list b's worker", func() bool {
		resp, err := clusterA.ListWorkers(ctx, &aionv1.ListWorkersRequest{Namespace: "ctl"})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetWorkers()) == 1 {
			listed = resp.GetWorkers()[0]
		}
		return listed != nil
	})
	if listed.GetServer() != "b" || listed.GetId() != w.id {
		t.Fatalf("a lists %v, want worker %d on server b", listed, w.id)
	}

	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "ctl", Id: "talk", ActivityType: "long"})
	c["a"].schedule(t, &aionv1.ScheduleRequest{Namespace: "ctl", Id: "stop", ActivityType: "long"})
	w.nextTask()
	w.nextTask()

	// Intervene through a: delivered to the worker on b.
	iv, err := c["a"].activities.Intervene(ctx, &aionv1.InterveneRequest{Namespace: "ctl", Id: "talk",
		Command: &aionv1.InterventionCommand{Command: &aionv1.InterventionCommand_InjectMessage{
			InjectMessage: &aionv1.InjectMessageCommand{Text: "hello from a"}}}})
	if err != nil || iv.GetOutcome() != aionv1.InterventionOutcome_INTERVENTION_OUTCOME_DELIVERED {
		t.Fatalf("intervene through a: %v, %v", iv, err)
	}
	got := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetIntervention() != nil }).GetIntervention()
	if got.GetActivityId() != "talk" || got.GetCommand().GetInjectMessage().GetText() != "hello from a" {
		t.Fatalf("worker got intervention %v", got)
	}

	// Cancel through a: the worker on b is told to stop, and the activity is
	// canceled when Cancel returns.
	resp, err := c["a"].activities.Cancel(ctx, &aionv1.CancelRequest{Namespace: "ctl", Id: "stop", Reason: "from a"})
	if err != nil || resp.GetActivity().GetState() != aionv1.ActivityState_ACTIVITY_STATE_CANCELED {
		t.Fatalf("cancel through a: %v, %v", resp, err)
	}
	stop := w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetCancelActivity() != nil }).GetCancelActivity()
	if stop.GetActivityId() != "stop" {
		t.Fatalf("worker was told to stop %v", stop)
	}

	// Drain through a: the worker on b is asked to drain.
	dr, err := clusterA.DrainWorker(ctx, &aionv1.DrainWorkerRequest{WorkerId: w.id})
	if err != nil || dr.GetWorker().GetState() != aionv1.WorkerState_WORKER_STATE_DRAINING {
		t.Fatalf("drain through a: %v, %v", dr, err)
	}
	w.recvWhere(func(m *aionv1.ServerMessage) bool { return m.GetDrainRequest() != nil })
}

func TestClusterWatchShowsWorkersOfEveryServer(t *testing.T) {
	t.Parallel()
	c := cluster(t, "a", "b")
	events := c["a"].watch(t)
	if snap := (<-events).GetSnapshot(); snap == nil {
		t.Fatal("watch did not start with a snapshot")
	}
	w := c["b"].mustConnect(t, &aionv1.Register{Namespaces: []string{"seen"}, ActivityTypes: []string{"t"}, Slots: 1})
	var connected *aionv1.Worker
	for connected == nil {
		e := nextDelta(t, events)
		if wc := e.GetWorkerConnected(); wc != nil && wc.GetWorker().GetId() == w.id {
			connected = wc.GetWorker()
		}
	}
	if connected.GetServer() != "b" {
		t.Fatalf("worker_connected on a names server %q, want b", connected.GetServer())
	}
	w.cancel()
	for {
		e := nextDelta(t, events)
		if wd := e.GetWorkerDisconnected(); wd != nil && wd.GetWorkerId() == w.id {
			if wd.GetReason() != aionv1.DisconnectReason_DISCONNECT_REASON_DISCONNECT {
				t.Fatalf("disconnect reason %v", wd.GetReason())
			}
			return
		}
	}
}

func TestClusterRefusesASecondLiveServerWithTheSameName(t *testing.T) {
	t.Parallel()
	dsn := freshPostgres(t)
	clusterOn(t, dsn, "only")
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.Store, cfg.ServerName, cfg.Lease = dsn, "only", 400*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := startServer(ctx, cfg, nil)
	if err == nil {
		_ = s.Stop(context.Background())
		t.Fatal("a second server named \"only\" started while the first was alive")
	}
	if !errors.Is(err, store.ErrNameTaken) || !strings.Contains(err.Error(), "--server-name") {
		t.Fatalf("second server refused with %v, want the name taken and a hint to set --server-name", err)
	}
}
