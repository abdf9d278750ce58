package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/internal/bench"
	"github.com/aion-run/aion/internal/tracing"
)

func (a *app) benchCommand() *cobra.Command {
	o := bench.Defaults()
	var (
		asJSON     bool
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a whole aion system: throughput and latency, end to end",
		Long: `bench schedules activities, runs them on workers and measures throughput
and latency over real gRPC on loopback, with durable commits.

Without --address (or AION_ADDRESS) it starts its own server in this process,
on a temporary data directory; with one it targets that running server. In
the activity mode (the default) its workers speak the worker protocol
directly and complete each task at once, so the figures measure the server
and the wire, not activity code.

Load: with --rate R the run is an open loop. Call k (of --batch activities,
or one) is due at start + k*batch/R and is sent then, on its own goroutine,
however many earlier calls are still outstanding; --concurrency does not
apply. A server that cannot keep up still receives the offered load, and its
backlog shows in the latencies and in "at most N in flight". Without --rate
the run is a closed loop: --concurrency goroutines each send the next call
when the previous one returned, so the server sets the pace (throughput at
saturation).

Counting: an activity completes when the server acknowledged its result as
durable; the rate (/s) counts completions only. Every activity of a failed
call, every refused batch item and every refused result is an error, and a
run with errors exits non-zero after printing its figures. With --timeout D
the run ends after D at most, and whatever has not completed by then is an
error.

Latencies: end-to-end runs from each call's intended start (its due time with
--rate, even if the bench sent it late; the instant it was sent without) to
the worker receiving the acknowledgement that the result is durable. The
tenths line gives its median for each tenth of the activities in order of
intended start: flat when the server keeps up, growing with a backlog.
Schedule-to-start is the server's figure, started_time minus scheduled_time
of each task a worker receives, both from the server's clock: scheduled_time
is read when the server accepts the Schedule request (after checking it,
before the commit that makes it durable), started_time when it hands the
attempt to a worker whose slot it took, just before sending the task. It
includes the commit and the wait for a free slot, not the time before the
request reached the server.

Workflows: --workflows N runs N workflows of the bench's own type
(bench-steps), each running --steps K activities one after the other; the
bench's workers (SDK workers, --workers of --slots slots, build id
aion-bench-1) serve both the workflows and their step activities, which
return their input (--payload bytes of JSON) at once. With --rate R workflow
k is started at start + k/R on its own goroutine, however many earlier
workflows are still open (open loop); without it --concurrency goroutines
each start the next workflow when their previous one closed (closed loop).
A workflow completes when the bench learns that its run closed completed;
workflows/s counts those only, and every start the server refused and every
run that closed otherwise is an error. Start-to-close runs from each
workflow's intended start (its due time with --rate; the instant its start
was sent without) to the bench learning that its run closed; the tenths line
gives its median for each tenth of the workflows. The step gap runs,
inside one workflow, from a step's activity returning on a bench worker to
the next step's activity starting on a bench worker (recorded by run id and
step): the result's commit, the workflow task that takes the next step, and
its scheduling and dispatch; there are K-1 per completed workflow.
Schedule-to-start is the server's figure for each step activity, as above.

Fan-out: --fanout M runs one workflow (bench-fanout) that starts M
activities in one workflow task and waits for all of them. activities/s is
the activities it saw complete divided by the time from its start to the
bench learning that it closed; schedule-to-start is given over the M
activities; an activity that failed, or all M when the workflow did not
complete, are errors.

Workflows run on either store; on --store postgres://… with --servers N the
runs are held by the servers whose workers serve them (docs/workflows.md).

JSON (--json): one object with the same fields in every mode. mode is
activities, workflows or fanout. activities, scheduled, seconds, per_sec,
errors, first_error, calls, max_in_flight, schedule_to_start_ms,
end_to_end_ms and end_to_end_p50_by_tenth_ms are the figures above; in the
workflow modes activities counts the steps of completed workflows (or the
activities the fan-out saw complete), scheduled is N*K (or M), errors counts
workflows with --workflows and activities with --fanout, calls counts
workflow starts, max_in_flight is the most workflows open at once, and
end_to_end_ms is start-to-close. workflows is the workflows completed,
workflows_planned those the run set out to start (N, or 1 with --fanout),
workflows_per_sec is workflows / seconds; steps is K and fanout is M;
step_gap_ms is the step gap and step_gaps the number of gaps it covers;
timeout_seconds is --timeout (0 for none); tracing says how the in-process
servers exported spans, absent when they did not, and spans_exported how
many reached --trace-sink. Every latency (the fields ending in _ms) gives
p50, p90, p99 and max in milliseconds.

Steady state: --duration D with --rate R schedules R*D activities, a
steady open-loop load for D. --window W samples the run every W and reports
each window (windows in JSON, a table in the summary, a line on stderr as it
runs): the activities completed in it, the p99 of schedule-to-start
(dispatch) and of end-to-end over the tasks and completions of the window,
the size of the SQLite file and its -wal (--db-path; the in-process server's
by default), and the server's resident memory and aion_reaped_total read
from its /metrics (--metrics-url; the in-process server's by default).
--retention sets the namespace's retention before the load, so a run longer
than the retention shows whether reaping keeps the database and memory flat;
--reap-interval sets the in-process servers' reaping interval (negative: no
reaping, for comparison). Against a server in another process (--address),
give --db-path and --metrics-url so its own file and memory are measured.

Tracing: the in-process servers trace as "aion server" does, from the OTEL_*
environment (off unless OTEL_TRACES_EXPORTER=otlp; docs/operations.md,
Tracing), to whatever collector that names. --trace-sink instead exports
over OTLP/gRPC to a receiver in the bench's process that counts the spans and
drops them, to measure tracing's cost without a collector. The bench's own
workers and schedulers send no trace context, so each activity is a trace of
the server's spans: schedule, dispatch wait and result. With --address the
target server's own settings apply.`,
		Example: `  aion bench --activities 50000 --batch 100
  aion bench --activities 20000 --concurrency 64
  aion bench --rate 2000 --activities 20000 --json
  aion bench --address 127.0.0.1:50051 --namespace bench
  aion bench --workflows 2000 --steps 5 --concurrency 32
  aion bench --workflows 5000 --steps 3 --rate 200 --json
  aion bench --fanout 5000 --timeout 2m
  aion bench --rate 1000 --duration 10m --batch 10 --retention 1m --reap-interval 10s --window 30s --json
  aion bench --activities 100000 --batch 100 --trace-sink
  OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 aion bench --activities 100000 --batch 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkBenchFlags(cmd, o); err != nil {
				return err
			}
			if f := cmd.Flags().Lookup("address"); f.Changed || envSet(a.lookupEnv, "AION_ADDRESS") {
				o.Address = a.address
			}
			tr, err := tracing.FromEnv(a.lookupEnv)
			if err != nil {
				return err
			}
			o.Tracing = tr
			if !asJSON || o.Window > 0 {
				o.Progress = os.Stderr // with --window, one line per window
			}
			if cpuProfile != "" {
				stopProfile, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.Run(ctx, o)
			if asJSON {
				b, jerr := json.Marshal(rep)
				if jerr != nil {
					return jerr
				}
				fmt.Fprintf(a.stdout, "%s\n", b)
			} else if rep.Calls > 0 {
				printReport(a, rep)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Activities, "activities", o.Activities, "activities to schedule in all (the activity mode)")
	f.IntVar(&o.Workflows, "workflows", 0, "run this many workflows of --steps sequential activities each instead of scheduling activities")
	f.IntVar(&o.Steps, "steps", o.Steps, "sequential activities of each workflow of --workflows")
	f.IntVar(&o.Fanout, "fanout", 0, "run one workflow that starts this many activities at once and waits for all of them")
	f.IntVar(&o.Workers, "workers", o.Workers, "workers to connect")
	f.IntVar(&o.Slots, "slots", o.Slots, "slots of each worker")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "goroutines of a closed-loop run (without --rate): each sends its next call when its previous one returned, or starts its next workflow when its previous one closed; --rate and --fanout do not use it")
	f.IntVar(&o.Payload, "payload", o.Payload, "input size of each activity in bytes (at least 8); with --workflows or --fanout, of each step's JSON input, which it returns")
	f.IntVar(&o.Batch, "batch", o.Batch, "activities per ScheduleBatch call; 0 uses unary Schedule (the activity mode only)")
	f.Float64Var(&o.Rate, "rate", o.Rate, "offered load in activities (with --workflows, workflows) per second, open loop: every call is sent when due; 0 is a closed loop, as fast as possible")
	f.DurationVar(&o.Timeout, "timeout", 0, "end the run after this long at most, counting whatever has not completed as errors; 0 waits as long as it takes")
	f.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace the run uses")
	f.StringVar(&o.TaskQueue, "task-queue", o.TaskQueue, "task queue the run uses")
	f.StringVar(&o.SQLiteSync, "sqlite-sync", o.SQLiteSync, "synchronous mode of the in-process server: full or normal")
	f.StringVar(&o.Store, "store", "", "store of the in-process server: empty for SQLite, or a postgres:// URL")
	f.IntVar(&o.Servers, "servers", o.Servers, "in-process servers sharing --store (a cluster; more than one needs PostgreSQL); workers and schedulers are spread over them")
	f.BoolVar(&o.TraceSink, "trace-sink", false, "trace the in-process servers, exporting over OTLP/gRPC to a receiver in this process that counts and drops the spans: tracing's cost without a collector")
	f.DurationVar(&o.Duration, "duration", 0, "with --rate, run for this long: --activities becomes rate x duration (a steady load)")
	f.DurationVar(&o.Window, "window", 0, "sample every window: dispatch (schedule-to-start) and end-to-end p99 of the window, database and write-ahead log size, server RSS and reaped total (printed to stderr as it runs)")
	f.StringVar(&o.MetricsURL, "metrics-url", "", "the server's /metrics, read by --window for RSS and the reaped total; defaults to the in-process server's")
	f.StringVar(&o.DBPath, "db-path", "", "the SQLite file --window measures (with its -wal); defaults to the in-process server's")
	f.DurationVar(&o.Retention, "retention", 0, "create the namespace and set its retention before the load (0 leaves it as it is)")
	f.DurationVar(&o.ReapInterval, "reap-interval", 0, "reaping interval of the in-process servers: 0 for the server default, negative for no reaping")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of this process (the bench and its in-process servers) for the whole run to this file, for go tool pprof")
	cmd.AddCommand(a.benchBacklogCommand())
	return cmd
}

func (a *app) benchBacklogCommand() *cobra.Command {
	o := bench.BacklogOptions{Activities: 1_000_000, Batch: 1000, Concurrency: 4, Payload: 16, Slots: 256}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backlog",
		Short: "Measure a server with a large backlog: its memory, and its restart after SIGKILL",
		Long: `backlog starts "aion server" (this executable, or --server-binary to
compare builds) on a SQLite file in a temporary directory (or --data-dir),
schedules --activities activities with no worker connected, reads the server's resident memory (VmRSS, and its peak
VmHWM) from /proc, kills it with SIGKILL and starts it again over the same
file. It reports the time from that start to /readyz answering 200, the
restarted server's memory, and the time from a worker's connect call to its
first task. With --drain that worker (of --slots slots) then completes every
activity, and the run fails unless each ran exactly once.

Linux only (it reads /proc).`,
		Example: `  aion bench backlog --activities 1000000
  aion bench backlog --activities 200000 --drain --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find the aion executable: %w", err)
				}
				o.Binary = exe
			}
			if !asJSON {
				o.Progress = os.Stderr
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.RunBacklog(ctx, o)
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if jerr := enc.Encode(rep); jerr != nil {
					return jerr
				}
			} else {
				fmt.Fprintf(a.stdout, "waiting:           %d activities, scheduled in %.1f s\n", rep.Activities, rep.FillSeconds)
				fmt.Fprintf(a.stdout, "server memory:     %.0f MiB resident (peak %.0f MiB)\n", rep.RSSMiB, rep.PeakRSSMiB)
				fmt.Fprintf(a.stdout, "restart:           ready %.2f s after start following SIGKILL, %.0f MiB resident\n", rep.ReadySeconds, rep.RestartRSSMiB)
				fmt.Fprintf(a.stdout, "first task:        %.3f s after a worker's connect call\n", rep.FirstTaskSeconds)
				if o.Drain {
					fmt.Fprintf(a.stdout, "drain:             %d distinct activities ran in %.1f s, %d more than once\n", rep.Drained, rep.DrainSeconds, rep.Duplicates)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Activities, "activities", o.Activities, "activities to leave waiting")
	f.IntVar(&o.Batch, "batch", o.Batch, "activities per ScheduleBatch call (at most 1000)")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "ScheduleBatch calls in flight at once")
	f.IntVar(&o.Payload, "payload", o.Payload, "input size of each activity in bytes")
	f.IntVar(&o.Slots, "slots", o.Slots, "slots of the worker that connects after the restart")
	f.BoolVar(&o.Drain, "drain", false, "after the restart, run every activity and check each ran exactly once")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the server's SQLite file (default: a temporary one, removed after)")
	f.StringVar(&o.Binary, "server-binary", "", "aion executable to run as the server, to compare builds (default: this one)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	return cmd
}

// checkBenchFlags refuses flags of one mode given to another.
func checkBenchFlags(cmd *cobra.Command, o bench.Options) error {
	f := cmd.Flags()
	workflows := o.Workflows != 0 || o.Fanout != 0
	switch {
	case workflows && f.Changed("activities"):
		return fmt.Errorf("--activities: %d applies to the activity mode; --workflows and --fanout set their own counts", o.Activities)
	case o.Workflows == 0 && f.Changed("steps"):
		return fmt.Errorf("--steps: %d applies to --workflows only", o.Steps)
	}
	return nil
}

func envSet(lookup func(string) (string, bool), name string) bool {
	_, ok := lookup(name)
	return ok
}

func printReport(a *app, r bench.Report) {
	w := a.stdout
	ms := func(p bench.Percentiles) string {
		return fmt.Sprintf("p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms", p.P50, p.P90, p.P99, p.Max)
	}
	fmt.Fprintf(w, "server:            %s\n", r.Server)
	if r.Tracing != "" {
		fmt.Fprintf(w, "tracing:           %s", r.Tracing)
		if r.SpansExported > 0 {
			fmt.Fprintf(w, ", %d spans received", r.SpansExported)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "load:              %d workers x %d slots, ", r.Workers, r.Slots)
	switch {
	case r.Mode == bench.ModeFanout:
		fmt.Fprintf(w, "one workflow of %d activities at once", r.Fanout)
	case r.Mode == bench.ModeWorkflows && r.Rate > 0:
		fmt.Fprintf(w, "open loop at %g workflows/s", r.Rate)
	case r.Mode == bench.ModeWorkflows:
		fmt.Fprintf(w, "closed loop, %d workflows at a time", r.Concurrency)
	case r.Rate > 0:
		fmt.Fprintf(w, "open loop at %g/s", r.Rate)
	default:
		fmt.Fprintf(w, "closed loop, %d schedulers", r.Concurrency)
	}
	if r.Mode == bench.ModeActivities {
		fmt.Fprintf(w, ", batch %d", r.Batch)
	}
	fmt.Fprintf(w, ", payload %d B\n", r.Payload)
	switch r.Mode {
	case bench.ModeWorkflows:
		fmt.Fprintf(w, "starts:            %d sent, at most %d workflows open\n", r.Calls, r.MaxInFlight)
		fmt.Fprintf(w, "workflows:         %d of %d completed in %.2fs = %.0f/s, %d errors\n", r.Workflows, r.WorkflowsPlanned, r.Seconds, r.WorkflowsPerSec, r.Errors)
		fmt.Fprintf(w, "activities:        %d completed (%d steps each) = %.0f/s\n", r.Activities, r.Steps, r.PerSec)
	case bench.ModeFanout:
		fmt.Fprintf(w, "activities:        %d of %d completed in %.2fs = %.0f/s, %d errors\n", r.Activities, r.Scheduled, r.Seconds, r.PerSec, r.Errors)
	default:
		fmt.Fprintf(w, "calls:             %d sent, at most %d in flight\n", r.Calls, r.MaxInFlight)
		fmt.Fprintf(w, "activities:        %d of %d completed in %.2fs = %.0f/s, %d errors\n", r.Activities, r.Scheduled, r.Seconds, r.PerSec, r.Errors)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error:       %s\n", r.FirstError)
	}
	if r.Mode == bench.ModeActivities {
		fmt.Fprintf(w, "schedule-to-start: p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.ScheduleToStart.P50, r.ScheduleToStart.P99, r.ScheduleToStart.Max)
		fmt.Fprintf(w, "end-to-end:        p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.EndToEnd.P50, r.EndToEnd.P99, r.EndToEnd.Max)
	} else {
		fmt.Fprintf(w, "schedule-to-start: %s\n", ms(r.ScheduleToStart))
		fmt.Fprintf(w, "start-to-close:    %s\n", ms(r.EndToEnd))
	}
	if r.Mode == bench.ModeWorkflows {
		fmt.Fprintf(w, "step gap:          %s (%d gaps)\n", ms(r.StepGap), r.StepGaps)
	}
	if r.RetentionSeconds > 0 {
		fmt.Fprintf(w, "retention:         %v\n", time.Duration(r.RetentionSeconds*float64(time.Second)))
	}
	if len(r.Windows) > 0 {
		fmt.Fprintln(w, "windows:           end_s  completed  dispatch_p99_ms  end_to_end_p99_ms  db_MiB  wal_MiB  rss_MiB  reaped")
		for _, x := range r.Windows {
			fmt.Fprintf(w, "                   %5.0f  %9d  %15.3f  %17.3f  %6.1f  %7.1f  %7.1f  %d\n", x.End, x.Completed,
				x.ScheduleToStart.P99, x.EndToEnd.P99, float64(x.DBBytes)/(1<<20), float64(x.WALBytes)/(1<<20), float64(x.RSSBytes)/(1<<20), x.Reaped)
		}
	}
	if len(r.EndToEndTrend) > 1 {
		label := "end-to-end tenths: p50"
		if r.Mode != bench.ModeActivities {
			label = "start-to-close tenths: p50"
		}
		fmt.Fprint(w, label)
		for _, ms := range r.EndToEndTrend {
			fmt.Fprintf(w, " %.3f", ms)
		}
		fmt.Fprintln(w, " ms")
	}
}

// startCPUProfile profiles this process into path until the returned stop is
// called; the profile is complete only after stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu-profile %q: %w", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu-profile %q: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
