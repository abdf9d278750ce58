// Package console drives the ops console in headless Chromium against a real
// server (server.Start on loopback ports) and real worker streams: demo
// worker processes of the aion binary for the live-update checks, and a
// thousand raw gRPC worker streams for the scale check.
//
// The tests need Debian's chromium (apt-get install -y chromium; .ci/run
// installs it). Without it they skip, except under CI=true, where they fail.
// Screenshots go to $AION_ARTIFACTS when set, else to the test's temp dir.
package console

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/servertest"
	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

// binary is the aion executable, built once for the whole run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aion-console-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "aion")
	build := exec.Command("go", "build", "-o", binary, "github.com/aion-run/aion/cmd/aion")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build aion:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chromium returns the browser to drive. Without one the test skips, or
// fails under CI, where .ci/run must have installed it.
func chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AION_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found, and CI=true: the console browser tests must run in CI; " +
			".ci/run installs it with apt-get install -y chromium (or set AION_CHROMIUM)")
	}
	t.Skip("chromium not found: install it with `apt-get install -y chromium` (or set AION_CHROMIUM) to run the console browser tests")
	return ""
}

// startServer starts a real server on loopback ports with its own data dir;
// opts may change the configuration first.
func startServer(t *testing.T, opts ...func(*server.Config)) *server.Server {
	t.Helper()
	cfg := servertest.Config(t.TempDir())
	cfg.DrainTimeout = 2 * time.Second
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(context.Background(), cfg, servertest.TestLogger(t))
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatalf("start server: %v", err)
	}
	return srv
}

// page is one browser tab on the console.
type page struct {
	t    testing.TB
	ctx  context.Context
	base string

	mu     sync.Mutex
	errors []string // uncaught exceptions and console errors
}

// openBrowser starts headless Chromium with a throwaway profile. The
// browser is closed (and waited for) when the test ends.
func openBrowser(t testing.TB, httpAddr string) *page {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	p := &page{t: t, ctx: ctx, base: "http://" + httpAddr}
	// The first call starts the browser; it must be on the tab's own
	// context, not on a derived one with a deadline.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	messages := chromedp.Console(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				p.mu.Lock()
				p.errors = append(p.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = chromedp.Cancel(cctx)
		cancelTab()
		cancelAlloc()
		<-read
	})
	return p
}

// do runs actions with a deadline.
func (p *page) do(within time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(p.ctx, within)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

func (p *page) open(path string) {
	p.t.Helper()
	if err := p.do(20*time.Second, chromedp.Navigate(p.base+path)); err != nil {
		p.t.Fatalf("open %s: %v", path, err)
	}
}

// evaluate evaluates a JavaScript expression in the page.
func evaluate[T any](p *page, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// must evaluates expr and fails the test on error.
func must[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := evaluate[T](p, expr)
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls the JavaScript predicate until it holds.
func (p *page) waitFor(what, predicate string, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := evaluate[bool](p, "!!("+predicate+")")
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.fatalWithState("%s: not true within %v (%s; last error %v)", what, within, predicate, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// text returns the text of the first element matching the CSS selector, or
// "<none>".
func (p *page) text(selector string) string {
	p.t.Helper()
	return must[string](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : "<none>"; })()`, jsString(selector)))
}

// count returns how many elements match the CSS selector.
func (p *page) count(selector string) int {
	p.t.Helper()
	return must[int](p, fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(selector)))
}

// exists is a JavaScript expression: some element matches the selector.
func exists(selector string) string {
	return fmt.Sprintf("document.querySelector(%s) !== null", jsString(selector))
}

// visible is a JavaScript expression: the selected element is rendered.
func visible(selector string) string {
	return fmt.Sprintf("(document.querySelector(%s)?.checkVisibility() ?? false)", jsString(selector))
}

// textOf is a JavaScript expression: the selected element's text, or "".
func textOf(selector string) string {
	return fmt.Sprintf(`((document.querySelector(%s) || {}).textContent || "")`, jsString(selector))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fatalWithState fails the test with what the page showed.
func (p *page) fatalWithState(format string, args ...any) {
	p.t.Helper()
	state, _ := evaluate[string](p, `JSON.stringify({
		conn: document.getElementById("conn")?.dataset.state,
		workers: [...document.querySelectorAll("#workers-body [data-worker-id]")].map(r => r.textContent).slice(0, 20),
		namespaces: [...document.querySelectorAll("#namespaces-body tr")].map(r => r.textContent),
		activities: [...document.querySelectorAll("#activities-body tr")].map(r => r.textContent).slice(0, 10),
		detail: document.getElementById("activity-detail")?.textContent,
		workflows: [...document.querySelectorAll("#workflows-body tr")].map(r => r.textContent).slice(0, 10),
		run: document.getElementById("run-detail")?.textContent,
		schedules: [...document.querySelectorAll("#schedules-body tr")].map(r => r.textContent).slice(0, 10),
		schedule: document.getElementById("schedule-detail")?.textContent,
		feed: [...document.querySelectorAll("#event-feed li")].map(r => r.textContent).slice(0, 15),
	}, null, 1)`)
	p.t.Fatalf(format+"\npage state: %s\npage errors: %v", append(args, state, p.pageErrors())...)
}

func (p *page) pageErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// screenshot saves a full-page PNG as a test artifact and returns its path.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("AION_ARTIFACTS")
	if dir == "" {
		dir = p.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return path
}

// proc is one running aion process with its output kept for failures.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// startProc runs the aion binary with args; it is killed when the test
// ends if still running.
func startProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		w.Close()
		<-copied
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.output())
		}
	})
	return p
}

// output returns what the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// serving is the server's log line naming the addresses it listens on.
var serving = regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)

// startServerProcess runs `aion dev` on loopback ports it picks itself and
// returns its gRPC and HTTP addresses. It is the binary as users run it:
// built without the race detector even when the tests run with it.
func startServerProcess(t testing.TB) (grpcAddr, httpAddr string) {
	t.Helper()
	p := startProc(t, "aion dev", "dev", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir())
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := serving.FindStringSubmatch(p.output()); m != nil {
			return m[1], m[2]
		}
		select {
		case <-p.done:
			t.Fatalf("aion dev exited before serving:\n%s", p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("aion dev not serving within 20s:\n%s", p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// getJSON fetches an API path into out.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// sendJSON sends a JSON body with method and checks for 200.
func sendJSON(t *testing.T, method, url, body string) {
	t.Helper()
	sendJSONAs(t, "", method, url, body)
}

// sendJSONAs is sendJSON with a bearer token, when not empty.
func sendJSONAs(t *testing.T, token, method, url, body string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s: %s", method, url, resp.Status, b)
	}
}
