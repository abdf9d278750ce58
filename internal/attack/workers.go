package attack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/proc"
	"google.golang.org/grpc"
)

// idleQueue is the task queue the connected workers serve; nothing is ever
// scheduled on it.
const idleQueue = "idle"

// Workers is what the server held for the connected workers (kind workers).
type Workers struct {
	// Asked is how many workers the run tried to connect; Registered how
	// many the server acknowledged, and Counted how many its
	// aion_workers_connected gauge showed in the attacker's namespace.
	Asked      int `json:"asked"`
	Registered int `json:"registered"`
	Counted    int `json:"counted"`
	// Connections is how many TCP connections the workers were on.
	Connections int `json:"connections"`
	// ConnectS is the time from the first dial to the server counting
	// every registered worker.
	ConnectS float64 `json:"connect_s"`
	// Before is the server before the first worker connected, Held with
	// every worker connected, at the end of the hold (after a collection,
	// when the server serves profiles).
	Before ServerMemory `json:"before"`
	Held   ServerMemory `json:"held"`
	// PerWorkerKB is (Held.RSS - Before.RSS) / Counted, in KiB, Counted
	// read at the end of the hold.
	PerWorkerKB float64 `json:"per_worker_kb"`
	// GoroutinesPerWorker is (Held.Goroutines - Before.Goroutines) / Counted.
	GoroutinesPerWorker float64 `json:"goroutines_per_worker"`
	// Profiles are the files the run wrote (heap and goroutine profiles of
	// the server with every worker connected), when asked for.
	Profiles []string `json:"profiles,omitempty"`
}

// ServerMemory is one reading of the server's memory.
type ServerMemory struct {
	// RSSMB is VmRSS from /proc, in MB (10^6 bytes).
	RSSMB float64 `json:"rss_mb"`
	// HeapInuseMB is the Go heap's in-use spans (go_memstats_heap_inuse_bytes).
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	// StackInuseMB is the goroutine stacks (go_memstats_stack_inuse_bytes).
	StackInuseMB float64 `json:"stack_inuse_mb"`
	// Goroutines is go_goroutines.
	Goroutines int `json:"goroutines"`
}

// idleWorker is one connected worker: its stream, and the connection it
// owns (nil when it shares one).
type idleWorker struct {
	cc     *grpc.ClientConn
	stream grpc.ClientStream
}

// connectedWorkers connects o.Workers workers, each on its own TCP
// connection or, with o.Connections, as streams spread over that many
// shared ones; registered in the attacker's namespace on a queue nothing is
// scheduled on; waits until the server's gauge counts them; and holds them,
// pinging as the server asks, until the attack's end. It reads the server's
// memory before the first connects and with all of them held.
func connectedWorkers(ctx context.Context, e *env) {
	w := &Workers{Asked: e.o.Workers, Connections: e.o.Workers}
	defer func() {
		e.mu.Lock()
		e.workers = w
		e.mu.Unlock()
	}()
	before, err := e.serverMemory(ctx, false)
	if err != nil {
		e.failed(ctx, "read the server's memory", err)
		return
	}
	w.Before = before
	start := time.Now()

	var (
		mu      sync.Mutex
		workers []*idleWorker
		ping    atomic.Int64 // the ping interval the server asked for, in nanoseconds
		readers sync.WaitGroup
		shared  []*grpc.ClientConn
	)
	defer func() {
		for _, iw := range workers {
			if iw.cc != nil {
				iw.cc.Close() // ends its reader
			}
		}
		for _, cc := range shared {
			cc.Close() // ends the readers of its streams
		}
		readers.Wait()
	}()
	if n := e.o.Connections; n > 0 {
		w.Connections = n
		for range n {
			cc, err := dialIdle(e)
			if err != nil {
				e.failed(ctx, "dial", err)
				return
			}
			shared = append(shared, cc)
		}
	}
	// The pinger keeps every worker inside its heartbeat window from the
	// moment it registered: one pass over those registered so far each
	// ping interval the server asked for, spread over the interval in a
	// hundred steps, as workers' own timers are spread.
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		msg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{}}}
		const steps = 100
		for ctx.Err() == nil {
			interval := time.Duration(ping.Load())
			if interval <= 0 {
				pause(ctx, 100*time.Millisecond)
				continue
			}
			pass := time.Now()
			mu.Lock()
			all := workers[:len(workers):len(workers)]
			mu.Unlock()
			for step := range steps {
				for _, iw := range all[step*len(all)/steps : (step+1)*len(all)/steps] {
					if ctx.Err() != nil {
						return
					}
					if iw.stream.SendMsg(msg) != nil {
						e.tally.add("ping: stream ended", 1)
					}
				}
				pause(ctx, time.Until(pass.Add(interval*time.Duration(step+1)/steps)))
			}
		}
	}()
	defer func() { <-pinged }()
	next := make(chan int)
	var dialers sync.WaitGroup
	for range min(e.o.Workers, 32) {
		dialers.Go(func() {
			for i := range next {
				e.tally.sent.Add(1)
				var cc *grpc.ClientConn
				if len(shared) > 0 {
					cc = shared[i%len(shared)]
				}
				iw, interval, err := registerIdle(ctx, e, i, cc)
				if err != nil {
					e.failed(ctx, "register", err)
					continue
				}
				e.tally.add("register: OK", 1)
				ping.Store(int64(interval))
				mu.Lock()
				workers = append(workers, iw)
				mu.Unlock()
				// Pongs are read and dropped, so the stream's window stays open.
				readers.Go(func() {
					m := new(aionv1.ServerMessage)
					for iw.stream.RecvMsg(m) == nil {
					}
				})
			}
		})
	}
	for i := range e.o.Workers {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	dialers.Wait()
	w.Registered = len(workers)

	// The server says when it holds them all.
	for ctx.Err() == nil {
		n, err := e.gauge(ctx, fmt.Sprintf("aion_workers_connected{namespace=%q}", attackerNS))
		if err == nil {
			w.Counted = int(n)
			if w.Counted >= w.Registered {
				break
			}
		}
		pause(ctx, 100*time.Millisecond)
	}
	w.ConnectS = time.Since(start).Seconds()
	e.note("%d of %d workers registered, counted by the server after %.1f s", w.Counted, w.Asked, w.ConnectS)
	<-ctx.Done()

	// The readings use a fresh context: ctx has ended with the hold.
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held, err := e.serverMemory(rctx, true)
	if err != nil {
		e.failed(rctx, "read the server's memory", err)
		return
	}
	w.Held = held
	if n, err := e.gauge(rctx, fmt.Sprintf("aion_workers_connected{namespace=%q}", attackerNS)); err == nil {
		w.Counted = int(n)
	}
	if w.Counted > 0 {
		w.PerWorkerKB = (held.RSSMB - w.Before.RSSMB) * 1e6 / 1024 / float64(w.Counted)
		w.GoroutinesPerWorker = float64(held.Goroutines-w.Before.Goroutines) / float64(w.Counted)
	}
	if e.o.ProfileDir != "" {
		for _, p := range []string{"heap", "goroutine"} {
			path, err := e.saveProfile(rctx, p)
			if err != nil {
				e.failed(rctx, "profile "+p, err)
				continue
			}
			w.Profiles = append(w.Profiles, path)
		}
	}
}

// dialIdle makes a connection for idle workers.
func dialIdle(e *env) (*grpc.ClientConn, error) {
	// Small buffers on the attack's side: ten thousand connections with
	// gRPC's 32 KiB read and write buffers each would cost the attack more
	// than the server it measures.
	return dial("passthrough:///"+e.srv.grpcAddr, e.srv.keys.attackWorker,
		grpc.WithReadBufferSize(4096), grpc.WithWriteBufferSize(4096))
}

// registerIdle registers worker i, on shared when it is not nil, else on a
// connection of its own; it returns the ping interval the server asked for.
func registerIdle(ctx context.Context, e *env, i int, shared *grpc.ClientConn) (*idleWorker, time.Duration, error) {
	cc, own := shared, (*grpc.ClientConn)(nil)
	if cc == nil {
		var err error
		if cc, err = dialIdle(e); err != nil {
			return nil, 0, err
		}
		own = cc
	}
	closeOwn := func() {
		if own != nil {
			own.Close()
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The stream lives as long as its connection: its context is not sctx.
	st, err := cc.NewStream(context.WithoutCancel(ctx), &aionv1.WorkerService_ServiceDesc.Streams[0], connectMethod)
	if err != nil {
		closeOwn()
		return nil, 0, err
	}
	reg := &aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Register{Register: &aionv1.Register{
		Namespaces: []string{attackerNS}, TaskQueue: idleQueue, ActivityTypes: []string{"idle"}, Slots: 1,
		Identity: fmt.Sprintf("idle-%d", i)}}}
	acked := make(chan error, 1)
	m := new(aionv1.ServerMessage)
	go func() {
		if err := st.SendMsg(reg); err != nil {
			acked <- err
			return
		}
		if err := st.RecvMsg(m); err != nil {
			acked <- err
			return
		}
		if m.GetRegisterAck() == nil {
			acked <- fmt.Errorf("first frame %v, want register_ack", m)
			return
		}
		acked <- nil
	}()
	select {
	case err = <-acked:
	case <-sctx.Done():
		err = sctx.Err()
	}
	if err != nil {
		closeOwn()
		return nil, 0, err
	}
	return &idleWorker{cc: own, stream: st}, m.GetRegisterAck().GetPingInterval().AsDuration(), nil
}

// serverMemory reads the server's RSS and its Go runtime's figures; with
// collect, after a garbage collection (asked through the heap profile, when
// the server serves profiles), so the heap figure is what is live.
func (e *env) serverMemory(ctx context.Context, collect bool) (ServerMemory, error) {
	if collect {
		if resp, err := e.httpGet(ctx, "/debug/pprof/heap?gc=1", ""); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	var m ServerMemory
	for _, g := range []struct {
		name string
		set  func(float64)
	}{
		{"go_memstats_heap_inuse_bytes", func(v float64) { m.HeapInuseMB = v / 1e6 }},
		{"go_memstats_stack_inuse_bytes", func(v float64) { m.StackInuseMB = v / 1e6 }},
		{"go_goroutines", func(v float64) { m.Goroutines = int(v) }},
	} {
		v, err := e.gauge(ctx, g.name)
		if err != nil {
			return ServerMemory{}, err
		}
		g.set(v)
	}
	mem, err := proc.ReadMemory(e.srv.pid())
	if err != nil {
		return ServerMemory{}, err
	}
	m.RSSMB = mb(mem.RSS)
	return m, nil
}

// httpGet gets path from the server's HTTP side, with the admin key when
// token is set.
func (e *env) httpGet(ctx context.Context, path, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.srv.httpAddr+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("get %s: HTTP %d", path, resp.StatusCode)
	}
	return resp, nil
}

// gauge reads one sample of the server's /metrics: the line that starts
// with series followed by a space.
func (e *env) gauge(ctx context.Context, series string) (float64, error) {
	resp, err := e.httpGet(ctx, "/metrics", e.srv.keys.admin)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %q: %w", series, v, err)
			}
			return f, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read /metrics: %w", err)
	}
	return 0, fmt.Errorf("metric %s: not in /metrics", series)
}

// saveProfile writes the server's profile of the given kind to the
// profile directory and returns the file's path.
func (e *env) saveProfile(ctx context.Context, kind string) (string, error) {
	resp, err := e.httpGet(ctx, "/debug/pprof/"+kind, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(e.o.ProfileDir, 0o755); err != nil {
		return "", fmt.Errorf("make the profile directory: %w", err)
	}
	path := filepath.Join(e.o.ProfileDir, fmt.Sprintf("%s-%d-workers.pb.gz", kind, e.o.Workers))
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("create %q: %w", path, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", fmt.Errorf("write %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %q: %w", path, err)
	}
	return path, nil
}

// raiseFileLimit lifts this process's open-file soft limit to its hard
// limit; the server it starts inherits it. Ten thousand workers are ten
// thousand descriptors on each side.
func raiseFileLimit() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("read the open-file limit: %w", err)
	}
	if l.Cur >= l.Max {
		return nil
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raise the open-file limit to %d: %w", l.Max, err)
	}
	return nil
}
