package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aion-run/aion/client"
)

// The honest tenant runs in a process of its own, the aion binary run as
// `aion attack honest` (a hidden command), so that the attack's goroutines
// share no scheduler with it: its latency is the server's, not that of the
// process attacking it. The protocol, one line at a time:
//
//	child  → parent (stdout)  ready             after the warm-up
//	parent → child  (stdin)   go <seconds>      the load starts now, for that long
//	child  → parent (stdout)  {"rate":…}        its Honest figures as JSON
//
// The child runs until its stdin ends: the parent closes it when it is done
// with the child, to cut the load short (the child then reports what ran),
// or by dying. The keys come in the environment, not on the command line,
// where any user of the machine could read them.

// The environment variables that carry the honest tenant's API keys to its
// process. Their AION_ prefix keeps them out of the environment the run's
// children inherit, so only the ones Run sets reach the child.
const (
	HonestWorkerKeyEnv = "AION_ATTACK_HONEST_WORKER_KEY"
	HonestClientKeyEnv = "AION_ATTACK_HONEST_CLIENT_KEY"
)

// The protocol's lines (see above).
const (
	honestReadyLine = "ready"
	honestGoVerb    = "go"
)

// honestWarmUp bounds the child's warm-up, and honestStartup its start and
// warm-up as the parent waits for them.
const (
	honestWarmUp  = 30 * time.Second
	honestStartup = honestWarmUp + 30*time.Second
)

// errStdinClosed is the cause of the child's end when its parent closes
// its stdin, or dies.
var errStdinClosed = errors.New("stdin closed: the parent is done or gone")

// HonestOptions describe the honest tenant's process.
type HonestOptions struct {
	// Server is the gRPC address of the server under attack; it must be a
	// loopback IP address and port, the only target the process ever has.
	Server string
	// WorkerKey and ClientKey are the API keys of the honest worker and
	// client (namespace "honest").
	WorkerKey, ClientKey string
	// Rate is the client's operations per second.
	Rate float64
	// Timeout bounds one operation; one that takes longer is an error.
	Timeout time.Duration
}

func (o HonestOptions) validate() error {
	switch {
	case !isLoopback(o.Server):
		return fmt.Errorf("--server %q: not a loopback address and port; the honest tenant only ever connects to the server `aion attack` started on 127.0.0.1", o.Server)
	case o.WorkerKey == "" || o.ClientKey == "":
		return fmt.Errorf("the honest keys: set both %s and %s", HonestWorkerKeyEnv, HonestClientKeyEnv)
	case !(o.Rate > 0 && o.Rate <= 10000):
		return fmt.Errorf("--rate %v: want more than 0 and at most 10000 per second", o.Rate)
	case o.Timeout <= 0:
		return fmt.Errorf("--honest-timeout %v: must be more than zero", o.Timeout)
	}
	return nil
}

// RunHonest is the honest tenant's process: it connects the honest worker
// and client to o.Server, warms up, writes "ready" to out, waits for
// "go <seconds>" on in, offers the load for that long (less if in ends
// first), writes its Honest figures to out as one JSON line, and returns
// once in ends. It refuses any server address but a loopback one before it
// connects anywhere. The end of in, or of ctx, stops it at any point; only
// an end before "go" is an error.
func RunHonest(ctx context.Context, o HonestOptions, in io.Reader, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One reader of in for the whole run: the first line is kept for the
	// wait for "go"; the end of in ends everything.
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
		}
		cause := errStdinClosed
		if err := sc.Err(); err != nil {
			cause = fmt.Errorf("read stdin: %w", err)
		}
		cancel(cause)
	}()

	wctx, stopWorker := context.WithCancel(ctx)
	waitWorker, err := startHonestWorker(wctx, o.Server, o.WorkerKey)
	if err != nil {
		stopWorker()
		return err
	}
	defer waitWorker()
	defer stopWorker()
	hc, err := client.Dial(ctx, o.Server, client.WithToken(o.ClientKey))
	if err != nil {
		return fmt.Errorf("honest client: %w", err)
	}
	defer hc.Close()
	load := &honestLoad{c: hc, timeout: o.Timeout, errs: make(map[string]int)}
	if err := load.warmUp(ctx, honestWarmUp); err != nil {
		return fmt.Errorf("honest client: %w", causeOf(ctx, err))
	}
	if _, err := fmt.Fprintln(out, honestReadyLine); err != nil {
		return fmt.Errorf("write %q: %w", honestReadyLine, err)
	}

	var line string
	select {
	case line = <-first:
	case <-ctx.Done():
		// A "go" that came with the end of in still counts.
		select {
		case line = <-first:
		default:
			return fmt.Errorf("waiting for %q: %w", honestGoVerb+" <seconds>", context.Cause(ctx))
		}
	}
	d, err := parseGo(line)
	if err != nil {
		return err
	}
	load.run(ctx, o.Rate, time.Now().Add(d))
	b, err := json.Marshal(load.report(o.Rate))
	if err != nil {
		return fmt.Errorf("encode the honest figures: %w", err)
	}
	if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
		return fmt.Errorf("write the honest figures: %w", err)
	}
	// The worker stays connected until the parent is done with the run, as
	// it would be if the tenant lived on.
	<-ctx.Done()
	return nil
}

// causeOf prefers the cause of ctx's end to err, when ctx has ended.
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

// parseGo reads "go <seconds>".
func parseGo(line string) (time.Duration, error) {
	verb, arg, ok := strings.Cut(line, " ")
	s, err := strconv.ParseFloat(arg, 64)
	if !ok || verb != honestGoVerb || err != nil || !(s > 0) || s > math.MaxInt64/float64(time.Second) {
		return 0, fmt.Errorf("stdin: %q: want %q with a positive number of seconds", line, honestGoVerb+" <seconds>")
	}
	return time.Duration(s * float64(time.Second)), nil
}

// honestChild is the parent's side of the honest tenant's process.
type honestChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// lines are the child's first two lines on stdout: "ready", then its
	// figures; any more are dropped.
	lines   chan string
	stderr  *tailWriter
	exited  chan struct{} // closed when the process has ended
	exitErr error         // how it ended; read after exited is closed
	closeIn sync.Once
	stopped sync.Once
	stopErr error
}

// startHonest starts `<command> attack honest` against srv and waits until
// it is ready (warmed up), ctx ends, or it fails.
func startHonest(ctx context.Context, o Options, srv *child) (*honestChild, error) {
	args := append(append([]string{}, o.Command[1:]...),
		"attack", "honest", "--server", srv.grpcAddr,
		"--rate", strconv.FormatFloat(o.Rate, 'g', -1, 64), "--honest-timeout", o.HonestTimeout.String())
	h := &honestChild{cmd: exec.Command(o.Command[0], args...), lines: make(chan string, 2),
		stderr: &tailWriter{max: 8 << 10}, exited: make(chan struct{})}
	// The keys last, so nothing in o.Env replaces them.
	h.cmd.Env = append(append(childEnv(os.Environ()), o.Env...),
		HonestWorkerKeyEnv+"="+srv.keys.honestWorker, HonestClientKeyEnv+"="+srv.keys.honestClient)
	h.cmd.Stderr = h.stderr
	// Bounds the copy of stderr should the child leave it open behind it.
	h.cmd.WaitDelay = 5 * time.Second
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("honest tenant: stdin: %w", err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("honest tenant: stdout: %w", err)
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("honest tenant: start %s: %w", o.Command[0], err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default:
			}
		}
		// Every read of stdout is done: Wait may close it.
		h.exitErr = h.cmd.Wait()
		close(h.exited)
	}()
	line, err := h.next(ctx, honestStartup, "ready")
	if err == nil && line != honestReadyLine {
		err = fmt.Errorf("honest tenant (pid %d): first line %q, want %q", h.pid(), line, honestReadyLine)
	}
	if err != nil {
		h.stop(5 * time.Second)
		return nil, err
	}
	return h, nil
}

func (h *honestChild) pid() int { return h.cmd.Process.Pid }

// next returns the child's next line on stdout, or why there is none: it
// exited, ctx ended, or within passed. what names the line awaited.
func (h *honestChild) next(ctx context.Context, within time.Duration, what string) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case l := <-h.lines:
		return l, nil
	case <-h.exited:
		select {
		case l := <-h.lines:
			return l, nil
		default:
		}
		return "", fmt.Errorf("honest tenant (pid %d) exited before its %s (%v); its stderr:\n%s", h.pid(), what, h.exitErr, h.stderr)
	case <-ctx.Done():
		return "", fmt.Errorf("honest tenant (pid %d), waiting for its %s: %w", h.pid(), what, ctx.Err())
	case <-t.C:
		return "", fmt.Errorf("honest tenant (pid %d): no %s within %v; its stderr:\n%s", h.pid(), what, within, h.stderr)
	}
}

// begin starts the child's load, for d.
func (h *honestChild) begin(d time.Duration) error {
	if _, err := fmt.Fprintf(h.stdin, "%s %s\n", honestGoVerb, strconv.FormatFloat(d.Seconds(), 'f', -1, 64)); err != nil {
		return fmt.Errorf("honest tenant (pid %d): start its load: %w; its stderr:\n%s", h.pid(), err, h.stderr)
	}
	return nil
}

// figures waits up to within for the child's report of its load. If ctx
// ends first, it closes the child's stdin, so the child cuts its load
// short and reports what ran.
func (h *honestChild) figures(ctx context.Context, within time.Duration) (Honest, error) {
	line, err := h.next(ctx, within, "figures")
	if err != nil && ctx.Err() != nil {
		h.closeStdin()
		line, err = h.next(context.Background(), 30*time.Second, "figures")
	}
	if err != nil {
		return Honest{}, err
	}
	var r Honest
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return Honest{}, fmt.Errorf("honest tenant (pid %d): figures %q: %w", h.pid(), line, err)
	}
	return r, nil
}

func (h *honestChild) closeStdin() { h.closeIn.Do(func() { _ = h.stdin.Close() }) }

// stop closes the child's stdin, which ends it, and kills it if it has not
// ended after grace. It returns how the child ended when that was not of
// its own accord with status 0; calls after the first return the same.
func (h *honestChild) stop(grace time.Duration) error {
	h.stopped.Do(func() {
		h.closeStdin()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.exited:
		case <-t.C:
			_ = h.cmd.Process.Kill()
			<-h.exited
			h.stopErr = fmt.Errorf("honest tenant (pid %d) still ran %v after its stdin closed: killed; its stderr:\n%s", h.pid(), grace, h.stderr)
			return
		}
		if h.exitErr != nil {
			h.stopErr = fmt.Errorf("honest tenant (pid %d): %w; its stderr:\n%s", h.pid(), h.exitErr, h.stderr)
		}
	})
	return h.stopErr
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	mu  sync.Mutex
	b   []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
