package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/internal/attack"
)

func (a *app) attackCommand() *cobra.Command {
	o := attack.Defaults()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "attack KIND",
		Short: "Attack a server this command starts itself, and measure what it costs an honest tenant",
		Long: `attack starts its own aion server as a child process, on free loopback ports
(127.0.0.1) with a fresh temporary data directory, token authentication and
--sqlite-sync full; it never targets any other server, and there is no flag to
point it elsewhere. It connects an honest tenant (namespace "honest": a worker
serving echo and a client that schedules an echo and waits for it, --rate
times a second, open loop), runs the attack KIND from the namespace
"attacker" (or from no namespace at all) for --duration, and reports what
follows. The honest tenant runs in a child process of its own (this binary
again), apart from the attack as a real tenant would be, so the attack's
goroutines do not delay its own and its latency is the server's; it ends
when this command does.

  server RSS   baseline, peak and end VmRSS, sampled from /proc every 100 ms,
               and the kernel's VmHWM (the server is its own process, so the
               figures are the server's alone)
  honest       operations offered, completed and failed; schedule-and-wait
               p50, p99 and max, each measured from its intended start; and
               the honest tenant's process id
  attack       requests sent and the server's answers by gRPC code or HTTP
               status, and figures particular to the attack

Kinds (numbers are those of the hardening matrix in docs/security.md):

  none            no attack: the honest figures on an idle server
  unauth-large    (1) callers without a token send 63 MiB Schedule requests,
                  and one sends small ones with a 1.4 MB bearer token
  worker-fields   (3) a worker with a valid key sends 40 MiB heartbeat details
                  and failures with 20 MiB message, type and details
  stalled-reader  (4) a worker takes a task, then floods pings and never reads
                  its stream; reports when the server dropped it and whether
                  its attempt was retried
  pending-memory  (5) a client schedules 2 MiB activities no worker serves, as
                  fast as it may, and lists them 1000 at a time over HTTP
  connections     (10) 3000 idle TCP connections to the gRPC port, 1000 slow
                  readers of the console's script, 500 event-stream clients
                  that never read, and a worker registering over and over
  workers         no attack: --workers idle workers, each on its own TCP
                  connection, registered in the attacker's namespace and
                  pinging as the server asks, held until --duration ends;
                  reports the server's RSS, Go heap, stacks and goroutines
                  before the first connects and with all of them held (after
                  a collection), per worker; the server runs with --pprof and
                  --profile-dir receives its heap and goroutine profiles

Attacks on the HTTP/2 framing of worker connections (raw frames, each with
the attacker's worker key where a call is made):

  early-eof       4 loops end worker streams early, over and over: END_STREAM
                  on the first HEADERS (no Register), half a gRPC message then
                  END_STREAM, RST_STREAM before Register, CloseSend right after
                  Register, and the TCP connection closed in the middle of a
                  frame; counted by the grpc-status the server ended each with
                  (or "connection closed")
  undecided       2000 connections (--attackers) that send the preface,
                  SETTINGS and --priority-bytes of PRIORITY frames but never a
                  request, held to the end; reports how many the server
                  closed, and when
  refused-streams 2 connections with a small receive buffer that never read:
                  each opens streams as fast as it may, past the server's
                  MAX_CONCURRENT_STREAMS, worker Connect calls and calls sent as
                  text/plain, so the server's refusals back up; at the end they
                  read what was queued and count the answers

Every request loop stops by itself at --duration or --max-requests. The
attack stops early (the honest load goes on) if the server's RSS passes
--max-server-rss, so a run cannot exhaust the machine.`,
		Example: `  aion attack unauth-large
  aion attack stalled-reader --duration 60s
  aion attack pending-memory --attackers 4 --json
  aion attack none --rate 50
  aion attack workers --workers 10000 --duration 60s --profile-dir /tmp/prof
  aion attack early-eof --server-arg=--worker-transport=grpc`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f := cmd.Flags().Lookup("address"); f != nil && f.Changed {
				return fmt.Errorf("--address %q: attack never targets another server; it starts its own on 127.0.0.1", a.address)
			}
			kind, err := attack.ParseKind(args[0])
			if err != nil {
				return err
			}
			o.Kind = kind
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this executable to start the server: %w", err)
			}
			o.Command = []string{exe}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := attack.Run(ctx, o)
			if asJSON {
				b, jerr := json.Marshal(rep)
				if jerr != nil {
					return jerr
				}
				fmt.Fprintf(a.stdout, "%s\n", b)
			} else if rep.PID != 0 {
				rep.WriteText(a.stdout)
			}
			return err
		},
	}
	cmd.AddCommand(a.attackHonestCommand())
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long the attack runs")
	f.IntVar(&o.Attackers, "attackers", 0, "attacking callers or workers at once; 0 takes the kind's default (unauth-large 12, worker-fields 2, stalled-reader 1, pending-memory 2, connections 1 registering worker, early-eof 4, undecided 2000 connections, refused-streams 2 connections)")
	f.Float64Var(&o.Rate, "rate", o.Rate, "honest schedule-and-wait operations per second")
	f.DurationVar(&o.HonestTimeout, "honest-timeout", o.HonestTimeout, "an honest operation slower than this counts as an error")
	f.IntVar(&o.MaxServerRSSMB, "max-server-rss", o.MaxServerRSSMB, "stop the attack once the server's RSS passes this many MB (0: never)")
	f.IntVar(&o.MaxRequests, "max-requests", o.MaxRequests, "most requests each attacking loop sends")
	f.IntVar(&o.LargeBytes, "large-bytes", o.LargeBytes, "unauth-large: bytes of each request")
	f.IntVar(&o.TokenBytes, "token-bytes", o.TokenBytes, "unauth-large: bytes of the oversized bearer token")
	f.IntVar(&o.DetailsBytes, "details-bytes", o.DetailsBytes, "worker-fields: bytes of heartbeat details")
	f.IntVar(&o.FailureBytes, "failure-bytes", o.FailureBytes, "worker-fields: bytes of a failure's message, type and details, each")
	f.IntVar(&o.PendingBytes, "pending-bytes", o.PendingBytes, "pending-memory: payload bytes of each activity")
	f.IntVar(&o.ListPageSize, "page-size", o.ListPageSize, "pending-memory: page size of each list")
	f.IntVar(&o.IdleConns, "idle-conns", o.IdleConns, "connections: idle TCP connections to the gRPC port")
	f.IntVar(&o.SlowReaders, "slow-readers", o.SlowReaders, "connections: slow readers of the console's script")
	f.IntVar(&o.SSEClients, "sse-clients", o.SSEClients, "connections: event-stream clients that never read")
	f.IntVar(&o.Workers, "workers", o.Workers, "workers: idle workers to connect and hold, one TCP connection each unless --connections")
	f.IntVar(&o.Connections, "connections", 0, "workers: TCP connections the workers share, each worker a stream on one of them (0: a connection each); the server takes at most --grpc-max-streams (1000) streams on one")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "workers: write the server's heap and goroutine profiles here, with every worker connected")
	f.IntVar(&o.PriorityBytes, "priority-bytes", o.PriorityBytes, "undecided: bytes of PRIORITY frames each connection sends (at most 1 MiB)")
	f.StringArrayVar(&o.ServerArgs, "server-arg", nil, "an argument added to the server's command line, e.g. --server-arg=--max-pending-per-namespace=100 (repeatable)")
	f.BoolVar(&o.KeepDir, "keep", false, "keep the server's temporary directory (data and server.log) and print where it is")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	return cmd
}

// attackHonestCommand is the honest tenant's process of `aion attack`,
// which starts it; it is hidden, being no command to run by hand.
func (a *app) attackHonestCommand() *cobra.Command {
	d := attack.Defaults()
	o := attack.HonestOptions{Rate: d.Rate, Timeout: d.HonestTimeout}
	cmd := &cobra.Command{
		Use:   "honest --server 127.0.0.1:PORT",
		Short: "The honest tenant of `aion attack`, in a process of its own (started by aion attack)",
		Long: `honest is the honest tenant of an ` + "`aion attack`" + ` run, which starts it as a
child process: a worker serving echo and a client that schedules an echo and
waits for it, --rate times a second, against --server, which must be a
loopback address. The API keys come in ` + attack.HonestWorkerKeyEnv + ` and
` + attack.HonestClientKeyEnv + `. It writes "ready" after its warm-up, runs
its load for <seconds> once it reads "go <seconds>" on stdin, writes its
figures as one JSON line, and ends when its stdin does.`,
		Example: `  # as aion attack runs it, keys in the environment, "go 30" on stdin
  aion attack honest --server 127.0.0.1:43117 --rate 20 --honest-timeout 10s`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("address"); f != nil && f.Changed {
				return fmt.Errorf("--address %q: the honest tenant connects only to --server", a.address)
			}
			o.WorkerKey, _ = a.lookupEnv(attack.HonestWorkerKeyEnv)
			o.ClientKey, _ = a.lookupEnv(attack.HonestClientKeyEnv)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return attack.RunHonest(ctx, o, a.stdin, a.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Server, "server", "", "gRPC address of the server under attack: a loopback IP address and port")
	f.Float64Var(&o.Rate, "rate", o.Rate, "honest schedule-and-wait operations per second")
	f.DurationVar(&o.Timeout, "honest-timeout", o.Timeout, "an honest operation slower than this counts as an error")
	return cmd
}
