package python

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aion-run/aion/client"
)

// needPython skips the test (fails it under CI=true) when the interpreter or its packages
// are missing, and returns the interpreter.
func needPython(t *testing.T) string {
	t.Helper()
	py := interpreter()
	if out, err := osexec.Command(py, "-c", "import grpc, google.protobuf, pytest").CombinedOutput(); err != nil {
		msg := "the Python SDK's tests need " + py + " with " + packages +
			" (apt-get install -y " + packages + "): " + strings.TrimSpace(string(out)) + " " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// aionBinary builds the aion binary once for the package's tests.
func aionBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "aion-e2e-python-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "aion")
		build := osexec.Command("go", "build", "-race", "-o", built, "./cmd/aion")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build aion: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProc runs a process until the test ends, showing its output when the test fails.
func startProc(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	var out strings.Builder
	var mu sync.Mutex
	cmd := osexec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	w := writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(b)
	})
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("--- output of %s ---\n%s", strings.Join(args, " "), out.String())
			mu.Unlock()
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// The traceparent and tracestate a Go client sends with an activity reach the handler of a
// Python worker (through a server with tracing off, which passes them on untouched).
func TestAGoClientsTraceContextReachesAPythonHandler(t *testing.T) {
	py := needPython(t)
	bin := aionBinary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	startProc(t, root, []string{"AION_LOG_LEVEL=info"}, bin, "server", "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--data-dir", t.TempDir(), "--sqlite-sync", "normal")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready within 30s: %v", err)
		}
	}
	const ns = "py-traced"
	startProc(t, root, []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + filepath.Join(root, "sdk", "python")},
		py, "sdk/python/tests/worker_proc.py", "--address", grpcAddr, "--namespace", ns)

	c, err := client.Dial(context.Background(), grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 0x2f}, SpanID: trace.SpanID{0, 0xf0, 0x67},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), caller), 2*time.Minute)
	defer cancel()
	h, err := client.Schedule(ctx, c, client.ScheduleOptions{Namespace: ns, ActivityType: "trace-echo"}, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	// The Python worker may still be starting: the activity waits for it.
	got, err := client.WaitResult[[]string](ctx, c, ns, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("00-%s-%s-01", caller.TraceID(), caller.SpanID()), "congo=t61rcWkgMzE"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the Python handler saw trace context %q, want %q", got, want)
	}
}
