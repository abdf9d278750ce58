package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/intervention"
	ivwire "github.com/aion-run/aion/internal/intervention/wire"
)

// testLogger discards logs unless AION_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("AION_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// logRecorder is a slog.Handler that keeps every record's message, so a
// test can wait for what the worker logs instead of sleeping. It also logs
// to stderr when AION_TEST_LOG is set.
type logRecorder struct {
	mu      sync.Mutex
	msgs    []string
	changed chan struct{} // closed, and replaced, on every record
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if h := testLogger().Handler(); h.Enabled(ctx, rec.Level) {
		return h.Handle(ctx, rec)
	}
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// waitFor waits until msg has been logged n times.
func (r *logRecorder) waitFor(t *testing.T, msg string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := 0
		for _, m := range r.msgs {
			if m == msg {
				got++
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%q logged %d times in 10s, want %d", msg, got, n)
		}
	}
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	t.Parallel()
	for _, r := range []float64{0, 0.5, 0.999999} {
		b := newBackoff(100*time.Millisecond, 2*time.Second)
		b.rand = func() float64 { return r }
		prevCeil := time.Duration(0)
		for i := range 100 {
			d := b.next()
			if d < 100*time.Millisecond || d > 2*time.Second {
				t.Fatalf("rand=%v step %d: delay %s outside [100ms, 2s]", r, i, d)
			}
			ceil := min(100*time.Millisecond<<min(i, 20), 2*time.Second)
			if d > ceil || d < max(ceil/2, 100*time.Millisecond) {
				t.Fatalf("rand=%v step %d: delay %s outside [%s, %s]", r, i, d, ceil/2, ceil)
			}
			if ceil < prevCeil {
				t.Fatalf("ceiling shrank")
			}
			prevCeil = ceil
		}
		b.reset()
		if d := b.next(); d > 100*time.Millisecond {
			t.Fatalf("after reset: %s", d)
		}
	}
}

func TestBackoffHandlesHugeBounds(t *testing.T) {
	t.Parallel()
	b := newBackoff(time.Hour, 1<<62)
	for range 200 {
		if d := b.next(); d < time.Hour || d > 1<<62 {
			t.Fatalf("delay %s out of bounds", d)
		}
	}
}

type MyError struct{}

func (MyError) Error() string { return "mine" }

type lowerError struct{}

func (lowerError) Error() string { return "lower" }

func TestErrorType(t *testing.T) {
	t.Parallel()
	_, pathErr := os.Open("/definitely/not/here")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("x"), "error"},
		{fmt.Errorf("wrap: %w", errors.New("x")), "error"},
		{pathErr, "fs.PathError"},
		{&fs.PathError{}, "fs.PathError"},
		{MyError{}, "worker.MyError"},
		{&MyError{}, "worker.MyError"},
		{lowerError{}, "error"},
		{context.Canceled, "context_canceled"},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), "deadline_exceeded"},
	} {
		if got := errorType(tc.err); got != tc.want {
			t.Errorf("errorType(%T %v) = %q, want %q", tc.err, tc.err, got, tc.want)
		}
	}
}

func TestToFailure(t *testing.T) {
	t.Parallel()
	f := toFailure(NonRetryable(errors.New("boom")))
	if f.GetType() != "error" || f.GetRetryable() || f.GetMessage() != "boom" {
		t.Errorf("non-retryable plain: %v", f)
	}
	f = toFailure(errors.New("boom"))
	if f.GetType() != "error" || !f.GetRetryable() || f.GetMessage() != "boom" {
		t.Errorf("plain: %v", f)
	}
	f = toFailure(fmt.Errorf("charge: %w", NewError("card_declined", "declined", false, map[string]string{"card": "x"})))
	if f.GetType() != "card_declined" || f.GetRetryable() || string(f.GetDetails()) != `{"card":"x"}` {
		t.Errorf("typed: %v", f)
	}
	if f.GetMessage() != "charge: declined" {
		t.Errorf("typed message: %q", f.GetMessage())
	}
	f = toFailure(NonRetryable(&MyError{}))
	if f.GetType() != "worker.MyError" || f.GetRetryable() {
		t.Errorf("non-retryable: %v", f)
	}
	f = toFailure(NonRetryable(NewError("t", "m", true, nil)))
	if f.GetType() != "t" || f.GetRetryable() || f.GetMessage() != "m" {
		t.Errorf("non-retryable of *Error: %v", f)
	}
	if NonRetryable(nil) != nil {
		t.Error("NonRetryable(nil) != nil")
	}
	if !errors.Is(NonRetryable(context.Canceled), context.Canceled) {
		t.Error("NonRetryable hides the wrapped error")
	}
	f = toFailure(NewError("", "m", true, func() {}))
	if f.GetType() != "error" || len(f.GetDetails()) == 0 {
		t.Errorf("unencodable details: %v", f)
	}
}

func TestBuildResult(t *testing.T) {
	t.Parallel()
	k := attemptKey{"ns", "a", 2}
	live := context.Background()
	canceled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	if r := buildResult(live, k, []byte(`1`), nil); string(r.GetCompleted().GetResult()) != "1" || r.GetAttempt() != 2 {
		t.Errorf("completed: %v", r)
	}
	// A handler that finished despite a cancellation still completed.
	if r := buildResult(canceled(ErrActivityCanceled), k, []byte(`1`), nil); r.GetCompleted() == nil {
		t.Errorf("completed after cancel: %v", r)
	}
	if r := buildResult(canceled(fmt.Errorf("%w: x", ErrActivityCanceled)), k, nil, context.Canceled); r.GetCanceled() == nil {
		t.Errorf("canceled: %v", r)
	}
	if r := buildResult(canceled(ErrWorkerStopping), k, nil, context.Canceled); r.GetFailed().GetType() != "worker_stopping" || !r.GetFailed().GetRetryable() {
		t.Errorf("stopping: %v", r)
	}
	// A real failure during a stop keeps its own type.
	if r := buildResult(canceled(ErrWorkerStopping), k, nil, NewError("db", "down", false, nil)); r.GetFailed().GetType() != "db" {
		t.Errorf("failure during stop: %v", r)
	}
	if r := buildResult(canceled(ErrAttemptStale), k, nil, context.Canceled); r.GetFailed().GetType() != "context_canceled" {
		t.Errorf("stale: %v", r)
	}
}

func result(id string, attempt uint32) *aionv1.ActivityResult {
	return &aionv1.ActivityResult{Namespace: "ns", ActivityId: id, Attempt: attempt}
}

func TestResultBookKeepsOrderUntilAcked(t *testing.T) {
	t.Parallel()
	var b resultBook
	if len(b.unacked()) != 0 || b.len() != 0 {
		t.Fatal("empty book not empty")
	}
	for _, id := range []string{"c", "a", "b", "d"} {
		b.add(result(id, 1))
	}
	b.add(result("a", 2)) // another attempt is another result
	if !b.ack(attemptKey{"ns", "b", 1}) {
		t.Fatal("ack of a pending result = false")
	}
	if b.ack(attemptKey{"ns", "b", 1}) {
		t.Fatal("second ack = true")
	}
	if b.ack(attemptKey{"other", "a", 1}) {
		t.Fatal("ack in another namespace matched")
	}
	// Replacing a result keeps its place.
	replaced := result("c", 1)
	replaced.Outcome = &aionv1.ActivityResult_Completed{Completed: &aionv1.ActivityCompleted{}}
	b.add(replaced)
	var got []string
	for _, r := range b.unacked() {
		got = append(got, attemptKey{r.GetNamespace(), r.GetActivityId(), r.GetAttempt()}.String())
	}
	want := []string{"ns/c#1", "ns/a#1", "ns/d#1", "ns/a#2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("unacked = %v, want %v", got, want)
	}
	if b.unacked()[0].GetCompleted() == nil {
		t.Fatal("replacement lost")
	}
	if !b.has(attemptKey{"ns", "d", 1}) || b.has(attemptKey{"ns", "b", 1}) || b.len() != 4 {
		t.Fatal("has/len wrong")
	}
}

type recordingStream struct {
	sent      []*aionv1.WorkerMessage
	closed    int
	failAfter int
}

func (r *recordingStream) Send(m *aionv1.WorkerMessage) error {
	if r.failAfter > 0 && len(r.sent) == r.failAfter {
		return errors.New("broken")
	}
	r.sent = append(r.sent, m)
	return nil
}

func (r *recordingStream) CloseSend() error { r.closed++; return nil }

func TestOutboxSendsInOrderThenCloses(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	s := &recordingStream{}
	for i := range 5 {
		o.push(&aionv1.WorkerMessage{Message: &aionv1.WorkerMessage_Ping{Ping: &aionv1.Ping{Nonce: uint64(i)}}})
	}
	o.finish()
	if o.push(&aionv1.WorkerMessage{}) {
		t.Fatal("push after finish accepted")
	}
	if err := o.run(s, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if len(s.sent) != 5 || s.closed != 1 {
		t.Fatalf("sent %d, closed %d", len(s.sent), s.closed)
	}
	for i, m := range s.sent {
		if m.GetPing().GetNonce() != uint64(i) {
			t.Fatalf("frame %d out of order", i)
		}
	}
}

func TestOutboxStopsOnSendError(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	s := &recordingStream{failAfter: 1}
	o.push(&aionv1.WorkerMessage{})
	o.push(&aionv1.WorkerMessage{})
	if err := o.run(s, make(chan struct{})); err == nil {
		t.Fatal("want the send error")
	}
	if o.push(&aionv1.WorkerMessage{}) {
		t.Fatal("push after failure accepted")
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		addr string
		opts Options
	}{
		"no address":     {"", Options{Namespaces: []string{"a"}}},
		"no namespace":   {"x:1", Options{}},
		"empty name":     {"x:1", Options{Namespaces: []string{"a", ""}}},
		"negative slots": {"x:1", Options{Namespaces: []string{"a"}, Slots: -1}},
		"backoff":        {"x:1", Options{Namespaces: []string{"a"}, MinBackoff: time.Second, MaxBackoff: time.Millisecond}},
		"capability":     {"x:1", Options{Namespaces: []string{"a"}, Capabilities: []Capability{"fly"}}},
	} {
		if _, err := New(tc.addr, tc.opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, tc.opts)
		}
	}
	w, err := New("x:1", Options{Namespaces: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if w.opts.Slots != 1 || w.opts.StopTimeout != DefaultStopTimeout || w.opts.Identity == "" {
		t.Fatalf("defaults not applied: %+v", w.opts)
	}
}

func TestEveryCapabilityConstantIsAPrimitiveOfTheWire(t *testing.T) {
	t.Parallel()
	consts := []Capability{CapabilityInjectMessage, CapabilityCancel, CapabilityPauseResume, CapabilityUpdateBudget, CapabilityRespondToApproval}
	if len(consts) != len(intervention.All()) {
		t.Fatalf("%d capability constants for %d primitives", len(consts), len(intervention.All()))
	}
	for i, c := range consts {
		p := intervention.All()[i]
		got, err := c.toProto()
		if err != nil || got != ivwire.Primitive(p) || capabilityOf(p) != c {
			t.Errorf("%q: wire enum %v, %v; want %v", c, got, err, ivwire.Primitive(p))
		}
	}
}

func TestRegisterActivityPanicsOnMisuse(t *testing.T) {
	t.Parallel()
	w, _ := New("x:1", Options{Namespaces: []string{"a"}})
	fn := func(context.Context, int) (int, error) { return 0, nil }
	RegisterActivity(w, "t", fn)
	for name, f := range map[string]func(){
		"duplicate": func() { RegisterActivity(w, "t", fn) },
		"empty":     func() { RegisterActivity(w, "", fn) },
		"nil":       func() { RegisterActivity[int, int](w, "n", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestHelpersOutsideAHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	RecordHeartbeat(ctx, 1) // no-op, no panic
	if (Info(ctx) != ActivityInfo{}) {
		t.Error("Info outside a handler is not zero")
	}
	if _, err := HeartbeatDetails[int](ctx); err == nil {
		t.Error("HeartbeatDetails outside a handler = nil error")
	}
}

// TestOnlyRefusalsEndRun covers the codes the real server cannot produce
// yet (it has no authentication) along with the ones it does: a refusal
// ends Run, anything else is retried.
func TestOnlyRefusalsEndRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{status.Error(codes.InvalidArgument, ""), true},
		{status.Error(codes.PermissionDenied, ""), true},
		{status.Error(codes.Unauthenticated, ""), true},
		{status.Error(codes.NotFound, ""), true},
		{status.Error(codes.FailedPrecondition, ""), true},
		{status.Error(codes.Unimplemented, ""), true},
		{status.Error(codes.Unavailable, ""), false},
		{status.Error(codes.Internal, ""), false},
		{status.Error(codes.DeadlineExceeded, ""), false},
		{status.Error(codes.ResourceExhausted, ""), false},
		{errors.New("connection reset"), false},
	} {
		if got := fatal(tc.err); got != tc.fatal {
			t.Errorf("fatal(%v) = %v, want %v", tc.err, got, tc.fatal)
		}
	}
}
