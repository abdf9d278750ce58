// Package bench measures a whole aion system: real gRPC over loopback,
// durable commits, workers and schedulers in one process. It starts its own
// server unless given the address of a running one.
//
// In the activity mode the bench's workers speak the worker protocol
// directly, so the figures measure the server and the wire rather than a
// handler framework: each worker completes a task as soon as it arrives and
// counts it done when the server acknowledges the durable result.
//
// Load. With a rate the run is an open loop: call k is due at
// start + k·max(batch, 1)/rate and is sent then on its own goroutine,
// however many earlier calls are outstanding, so a server that cannot keep
// up meets the offered load anyway and its backlog shows in the latencies
// (and in the most calls in flight at once). Without a rate the run is a
// closed loop of a number of goroutines, each sending its next call when its
// previous one returned: the server sets the pace, so its figures are
// throughput at saturation.
//
// Counting. An activity completes when the server acknowledged its result as
// durable; only completions count in the throughput. Every activity of a
// failed call, every refused batch item and every refused result is an
// error.
//
// Latencies. End-to-end runs from the call's intended start (its due time
// in an open loop, even when the bench sent it later; the instant it was
// sent in a closed loop) to the bench worker receiving the acknowledgement
// that the result is durable, over completed activities. Schedule-to-start
// is the server's own figure, started_time minus scheduled_time of each task
// a bench worker receives, both read from the server's wall clock:
// scheduled_time is read when the server accepts the Schedule request,
// after checking it (and creating its namespace on first use) and before
// the group commit that makes it durable; started_time when the server hands
// the attempt to a worker whose slot it took, just before the task is sent.
// It therefore includes the commit and the wait for a free slot, but not the
// time before the request reached the server; a retried attempt counts from
// the same scheduled_time, and in a cluster the two instants may be read by
// two servers. (The server's metric aion_schedule_to_start_seconds starts
// later, when the attempt became ready after the commit.)
//
// Workflows. With Options.Workflows the run starts that many workflows of
// the bench's own type, each running Options.Steps activities one after
// the other; with Options.Fanout it starts one workflow that starts that
// many activities in one workflow task and waits for all of them. SDK
// workers (package worker) serve both the workflows and their step
// activities, which return their input at once. The load is the activity
// mode's, per workflow: an open loop starts workflow k at start + k/Rate
// whatever is still open, a closed loop has Concurrency goroutines that each
// start their next workflow when their previous one closed. A workflow
// completes when the bench learns, from the server, that its run closed
// completed; a refused start and a run that closed otherwise are errors.
// End-to-end runs from a workflow's intended start to that moment. The step
// gap is measured inside the bench's workers, by run id and step: from a
// step's activity returning its result to the next step's activity
// starting, so it covers the result's commit, the workflow task that takes
// the next step, and that step's scheduling and dispatch.
//
// Timeout. With Options.Timeout the run ends when it passes: whatever has
// not completed by then is an error, and the timeout is the first error
// unless one came before it.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/tracing"
	"github.com/aion-run/aion/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Options describe one run.
type Options struct {
	// Address of a running server; empty starts one in this process.
	Address string
	// Activities to schedule in all (the activity mode).
	Activities int
	// Workflows, above 0, selects the workflow mode: this many runs of the
	// bench's own workflow, each of Steps sequential activities.
	Workflows int
	// Steps is the number of sequential activities of each workflow of the
	// workflow mode (at least 1).
	Steps int
	// Fanout, above 0, selects the fan-out mode: one workflow that starts
	// this many activities at once and waits for all of them.
	Fanout int
	// Workers connected, each with Slots slots.
	Workers, Slots int
	// Concurrency is the number of goroutines of a closed-loop run (Rate
	// 0). In the activity mode each sends its next call when its previous
	// one returned; in the workflow mode each starts its next workflow
	// when its previous one closed. An open-loop run (Rate above 0) and
	// the fan-out mode do not use it.
	Concurrency int
	// Payload is the size of each activity's input in bytes (at least 8).
	// In the workflow modes it is the size of each step's JSON input, which
	// the step returns as its result.
	Payload int
	// Batch schedules this many activities per ScheduleBatch call; 0 uses
	// unary Schedule. The activity mode only.
	Batch int
	// Rate, above 0, is the offered load of an open-loop run. In the
	// activity mode it is in activities per second: call k (of
	// max(Batch, 1) activities) is due at start + k·max(Batch, 1)/Rate. In
	// the workflow mode it is in workflows per second: workflow k is due at
	// start + k/Rate. Each is sent then on its own goroutine, however many
	// earlier ones are still outstanding; one the bench itself sends late
	// goes out at once and still counts from its due time. 0 is a closed
	// loop, as fast as Concurrency goroutines go. The fan-out mode takes
	// no rate.
	Rate float64
	// Timeout, above 0, bounds the run: when it passes, whatever has not
	// completed is counted as an error and the run ends. 0 waits as long as
	// the run takes.
	Timeout time.Duration
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
	// Log receives the in-process server's log (and the workflow modes'
	// SDK workers' log); nil discards it.
	Log *slog.Logger
	// Tracing is the in-process servers' OpenTelemetry tracing; the zero
	// value is off. The command reads it from the OTEL_* environment.
	Tracing tracing.Config
	// TraceSink turns the in-process servers' tracing on, exporting over
	// OTLP/gRPC to a receiver in the bench's process that counts the spans
	// and drops them (instead of Tracing's exporter).
	TraceSink bool

	// Duration, above 0 with a Rate, sets Activities to Rate·Duration: a
	// steady load for that long (the activity mode).
	Duration time.Duration
	// Window, above 0, samples the run every Window: the dispatch
	// (schedule-to-start) and end-to-end latencies of each window, the
	// size of DBPath and its write-ahead log, and the server's resident
	// memory and reaped total from MetricsURL (Report.Windows).
	Window time.Duration
	// MetricsURL is the server's /metrics; empty for an in-process server
	// means its own, and with Address means none.
	MetricsURL string
	// DBPath is the SQLite file whose size is sampled; empty for an
	// in-process SQLite server means its own, and otherwise none.
	DBPath string
	// Retention, above 0, creates the namespace and sets its retention
	// before the load starts.
	Retention time.Duration
	// ReapInterval is the in-process servers' reaping interval: 0 for the
	// server's default, below 0 for none.
	ReapInterval time.Duration

	hooks hooks
}

// The modes of a run, as Report.Mode names them.
const (
	ModeActivities = "activities"
	ModeWorkflows  = "workflows"
	ModeFanout     = "fanout"
)

func (o *Options) mode() string {
	switch {
	case o.Workflows > 0:
		return ModeWorkflows
	case o.Fanout > 0:
		return ModeFanout
	}
	return ModeActivities
}

// hooks let this package's tests pace a run and watch it; each nil hook
// does nothing.
type hooks struct {
	// started runs once the workers are connected, just before the
	// schedule starts.
	started func()
	// issued runs in the open loop's dispatcher when call k is due and
	// counted in flight, just before it is sent.
	issued func(k int)
	// answered runs when a call returns, with its error (nil when the
	// server answered it, even if some of its batch items were refused).
	answered func(err error)
	// hold runs in a bench worker before it completes a task: a stand-in
	// for activity code that takes time.
	hold func(ctx context.Context, t *aionv1.ActivityTask)
	// step runs in a workflow mode's step activity before it returns; an
	// error it returns fails the attempt.
	step func(ctx context.Context, info worker.ActivityInfo) error
	// workflowType, when set, is the type the workflow modes start instead
	// of the bench's own (which its workers still register).
	workflowType string
}

// Percentiles summarise a latency distribution in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Report is the outcome of one run. Every mode fills the same fields; the
// documentation of each says what it counts in the workflow modes.
type Report struct {
	// Mode is "activities", "workflows" or "fanout".
	Mode string `json:"mode"`
	// Activities is how many activities completed. In the activity mode: a
	// bench worker ran them and the server acknowledged the result as
	// durable. In the workflow mode: the steps of the completed workflows
	// (Steps each). In the fan-out mode: the activities the completed
	// workflow saw complete. Scheduled is how many the run set out to
	// schedule (Workflows·Steps, or Fanout, in the workflow modes).
	Activities int     `json:"activities"`
	Scheduled  int     `json:"scheduled"`
	Seconds    float64 `json:"seconds"`
	// PerSec is Activities / Seconds: completions only, never failures.
	PerSec float64 `json:"per_sec"`
	// Errors counts what did not complete. In the activity and fan-out
	// modes, activities: every activity of a call that failed, every
	// refused batch item, every result the server refused, every activity
	// of a fan-out whose workflow did not complete. In the workflow mode,
	// workflows: every start the server refused and every run that closed
	// other than completed. With Timeout, everything not completed when it
	// passed counts too. FirstError is the first such error's text.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Calls is the number of Schedule or ScheduleBatch calls sent (in the
	// workflow modes, workflow starts); MaxInFlight the most that were
	// outstanding at once (issued, not yet answered; in the workflow modes,
	// started and not yet seen closed): a server that cannot keep up with
	// an open loop shows it here.
	Calls       int `json:"calls"`
	MaxInFlight int `json:"max_in_flight"`
	// ScheduleToStart is measured by the server: started_time minus
	// scheduled_time of each task a bench worker receives (see the package
	// documentation of bench for the instants). In the workflow modes, of
	// each step activity attempt of the run's workflows.
	ScheduleToStart Percentiles `json:"schedule_to_start_ms"`
	// EndToEnd runs from each call's intended start to the bench worker
	// receiving the acknowledgement that the activity's result is durable,
	// over completed activities. In the workflow modes it runs from each
	// workflow's intended start to the bench learning that the run closed,
	// over completed workflows.
	EndToEnd Percentiles `json:"end_to_end_ms"`
	// EndToEndTrend is the median EndToEnd of each tenth of the completed
	// activities (workflows, in the workflow modes), in order of intended
	// start: flat when the server keeps up, growing when a backlog builds.
	EndToEndTrend []float64 `json:"end_to_end_p50_by_tenth_ms"`
	// Workflows is how many workflow runs completed, WorkflowsPlanned how
	// many the run set out to start (Workflows, or 1 in the fan-out mode;
	// 0 in the activity mode), WorkflowsPerSec Workflows / Seconds.
	Workflows        int     `json:"workflows"`
	WorkflowsPlanned int     `json:"workflows_planned"`
	WorkflowsPerSec  float64 `json:"workflows_per_sec"`
	// Steps is the activities per workflow of the workflow mode; Fanout the
	// activities of the fan-out mode's workflow.
	Steps  int `json:"steps"`
	Fanout int `json:"fanout"`
	// StepGap runs, within one completed workflow of the workflow mode,
	// from a step's activity returning on a bench worker to the next
	// step's activity starting on a bench worker: the server recording the
	// result, the workflow task that decides the next step, and scheduling
	// and dispatching it. StepGaps counts the gaps measured: Steps-1 per
	// completed workflow.
	StepGap  Percentiles `json:"step_gap_ms"`
	StepGaps int         `json:"step_gaps"`
	Workers  int         `json:"workers"`
	Slots    int         `json:"slots"`
	// Concurrency is the closed loop's goroutines; 0 in an open-loop run
	// and in the fan-out mode, which do not use them.
	Concurrency int     `json:"concurrency"`
	Batch       int     `json:"batch"`
	Payload     int     `json:"payload"`
	Rate        float64 `json:"rate"`
	// TimeoutSeconds is Options.Timeout; 0 for none.
	TimeoutSeconds float64 `json:"timeout_seconds"`
	Server         string  `json:"server"`
	Servers        int     `json:"servers"`
	SQLiteSync     string  `json:"sqlite_sync,omitempty"`
	// Tracing is how the in-process servers exported spans ("otlp over
	// grpc", say); empty when tracing was off or the server was not
	// in-process.
	Tracing string `json:"tracing,omitempty"`
	// Windows are the samples of a run with Options.Window, in order.
	Windows []Window `json:"windows,omitempty"`
	// RetentionSeconds is Options.Retention; ReapIntervalSeconds the
	// in-process servers' reaping interval (-1 for none, 0 for the default
	// or a server not in-process).
	RetentionSeconds    float64 `json:"retention_seconds,omitempty"`
	ReapIntervalSeconds float64 `json:"reap_interval_seconds,omitempty"`
	// SpansExported is how many spans reached the bench's own trace sink
	// (TraceSink), counted after the servers stopped; spans the servers'
	// batch processors dropped (a full queue) are not among them.
	SpansExported int64 `json:"spans_exported,omitempty"`
}

// Defaults returns the options of a plain `aion bench`.
func Defaults() Options {
	return Options{Activities: 20000, Steps: 3, Workers: 4, Slots: 64, Concurrency: 8, Payload: 64, Batch: 0,
		Namespace: "bench", TaskQueue: "bench", SQLiteSync: "full", Servers: 1}
}

// fanoutOverhead is a generous bound on what one activity command adds to
// a workflow task result beyond its input.
const fanoutOverhead = 256

func (o *Options) validate() error {
	workflows := o.Workflows > 0 || o.Fanout > 0
	switch {
	case o.Workflows < 0:
		return fmt.Errorf("--workflows: %d, want at least 1 (or 0 for the activity mode)", o.Workflows)
	case o.Fanout < 0:
		return fmt.Errorf("--fanout: %d, want at least 1 (or 0 for no fan-out)", o.Fanout)
	case o.Workflows > 0 && o.Fanout > 0:
		return fmt.Errorf("--fanout: %d cannot be combined with --workflows %d; choose one mode", o.Fanout, o.Workflows)
	case !workflows && o.Activities < 1:
		return fmt.Errorf("--activities: %d, want at least 1", o.Activities)
	case o.Workflows > 0 && o.Steps < 1:
		return fmt.Errorf("--steps: %d, want at least 1", o.Steps)
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
	case workflows && o.Batch != 0:
		return fmt.Errorf("--batch: %d applies to the activity mode only; the workflow modes schedule through their workflows", o.Batch)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate: %v, want 0 (closed loop) or a positive number of activities (workflows with --workflows) per second", o.Rate)
	case o.Fanout > 0 && o.Rate > 0:
		return fmt.Errorf("--rate: %v does not apply to --fanout, which starts one workflow", o.Rate)
	case o.Fanout > 0 && o.Fanout*(o.Payload+fanoutOverhead) > limit.Message:
		return fmt.Errorf("--fanout: %d activities with --payload %d do not fit in one workflow task result of at most %d bytes; lower either",
			o.Fanout, o.Payload, limit.Message)
	case o.Timeout < 0:
		return fmt.Errorf("--timeout: %v, want 0 (none) or a positive duration", o.Timeout)
	case o.Servers < 1:
		return fmt.Errorf("--servers: %d, want at least 1", o.Servers)
	case o.Servers > 1 && o.Address != "":
		return fmt.Errorf("--servers: %d in-process servers cannot be combined with --address", o.Servers)
	case o.Servers > 1 && o.Store == "":
		return fmt.Errorf("--servers: %d servers must share a PostgreSQL store; set --store postgres://…", o.Servers)
	case o.TraceSink && o.Address != "":
		return errors.New("--trace-sink: traces the in-process servers; it cannot be combined with --address")
	case o.Duration < 0 || (o.Duration > 0 && (o.Rate <= 0 || workflows)):
		return fmt.Errorf("--duration: %v applies to an open-loop activity run (--rate) only", o.Duration)
	case o.Window < 0 || (o.Window > 0 && workflows):
		return fmt.Errorf("--window: %v, want 0 (none) or a positive duration, in the activity mode", o.Window)
	case o.Retention < 0:
		return fmt.Errorf("--retention: %v, want 0 (leave the namespace as it is) or a positive duration", o.Retention)
	case o.ReapInterval != 0 && o.Address != "":
		return fmt.Errorf("--reap-interval: %v applies to in-process servers; it cannot be combined with --address", o.ReapInterval)
	}
	return nil
}

// Run performs one bench run. It returns the report with an error when the
// run was interrupted or when anything did not complete (the report then
// counts it in Errors).
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Duration > 0 && o.Rate > 0 {
		o.Activities = max(1, int(o.Rate*o.Duration.Seconds()))
	}
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	if !o.TraceSink {
		return run(ctx, o)
	}
	sink, err := startTraceSink()
	if err != nil {
		return Report{}, err
	}
	o.Tracing = tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: sink.addr}
	rep, err := run(ctx, o) // its servers have stopped, exporting what they held
	sink.stop()
	rep.SpansExported = sink.spans.Load()
	if rep.Tracing != "" {
		rep.Tracing += " to the bench's own sink"
	}
	return rep, err
}

// run is Run after the checks, with o.Tracing set for a trace sink.
func run(ctx context.Context, o Options) (Report, error) {
	rep := Report{Mode: o.mode(), Workers: o.Workers, Slots: o.Slots, Concurrency: o.Concurrency,
		Batch: o.Batch, Payload: o.Payload, Rate: o.Rate, TimeoutSeconds: o.Timeout.Seconds(), Server: o.Address}
	if o.Rate > 0 || o.Fanout > 0 {
		rep.Concurrency = 0
	}
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
			cfg.Tracing = o.Tracing
			cfg.ServerName = fmt.Sprintf("bench-%d", i+1)
			cfg.DrainTimeout = 5 * time.Second
			switch {
			case o.ReapInterval > 0:
				cfg.ReapInterval = o.ReapInterval
			case o.ReapInterval < 0:
				cfg.ReapInterval = 0
			}
			srv, err := server.New(ctx, cfg, o.Log)
			if err != nil {
				return Report{}, fmt.Errorf("start in-process server %d: %w", i+1, err)
			}
			defer srv.Stop(context.Background())
			if err := srv.Start(ctx); err != nil {
				return Report{}, fmt.Errorf("start in-process server %d: %w", i+1, err)
			}
			addrs = append(addrs, srv.GRPCAddr())
			if i == 0 && o.MetricsURL == "" {
				o.MetricsURL = "http://" + srv.HTTPAddr() + "/metrics"
			}
		}
		if o.DBPath == "" && o.Store == "" {
			o.DBPath = filepath.Join(dir, "aion.db")
		}
		rep.ReapIntervalSeconds = max(o.ReapInterval.Seconds(), -1)
		rep.Server, rep.SQLiteSync = "in-process "+addrs[0], o.SQLiteSync
		if o.Tracing.Enabled() {
			rep.Tracing = o.Tracing.Exporter + " over " + o.Tracing.Protocol
		}
		if o.Store != "" {
			rep.Server, rep.SQLiteSync = fmt.Sprintf("%d in-process server(s) on postgres", o.Servers), ""
		}
	}
	rep.Servers = len(addrs)

	var conns []*grpc.ClientConn
	for _, addr := range addrs {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return Report{}, err
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	if o.Retention > 0 {
		if err := setRetention(ctx, conns[0], o.Namespace, o.Retention); err != nil {
			return Report{}, err
		}
		rep.RetentionSeconds = o.Retention.Seconds()
	}
	if rep.Mode != ModeActivities {
		return runWorkflows(ctx, o, addrs, conns, rep)
	}
	return runActivities(ctx, o, addrs, conns, rep)
}

// runActivities is the activity mode.
func runActivities(ctx context.Context, o Options, addrs []string, conns []*grpc.ClientConn, rep Report) (Report, error) {
	rep.Scheduled = o.Activities
	run := &runner{o: o, tally: newTally(int64(o.Activities)),
		settled: make(map[string]bool, o.Activities),
		toStart: make([]time.Duration, 0, o.Activities), endToEnd: make([]sample, 0, o.Activities)}
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
	for _, cc := range conns {
		clients = append(clients, aionv1.NewActivityServiceClient(cc))
	}

	if o.hooks.started != nil {
		o.hooks.started()
	}
	runCtx, stopRun := run.withTimeout(ctx, o.Timeout)
	defer stopRun()
	start := time.Now()
	var samples *sampler
	stopProgress := func() {}
	if o.Window > 0 {
		samples = startSampler(o, run, start, o.MetricsURL, o.DBPath)
	} else {
		stopProgress = progress(o.Progress, start, "activities", run.counts)
	}
	if o.Rate > 0 {
		run.openLoop(runCtx, clients, start)
	} else {
		run.closedLoop(runCtx, clients)
	}
	select {
	case <-run.allDone:
	case <-runCtx.Done():
	}
	elapsed := time.Since(start)
	stopProgress()
	if samples != nil {
		rep.Windows = samples.finish()
	}
	stopWorkers()
	wg.Wait()
	stopRun()

	run.mu.Lock()
	defer run.mu.Unlock()
	run.countMissing()
	done := int(run.completed.Load())
	rep.Activities = done
	rep.Seconds = elapsed.Seconds()
	rep.PerSec = float64(done) / elapsed.Seconds()
	rep.Errors = int(run.errors.Load())
	if rep.Errors > 0 && run.firstErr != nil {
		rep.FirstError = run.firstErr.Error()
	}
	rep.Calls = int(run.calls.Load())
	rep.MaxInFlight = int(run.maxInFlight.Load())
	rep.ScheduleToStart = percentiles(run.toStart)
	lat := make([]time.Duration, len(run.endToEnd))
	for i, s := range run.endToEnd {
		lat[i] = s.latency
	}
	rep.EndToEnd = percentiles(lat)
	rep.EndToEndTrend = trend(run.endToEnd)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("bench interrupted after %d of %d activities completed: %w", done, o.Activities, err)
	}
	if rep.Errors > 0 {
		return rep, fmt.Errorf("bench: %d of %d activities did not complete; the first error: %w", rep.Errors, o.Activities, run.firstErr)
	}
	return rep, nil
}

// sample is one completed activity's (or workflow's) end-to-end latency
// and the intended start it runs from.
type sample struct {
	due     time.Time
	latency time.Duration
}

// tally is what every mode counts: outcomes against a total, calls in
// flight, the first error, and the run's timeout.
type tally struct {
	total int64
	// claimed counts units handed to calls; outcomes counts those
	// completed or failed, and the run ends when it reaches total.
	claimed     atomic.Int64
	outcomes    atomic.Int64
	completed   atomic.Int64
	errors      atomic.Int64
	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	allDone     chan struct{}
	doneOnce    sync.Once

	mu       sync.Mutex
	firstErr error
	// timedOut is set when Options.Timeout passed, before anything was
	// canceled for it.
	timedOut bool
}

func newTally(total int64) tally {
	return tally{total: total, allDone: make(chan struct{})}
}

// withTimeout returns a context for the run that ends after d (never when
// d is 0). When d passes, the timeout becomes the first error unless one
// came before, and only then is the context canceled, so calls it cuts
// short do not take that place. stop, which may be called more than once,
// releases it and waits for a timeout that has begun to finish.
func (t *tally) withTimeout(ctx context.Context, d time.Duration) (_ context.Context, stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	if d <= 0 {
		return rctx, cancel
	}
	fired := make(chan struct{})
	timer := time.AfterFunc(d, func() {
		defer close(fired)
		if t.outcomes.Load() >= t.total {
			return // finished just in time
		}
		t.mu.Lock()
		t.timedOut = true
		if t.firstErr == nil {
			t.firstErr = fmt.Errorf("not finished within --timeout %v", d)
		}
		t.mu.Unlock()
		cancel()
	})
	return rctx, sync.OnceFunc(func() {
		if !timer.Stop() {
			<-fired
		}
		cancel()
	})
}

// countMissing counts as errors the units that had no outcome when the
// timeout passed. Callers hold t.mu, after every call and worker ended.
func (t *tally) countMissing() {
	if !t.timedOut {
		return
	}
	if missing := t.total - t.outcomes.Load(); missing > 0 {
		t.errors.Add(missing)
		t.outcomes.Add(missing)
	}
}

// counts is the progress of the units the tally counts.
func (t *tally) counts() (done, bad, settled, total int64) {
	return t.completed.Load(), t.errors.Load(), t.outcomes.Load(), t.total
}

// issue counts one call sent and in flight.
func (t *tally) issue() {
	t.calls.Add(1)
	n := t.inFlight.Add(1)
	for {
		m := t.maxInFlight.Load()
		if n <= m || t.maxInFlight.CompareAndSwap(m, n) {
			return
		}
	}
}

// claim reserves up to n of the remaining units for one call.
func (t *tally) claim(n int64) int64 {
	for {
		cur := t.claimed.Load()
		take := min(n, t.total-cur)
		if take <= 0 {
			return 0
		}
		if t.claimed.CompareAndSwap(cur, cur+take) {
			return take
		}
	}
}

// fail counts n units that will not complete.
func (t *tally) fail(n int64, err error) {
	t.errors.Add(n)
	t.mu.Lock()
	if t.firstErr == nil {
		t.firstErr = err
	}
	t.mu.Unlock()
	t.outcome(n)
}

func (t *tally) outcome(n int64) {
	if t.outcomes.Add(n) >= t.total {
		t.doneOnce.Do(func() { close(t.allDone) })
	}
}

// openLoop sends call k, of up to per units, at start + k·per/rate on its
// own goroutine, whether or not earlier calls have returned, and returns
// once every call has. issued, when set, runs when call k is due and
// counted in flight.
func (t *tally) openLoop(ctx context.Context, start time.Time, per int64, rate float64, issued func(k int),
	send func(k int, n int64, due time.Time)) {
	perCall := float64(time.Second) * float64(per) / rate
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ctx.Err() == nil; k++ {
		n := t.claim(per)
		if n <= 0 {
			return
		}
		due := start.Add(time.Duration(float64(k) * perCall))
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		t.issue()
		if issued != nil {
			issued(k)
		}
		wg.Go(func() { send(k, n, due) })
	}
}

// closedLoop runs conc goroutines, each sending its next call of up to per
// units when its previous one returned; a call's intended start is when it
// is sent. g is the goroutine's number.
func (t *tally) closedLoop(ctx context.Context, conc int, per int64, send func(g int, n int64, due time.Time)) {
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := t.claim(per)
				if n <= 0 {
					return
				}
				t.issue()
				send(g, n, time.Now())
			}
		})
	}
	wg.Wait()
}

// runner is the activity mode.
type runner struct {
	o Options
	tally

	// Guarded by tally.mu. settled holds the activities already counted,
	// completed or refused, so a later attempt of one (after a worker was
	// lost) counts once.
	settled  map[string]bool
	toStart  []time.Duration
	endToEnd []sample
}

// payload carries the call's intended start to the worker, which measures
// end-to-end latency from it.
func (r *runner) payload(due time.Time) []byte {
	p := make([]byte, r.o.Payload)
	binary.BigEndian.PutUint64(p, uint64(due.UnixNano()))
	return p
}

// openLoop sends call k at start + k·per/Rate on its own goroutine, whether
// or not earlier calls have returned, and returns once every call has.
func (r *runner) openLoop(ctx context.Context, clients []aionv1.ActivityServiceClient, start time.Time) {
	r.tally.openLoop(ctx, start, int64(max(r.o.Batch, 1)), r.o.Rate, r.o.hooks.issued, func(k int, n int64, due time.Time) {
		r.call(ctx, clients[k%len(clients)], n, due)
	})
}

// closedLoop runs Concurrency goroutines, each sending its next call when
// its previous one returned; a call's intended start is when it is sent.
func (r *runner) closedLoop(ctx context.Context, clients []aionv1.ActivityServiceClient) {
	r.tally.closedLoop(ctx, r.o.Concurrency, int64(max(r.o.Batch, 1)), func(g int, n int64, due time.Time) {
		r.call(ctx, clients[g%len(clients)], n, due)
	})
}

func (r *runner) request(due time.Time) *aionv1.ScheduleRequest {
	return &aionv1.ScheduleRequest{Namespace: r.o.Namespace, TaskQueue: r.o.TaskQueue, ActivityType: "bench",
		Payload: r.payload(due)}
}

// call sends one Schedule (or ScheduleBatch of n) due at due, already
// counted in flight, and counts what failed.
func (r *runner) call(ctx context.Context, client aionv1.ActivityServiceClient, n int64, due time.Time) {
	err := r.send(ctx, client, n, due)
	r.inFlight.Add(-1)
	if err != nil {
		r.fail(n, err)
	}
	if r.o.hooks.answered != nil {
		r.o.hooks.answered(err)
	}
}

func (r *runner) send(ctx context.Context, client aionv1.ActivityServiceClient, n int64, due time.Time) error {
	if r.o.Batch == 0 {
		_, err := client.Schedule(ctx, r.request(due))
		return err
	}
	reqs := make([]*aionv1.ScheduleRequest, n)
	for i := range reqs {
		reqs[i] = r.request(due)
	}
	resp, err := client.ScheduleBatch(ctx, &aionv1.ScheduleBatchRequest{Requests: reqs})
	if err != nil {
		return err
	}
	for i, res := range resp.GetResults() {
		if e := res.GetError(); e != nil {
			r.fail(1, fmt.Errorf("ScheduleBatch item %d: %s", i, e.GetMessage()))
		}
	}
	return nil
}

// settle counts an activity's result once: completed when the server
// acknowledged it, an error when it refused it.
func (r *runner) settle(id string, due time.Time, refused string) {
	r.mu.Lock()
	if r.settled[id] {
		r.mu.Unlock()
		return
	}
	r.settled[id] = true
	if refused == "" {
		if !due.IsZero() {
			r.endToEnd = append(r.endToEnd, sample{due: due, latency: time.Since(due)})
		}
		r.mu.Unlock()
		r.completed.Add(1)
	} else {
		if r.firstErr == nil {
			r.firstErr = fmt.Errorf("result of activity %q refused: %s", id, refused)
		}
		r.mu.Unlock()
		r.errors.Add(1)
	}
	r.outcome(1)
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
	// due maps an attempt to its call's intended start until its ack
	// arrives.
	type ref struct {
		id      string
		attempt uint32
	}
	due := make(map[ref]time.Time)
	for {
		m, err := stream.Recv()
		if err != nil {
			return
		}
		switch f := m.GetMessage().(type) {
		case *aionv1.ServerMessage_ActivityTask:
			t := f.ActivityTask
			var at time.Time
			if p := t.GetPayload(); len(p) >= 8 {
				at = time.Unix(0, int64(binary.BigEndian.Uint64(p)))
			}
			due[ref{t.GetActivityId(), t.GetAttempt()}] = at
			toStart := t.GetStartedTime().AsTime().Sub(t.GetScheduledTime().AsTime())
			r.mu.Lock()
			r.toStart = append(r.toStart, toStart)
			r.mu.Unlock()
			if r.o.hooks.hold != nil {
				r.o.hooks.hold(ctx, t)
			}
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
			r.settle(a.GetActivityId(), due[k], a.GetRefused())
			delete(due, k)
		case *aionv1.ServerMessage_DrainRequest:
			_ = stream.CloseSend()
		}
	}
}

// trend is the median latency of each tenth of the samples in order of
// intended start (fewer parts when there are fewer than ten samples).
func trend(samples []sample) []float64 {
	if len(samples) == 0 {
		return nil
	}
	slices.SortStableFunc(samples, func(a, b sample) int { return a.due.Compare(b.due) })
	parts := min(10, len(samples))
	out := make([]float64, parts)
	for i := range parts {
		part := samples[i*len(samples)/parts : (i+1)*len(samples)/parts]
		ds := make([]time.Duration, len(part))
		for j, s := range part {
			ds[j] = s.latency
		}
		out[i] = percentiles(ds).P50
	}
	return out
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Percentiles{P50: ms(at(0.50)), P90: ms(at(0.90)), P99: ms(at(0.99)), Max: ms(ds[len(ds)-1])}
}

// progress draws a bar on a terminal until the returned stop is called:
// counts gives the units completed, failed, settled either way, and in all.
func progress(w io.Writer, start time.Time, unit string, counts func() (done, bad, settled, total int64)) (stop func()) {
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
		n, bad, settled, total := counts()
		frac := float64(settled) / float64(max(total, 1))
		const width = 30
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if float64(i) < frac*width {
				bar[i] = '='
			}
		}
		rate := float64(n) / time.Since(start).Seconds()
		fmt.Fprintf(f, "\r[%s] %3.0f%% %d/%d %s completed  %.0f/s  %d errors ", bar, frac*100, n, total, unit, rate, bad)
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
