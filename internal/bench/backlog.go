package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/proc"
)

// BacklogOptions configure RunBacklog.
type BacklogOptions struct {
	// Binary is the aion executable the server runs as.
	Binary string
	// Activities to leave waiting.
	Activities int
	// Batch is the activities of each ScheduleBatch call (at most 1000);
	// Concurrency the calls in flight at once.
	Batch, Concurrency int
	// Payload is each activity's input size in bytes.
	Payload int
	// Drain, after the restart, runs every activity on one worker of
	// Slots slots and checks that each ran exactly once.
	Drain bool
	Slots int
	// DataDir holds the server's SQLite file; empty for a temporary one.
	DataDir string
	// Progress receives a line per step; nil for none.
	Progress io.Writer
}

// BacklogReport is what RunBacklog measured.
type BacklogReport struct {
	Activities int `json:"activities"`
	// FillSeconds is how long scheduling them took.
	FillSeconds float64 `json:"fill_seconds"`
	// RSSMiB is the server's resident memory with them waiting, before
	// the kill; PeakRSSMiB its peak (VmHWM) by then.
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// ReadySeconds runs from starting the server again after SIGKILL to
	// its /readyz answering 200.
	ReadySeconds float64 `json:"ready_seconds"`
	// RestartRSSMiB is the restarted server's resident memory once ready.
	RestartRSSMiB float64 `json:"restart_rss_mib"`
	// FirstTaskSeconds runs from a worker's connect call to its first task.
	FirstTaskSeconds float64 `json:"first_task_seconds"`
	// Drained, with Drain, counts the distinct activities the worker ran,
	// Duplicates the tasks of an activity it had run already, and
	// DrainSeconds how long that took.
	Drained      int     `json:"drained,omitempty"`
	Duplicates   int     `json:"duplicates,omitempty"`
	DrainSeconds float64 `json:"drain_seconds,omitempty"`
}

// RunBacklog starts an aion server (o.Binary) on a SQLite file, leaves
// o.Activities waiting with no worker connected, reads the server's memory,
// kills it with SIGKILL, starts it again and times its readiness and a
// worker's first task; with o.Drain it then runs them all and counts each.
func RunBacklog(ctx context.Context, o BacklogOptions) (BacklogReport, error) {
	rep := BacklogReport{Activities: o.Activities}
	if o.Batch <= 0 || o.Batch > 1000 {
		return rep, fmt.Errorf("batch: %d, want 1 to 1000", o.Batch)
	}
	if o.Activities <= 0 || o.Concurrency <= 0 || o.Payload < 0 || o.Slots <= 0 {
		return rep, fmt.Errorf("activities %d, concurrency %d, slots %d: want each above 0, payload %d not negative",
			o.Activities, o.Concurrency, o.Slots, o.Payload)
	}
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", args...)
		}
	}
	dir := o.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "aion-backlog-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	grpcAddr, err := freeAddr()
	if err != nil {
		return rep, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return rep, err
	}
	start := func() (*exec.Cmd, time.Duration, error) {
		cmd := exec.CommandContext(ctx, o.Binary, "server", "--data-dir", dir, "--grpc-addr", grpcAddr, "--http-addr", httpAddr)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, 0, fmt.Errorf("start %s server: %w", o.Binary, err)
		}
		if err := awaitReady(ctx, "http://"+httpAddr+"/readyz"); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, 0, err
		}
		return cmd, time.Since(t0), nil
	}
	srv, _, err := start()
	if err != nil {
		return rep, err
	}
	kill := func(c *exec.Cmd) {
		_ = c.Process.Signal(syscall.SIGKILL)
		_ = c.Wait()
	}
	defer func() {
		if srv != nil {
			kill(srv)
		}
	}()
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return rep, err
	}
	defer cc.Close()

	say("scheduling %d activities, no worker connected", o.Activities)
	t0 := time.Now()
	if err := fill(ctx, aionv1.NewActivityServiceClient(cc), o); err != nil {
		return rep, err
	}
	rep.FillSeconds = time.Since(t0).Seconds()
	if rep.RSSMiB, rep.PeakRSSMiB, err = rss(srv.Process.Pid); err != nil {
		return rep, err
	}
	say("scheduled in %.1f s; server RSS %.0f MiB (peak %.0f MiB); SIGKILL", rep.FillSeconds, rep.RSSMiB, rep.PeakRSSMiB)
	kill(srv)
	srv = nil

	s2, ready, err := start()
	if err != nil {
		return rep, err
	}
	srv = s2
	rep.ReadySeconds = ready.Seconds()
	if rep.RestartRSSMiB, _, err = rss(srv.Process.Pid); err != nil {
		return rep, err
	}
	say("restarted: ready after %.2f s, RSS %.0f MiB", rep.ReadySeconds, rep.RestartRSSMiB)

	return drain(ctx, cc, o, rep, say)
}

// fill schedules o.Activities in batches from o.Concurrency goroutines.
func fill(ctx context.Context, c aionv1.ActivityServiceClient, o BacklogOptions) error {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	payload := []byte(`"` + strings.Repeat("x", max(o.Payload-2, 0)) + `"`)
	for range o.Concurrency {
		wg.Go(func() {
			for {
				from := next.Add(int64(o.Batch)) - int64(o.Batch)
				if from >= int64(o.Activities) || ctx.Err() != nil {
					return
				}
				n := min(int64(o.Batch), int64(o.Activities)-from)
				req := &aionv1.ScheduleBatchRequest{}
				for i := range n {
					req.Requests = append(req.Requests, &aionv1.ScheduleRequest{Namespace: "bench",
						Id: fmt.Sprintf("w%09d", from+i), ActivityType: "bench", Payload: payload})
				}
				resp, err := c.ScheduleBatch(ctx, req)
				if err == nil {
					for _, r := range resp.GetResults() {
						if r.GetError() != nil {
							err = fmt.Errorf("schedule: %s", r.GetError().GetMessage())
							break
						}
					}
				}
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// drain connects one worker, times its first task and, with o.Drain, runs
// every activity and counts each.
func drain(ctx context.Context, cc *grpc.ClientConn, o BacklogOptions, rep BacklogReport, say func(string, ...any)) (BacklogReport, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	stream, err := aionv1.NewWorkerServiceClient(cc).Connect(wctx)
	if err != nil {
		return rep, err
	}
	if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{"bench"}, ActivityTypes: []string{"bench"}, Slots: uint32(o.Slots), Identity: "aion-bench-backlog"}}}); err != nil {
		return rep, err
	}
	seen := make(map[string]bool, o.Activities)
	for {
		m, err := stream.Recv()
		if err != nil {
			return rep, fmt.Errorf("worker stream: %w", err)
		}
		t := m.GetActivityTask()
		if t == nil {
			continue
		}
		if len(seen) == 0 && rep.Duplicates == 0 {
			rep.FirstTaskSeconds = time.Since(t0).Seconds()
			say("first task %.3f s after the worker's connect call", rep.FirstTaskSeconds)
			if !o.Drain {
				return rep, nil
			}
		}
		if seen[t.GetActivityId()] {
			rep.Duplicates++
		}
		seen[t.GetActivityId()] = true
		if err := stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
			Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt(),
			Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}},
		}}}); err != nil {
			return rep, err
		}
		if len(seen) == o.Activities {
			rep.Drained = len(seen)
			rep.DrainSeconds = time.Since(t0).Seconds()
			say("ran %d distinct activities in %.1f s, %d duplicate tasks", rep.Drained, rep.DrainSeconds, rep.Duplicates)
			if rep.Duplicates > 0 {
				return rep, fmt.Errorf("%d activities ran more than once", rep.Duplicates)
			}
			return rep, nil
		}
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// awaitReady polls url until it answers 200.
func awaitReady(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", url, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// rss reads a process's resident and peak resident memory in MiB.
func rss(pid int) (cur, peak float64, err error) {
	m, err := proc.ReadMemory(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("read the server's memory: %w", err)
	}
	return float64(m.RSS) / 1024, float64(m.HWM) / 1024, nil
}
