// Package bench measures a whole aion system: real gRPC over loopback,
// durable commits, workers and schedulers in one process. It starts its own
// server unless given the address of a running one.
//
// The bench's workers speak the worker protocol directly, so the figures
// measure the server and the wire rather than a handler framework: each
// worker completes a task as soon as it arrives and counts it done when the
// server acknowledges the durable result.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Options describe one run.
type Options struct {
	// Address of a running server; empty starts one in this process.
	Address string
	// Activities to schedule in all.
	Activities int
	// Workers connected, each with Slots slots.
	Workers, Slots int
	// Concurrency is the number of scheduling goroutines.
	Concurrency int
	// Payload is the size of each activity's input in bytes (at least 8).
	Payload int
	// Batch schedules this many activities per ScheduleBatch call; 0 uses
	// unary Schedule.
	Batch int
	// Rate is the offered load in activities per second; 0 is as fast as
	// possible.
	Rate float64
	// Namespace and TaskQueue the run uses.
	Namespace, TaskQueue string
	// SQLiteSync is the synchronous mode of an in-process server.
	SQLiteSync string
	// Store is the in-process server's store: empty for SQLite, or a
	// postgres:// URL.
	Store string
	// Servers is how many in-process servers share Store (a cluster; more
	// than one needs PostgreSQL). Workers and schedulers are spread over
	// them round-robin, so most work crosses from one server to another.
	Servers int
	// Progress receives a progress bar when it is a terminal; nil for none.
	Progress io.Writer
	// Log receives the in-process server's log; nil discards it.
	Log *slog.Logger
}

// Percentiles summarise a latency distribution in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Report is the outcome of one run.
type Report struct {
	Activities      int         `json:"activities"`
	Seconds         float64     `json:"seconds"`
	PerSec          float64     `json:"per_sec"`
	Errors          int         `json:"errors"`
	ScheduleToStart Percentiles `json:"schedule_to_start_ms"`
	EndToEnd        Percentiles `json:"end_to_end_ms"`
	Workers         int         `json:"workers"`
	Slots           int         `json:"slots"`
	Concurrency     int         `json:"concurrency"`
	Batch           int         `json:"batch"`
	Payload         int         `json:"payload"`
	Rate            float64     `json:"rate"`
	Server          string      `json:"server"`
	Servers         int         `json:"servers"`
	SQLiteSync      string      `json:"sqlite_sync,omitempty"`
}

// Defaults returns the options of a plain `aion bench`.
func Defaults() Options {
	return Options{Activities: 20000, Workers: 4, Slots: 64, Concurrency: 8, Payload: 64, Batch: 0,
		Namespace: "bench", TaskQueue: "bench", SQLiteSync: "full", Servers: 1}
}

func (o *Options) validate() error {
	switch {
	case o.Activities < 1:
		return fmt.Errorf("--activities: %d, want at least 1", o.Activities)
	case o.Workers < 1:
		return fmt.Errorf("--workers: %d, want at least 1", o.Workers)
	case o.Slots < 1:
		return fmt.Errorf("--slots: %d, want at least 1", o.Slots)
	case o.Concurrency < 1:
		return fmt.Errorf("--concurrency: %d, want at least 1", o.Concurrency)
	case o.Payload < 8 || o.Payload > 2<<20:
		return fmt.Errorf("--payload: %d bytes, want 8 to %d", o.Payload, 2<<20)
	case o.Batch < 0 || o.Batch > 1000:
		return fmt.Errorf("--batch: %d, want 0 (unary) to 1000", o.Batch)
	case o.Rate < 0:
		return fmt.Errorf("--rate: %v is negative", o.Rate)
	case o.Servers < 1:
		return fmt.Errorf("--servers: %d, want at least 1", o.Servers)
	case o.Servers > 1 && o.Address != "":
		return fmt.Errorf("--servers: %d in-process servers cannot be combined with --address", o.Servers)
	case o.Servers > 1 && o.Store == "":
		return fmt.Errorf("--servers: %d servers must share a PostgreSQL store; set --store postgres://…", o.Servers)
	}
	return nil
}

// Run performs one bench run.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	rep := Report{Workers: o.Workers, Slots: o.Slots, Concurrency: o.Concurrency, Batch: o.Batch,
		Payload: o.Payload, Rate: o.Rate, Server: o.Address}
	addrs := []string{o.Address}
	if o.Address == "" {
		dir, err := os.MkdirTemp("", "aion-bench-")
		if err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(dir)
		addrs = addrs[:0]
		for i := range o.Servers {
			cfg := server.Defaults()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir, cfg.SQLiteSync = "127.0.0.1:0", "127.0.0.1:0", dir, o.SQLiteSync
			cfg.Store = o.Store
			cfg.ServerName = fmt.Sprintf("bench-%d", i+1)
			cfg.DrainTimeout = 5 * time.Second
			srv, err := server.New(ctx, cfg, o.Log)
			if err != nil {
				return Report{}, fmt.Errorf("start in-process server %d: %w", i+1, err)
			}
			defer srv.Stop(context.Background())
			if err := srv.Start(ctx); err != nil {
				return Report{}, fmt.Errorf("start in-process server %d: %w", i+1, err)
			}
			addrs = append(addrs, srv.GRPCAddr())
		}
		rep.Server, rep.SQLiteSync = "in-process "+addrs[0], o.SQLiteSync
		if o.Store != "" {
			rep.Server, rep.SQLiteSync = fmt.Sprintf("%d in-process server(s) on postgres", o.Servers), ""
		}
	}
	rep.Servers = len(addrs)

	run := &runner{o: o, total: int64(o.Activities), allDone: make(chan struct{}),
		toStart: make([]time.Duration, 0, o.Activities), endToEnd: make([]time.Duration, 0, o.Activities)}
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg sync.WaitGroup
	ready := make(chan error, o.Workers)
	for i := range o.Workers {
		wg.Go(func() { run.worker(wctx, addrs[i%len(addrs)], ready) })
	}
	for range o.Workers {
		if err := <-ready; err != nil {
			stopWorkers()
			wg.Wait()
			return Report{}, fmt.Errorf("connect bench worker: %w", err)
		}
	}

	var clients []aionv1.ActivityServiceClient
	for _, addr := range addrs {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return Report{}, err
		}
		defer cc.Close()
		clients = append(clients, aionv1.NewActivityServiceClient(cc))
	}

	start := time.Now()
	stopProgress := run.progress(o.Progress, start)
	run.schedule(ctx, clients)
	select {
	case <-run.allDone:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	stopProgress()
	stopWorkers()
	wg.Wait()

	run.mu.Lock()
	defer run.mu.Unlock()
	done := int(run.completed.Load())
	rep.Activities = done
	rep.Seconds = elapsed.Seconds()
	rep.PerSec = float64(done) / elapsed.Seconds()
	rep.Errors = int(run.errors.Load())
	rep.ScheduleToStart = percentiles(run.toStart)
	rep.EndToEnd = percentiles(run.endToEnd)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("bench interrupted after %d of %d activities: %w", done, o.Activities, err)
	}
	if run.scheduleErr != nil && done < o.Activities {
		return rep, run.scheduleErr
	}
	return rep, nil
}

type runner struct {
	o         Options
	total     int64
	scheduled atomic.Int64
	completed atomic.Int64
	errors    atomic.Int64
	allDone   chan struct{}
	doneOnce  sync.Once

	mu          sync.Mutex
	toStart     []time.Duration
	endToEnd    []time.Duration
	scheduleErr error
}

func (r *runner) payload(sent time.Time) []byte {
	p := make([]byte, r.o.Payload)
	binary.BigEndian.PutUint64(p, uint64(sent.UnixNano()))
	return p
}

// schedule sends every activity from Concurrency goroutines. With a Rate,
// call k is due at start + k·Batch/Rate (an open-loop load: a slow server
// does not slow the offered rate down, late calls go out at once).
func (r *runner) schedule(ctx context.Context, clients []aionv1.ActivityServiceClient) {
	per := int64(max(r.o.Batch, 1))
	var interval time.Duration
	if r.o.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(per) / r.o.Rate)
	}
	start := time.Now()
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range r.o.Concurrency {
		client := clients[g%len(clients)]
		wg.Go(func() {
			for ctx.Err() == nil {
				n := r.claim(per)
				if n <= 0 {
					return
				}
				if interval > 0 {
					due := start.Add(time.Duration(calls.Add(1)-1) * interval)
					if d := time.Until(due); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
				}
				if err := r.send(ctx, client, int(n)); err != nil {
					r.errors.Add(n)
					r.mu.Lock()
					r.scheduleErr = err
					r.mu.Unlock()
					r.finish(n) // never completes; do not wait for it
				}
			}
		})
	}
	wg.Wait()
}

// claim reserves up to n of the remaining activities for one call.
func (r *runner) claim(n int64) int64 {
	for {
		cur := r.scheduled.Load()
		take := min(n, r.total-cur)
		if take <= 0 {
			return 0
		}
		if r.scheduled.CompareAndSwap(cur, cur+take) {
			return take
		}
	}
}

func (r *runner) request(sent time.Time) *aionv1.ScheduleRequest {
	return &aionv1.ScheduleRequest{Namespace: r.o.Namespace, TaskQueue: r.o.TaskQueue, ActivityType: "bench",
		Payload: r.payload(sent)}
}

func (r *runner) send(ctx context.Context, client aionv1.ActivityServiceClient, n int) error {
	sent := time.Now()
	if r.o.Batch == 0 {
		_, err := client.Schedule(ctx, r.request(sent))
		return err
	}
	reqs := make([]*aionv1.ScheduleRequest, n)
	for i := range reqs {
		reqs[i] = r.request(sent)
	}
	resp, err := client.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: reqs})
	if err != nil {
		return err
	}
	for _, res := range resp.GetResults() {
		if e := res.GetError(); e != nil {
			r.errors.Add(1)
			r.finish(1)
			r.mu.Lock()
			r.scheduleErr = errors.New(e.GetMessage())
			r.mu.Unlock()
		}
	}
	return nil
}

func (r *runner) finish(n int64) {
	if r.completed.Add(n) >= r.total {
		r.doneOnce.Do(func() { close(r.allDone) })
	}
}

// worker runs one bench worker until ctx ends.
func (r *runner) worker(ctx context.Context, addr string, ready chan<- error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		ready <- err
		return
	}
	defer cc.Close()
	stream, err := aionv1.NewWorkerServiceClient(cc).Connect(ctx)
	if err != nil {
		ready <- err
		return
	}
	err = stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{r.o.Namespace}, TaskQueue: r.o.TaskQueue, ActivityTypes: []string{"bench"},
		Slots: uint32(r.o.Slots), Identity: "aion-bench"}}})
	if err == nil {
		var m *aionv1.ServerMessage
		if m, err = stream.Recv(); err == nil && m.GetRegisterAck() == nil {
			err = fmt.Errorf("first frame %v, want register_ack", m)
		}
	}
	ready <- err
	if err != nil {
		return
	}
	// sent maps an attempt to its client send time until its ack arrives.
	type ref struct {
		id      string
		attempt uint32
	}
	sent := make(map[ref]time.Time)
	for {
		m, err := stream.Recv()
		if err != nil {
			return
		}
		switch f := m.GetMessage().(type) {
		case *aionv1.ServerMessage_ActivityTask:
			t := f.ActivityTask
			p := t.GetPayload()
			if len(p) >= 8 {
				sent[ref{t.GetActivityId(), t.GetAttempt()}] = time.Unix(0, int64(binary.BigEndian.Uint64(p)))
			}
			toStart := t.GetStartedTime().AsTime().Sub(t.GetScheduledTime().AsTime())
			r.mu.Lock()
			r.toStart = append(r.toStart, toStart)
			r.mu.Unlock()
			err = stream.Send(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_ActivityResult{ActivityResult: &aionv1.ActivityResult{
				Namespace: t.GetNamespace(), ActivityId: t.GetActivityId(), Attempt: t.GetAttempt(),
				Outcome: &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}},
			}}})
			if err != nil {
				return
			}
		case *aionv1.ServerMessage_ResultAck:
			a := f.ResultAck
			k := ref{a.GetActivityId(), a.GetAttempt()}
			if a.GetRefused() != "" {
				r.errors.Add(1)
			} else if at, ok := sent[k]; ok {
				r.mu.Lock()
				r.endToEnd = append(r.endToEnd, time.Since(at))
				r.mu.Unlock()
			}
			delete(sent, k)
			r.finish(1)
		case *aionv1.ServerMessage_DrainRequest:
			_ = stream.CloseSend()
		}
	}
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Percentiles{P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(ds[len(ds)-1])}
}

// progress draws a bar on a terminal until the returned stop is called.
func (r *runner) progress(w io.Writer, start time.Time) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		n := r.completed.Load()
		frac := float64(n) / float64(r.total)
		const width = 30
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if float64(i) < frac*width {
				bar[i] = '='
			}
		}
		rate := float64(n) / time.Since(start).Seconds()
		fmt.Fprintf(f, "\r[%s] %3.0f%% %d/%d  %.0f/s ", bar, frac*100, n, r.total, rate)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				draw()
				fmt.Fprintln(f)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(done); <-finished }
}
