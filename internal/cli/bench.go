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

Latencies: schedule-to-start is the server's time from an attempt becoming
ready (after its schedule was made durable) to its start on a worker;
end-to-end is from the client sending Schedule to the worker receiving the
acknowledgement that the result is durable.`,
		Example: `  aion bench --activities 50000 --batch 100
  aion bench --activities 20000 --concurrency 64
  aion bench --rate 1000 --activities 20000 --json
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
			} else if rep.Activities > 0 {
				printReport(a, rep)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Activities, "activities", o.Activities, "activities to schedule in all")
	f.IntVar(&o.Workers, "workers", o.Workers, "workers to connect")
	f.IntVar(&o.Slots, "slots", o.Slots, "slots of each worker")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "scheduling goroutines")
	f.IntVar(&o.Payload, "payload", o.Payload, "input size of each activity in bytes (at least 8)")
	f.IntVar(&o.Batch, "batch", o.Batch, "activities per ScheduleBatch call; 0 uses unary Schedule")
	f.Float64Var(&o.Rate, "rate", o.Rate, "offered load in activities per second; 0 is as fast as possible")
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
	fmt.Fprintf(w, "load:              %d workers x %d slots, %d schedulers, batch %d, payload %d B", r.Workers, r.Slots, r.Concurrency, r.Batch, r.Payload)
	if r.Rate > 0 {
		fmt.Fprintf(w, ", offered %.0f/s", r.Rate)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "activities:        %d in %.2fs = %.0f/s, %d errors\n", r.Activities, r.Seconds, r.PerSec, r.Errors)
	fmt.Fprintf(w, "schedule-to-start: p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.ScheduleToStart.P50, r.ScheduleToStart.P99, r.ScheduleToStart.Max)
	fmt.Fprintf(w, "end-to-end:        p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.EndToEnd.P50, r.EndToEnd.P99, r.EndToEnd.Max)
}
