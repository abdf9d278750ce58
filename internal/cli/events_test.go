package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/servertest"
)

// streamed is a long-running command line whose stdout is read line by
// line as it prints, such as aion events.
type streamed struct {
	args  []string
	log   *servertest.LogBuffer
	lines chan string
	done  chan int
	stop  func() int
}

// stream runs a command line until stop or the end of the test, handing
// each line it prints to next.
func (r *cliRig) stream(t *testing.T, args ...string) *streamed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &streamed{args: args, log: &servertest.LogBuffer{}, lines: make(chan string, 64), done: make(chan int, 1)}
	quit, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		// Closing the reading end on the way out fails a write the command
		// is blocked in, so it can always finish.
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			case <-quit:
				return
			}
		}
	}()
	go func() {
		code := newApp(strings.NewReader(""), pw, s.log, r.lookup(nil)).execute(ctx, args)
		pw.Close()
		s.done <- code
	}()
	var code int
	stopped := false
	s.stop = func() int {
		if stopped {
			return code
		}
		stopped = true
		cancel() // as SIGTERM would
		close(quit)
		select {
		case code = <-s.done:
		case <-time.After(20 * time.Second):
			t.Errorf("aion %s did not exit", strings.Join(args, " "))
		}
		<-read
		return code
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// next returns the next line the command prints.
func (s *streamed) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case code := <-s.done:
		s.done <- code
		t.Fatalf("aion %s exited (%d) before printing %s; stderr:\n%s", strings.Join(s.args, " "), code, what, s.log)
	case <-time.After(20 * time.Second):
		t.Fatalf("aion %s printed no %s within 20s; stderr:\n%s", strings.Join(s.args, " "), what, s.log)
	}
	return ""
}

// eventJSON is the part of a ClusterEvent, as aion events -o json prints
// it, that these tests read.
type eventJSON struct {
	Sequence string    `json:"sequence"`
	Epoch    string    `json:"epoch"`
	Resumed  *struct{} `json:"resumed"`
	Snapshot *struct {
		Namespaces []struct {
			Name string `json:"name"`
		} `json:"namespaces"`
	} `json:"snapshot"`
	NamespaceCreated *struct {
		Namespace struct {
			Name string `json:"name"`
		} `json:"namespace"`
	} `json:"namespace_created"`
}

// seq is the event's sequence; protojson leaves out a zero one.
func (e eventJSON) seq(t *testing.T) uint64 {
	t.Helper()
	if e.Sequence == "" {
		return 0
	}
	n, err := strconv.ParseUint(e.Sequence, 10, 64)
	if err != nil {
		t.Fatalf("event sequence %q: %v", e.Sequence, err)
	}
	return n
}

// nextEvent reads the next JSON event line.
func (s *streamed) nextEvent(t *testing.T, what string) eventJSON {
	t.Helper()
	l := s.next(t, what)
	var e eventJSON
	if err := json.Unmarshal([]byte(l), &e); err != nil {
		t.Fatalf("aion events -o json printed %q, not an event: %v", l, err)
	}
	return e
}

// created reads the namespace_created events for names, in order, right
// after the sequence after: one each, numbered after+1, after+2, ….
func (s *streamed) created(t *testing.T, asJSON bool, after uint64, names ...string) {
	t.Helper()
	for i, name := range names {
		seq := after + uint64(i) + 1
		if asJSON {
			e := s.nextEvent(t, "namespace "+name+" created")
			if e.NamespaceCreated == nil || e.NamespaceCreated.Namespace.Name != name || e.seq(t) != seq {
				t.Fatalf("event %+v, want #%d namespace %s created", e, seq, name)
			}
			continue
		}
		want := regexp.MustCompile(fmt.Sprintf(`^#%d \S+ namespace %s created: origin=explicit$`, seq, regexp.QuoteMeta(name)))
		if l := s.next(t, "namespace "+name+" created"); !want.MatchString(l) {
			t.Fatalf("line %q, want %s", l, want)
		}
	}
}

func TestEventsResumesAfterAPositionOrSaysWhyItSentASnapshot(t *testing.T) {
	t.Parallel()
	r := newCLIRig(t)

	// A first watch: its snapshot names the epoch; it sees one event.
	w := r.stream(t, "events", "-o", "json")
	snap := w.nextEvent(t, "the snapshot")
	epoch := snap.Epoch
	if snap.Snapshot == nil || snap.Resumed != nil || len(epoch) != 16 {
		t.Fatalf("first event of a fresh watch %+v, want a snapshot naming its epoch", snap)
	}
	r.ok(t, "namespace", "create", "seen")
	w.created(t, true, snap.seq(t), "seen")
	last := snap.seq(t) + 1
	if code := w.stop(); code != exitOK {
		t.Fatalf("aion events exited %d when stopped, want 0", code)
	}

	// Missed while no watch ran.
	missed := []string{"missed-1", "missed-2", "missed-3"}
	for _, n := range missed {
		r.ok(t, "namespace", "create", n)
	}
	pos := fmt.Sprintf("%s-%d", epoch, last)

	t.Run("ResumedText", func(t *testing.T) {
		w := r.stream(t, "events", "--after", pos)
		want := fmt.Sprintf(`^#%d \S+ resumed after %s: the events missed follow$`, last, pos)
		if l := w.next(t, "the resumed line"); !regexp.MustCompile(want).MatchString(l) {
			t.Fatalf("first line %q, want %s", l, want)
		}
		w.created(t, false, last, missed...)
	})
	t.Run("ResumedJSON", func(t *testing.T) {
		w := r.stream(t, "events", "--after", pos, "-o", "json")
		e := w.nextEvent(t, "the resumed event")
		if e.Resumed == nil || e.Snapshot != nil || e.seq(t) != last || e.Epoch != epoch {
			t.Fatalf("first event %+v, want resumed at #%d of epoch %s", e, last, epoch)
		}
		w.created(t, true, last, missed...)
	})
	t.Run("OtherEpoch", func(t *testing.T) {
		other := strings.Repeat("0", 15) + "1"
		if epoch == other {
			other = strings.Repeat("0", 15) + "2"
		}
		w := r.stream(t, "events", "--after", other+"-1")
		want := fmt.Sprintf(`^#%d \S+ snapshot: 0 workers, 4 namespaces, 0 pools; epoch %s; not resumed: %s-1 is of another epoch`,
			last+3, epoch, other)
		if l := w.next(t, "the snapshot line"); !regexp.MustCompile(want).MatchString(l) {
			t.Fatalf("first line %q, want %s", l, want)
		}
	})
	if t.Failed() {
		return
	}

	// More events than the server holds: the position is gone.
	bus := r.srv.Events()
	for i := range events.RingEvents + 1 {
		bus.Publish(events.Event{Kind: events.RunStarted, Run: &events.Run{Namespace: "seen",
			WorkflowID: fmt.Sprint("wf-", i), RunID: "r", WorkflowType: "t", TaskQueue: "default"}})
	}
	now := bus.Seq()

	t.Run("EvictedText", func(t *testing.T) {
		w := r.stream(t, "events", "--after", pos)
		want := fmt.Sprintf(`^#%d \S+ snapshot: 0 workers, 4 namespaces, 0 pools; epoch %s; not resumed: the server no longer holds every event after %s$`,
			now, epoch, pos)
		if l := w.next(t, "the snapshot line"); !regexp.MustCompile(want).MatchString(l) {
			t.Fatalf("first line %q, want %s", l, want)
		}
	})
	t.Run("EvictedJSON", func(t *testing.T) {
		w := r.stream(t, "events", "--after", pos, "-o", "json")
		e := w.nextEvent(t, "the snapshot")
		if e.Snapshot == nil || e.Resumed != nil || e.seq(t) != now || e.Epoch != epoch {
			t.Fatalf("first event %+v, want a snapshot at #%d of epoch %s", e, now, epoch)
		}
		var names []string
		for _, ns := range e.Snapshot.Namespaces {
			names = append(names, ns.Name)
		}
		for _, n := range append([]string{"seen"}, missed...) {
			if !slices.Contains(names, n) {
				t.Fatalf("snapshot namespaces %v lack %s", names, n)
			}
		}
	})
}

func TestEventsRefusesAMalformedPositionBeforeAnyRPC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		after, want string
	}{
		{"nope", `--after: position "nope" is not <epoch>-<sequence>`},
		{"abc-1", `--after: position "abc-1": epoch "abc" is not 16 hex digits`},
		{"0000000000000000-1", `epoch "0000000000000000" is not 16 hex digits naming a bus`},
		{"00000000000000a1-x", `--after: position "00000000000000a1-x": sequence "x" is not a number`},
	} {
		inv := &invocation{}
		code, _, stderr := inv.run(t, "events", "--after", tc.after)
		if code != exitError || inv.dialed || !strings.Contains(stderr, tc.want) {
			t.Errorf("--after %q: code %d dialed %v stderr %q, want %q", tc.after, code, inv.dialed, stderr, tc.want)
		}
	}
}

func TestDescribeEventNamesResumesAndScheduleFires(t *testing.T) {
	t.Parallel()
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, tc := range []struct {
		name string
		e    *aionv1.ClusterEvent
		want string
	}{
		{"Resumed", &aionv1.ClusterEvent{Sequence: 7, Time: at, Epoch: "00000000000000a1",
			Event: &aionv1.ClusterEvent_Resumed{Resumed: &aionv1.Resumed{}}},
			"resumed after 00000000000000a1-7: the events missed follow"},
		{"Started", &aionv1.ClusterEvent{Sequence: 8, Time: at, Event: &aionv1.ClusterEvent_ScheduleFired{ScheduleFired: &aionv1.ScheduleFired{
			Namespace: "shop", ScheduleId: "nightly", Outcome: aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_STARTED,
			Origin: "tick", Count: 1, ActionId: "nightly-2026"}}},
			"schedule nightly: namespace=shop outcome=started origin=tick action=nightly-2026"},
		{"Skipped", &aionv1.ClusterEvent{Sequence: 9, Time: at, Event: &aionv1.ClusterEvent_ScheduleFired{ScheduleFired: &aionv1.ScheduleFired{
			Namespace: "shop", ScheduleId: "nightly", Outcome: aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_SKIPPED,
			Origin: "tick", Count: 3}}},
			"schedule nightly: namespace=shop outcome=skipped origin=tick count=3"},
		{"Failed", &aionv1.ClusterEvent{Sequence: 10, Time: at, Event: &aionv1.ClusterEvent_ScheduleFired{ScheduleFired: &aionv1.ScheduleFired{
			Namespace: "shop", ScheduleId: "nightly", Outcome: aionv1.ScheduleActionOutcome_SCHEDULE_ACTION_OUTCOME_FAILED,
			Origin: "trigger", Count: 1, Detail: "no such type"}}},
			`schedule nightly: namespace=shop outcome=failed origin=trigger detail="no such type"`},
	} {
		got := describeEvent(tc.e)
		head := fmt.Sprintf("#%d %s ", tc.e.GetSequence(), at.AsTime().Local().Format("15:04:05.000"))
		if got != head+tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, head+tc.want)
		}
	}
}
