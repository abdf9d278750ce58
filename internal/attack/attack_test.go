package attack_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aion-run/aion/internal/attack"
	"github.com/aion-run/aion/internal/cli"
)

// childMarker makes the test binary run the aion command line instead of
// the tests, so the server under attack is a real aion server process.
const childMarker = "ATTACK_TEST_RUN_AION=1"

func TestMain(m *testing.M) {
	if os.Getenv("ATTACK_TEST_RUN_AION") == "1" {
		os.Exit(cli.Execute())
	}
	goleak.VerifyTestMain(m)
}

// short is a run of a few seconds with small sizes: enough to exercise
// every part of an attack, not to measure it.
func short(t *testing.T, kind attack.Kind) attack.Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := attack.Defaults()
	o.Kind, o.Command, o.Env = kind, []string{exe}, []string{childMarker}
	o.Duration, o.Attackers, o.Rate = 2*time.Second, 2, 20
	o.LargeBytes, o.TokenBytes = 4<<20, 64<<10
	o.DetailsBytes, o.FailureBytes = 1<<20, 256<<10
	o.PendingBytes, o.ListPageSize = 64<<10, 100
	o.IdleConns, o.SlowReaders, o.SSEClients = 20, 10, 5
	o.Workers = 50
	if kind == attack.ConnectedWorkers {
		o.ProfileDir = t.TempDir()
	}
	return o
}

// TestEachAttackRunsAndReportsSoundFigures runs every attack briefly
// against a real server process and checks that the report measured
// something real: the honest client got work done, the attack sent
// requests and the server answered them, and the server's memory was
// read. The figures themselves are benchmarks (see docs/security.md).
func TestEachAttackRunsAndReportsSoundFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind attack.Kind
		// name tells apart runs of one kind; the kind when empty.
		name string
		// edit changes the run's options, when set.
		edit func(*attack.Options)
		// want are outcome labels (prefixes) the attack must have counted.
		want  []string
		check func(t *testing.T, r attack.Report)
	}{
		{kind: attack.None},
		{kind: attack.UnauthLarge, want: []string{"large body: ", "large token: "}},
		{kind: attack.WorkerFields, want: []string{"heartbeat: "}},
		{kind: attack.StalledReader, want: []string{"tasks taken and never answered", "stalled worker: "},
			check: func(t *testing.T, r attack.Report) {
				if len(r.Attack.Stalled) == 0 || r.Attack.Stalled[0].Pings == 0 || r.Attack.Stalled[0].HeldForS <= 0 {
					t.Errorf("stalled workers %+v: want one that sent pings and was held", r.Attack.Stalled)
				}
			}},
		{kind: attack.PendingMemory, want: []string{"schedule: ", "list: "}},
		// The workers runs are longer: every worker must register within
		// the run, which takes seconds on a loaded machine.
		{kind: attack.ConnectedWorkers, edit: func(o *attack.Options) { o.Duration = 6 * time.Second }, want: []string{"register: OK"},
			check: func(t *testing.T, r attack.Report) {
				w := r.Workers
				if w == nil {
					t.Fatal("no workers figures in the report")
				}
				if w.Asked != 50 || w.Registered != 50 || w.Counted != 50 {
					t.Errorf("workers %+v: want 50 asked, registered and counted by the server to the end", w)
				}
				// Each connection's reader: about one goroutine a worker.
				if w.Before.RSSMB <= 0 || w.Held.RSSMB <= 0 || w.Held.Goroutines <= w.Before.Goroutines || w.GoroutinesPerWorker < 0.9 {
					t.Errorf("workers %+v: want RSS readings and about a goroutine a worker more when held", w)
				}
				if w.Connections != 50 {
					t.Errorf("workers %+v: want 50 connections, one a worker", w)
				}
				if len(w.Profiles) != 2 {
					t.Errorf("profiles %v: want the heap and goroutine profiles written", w.Profiles)
				}
				for _, p := range w.Profiles {
					if st, err := os.Stat(p); err != nil || st.Size() == 0 {
						t.Errorf("profile %s: %v, want a non-empty file", p, err)
					}
				}
			}},
		// The lean transport's measure: grpc-go spends a goroutine a stream.
		{kind: attack.ConnectedWorkers, name: "workers sharing connections", edit: func(o *attack.Options) {
			o.Connections, o.Duration = 5, 6*time.Second
			o.ServerArgs = append(o.ServerArgs, "--worker-transport=lean")
		},
			want: []string{"register: OK"},
			check: func(t *testing.T, r attack.Report) {
				w := r.Workers
				if w == nil {
					t.Fatal("no workers figures in the report")
				}
				if w.Registered != 50 || w.Counted != 50 || w.Connections != 5 {
					t.Errorf("workers %+v: want 50 registered and counted, on 5 connections", w)
				}
				// One reader a connection and none a waiting stream: 5
				// goroutines for 50 workers (0.1 a worker), where a worker
				// on a connection of its own costs one. Goroutines that
				// came and went around the first sample can make the
				// difference a little less, even below zero.
				if w.Held.Goroutines <= 0 || w.GoroutinesPerWorker >= 0.5 {
					t.Errorf("workers %+v: want fewer than half a goroutine a worker on shared connections", w)
				}
			}},
		// The attacks on the framing run against grpc-go's transport
		// (--worker-transport grpc).
		{kind: attack.EarlyEOF, edit: grpcTransport(nil),
			want: []string{"(a) END_STREAM on the HEADERS: ", "(b) half a message, then END_STREAM: ", "(c) RST_STREAM before Register: ",
				"(d) CloseSend after Register: ", "(e) connection closed mid-frame: "}},
		{kind: attack.Undecided, edit: grpcTransport(func(o *attack.Options) { o.Attackers, o.PriorityBytes = 50, 4<<10 }),
			want: []string{"undecided: "},
			check: func(t *testing.T, r attack.Report) {
				var n int64
				for k, v := range r.Attack.Outcomes {
					if k == "undecided: closed by the server" || k == "undecided: held open to the end" {
						n += v
					}
				}
				if n != 50 || r.Attack.Sent != 50 {
					t.Errorf("sent %d, outcomes %v: want each of the 50 connections sent and counted once as held or closed",
						r.Attack.Sent, r.Attack.Outcomes)
				}
			}},
		{kind: attack.RefusedStreams, edit: grpcTransport(func(o *attack.Options) { o.MaxRequests = 20000 }),
			want: []string{"connection: ", "reply: "},
			check: func(t *testing.T, r attack.Report) {
				if r.Attack.Sent > 2*20000 {
					t.Errorf("sent %d frames: want at most --max-requests (20000) on each of 2 connections", r.Attack.Sent)
				}
			}},
		{kind: attack.Connections, want: []string{"idle gRPC: ", "slow reader: ", "event stream: "},
			check: func(t *testing.T, r attack.Report) {
				var held int64
				for k, n := range r.Attack.Outcomes {
					if strings.HasSuffix(k, ": held open to the end") || strings.HasSuffix(k, ": closed by the server") {
						held += n
					}
				}
				if held != 20+10+5 {
					t.Errorf("outcomes %v: want each of the 35 connections counted once as held or closed", r.Attack.Outcomes)
				}
			}},
	} {
		name := tc.name
		if name == "" {
			name = string(tc.kind)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := short(t, tc.kind)
			if tc.edit != nil {
				tc.edit(&o)
			}
			r, err := attack.Run(context.Background(), o)
			if err != nil {
				t.Fatalf("run: %v\nreport: %+v", err, r)
			}
			if r.Kind != tc.kind || r.PID == 0 || !strings.HasPrefix(r.Server, "127.0.0.1:") {
				t.Errorf("kind %q pid %d server %q: want %q on a loopback server process", r.Kind, r.PID, r.Server, tc.kind)
			}
			if r.Honest.PID == 0 || r.Honest.PID == r.PID || r.Honest.PID == os.Getpid() {
				t.Errorf("honest pid %d (server %d, this process %d): want a process of its own", r.Honest.PID, r.PID, os.Getpid())
			}
			if r.Honest.Completed == 0 || r.Honest.Offered < r.Honest.Completed+r.Honest.Errors ||
				r.Honest.P50MS <= 0 || r.Honest.P99MS < r.Honest.P50MS || r.Honest.MaxMS < r.Honest.P99MS {
				t.Errorf("honest %+v: want completed operations and ordered latencies", r.Honest)
			}
			// The kernel updates VmHWM lazily, so it may trail a VmRSS
			// reading by a little: only its presence is checked.
			if r.RSS.Samples == 0 || r.RSS.BaselineMB <= 0 || r.RSS.EndMB <= 0 || r.RSS.PeakMB < r.RSS.EndMB || r.RSS.HWMMB <= 0 {
				t.Errorf("rss %+v: want samples, a baseline, an end reading no larger than the peak, and a VmHWM", r.RSS)
			}
			if tc.kind == attack.None {
				if r.Attack.Sent != 0 {
					t.Errorf("no attack sent %d requests", r.Attack.Sent)
				}
				return
			}
			if r.Attack.Sent == 0 {
				t.Errorf("attack sent nothing; outcomes %v", r.Attack.Outcomes)
			}
			for _, w := range tc.want {
				found := false
				for k, n := range r.Attack.Outcomes {
					found = found || (strings.HasPrefix(k, w) && n > 0)
				}
				if !found {
					t.Errorf("outcomes %v: none starts with %q", r.Attack.Outcomes, w)
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			if t.Failed() {
				var b strings.Builder
				r.WriteText(&b)
				t.Log(b.String())
			}
		})
	}
}

// grpcTransport has the server serve worker connections with grpc-go's
// transport, then applies edit when set.
func grpcTransport(edit func(*attack.Options)) func(*attack.Options) {
	return func(o *attack.Options) {
		o.ServerArgs = append(o.ServerArgs, "--worker-transport=grpc")
		if edit != nil {
			edit(o)
		}
	}
}

func TestBadOptionsAreRefusedNamingTheSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*attack.Options)
		want string
	}{
		{"unknown kind", func(o *attack.Options) { o.Kind = "ddos" }, `attack "ddos"`},
		{"no duration", func(o *attack.Options) { o.Duration = 0 }, "--duration"},
		{"negative attackers", func(o *attack.Options) { o.Attackers = -1 }, "--attackers -1"},
		{"too many attackers", func(o *attack.Options) { o.Attackers = 1001 }, "--attackers 1001: want 0 (the kind's default) to 1000"},
		{"too many undecided connections", func(o *attack.Options) { o.Kind, o.Attackers = attack.Undecided, 15001 }, "--attackers 15001"},
		{"priority frames past a MiB", func(o *attack.Options) { o.PriorityBytes = 2 << 20 }, "--priority-bytes 2097152"},
		{"less than a priority frame", func(o *attack.Options) { o.PriorityBytes = 13 }, "--priority-bytes 13"},
		{"no rate", func(o *attack.Options) { o.Rate = 0 }, "--rate 0"},
		{"body past the gRPC limit", func(o *attack.Options) { o.LargeBytes = 64 << 20 }, "--large-bytes 67108864"},
		{"no workers", func(o *attack.Options) { o.Workers = 0 }, "--workers 0"},
		{"more connections than workers", func(o *attack.Options) { o.Workers, o.Connections = 10, 11 }, "--connections 11"},
		{"negative connections", func(o *attack.Options) { o.Connections = -1 }, "--connections -1"},
		{"too many connections", func(o *attack.Options) { o.IdleConns = 20000 }, "--idle-conns 20000"},
		{"no command", func(o *attack.Options) { o.Command = nil }, "command"},
		{"server arg moving the listener", func(o *attack.Options) { o.ServerArgs = []string{"--grpc-addr=0.0.0.0:50051"} },
			`--server-arg "--grpc-addr=0.0.0.0:50051"`},
		{"server arg turning auth off", func(o *attack.Options) { o.ServerArgs = []string{"--auth", "none"} }, `--server-arg "--auth"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := attack.Defaults()
			o.Kind, o.Command = attack.UnauthLarge, []string{"/nonexistent/aion"}
			tc.edit(&o)
			_, err := attack.Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v: want one naming %q", err, tc.want)
			}
		})
	}
}

// honestChild starts the honest tenant's command against server, as Run
// does, with stdin and stdout pipes for the test.
func honestChild(t *testing.T, server string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "attack", "honest", "--server", server)
	cmd.Env = append(os.Environ(), childMarker, attack.HonestWorkerKeyEnv+"=aion_w", attack.HonestClientKeyEnv+"=aion_c")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, in, &stderr
}

func TestHonestTenantRefusesAServerNotOnLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"10.0.0.1:50051", "0.0.0.0:50051", "[::]:50051", "localhost:50051", "example.com:443", "127.0.0.1", ""} {
		o := attack.HonestOptions{Server: addr, WorkerKey: "w", ClientKey: "c", Rate: 20, Timeout: time.Second}
		err := attack.RunHonest(context.Background(), o, strings.NewReader("go 1\n"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("server %q: err %v, want a refusal naming the address as not loopback", addr, err)
		}
	}
	// The same from the command line, in a process of its own: it exits
	// at once, having connected nowhere.
	cmd, in, stderr := honestChild(t, "10.0.0.1:50051")
	defer in.Close()
	err := cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), `--server "10.0.0.1:50051": not a loopback address`) {
		t.Fatalf("exit %v, stderr %q: want a failure refusing the address", err, stderr)
	}
}

// TestHonestTenantEndsWhenItsStdinCloses closes the stdin of an honest
// tenant still warming up (no server listens at its address), as a parent
// that dies does: the process must end by itself, with no orphan left.
func TestHonestTenantEndsWhenItsStdinCloses(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there: the warm-up goes on and on
	cmd, in, stderr := honestChild(t, addr)
	time.Sleep(500 * time.Millisecond)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(stderr.String(), "stdin closed") {
			t.Errorf("exit %v, stderr %q: want a failure saying its stdin closed before the load", err, stderr)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the honest tenant still ran 15 s after its stdin closed; stderr %q", stderr)
	}
}
