package attack

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aion-run/aion/internal/auth"
)

// The namespaces of a run: the honest tenant and the attacker's.
const (
	honestNS   = "honest"
	attackerNS = "attacker"
)

// keys are the API keys of one run, made fresh for it.
type keys struct {
	admin, honestClient, honestWorker, attackClient, attackWorker string
}

func newKeys() (keys, error) {
	var k keys
	for _, p := range []*string{&k.admin, &k.honestClient, &k.honestWorker, &k.attackClient, &k.attackWorker} {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return keys{}, fmt.Errorf("make an API key: %w", err)
		}
		*p = "aion_" + base64.RawURLEncoding.EncodeToString(b[:])
	}
	return k, nil
}

// config is the server's config file: one [[tokens]] table per key.
func (k keys) config() string {
	var b strings.Builder
	entry := func(name, secret, ns, role string) {
		fmt.Fprintf(&b, "[[tokens]]\nname = %q\nsha256 = %q\nnamespaces = [%q]\nroles = [%q]\n\n", name, auth.HashSecret(secret), ns, role)
	}
	entry("admin", k.admin, "*", string(auth.RoleAdmin))
	entry("honest-client", k.honestClient, honestNS, string(auth.RoleClient))
	entry("honest-worker", k.honestWorker, honestNS, string(auth.RoleWorker))
	entry("attacker-client", k.attackClient, attackerNS, string(auth.RoleClient))
	entry("attacker-worker", k.attackWorker, attackerNS, string(auth.RoleWorker))
	return b.String()
}

// child is the server under attack: a separate process, so its memory is
// its own, listening only on loopback ports it picked itself.
type child struct {
	cmd       *exec.Cmd
	dir       string
	keepDir   bool
	grpcAddr  string
	httpAddr  string
	keys      keys
	exited    chan struct{} // closed when the process has ended
	exitErr   error         // how it ended; read after exited is closed
	logDone   chan struct{} // closed when its output is fully copied
	logPath   string
	startedAt time.Time
}

// startChild starts `<command> server …` with token auth and synchronous
// full on a fresh data directory, and waits for its "serving" log line.
func startChild(o Options) (*child, error) {
	k, err := newKeys()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "aion-attack-")
	if err != nil {
		return nil, fmt.Errorf("make the server's directory: %w", err)
	}
	c := &child{dir: dir, keepDir: o.KeepDir, keys: k, exited: make(chan struct{}), logDone: make(chan struct{}),
		logPath: filepath.Join(dir, "server.log")}
	fail := func(err error) (*child, error) {
		if c.cmd != nil && c.cmd.Process != nil {
			c.stop(time.Second)
		} else if !c.keepDir {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	cfgPath := filepath.Join(dir, "aion.toml")
	if err := os.WriteFile(cfgPath, []byte(k.config()), 0o600); err != nil {
		return fail(fmt.Errorf("write %q: %w", cfgPath, err))
	}
	data := filepath.Join(dir, "data")
	args := append(append([]string{}, o.Command[1:]...),
		"--log-format", "json", "--log-level", "info",
		"server", "--config", cfgPath, "--auth", "token",
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", data, "--sqlite-sync", "full", "--drain-timeout", "2s")
	if o.Kind == ConnectedWorkers {
		args = append(args, "--pprof") // the heap profile and its collection
	}
	args = append(args, o.ServerArgs...)
	c.cmd = exec.Command(o.Command[0], args...)
	c.cmd.Env = append(childEnv(os.Environ()), o.Env...)
	logFile, err := os.Create(c.logPath)
	if err != nil {
		return fail(fmt.Errorf("create %q: %w", c.logPath, err))
	}
	r, w, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return fail(fmt.Errorf("pipe for the server's output: %w", err))
	}
	c.cmd.Stdout, c.cmd.Stderr = w, w
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		r.Close()
		w.Close()
		return fail(fmt.Errorf("start %s: %w", o.Command[0], err))
	}
	c.startedAt = time.Now()
	w.Close()
	serving := make(chan [2]string, 1)
	go func() {
		defer close(c.logDone)
		defer logFile.Close()
		defer r.Close()
		copyLog(r, logFile, serving)
	}()
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()
	select {
	case addrs := <-serving:
		c.grpcAddr, c.httpAddr = addrs[0], addrs[1]
	case <-c.exited:
		<-c.logDone
		return fail(fmt.Errorf("the server exited before serving (%v); its log:\n%s", c.exitErr, tail(c.logPath, 4000)))
	case <-time.After(60 * time.Second):
		return fail(fmt.Errorf("the server did not log \"serving\" within 60s; its log:\n%s", tail(c.logPath, 4000)))
	}
	for _, a := range []string{c.grpcAddr, c.httpAddr} {
		if !isLoopback(a) {
			return fail(fmt.Errorf("the server listens on %q, not a loopback address; attacks only ever target 127.0.0.1", a))
		}
	}
	return c, nil
}

// childEnv drops the AION_ variables, so the environment of the command
// cannot point the child elsewhere or change its settings.
func childEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AION_") {
			out = append(out, kv)
		}
	}
	return out
}

// copyLog copies the server's output to dst and sends the addresses of its
// "serving" line once.
func copyLog(r io.Reader, dst io.Writer, serving chan<- [2]string) {
	br := bufio.NewReaderSize(r, 64<<10)
	found := false
	for {
		line, err := br.ReadBytes('\n')
		_, _ = dst.Write(line)
		if !found && bytes.Contains(line, []byte(`"msg":"serving"`)) {
			var l struct{ GRPC, HTTP string }
			if json.Unmarshal(line, &l) == nil && l.GRPC != "" {
				found = true
				serving <- [2]string{l.GRPC, l.HTTP}
			}
		}
		if err != nil {
			return
		}
	}
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pid is the server's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// alive reports whether the server is still running.
func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// exit describes how the server ended: empty while it runs.
func (c *child) exit() string {
	if c.alive() {
		return ""
	}
	if c.exitErr == nil {
		return "exited with status 0"
	}
	return c.exitErr.Error()
}

// stop asks the server to shut down, kills it after grace, and removes its
// directory unless asked to keep it.
func (c *child) stop(grace time.Duration) {
	if c.alive() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(grace):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	<-c.logDone
	if !c.keepDir {
		os.RemoveAll(c.dir)
	}
}

// tail returns the last n bytes of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(0, st.Size()-n)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	return string(b)
}
