package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/internal/bench"
)

func (a *app) benchCommand() *cobra.Command {
	o := bench.Defaults()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a whole aion system: throughput and latency, end to end",
		Long: `bench schedules activities, runs them on workers and measures throughput
and latency over real gRPC on loopback, with durable commits.

Without --address (or AION_ADDRESS) it starts its own server in this process,
on a temporary data directory; with one it targets that running server. Its
workers speak the worker protocol directly and complete each task at once, so
the figures measure the server and the wire, not activity code.

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
run with errors exits non-zero after printing its figures.

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
request reached the server.`,
		Example: `  aion bench --activities 50000 --batch 100
  aion bench --activities 20000 --concurrency 64
  aion bench --rate 2000 --activities 20000 --json
  aion bench --address 127.0.0.1:50051 --namespace bench`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("address"); f.Changed || envSet(a.lookupEnv, "AION_ADDRESS") {
				o.Address = a.address
			}
			if !asJSON {
				o.Progress = os.Stderr
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
	f.IntVar(&o.Activities, "activities", o.Activities, "activities to schedule in all")
	f.IntVar(&o.Workers, "workers", o.Workers, "workers to connect")
	f.IntVar(&o.Slots, "slots", o.Slots, "slots of each worker")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "scheduling goroutines of a closed-loop run (without --rate); --rate does not use it")
	f.IntVar(&o.Payload, "payload", o.Payload, "input size of each activity in bytes (at least 8)")
	f.IntVar(&o.Batch, "batch", o.Batch, "activities per ScheduleBatch call; 0 uses unary Schedule")
	f.Float64Var(&o.Rate, "rate", o.Rate, "offered load in activities per second, open loop: every call is sent when due; 0 is a closed loop, as fast as possible")
	f.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace the run uses")
	f.StringVar(&o.TaskQueue, "task-queue", o.TaskQueue, "task queue the run uses")
	f.StringVar(&o.SQLiteSync, "sqlite-sync", o.SQLiteSync, "synchronous mode of the in-process server: full or normal")
	f.StringVar(&o.Store, "store", "", "store of the in-process server: empty for SQLite, or a postgres:// URL")
	f.IntVar(&o.Servers, "servers", o.Servers, "in-process servers sharing --store (a cluster; more than one needs PostgreSQL); workers and schedulers are spread over them")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	return cmd
}

func envSet(lookup func(string) (string, bool), name string) bool {
	_, ok := lookup(name)
	return ok
}

func printReport(a *app, r bench.Report) {
	w := a.stdout
	fmt.Fprintf(w, "server:            %s\n", r.Server)
	fmt.Fprintf(w, "load:              %d workers x %d slots, ", r.Workers, r.Slots)
	if r.Rate > 0 {
		fmt.Fprintf(w, "open loop at %g/s", r.Rate)
	} else {
		fmt.Fprintf(w, "closed loop, %d schedulers", r.Concurrency)
	}
	fmt.Fprintf(w, ", batch %d, payload %d B\n", r.Batch, r.Payload)
	fmt.Fprintf(w, "calls:             %d sent, at most %d in flight\n", r.Calls, r.MaxInFlight)
	fmt.Fprintf(w, "activities:        %d of %d completed in %.2fs = %.0f/s, %d errors\n", r.Activities, r.Scheduled, r.Seconds, r.PerSec, r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error:       %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "schedule-to-start: p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.ScheduleToStart.P50, r.ScheduleToStart.P99, r.ScheduleToStart.Max)
	fmt.Fprintf(w, "end-to-end:        p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.EndToEnd.P50, r.EndToEnd.P99, r.EndToEnd.Max)
	if len(r.EndToEndTrend) > 0 {
		fmt.Fprint(w, "end-to-end tenths: p50")
		for _, ms := range r.EndToEndTrend {
			fmt.Fprintf(w, " %.3f", ms)
		}
		fmt.Fprintln(w, " ms")
	}
}
