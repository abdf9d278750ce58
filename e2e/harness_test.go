// Package e2e runs aion as its users do: the real binary, a real server
// process on loopback ports, real demo-worker processes, and the public Go
// client. Processes are killed with real signals.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/client"
)

// binary is the aion executable built once for the whole run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aion-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "aion")
	build := osexec.Command("go", "build", "-race", "-o", binary, "../cmd/aion")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build aion:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running aion process with its combined output captured.
type proc struct {
	t    *testing.T
	name string
	cmd  *osexec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	// lines receives each output line for waiters.
	lines chan string
	done  chan struct{}
	err   error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startWith(t, name, nil, args...)
}

// startWith is start with the command built by launch, when set, instead of
// running the binary itself.
func startWith(t *testing.T, name string, launch func(args ...string) *osexec.Cmd, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, lines: make(chan string, 4096), done: make(chan struct{})}
	if launch != nil {
		p.cmd = launch(args...)
	} else {
		p.cmd = osexec.Command(binary, args...)
	}
	p.cmd.Env = append(p.cmd.Environ(), "AION_LOG_LEVEL=info")
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- line:
			default:
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// waitLine waits for an output line matching re and returns its submatches.
func (p *proc) waitLine(re *regexp.Regexp, within time.Duration) []string {
	p.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line := <-p.lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %s", p.name, p.err, re)
		case <-deadline:
			p.t.Fatalf("%s printed no line matching %s within %v", p.name, re, within)
		}
	}
}

// exit waits for the process to end and returns its exit code.
func (p *proc) exit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s still running after %v", p.name, within)
	}
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// cluster is one server process, its ports and data dir, and a client.
type cluster struct {
	t *testing.T
	// name is the server's name in a cluster of servers; "" for a lone
	// server.
	name     string
	grpc     string
	http     string
	dataDir  string
	server   *proc
	client   *client.Client
	extra    []string
	restarts int
	// launch, when set, builds the server's command for the next boot.
	launch func(args ...string) *osexec.Cmd
}

func startServer(t *testing.T, extra ...string) *cluster {
	t.Helper()
	return startServerWith(t, nil, extra...)
}

// startServerWith is startServer with the first boot's command built by
// launch.
func startServerWith(t *testing.T, launch func(args ...string) *osexec.Cmd, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, grpc: freePort(t), http: freePort(t), dataDir: t.TempDir(), extra: extra, launch: launch}
	c.boot()
	c.launch = nil
	cl, err := client.Dial(context.Background(), c.grpc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	c.client = cl
	return c
}

// boot starts the server process and waits until it is ready. A server on
// SQLite commits with --sqlite-sync normal unless the extra flags say
// otherwise.
func (c *cluster) boot() {
	c.t.Helper()
	args := []string{"server", "--grpc-addr", c.grpc, "--http-addr", c.http, "--data-dir", c.dataDir}
	if !slices.Contains(c.extra, "--sqlite-sync") && !slices.Contains(c.extra, "--store") {
		args = append(args, "--sqlite-sync", "normal")
	}
	args = append(args, c.extra...)
	// A cluster member's process is named after the server, so the logs
	// printed on failure say which one is which.
	label := fmt.Sprintf("server#%d", c.restarts)
	if c.name != "" {
		label = "server-" + c.name
		if c.restarts > 0 {
			label = fmt.Sprintf("server-%s#%d", c.name, c.restarts)
		}
	}
	c.server = startWith(c.t, label, c.launch, args...)
	c.restarts++
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + c.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-c.server.done:
			c.t.Fatalf("%s exited during start: %v\n%s", label, c.server.err, c.server.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.t.Fatalf("%s not ready within 30s", label)
}

var registered = regexp.MustCompile(`aion worker registered" worker_id=(\d+)`)

// worker starts a demo worker and returns it with its worker id.
func (c *cluster) worker(name string, args ...string) (*proc, uint64) {
	c.t.Helper()
	p := start(c.t, name, append([]string{"worker", "demo", "--address", c.grpc}, args...)...)
	m := p.waitLine(registered, 30*time.Second)
	id, _ := strconv.ParseUint(m[1], 10, 64)
	return p, id
}

// exec returns a function that runs one aion command to completion and
// returns its combined output and exit code.
func exec(args ...string) func() (string, int) {
	return func() (string, int) {
		out, err := osexec.Command(binary, args...).CombinedOutput()
		if ee, ok := err.(*osexec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			return err.Error(), -1
		}
		return string(out), 0
	}
}

// cli runs one aion command to completion and returns its output and exit code.
func (c *cluster) cli(args ...string) (string, int) {
	c.t.Helper()
	cmd := osexec.Command(binary, append([]string{"--address", c.grpc}, args...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*osexec.ExitError)
		if !ok {
			c.t.Fatalf("run aion %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

func (c *cluster) schedule(opts client.ScheduleOptions, input any) *client.Handle {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := client.Schedule(ctx, c.client, opts, input)
	if err != nil {
		c.t.Fatalf("schedule %+v: %v", opts, err)
	}
	return h
}

func (c *cluster) wait(ns, id string) *client.Activity {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := c.client.Wait(ctx, ns, id)
	if err != nil {
		c.t.Fatalf("wait %s/%s: %v", ns, id, err)
	}
	return a
}

// waitState polls until the activity reaches state.
func (c *cluster) waitState(ns, id string, state client.State) *client.Activity {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		a, err := c.client.Get(context.Background(), ns, id)
		if err == nil && a.State == state {
			return a
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s/%s did not reach %s within 30s", ns, id, state)
	return nil
}

// ranOn returns the worker id of the activity's last attempt.
func ranOn(a *client.Activity) uint64 {
	if len(a.Attempts) == 0 {
		return 0
	}
	return a.Attempts[len(a.Attempts)-1].WorkerID
}

// load schedules activities from four goroutines until stopped: echo, and
// every third one a sleep of sleepMs, each through the client that through
// names, with a short retry interval. It records the acknowledged ids, and
// stops at the end of the test at the latest.
type load struct {
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked []string
}

func startLoad(t *testing.T, sleepMs int, through func(g, i int) *client.Client) *load {
	ctx, stop := context.WithCancel(context.Background())
	l := &load{stop: stop}
	t.Cleanup(func() { l.finish() })
	for g := range 4 {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				input := any(echo{Hello: id})
				typ := "echo"
				if i%3 == 0 {
					typ, input = "sleep", map[string]int{"ms": sleepMs}
				}
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := client.Schedule(cctx, through(g, i), client.ScheduleOptions{Namespace: "load", ID: id, ActivityType: typ,
					RetryPolicy: &client.RetryPolicy{InitialInterval: 50 * time.Millisecond}}, input)
				cancel()
				if err == nil {
					l.mu.Lock()
					l.acked = append(l.acked, id)
					l.mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	return l
}

// count is how many activities were acknowledged so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// finish stops the load and returns every acknowledged id.
func (l *load) finish() []string {
	l.stop()
	l.wg.Wait()
	return l.acked
}
