// Package attack measures how the aion server holds up under attack. It
// starts a real server as a child process on loopback ports with token
// authentication, connects an honest tenant (a worker and a client that
// schedules and waits at a fixed rate), runs one attack from the attacker
// tenant or from no tenant at all, and reports the server's memory (read
// from /proc) and the honest client's latency.
//
// The honest tenant runs in a second child process (the same binary, as
// the hidden command `aion attack honest`, see RunHonest), as a real tenant
// would run apart from its attacker: the attack's goroutines then share no
// scheduler with it, and its latency is the server's alone. The attack, the
// memory readings and the report stay in the calling process.
//
// Every attack targets only the server it starts itself: there is no way to
// point it elsewhere, and a server that reports a non-loopback address is
// refused; the honest tenant's process refuses any address but a loopback
// one. Every request loop is bounded in count and time.
package attack

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aion-run/aion/client"
	"github.com/aion-run/aion/internal/proc"
)

// A Kind names one attack.
type Kind string

// The attacks; the numbers are those of the hardening matrix in
// docs/security.md.
const (
	// None runs no attack: the honest figures on an idle server.
	None Kind = "none"
	// UnauthLarge (attack 1): callers without a token send requests of
	// nearly 64 MiB, and one sends a 1.4 MB bearer token.
	UnauthLarge Kind = "unauth-large"
	// WorkerFields (attack 3): a worker with a valid key sends 40 MiB
	// heartbeat details and failures with 20 MiB message, type and details.
	WorkerFields Kind = "worker-fields"
	// StalledReader (attack 4): a worker takes a task, then floods pings
	// and never reads its stream.
	StalledReader Kind = "stalled-reader"
	// PendingMemory (attack 5): a client schedules 2 MiB activities no
	// worker serves as fast as it may, and lists them a thousand at a time.
	PendingMemory Kind = "pending-memory"
	// Connections (attack 10): idle TCP connections to the gRPC port, slow
	// readers of the console's script, event-stream clients that never read,
	// and a worker registering over and over meanwhile.
	Connections Kind = "connections"
	// ConnectedWorkers is no attack but a measure: many idle workers, each
	// on its own connection, held registered, and what the server's memory
	// grows by per worker.
	ConnectedWorkers Kind = "workers"
	// EarlyEOF: worker streams (attacker's key) that end early, over and
	// over, in five ways: END_STREAM on the first HEADERS, half a gRPC
	// message then END_STREAM, RST_STREAM before Register, CloseSend right
	// after Register, and the TCP connection closed in the middle of a
	// frame; counted by how the server ended each.
	EarlyEOF Kind = "early-eof"
	// Undecided: connections to the gRPC port that send the preface,
	// SETTINGS and PriorityBytes of PRIORITY frames but never a request,
	// held to the end; counts those the server closed, and when.
	Undecided Kind = "undecided"
	// RefusedStreams: connections that never read, each opening streams as
	// fast as it may, past the server's MAX_CONCURRENT_STREAMS, Connect
	// calls and calls with a content-type that is not gRPC, so the server's
	// refusals back up unread.
	RefusedStreams Kind = "refused-streams"
)

// Kinds lists every attack, in the matrix's order, then the attacks on the
// HTTP/2 framing of worker connections.
var Kinds = []Kind{None, UnauthLarge, WorkerFields, StalledReader, PendingMemory, Connections, ConnectedWorkers,
	EarlyEOF, Undecided, RefusedStreams}

// ParseKind reads an attack's name.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if slices.Contains(Kinds, k) {
		return k, nil
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("attack %q: want one of %s", s, strings.Join(names, ", "))
}

// Options describe one run.
type Options struct {
	// Kind is the attack.
	Kind Kind
	// Command starts the server and the honest tenant: an executable and
	// arguments placed before "server" or "attack honest" (the aion binary
	// itself, os.Executable(), for the command).
	Command []string
	// Env is added to the environment of the server and of the honest
	// tenant (which have no AION_ variables, so nothing outside can change
	// their settings).
	Env []string
	// ServerArgs are added to the server's command line, after the ones the
	// run sets (for trying settings).
	ServerArgs []string
	// Duration of the attack.
	Duration time.Duration
	// Attackers is how many attacking callers (or workers) run at once; 0
	// takes the kind's default.
	Attackers int
	// Rate is the honest client's operations per second, offered from the
	// honest tenant's own process.
	Rate float64
	// HonestTimeout bounds one honest operation; one that takes longer is
	// an error.
	HonestTimeout time.Duration
	// MaxServerRSSMB stops the attack (the honest load goes on) once the
	// server's resident set passes it, so a run cannot exhaust the machine;
	// 0 means no limit.
	MaxServerRSSMB int
	// SampleEvery is the interval of the memory readings.
	SampleEvery time.Duration

	// LargeBytes is the size of each unauthenticated request (unauth-large).
	LargeBytes int
	// TokenBytes is the size of the oversized bearer token (unauth-large).
	TokenBytes int
	// DetailsBytes is the size of heartbeat details and FailureBytes of a
	// failure's message, type and details each (worker-fields).
	DetailsBytes, FailureBytes int
	// PendingBytes is the payload of each pending activity and ListPageSize
	// the page size of each list (pending-memory).
	PendingBytes, ListPageSize int
	// IdleConns, SlowReaders and SSEClients are the connections held open
	// (connections).
	IdleConns, SlowReaders, SSEClients int
	// MaxRequests bounds the requests each attacking loop sends.
	MaxRequests int
	// Workers is how many workers to connect and hold (workers).
	Workers int
	// Connections, when positive, is how many TCP connections the workers
	// share, worker i a stream on connection i mod Connections; 0 gives
	// each worker a connection of its own (workers).
	Connections int
	// ProfileDir, when set, receives the server's heap and goroutine
	// profiles with every worker connected (workers).
	ProfileDir string
	// PriorityBytes is how many bytes of PRIORITY frames each connection
	// sends (undecided).
	PriorityBytes int

	// KeepDir keeps the server's directory (data and log) after the run.
	KeepDir bool
}

// Defaults returns the options of a plain `aion attack KIND`.
func Defaults() Options {
	return Options{
		Kind: None, Duration: 30 * time.Second, Rate: 20, HonestTimeout: 10 * time.Second,
		MaxServerRSSMB: 4096, SampleEvery: 100 * time.Millisecond,
		LargeBytes: 63 << 20, TokenBytes: 1_400_000,
		DetailsBytes: 40 << 20, FailureBytes: 20 << 20,
		PendingBytes: 2 << 20, ListPageSize: 1000,
		IdleConns: 3000, SlowReaders: 1000, SSEClients: 500,
		MaxRequests:   1_000_000,
		Workers:       10000,
		PriorityBytes: 120 << 10,
	}
}

// defaultAttackers is each kind's number of attackers when none is asked.
var defaultAttackers = map[Kind]int{
	None: 0, UnauthLarge: 12, WorkerFields: 2, StalledReader: 1, PendingMemory: 2, Connections: 1, ConnectedWorkers: 0,
	EarlyEOF: 4, Undecided: 2000, RefusedStreams: 2,
}

// maxAttackers bounds --attackers: the connections of undecided, the
// callers or workers of every other kind.
func maxAttackers(k Kind) int {
	if k == Undecided {
		return 15000
	}
	return 1000
}

// maxPriorityBytes bounds --priority-bytes: past it a server has long
// stopped waiting for a request.
const maxPriorityBytes = 1 << 20

func (o *Options) validate() error {
	switch {
	case len(o.Command) == 0 || o.Command[0] == "":
		return fmt.Errorf("command: the executable that runs `server` is empty")
	case o.Duration <= 0:
		return fmt.Errorf("--duration %v: must be more than zero", o.Duration)
	case o.Attackers < 0 || o.Attackers > maxAttackers(o.Kind):
		return fmt.Errorf("--attackers %d: want 0 (the kind's default) to %d", o.Attackers, maxAttackers(o.Kind))
	case o.Rate <= 0 || o.Rate > 10000:
		return fmt.Errorf("--rate %v: want more than 0 and at most 10000 per second", o.Rate)
	case o.HonestTimeout <= 0:
		return fmt.Errorf("--honest-timeout %v: must be more than zero", o.HonestTimeout)
	case o.MaxServerRSSMB < 0:
		return fmt.Errorf("--max-server-rss %d: must not be negative", o.MaxServerRSSMB)
	case o.SampleEvery <= 0:
		return fmt.Errorf("sample interval %v: must be more than zero", o.SampleEvery)
	case o.LargeBytes < 1 || o.LargeBytes > 64<<20-1024:
		return fmt.Errorf("--large-bytes %d: want 1 to %d", o.LargeBytes, 64<<20-1024)
	case o.TokenBytes < 1 || o.TokenBytes > 8<<20:
		return fmt.Errorf("--token-bytes %d: want 1 to %d", o.TokenBytes, 8<<20)
	case o.DetailsBytes < 1 || o.DetailsBytes > 60<<20:
		return fmt.Errorf("--details-bytes %d: want 1 to %d", o.DetailsBytes, 60<<20)
	case o.FailureBytes < 1 || 3*o.FailureBytes > 63<<20:
		return fmt.Errorf("--failure-bytes %d: want 1 to %d (three fields of it in one frame)", o.FailureBytes, 21<<20)
	case o.PendingBytes < 1 || o.PendingBytes > 60<<20:
		return fmt.Errorf("--pending-bytes %d: want 1 to %d", o.PendingBytes, 60<<20)
	case o.ListPageSize < 1:
		return fmt.Errorf("--page-size %d: want at least 1", o.ListPageSize)
	case o.IdleConns < 0 || o.SlowReaders < 0 || o.SSEClients < 0 || o.IdleConns+o.SlowReaders+o.SSEClients > 15000:
		return fmt.Errorf("--idle-conns %d, --slow-readers %d, --sse-clients %d: none negative, at most 15000 in all",
			o.IdleConns, o.SlowReaders, o.SSEClients)
	case o.Workers < 1 || o.Workers > 15000:
		return fmt.Errorf("--workers %d: want 1 to 15000", o.Workers)
	case o.Connections < 0 || o.Connections > o.Workers:
		return fmt.Errorf("--connections %d: want 0 (a connection per worker) to --workers (%d)", o.Connections, o.Workers)
	case o.MaxRequests < 1:
		return fmt.Errorf("--max-requests %d: want at least 1", o.MaxRequests)
	case o.PriorityBytes < priorityFrameSize || o.PriorityBytes > maxPriorityBytes:
		return fmt.Errorf("--priority-bytes %d: want %d (one frame) to %d", o.PriorityBytes, priorityFrameSize, maxPriorityBytes)
	}
	for _, a := range o.ServerArgs {
		for _, f := range reservedServerFlags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return fmt.Errorf("--server-arg %q: the run sets %s itself (loopback ports, token auth, a fresh directory)", a, f)
			}
		}
	}
	if _, err := ParseKind(string(o.Kind)); err != nil {
		return err
	}
	return nil
}

// reservedServerFlags are the server settings a run fixes: where it
// listens, how it authenticates and where its data lives.
var reservedServerFlags = []string{"--grpc-addr", "--http-addr", "--auth", "--config", "--data-dir",
	"--tls-cert", "--tls-key", "--insecure-allow-no-auth", "--jwt-secret-file", "--jwks-file", "--store"}

// Report is the outcome of one run.
type Report struct {
	Kind      Kind `json:"kind"`
	Attackers int  `json:"attackers"`
	// Seconds is the run's length: the attack's duration, then the wait
	// for the last honest operations.
	Seconds float64 `json:"seconds"`
	// Server is the gRPC address of the server under attack, PID its
	// process, and Exit how it ended if it did so during the run.
	Server string `json:"server"`
	PID    int    `json:"pid"`
	Exit   string `json:"exit,omitempty"`
	// Dir is the server's directory (data and server.log), when kept.
	Dir string `json:"dir,omitempty"`
	// RSS is the server's memory.
	RSS RSS `json:"rss"`
	// Honest is what the honest client saw.
	Honest Honest `json:"honest"`
	// Attack is what the attacker sent and what came back.
	Attack Attack `json:"attack"`
	// Workers is what the connected workers cost the server (kind workers).
	Workers *Workers `json:"workers,omitempty"`
}

// Attack is what the attack sent and how the server answered.
type Attack struct {
	// Sent counts the requests, frames or connections the attack sent.
	Sent int64 `json:"sent"`
	// Outcomes counts the answers by kind ("large body: Unauthenticated",
	// "list: HTTP 200", "idle gRPC: held open", ...).
	Outcomes map[string]int64 `json:"outcomes"`
	// Stalled describes each stalled worker (stalled-reader).
	Stalled []Stalled `json:"stalled,omitempty"`
	// Notes are figures particular to the attack, one sentence each.
	Notes []string `json:"notes,omitempty"`
	// Stopped is set when the attack was stopped early, saying why.
	Stopped string `json:"stopped,omitempty"`
}

// Stalled is one worker that stopped reading its stream.
type Stalled struct {
	// Pings sent after it stopped reading.
	Pings int64 `json:"pings"`
	// DroppedAfterS is the time from its last read until the server no
	// longer listed it among its workers; 0 when it was still listed at the
	// end (StillListed).
	DroppedAfterS float64 `json:"dropped_after_s"`
	StillListed   bool    `json:"still_listed"`
	// StreamEndedAfterS is the time from its last read until its stream
	// ended; 0 when it had not ended by the end of the run.
	StreamEndedAfterS float64 `json:"stream_ended_after_s"`
	// Retried reports whether the attempt it held was given up and the
	// activity made ready for another attempt.
	Retried bool `json:"retried"`
	// HeldFor is how long the attack kept it stalled.
	HeldForS float64 `json:"held_for_s"`
}

// env is what an attack works with.
type env struct {
	o     Options
	srv   *child
	tally *tally
	// admin is a client with the admin key, for watching the server.
	admin *client.Client
	// start is when the attack began; end is when it stops at the latest.
	start, end time.Time

	mu      sync.Mutex
	notes   []string
	stalled []Stalled
	workers *Workers
}

func (e *env) note(format string, args ...any) {
	e.mu.Lock()
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// failed counts a failed request under label: by how it failed, or as cut
// off when the attack's time was up.
func (e *env) failed(ctx context.Context, label string, err error) {
	if ctx.Err() != nil {
		e.tally.add(label+": cut off at the end", 1)
		return
	}
	e.tally.add(label+": "+outcome(err), 1)
}

var attacks = map[Kind]func(ctx context.Context, e *env){
	None:             func(context.Context, *env) {},
	UnauthLarge:      unauthLarge,
	WorkerFields:     workerFields,
	StalledReader:    stalledReader,
	PendingMemory:    pendingMemory,
	Connections:      connections,
	ConnectedWorkers: connectedWorkers,
	EarlyEOF:         earlyEOF,
	Undecided:        undecided,
	RefusedStreams:   refusedStreams,
}

// Run performs one run: it starts the server and the honest tenant, each a
// child process, runs the attack, and returns the report. ctx cancels the
// run early (the report then covers what ran). Neither child, nor any
// goroutine of the run, outlives it.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	if o.Attackers == 0 {
		o.Attackers = defaultAttackers[o.Kind]
	}
	rep := Report{Kind: o.Kind, Attackers: o.Attackers}
	if o.Kind == ConnectedWorkers || o.Kind == Undecided {
		if err := raiseFileLimit(); err != nil {
			return rep, err
		}
	}
	srv, err := startChild(o)
	if err != nil {
		return rep, err
	}
	defer srv.stop(10 * time.Second)
	rep.Server, rep.PID = srv.grpcAddr, srv.pid()
	if o.KeepDir {
		rep.Dir = srv.dir
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// The run ends early if the server dies.
	go func() {
		select {
		case <-srv.exited:
			cancelRun()
		case <-runCtx.Done():
		}
	}()

	// The honest tenant runs in a process of its own, so that the attack's
	// goroutines do not delay its own: what it measures is the server.
	hon, err := startHonest(runCtx, o, srv)
	if err != nil {
		return rep, err
	}
	defer func() { _ = hon.stop(10 * time.Second) }()
	admin, err := client.Dial(runCtx, srv.grpcAddr, client.WithToken(srv.keys.admin))
	if err != nil {
		return rep, err
	}
	defer admin.Close()

	attackCtx, stopAttack := context.WithCancel(runCtx)
	defer stopAttack()
	e := &env{o: o, srv: srv, tally: newTally(), admin: admin}
	var stoppedWhy string
	var stopOnce sync.Once
	mem := &sampler{pid: srv.pid(), interval: o.SampleEvery, limitKB: int64(o.MaxServerRSSMB) * 1e6 / 1024,
		over: func(kb int64) {
			stopOnce.Do(func() {
				stoppedWhy = fmt.Sprintf("server RSS reached %.0f MB, past --max-server-rss %d MB: attack stopped after %.1f s",
					mb(kb), o.MaxServerRSSMB, time.Since(e.start).Seconds())
			})
			stopAttack()
		}}
	if m, err := proc.ReadMemory(srv.pid()); err == nil {
		rep.RSS.BaselineMB = mb(m.RSS)
	} else {
		return rep, fmt.Errorf("read the server's memory: %w", err)
	}
	start := time.Now()
	e.start, e.end = start, start.Add(o.Duration)
	if err := hon.begin(o.Duration); err != nil {
		return rep, err
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		mem.run(stopSampling)
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		actx, cancel := context.WithDeadline(attackCtx, e.end)
		defer cancel()
		attacks[o.Kind](actx, e)
	})
	// The child's last operations may take up to HonestTimeout after the
	// load's end; the margin covers its start and its report.
	honest, honestErr := hon.figures(runCtx, o.Duration+o.HonestTimeout+30*time.Second)
	stopAttack()
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	mem.sample()
	close(stopSampling)
	<-sampled
	// Stopped only now, so its worker is connected at the last reading, as
	// it was through the run.
	if err := hon.stop(10 * time.Second); err != nil && honestErr == nil {
		honestErr = err
	}

	mem.mu.Lock()
	rep.RSS.PeakMB, rep.RSS.EndMB, rep.RSS.HWMMB = mb(mem.peak), mb(mem.last.RSS), mb(mem.last.HWM)
	rep.RSS.Samples, rep.RSS.IntervalMS = mem.samples, o.SampleEvery.Milliseconds()
	mem.mu.Unlock()
	rep.Honest = honest
	rep.Honest.PID = hon.pid()
	e.mu.Lock()
	rep.Attack = Attack{Sent: e.tally.sent.Load(), Outcomes: e.tally.snapshot(), Stalled: e.stalled, Notes: e.notes, Stopped: stoppedWhy}
	rep.Workers = e.workers
	e.mu.Unlock()
	if !srv.alive() {
		rep.Exit = srv.exit()
		return rep, fmt.Errorf("%w: %s", errNoServer, rep.Exit)
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("attack interrupted after %.1fs: %w", rep.Seconds, err)
	}
	return rep, honestErr
}

// WriteText writes the report as a short summary.
func (r Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "attack:      %s, %d attackers, %.1f s, server %s (pid %d)\n", r.Kind, r.Attackers, r.Seconds, r.Server, r.PID)
	if r.Exit != "" {
		fmt.Fprintf(w, "server:      EXITED during the run: %s\n", r.Exit)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "kept:        %s (data/ and server.log)\n", r.Dir)
	}
	fmt.Fprintf(w, "server RSS:  baseline %.0f MB, peak %.0f MB, end %.0f MB, VmHWM %.0f MB (%d samples every %d ms)\n",
		r.RSS.BaselineMB, r.RSS.PeakMB, r.RSS.EndMB, r.RSS.HWMMB, r.RSS.Samples, r.RSS.IntervalMS)
	h := r.Honest
	fmt.Fprintf(w, "honest:      %d offered at %.0f/s, %d completed, %d errors; schedule-and-wait p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		h.Offered, h.Rate, h.Completed, h.Errors, h.P50MS, h.P99MS, h.MaxMS)
	for _, k := range sortedKeys(h.ErrorKinds) {
		fmt.Fprintf(w, "             error %q: %d\n", k, h.ErrorKinds[k])
	}
	if len(h.Slowest) > 0 {
		parts := make([]string, len(h.Slowest))
		for i, op := range h.Slowest {
			parts[i] = fmt.Sprintf("%.1f ms due at %.1f s", op.MS, op.AtS)
		}
		fmt.Fprintf(w, "             slowest: %s\n", strings.Join(parts, ", "))
	}
	if h.PID != 0 {
		fmt.Fprintf(w, "             honest worker and client in their own process (pid %d), apart from the attack\n", h.PID)
	}
	fmt.Fprintf(w, "attack sent: %d\n", r.Attack.Sent)
	for _, k := range sortedKeys(r.Attack.Outcomes) {
		fmt.Fprintf(w, "             %s: %d\n", k, r.Attack.Outcomes[k])
	}
	for i, s := range r.Attack.Stalled {
		dropped := "still listed at the end"
		if !s.StillListed {
			dropped = fmt.Sprintf("dropped after %.1f s", s.DroppedAfterS)
		}
		ended := "stream still open at the end"
		if s.StreamEndedAfterS > 0 {
			ended = fmt.Sprintf("stream ended after %.1f s", s.StreamEndedAfterS)
		}
		fmt.Fprintf(w, "stalled #%d:  held %.1f s, %d pings, %s, %s, attempt retried: %v\n", i+1, s.HeldForS, s.Pings, dropped, ended, s.Retried)
	}
	if cw := r.Workers; cw != nil {
		fmt.Fprintf(w, "workers:     %d asked, %d registered, %d counted by the server after %.1f s, on %d connections\n",
			cw.Asked, cw.Registered, cw.Counted, cw.ConnectS, cw.Connections)
		for _, m := range []struct {
			label string
			m     ServerMemory
		}{{"before", cw.Before}, {"held", cw.Held}} {
			fmt.Fprintf(w, "  %-7s    RSS %.0f MB, heap in use %.1f MB, stacks %.1f MB, %d goroutines\n",
				m.label, m.m.RSSMB, m.m.HeapInuseMB, m.m.StackInuseMB, m.m.Goroutines)
		}
		fmt.Fprintf(w, "per worker:  %.1f KiB of RSS, %.2f goroutines\n", cw.PerWorkerKB, cw.GoroutinesPerWorker)
		for _, p := range cw.Profiles {
			fmt.Fprintf(w, "profile:     %s\n", p)
		}
	}
	for _, n := range r.Attack.Notes {
		fmt.Fprintf(w, "note:        %s\n", n)
	}
	if r.Attack.Stopped != "" {
		fmt.Fprintf(w, "STOPPED:     %s\n", r.Attack.Stopped)
	}
}
