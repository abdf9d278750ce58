// Package python runs the Python SDK's test suite (sdk/python/tests) with pytest against the
// real aion binary, so that `go test ./...` (and so `make test`) covers the Python SDK too.
package python

import (
	"bufio"
	"context"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"
	"time"
)

// packages are the Debian packages the suite needs, for the message that names them.
const packages = "python3-grpcio python3-protobuf python3-pytest"

// interpreter is the Python that runs the suite: $AION_PYTHON, else /usr/bin/python3, the
// system interpreter that sees Debian's packages (a python3 earlier on PATH, from pyenv say,
// may not).
func interpreter() string {
	if p := os.Getenv("AION_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// TestPythonSDK builds the binary and runs pytest on sdk/python/tests with it. Without Python
// or its packages the test is skipped, except under CI=true, where it fails: CI installs them
// (.ci/run) and a missing one must not pass unnoticed.
func TestPythonSDK(t *testing.T) {
	py := needPython(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	binary := aionBinary(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, py, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "sdk/python/tests")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "AION_BINARY="+binary, "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+filepath.Join(root, "sdk", "python"))
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pytest: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	err = cmd.Wait()
	w.Close()
	<-done
	if err != nil {
		t.Fatalf("pytest sdk/python/tests: %v (its output is above)", err)
	}
}
