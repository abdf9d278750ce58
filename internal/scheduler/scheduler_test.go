package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/schedule"
	"github.com/aion-run/aion/internal/scheduler"
	"github.com/aion-run/aion/internal/store"
)

func TestEachTickStartsOneActivityNamedByItsNominalTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	b.create(sc, activityDef("rep", store.OverlapAllowAll))
	b.stepTo(epoch.Add(10*time.Minute), 20*time.Second)
	if got, want := b.activities("ns", "rep@"), ids("rep", minutes(1, 10)...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("activities %v\nwant %v", got, want)
	}
	a, err := b.eng.Get(context.Background(), anyone, "ns", ids("rep", time.Minute)[0])
	if err != nil {
		t.Fatal(err)
	}
	if a.Activity.ActivityType != "report" || string(a.Activity.Payload) != `{"q":1}` {
		t.Fatalf("started activity %+v, want type report with the schedule's input", a.Activity)
	}
	if o := a.Activity.Origin; o.ScheduleID != "rep" || !o.Time.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("activity origin %+v, want schedule rep at its tick's nominal time %v", o, epoch.Add(time.Minute))
	}
	rec := b.get(sc, "rep")
	if rec.State.Fired != 10 || sc.obs.total() != 10 || len(rec.State.Pending) != 0 {
		t.Fatalf("fired %d (observer %d), pending %d; want 10, 10, 0", rec.State.Fired, sc.obs.total(), len(rec.State.Pending))
	}
	last := rec.State.Recent[len(rec.State.Recent)-1]
	if last.Outcome != store.RecordStarted || !last.Nominal.Equal(epoch.Add(10*time.Minute)) || last.ActionID != ids("rep", 10*time.Minute)[0] {
		t.Fatalf("last record %+v", last)
	}
	for _, lag := range sc.obs.lags {
		if lag != 0 {
			t.Fatalf("a tick fired %v after it was due; each pass runs at the due instant here", lag)
		}
	}
}

func TestWorkflowScheduleStartsARunPerTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	b.create(sc, scheduler.Definition{Namespace: "ns", ID: "wf", Spec: store.ScheduleSpec{Cron: "*/10 * * * * *"},
		Action: store.ScheduleAction{Kind: store.ActionWorkflow, Type: "sync", TaskQueue: "q", Input: []byte("in")},
		Policy: store.SchedulePolicy{Overlap: store.OverlapAllowAll}})
	b.stepTo(epoch.Add(time.Minute), 5*time.Second)
	var offs []time.Duration
	for s := 10; s <= 60; s += 10 {
		offs = append(offs, time.Duration(s)*time.Second)
	}
	if got, want := b.runs("ns", "wf@"), ids("wf", offs...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs %v\nwant %v", got, want)
	}
	rec := b.get(sc, "wf")
	last := rec.State.Recent[len(rec.State.Recent)-1]
	if last.RunID == "" || last.Outcome != store.RecordStarted {
		t.Fatalf("last record %+v, want the run it started", last)
	}
	v, err := b.eng.GetWorkflow(context.Background(), anyone, "ns", last.ActionID, "")
	if err != nil || v.Run.RunID != last.RunID || v.Run.WorkflowType != "sync" || v.Run.TaskQueue != "q" || string(v.Run.Input) != "in" {
		t.Fatalf("run %+v (%v), want the recorded run of type sync on q with the input", v.Run, err)
	}
	if o := v.Run.Origin; o.ScheduleID != "wf" || !o.Time.Equal(last.Nominal) {
		t.Fatalf("run origin %+v, want schedule wf at %v", o, last.Nominal)
	}
}

// TestAFireDecidedBeforeACrashIsCarriedOutOnceAfterIt kills the scheduler
// between deciding a fire and starting it, and between starting it and
// recording that: after the restart each tick has exactly one action.
func TestAFireDecidedBeforeACrashIsCarriedOutOnceAfterIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		afterStart bool
		kind       store.ActionKind
	}{
		{"ActivityCrashBeforeStart", false, store.ActionActivity},
		{"ActivityCrashAfterStart", true, store.ActionActivity},
		{"WorkflowCrashBeforeStart", false, store.ActionWorkflow},
		{"WorkflowCrashAfterStart", true, store.ActionWorkflow},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			first := b.scheduler(crashing{Engine: b.eng, afterStart: c.afterStart})
			d := activityDef("c", store.OverlapAllowAll)
			if c.kind == store.ActionWorkflow {
				d.Action = store.ScheduleAction{Kind: store.ActionWorkflow, Type: "wf"}
			}
			b.create(first, d)
			b.advanceTo(epoch.Add(time.Minute))
			rec := b.get(first, "c")
			if len(rec.State.Pending) != 1 || rec.State.Fired != 0 || first.obs.total() != 0 {
				t.Fatalf("after the crash: %d pending, fired %d, observed %d; want the fire decided and not carried out",
					len(rec.State.Pending), rec.State.Fired, first.obs.total())
			}
			if c.kind == store.ActionWorkflow && c.afterStart {
				// The run closed before the restart: its id cannot start
				// another.
				if _, err := b.eng.TerminateWorkflow(context.Background(), anyone, "ns", ids("c", time.Minute)[0], "", "done"); err != nil {
					t.Fatal(err)
				}
			}
			first.stop()
			second := b.scheduler(nil)
			b.advanceTo(epoch.Add(time.Minute + time.Second))
			list := b.activities
			if c.kind == store.ActionWorkflow {
				list = b.runs
			}
			if got, want := list("ns", "c@"), ids("c", time.Minute); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("actions after the restart %v, want exactly %v", got, want)
			}
			rec = b.get(second, "c")
			if len(rec.State.Pending) != 0 || rec.State.Fired != 1 || second.obs.total() != 1 {
				t.Fatalf("after the restart: %d pending, fired %d, observed %d; want 0, 1, 1", len(rec.State.Pending), rec.State.Fired, second.obs.total())
			}
			b.advanceTo(epoch.Add(2 * time.Minute))
			if got := list("ns", "c@"); len(got) != 2 {
				t.Fatalf("the next tick after the restart: actions %v", got)
			}
		})
	}
}

// TestTwoSchedulersOverOneStoreFireEachTickOnce runs two schedulers over one
// store, as two servers of a cluster do: each tick is decided once and
// counted once.
func TestTwoSchedulersOverOneStoreFireEachTickOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	one, two := b.scheduler(nil), b.scheduler(nil)
	for i := range 3 {
		b.create(one, activityDef(fmt.Sprintf("s%d", i), store.OverlapAllowAll))
	}
	b.stepTo(epoch.Add(30*time.Minute), 30*time.Second)
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		if got, want := b.activities("ns", id+"@"), ids(id, minutes(1, 30)...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: activities %v\nwant %v", id, got, want)
		}
		if rec := b.get(one, id); rec.State.Fired != 30 || len(rec.State.Pending) != 0 {
			t.Fatalf("%s: fired %d, pending %d; want 30 and none", id, rec.State.Fired, len(rec.State.Pending))
		}
	}
	if n := one.obs.total() + two.obs.total(); n != 90 {
		t.Fatalf("the two schedulers counted %d fires (%d + %d), want 90", n, one.obs.total(), two.obs.total())
	}
}

func TestOverlapPoliciesAgainstTheEngine(t *testing.T) {
	t.Parallel()
	t.Run("SkipWhileTheLastIsOpen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sc := b.scheduler(nil)
		b.create(sc, activityDef("s", store.OverlapSkip))
		b.stepTo(epoch.Add(3*time.Minute), time.Minute)
		if got := b.activities("ns", "s@"); fmt.Sprint(got) != fmt.Sprint(ids("s", time.Minute)) {
			t.Fatalf("activities %v: only the first should start while it is open", got)
		}
		b.closeActivity(ids("s", time.Minute)[0])
		b.advanceTo(epoch.Add(4 * time.Minute))
		if got := b.activities("ns", "s@"); fmt.Sprint(got) != fmt.Sprint(ids("s", time.Minute, 4*time.Minute)) {
			t.Fatalf("activities %v: the tick after the close should fire", got)
		}
		if rec := b.get(sc, "s"); rec.State.Skipped != 2 || sc.obs.skipped != 2 {
			t.Fatalf("skipped %d (observer %d), want 2", rec.State.Skipped, sc.obs.skipped)
		}
	})
	t.Run("CancelPreviousCancelsTheOpenOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sc := b.scheduler(nil)
		b.create(sc, activityDef("c", store.OverlapCancelPrevious))
		b.stepTo(epoch.Add(2*time.Minute), time.Minute)
		first, err := b.eng.Get(context.Background(), anyone, "ns", ids("c", time.Minute)[0])
		if err != nil {
			t.Fatal(err)
		}
		if first.Activity.State != store.StateCanceled {
			t.Fatalf("the first activity is %s after the second tick, want canceled", first.Activity.State)
		}
		second, err := b.eng.Get(context.Background(), anyone, "ns", ids("c", 2*time.Minute)[0])
		if err != nil || second.Activity.State.Terminal() {
			t.Fatalf("the second activity: %+v, %v; want it open", second.Activity.State, err)
		}
	})
	t.Run("BufferOneFiresTheBufferedTickOnClose", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sc := b.scheduler(nil)
		b.create(sc, activityDef("b", store.OverlapBufferOne))
		b.stepTo(epoch.Add(3*time.Minute), time.Minute) // 1m fires, 2m buffered, 3m skipped
		rec := b.get(sc, "b")
		if !rec.State.Buffered.Equal(epoch.Add(2*time.Minute)) || rec.State.Skipped != 1 {
			t.Fatalf("buffered %v, skipped %d; want 2m buffered and 3m skipped", rec.State.Buffered, rec.State.Skipped)
		}
		b.closeActivity(ids("b", time.Minute)[0])
		b.advanceTo(epoch.Add(3*time.Minute + 10*time.Second)) // the next poll sees the close
		if got := b.activities("ns", "b@"); fmt.Sprint(got) != fmt.Sprint(ids("b", time.Minute, 2*time.Minute)) {
			t.Fatalf("activities %v: the buffered 2m tick should fire with its nominal time once the first closed", got)
		}
		if sc.obs.fired[schedule.OriginBuffered] != 1 {
			t.Fatalf("fires by origin %v, want one buffered", sc.obs.fired)
		}
	})
}

// TestCatchUpAfterDowntime stops the scheduler for three hours of a
// quarter-hourly schedule and starts another: the catch-up policy decides
// which missed ticks fire.
func TestCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	q := func(n int) time.Duration { return time.Duration(n) * 15 * time.Minute }
	for _, c := range []struct {
		catchUp store.CatchUp
		want    []time.Duration // fired after the restart, at 3h00m30s
		missed  int
	}{
		{store.CatchUpAll, []time.Duration{q(1), q(2), q(3), q(4), q(5), q(6), q(7), q(8), q(9), q(10), q(11), q(12)}, 0},
		{store.CatchUpOne, []time.Duration{q(11), q(12)}, 10},
		{store.CatchUpSkip, []time.Duration{q(12)}, 11},
	} {
		t.Run(string(c.catchUp), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			sc := b.scheduler(nil)
			d := activityDef("q", store.OverlapAllowAll)
			d.Spec = store.ScheduleSpec{Every: 15 * time.Minute}
			d.Policy.CatchUp = c.catchUp
			b.create(sc, d)
			sc.stop()
			b.clk.AdvanceTo(epoch.Add(3*time.Hour + 30*time.Second)) // the 3h tick is 30s late, within the 1m window
			again := b.scheduler(nil)
			b.sync()
			if got, want := b.activities("ns", "q@"), ids("q", c.want...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after the outage fired %v\nwant %v", got, want)
			}
			if rec := b.get(again, "q"); rec.State.Missed != int64(c.missed) || again.obs.missed != c.missed {
				t.Fatalf("missed %d (observer %d), want %d", rec.State.Missed, again.obs.missed, c.missed)
			}
		})
	}
}

func TestPauseResumeTriggerBackfillUpdateDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	ctx := context.Background()
	b.create(sc, activityDef("p", store.OverlapAllowAll))
	b.advanceTo(epoch.Add(time.Minute))

	v, err := sc.s.Pause(ctx, anyone, "ns", "p", "maintenance")
	if err != nil || !v.Schedule.Paused || v.Schedule.Note != "maintenance" || len(v.Upcoming) != 0 {
		t.Fatalf("pause: %+v %v", v.Schedule, err)
	}
	if list, _, err := sc.s.List(ctx, anyone, "ns", 0, ""); err != nil || len(list) != 1 || len(list[0].Upcoming) != 0 {
		t.Fatalf("list while paused %+v %v, want p without a next tick", list, err)
	}
	b.stepTo(epoch.Add(5*time.Minute), time.Minute)
	if got := b.activities("ns", "p@"); len(got) != 1 {
		t.Fatalf("a paused schedule fired: %v", got)
	}

	// Trigger fires even while paused, with the call's time as nominal.
	b.clk.AdvanceTo(epoch.Add(5*time.Minute + 1500*time.Millisecond))
	v, err = sc.s.Trigger(ctx, anyone, "ns", "p", "")
	if err != nil {
		t.Fatal(err)
	}
	trig := "p@" + epoch.Add(5*time.Minute+1500*time.Millisecond).Format(time.RFC3339Nano)
	if last := v.Schedule.State.Recent[len(v.Schedule.State.Recent)-1]; last.ActionID != trig || last.Outcome != store.RecordStarted || last.Origin != schedule.OriginTrigger {
		t.Fatalf("trigger record %+v, want %s started", last, trig)
	}

	v, err = sc.s.Resume(ctx, anyone, "ns", "p", "")
	if err != nil || v.Schedule.Paused || v.Schedule.Note != "" {
		t.Fatalf("resume: %+v %v", v.Schedule, err)
	}
	if len(v.Upcoming) != scheduler.DefaultUpcoming || !v.Upcoming[0].Nominal.Equal(epoch.Add(6*time.Minute)) {
		t.Fatalf("upcoming after resume %v, want 5 from 6m", v.Upcoming)
	}
	if list, _, err := sc.s.List(ctx, anyone, "ns", 0, ""); err != nil || len(list) != 1 || len(list[0].Upcoming) != 1 ||
		!list[0].Upcoming[0].Nominal.Equal(epoch.Add(6*time.Minute)) {
		t.Fatalf("list after resume %+v %v, want p with its next tick at 6m only", list, err)
	}
	b.advanceTo(epoch.Add(6 * time.Minute))
	if got, want := b.activities("ns", "p@"), append(ids("p", time.Minute, 6*time.Minute), trig); fmt.Sprint(got) != fmt.Sprint(sorted(want)) {
		t.Fatalf("after resume %v\nwant %v (the paused ticks 2m-5m do not fire)", got, sorted(want))
	}

	// Backfill the paused minutes; the tick that fired already does not
	// fire again.
	if _, err := sc.s.Backfill(ctx, anyone, "ns", "p", epoch, epoch.Add(5*time.Minute+time.Second), ""); err != nil {
		t.Fatal(err)
	}
	b.sync()
	want := append(ids("p", minutes(0, 6)...), trig)
	if got := b.activities("ns", "p@"); fmt.Sprint(got) != fmt.Sprint(sorted(want)) {
		t.Fatalf("after backfill %v\nwant %v", got, sorted(want))
	}
	if sc.obs.fired[schedule.OriginBackfill] != 5 {
		t.Fatalf("fires by origin %v, want 5 backfilled (1m fired before and is not counted again)", sc.obs.fired)
	}

	// Update to every 2 minutes: the new spec counts from now.
	d := activityDef("p", store.OverlapAllowAll)
	d.Spec = store.ScheduleSpec{Every: 2 * time.Minute}
	b.clk.AdvanceTo(epoch.Add(6*time.Minute + 30*time.Second))
	v, err = sc.s.Update(ctx, anyone, d)
	if err != nil || v.Schedule.Spec.Every != 2*time.Minute || !v.Upcoming[0].Nominal.Equal(epoch.Add(8*time.Minute)) {
		t.Fatalf("update: %+v %v (upcoming %v)", v.Schedule.Spec, err, v.Upcoming)
	}
	b.stepTo(epoch.Add(9*time.Minute), time.Minute)
	if got := b.activities("ns", "p@"); len(got) != len(want)+1 || got[len(got)-1] != ids("p", 8*time.Minute)[0] {
		t.Fatalf("after update %v: want one more, at 8m", got)
	}

	if err := sc.s.Delete(ctx, anyone, "ns", "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.s.Get(ctx, anyone, "ns", "p", 0); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	before := len(b.activities("ns", "p@"))
	b.stepTo(epoch.Add(12*time.Minute), time.Minute)
	if n := len(b.activities("ns", "p@")); n != before {
		t.Fatalf("a deleted schedule fired %d more", n-before)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestCreateIsIdempotentForTheSameDefinition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	ctx := context.Background()
	d := activityDef("i", store.OverlapSkip)
	if _, existing, err := sc.s.Create(ctx, anyone, d); err != nil || existing {
		t.Fatalf("first create: existing=%v err=%v", existing, err)
	}
	if _, existing, err := sc.s.Create(ctx, anyone, d); err != nil || !existing {
		t.Fatalf("same create again: existing=%v err=%v, want the existing schedule", existing, err)
	}
	d.Action.Type = "other"
	if _, _, err := sc.s.Create(ctx, anyone, d); !errors.Is(err, engine.ErrAlreadyExists) {
		t.Fatalf("different create of the id: %v, want ErrAlreadyExists", err)
	}
	if rec := b.get(sc, "i"); rec.Action.Type != "report" {
		t.Fatalf("the refused create changed the schedule: %+v", rec.Action)
	}
}

func TestListPagesThroughANamespacesSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	for _, id := range []string{"d", "a", "c", "b", "e"} {
		b.create(sc, activityDef(id, store.OverlapSkip))
	}
	var got []string
	token := ""
	for range 10 {
		page, next, err := sc.s.List(context.Background(), anyone, "ns", 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			got = append(got, s.Schedule.ID)
		}
		if token = next; token == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[a b c d e]" {
		t.Fatalf("listed %v", got)
	}
	if _, _, err := sc.s.List(context.Background(), namespace.Identity{Name: "other", Namespaces: []string{"x"}}, "ns", 0, ""); !errors.Is(err, namespace.ErrPermissionDenied) {
		t.Fatalf("list by a caller without the namespace: %v, want PermissionDenied", err)
	}
}

func TestRefusalsNameTheFieldAndChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	ctx := context.Background()
	at := epoch.Add(time.Hour)
	for _, c := range []struct {
		name   string
		change func(d *scheduler.Definition)
		want   string
	}{
		{"BadCron", func(d *scheduler.Definition) { d.Spec = store.ScheduleSpec{Cron: "61 * * * *"} }, `cron: "61 * * * *"`},
		{"UnknownZone", func(d *scheduler.Definition) { d.Spec = store.ScheduleSpec{Cron: "0 * * * *", TimeZone: "Moon/Base"} }, `time_zone: "Moon/Base"`},
		{"ZeroInterval", func(d *scheduler.Definition) { d.Spec = store.ScheduleSpec{} }, "cron:"},
		{"NegativeInterval", func(d *scheduler.Definition) { d.Spec = store.ScheduleSpec{Every: -time.Minute} }, "every: -1m0s"},
		{"OffsetNotBelowInterval", func(d *scheduler.Definition) { d.Spec.Offset = time.Minute }, "offset: 1m0s"},
		{"UnknownOverlap", func(d *scheduler.Definition) { d.Policy.Overlap = "sometimes" }, `overlap: "sometimes"`},
		{"UnknownCatchUp", func(d *scheduler.Definition) { d.Policy.CatchUp = "most" }, `catch_up: "most"`},
		{"NegativeJitter", func(d *scheduler.Definition) { d.Spec.Jitter = -time.Second }, "jitter: -1s"},
		{"EndBeforeStart", func(d *scheduler.Definition) { d.Spec.StartAt, d.Spec.EndAt = at, at.Add(-time.Second) }, "end_at:"},
		{"NoActionType", func(d *scheduler.Definition) { d.Action.Type = "" }, "action.activity_type"},
		{"NoActionKind", func(d *scheduler.Definition) { d.Action.Kind = "" }, "action:"},
		{"BadID", func(d *scheduler.Definition) { d.ID = "has space" }, `schedule_id: "has space"`},
		{"NodeOnWorkflow", func(d *scheduler.Definition) {
			d.Action = store.ScheduleAction{Kind: store.ActionWorkflow, Type: "wf", Node: "gpu-1"}
		}, `action.node: "gpu-1"`},
		{"BadPriority", func(d *scheduler.Definition) { d.Action.Priority = 9 }, "action.priority: 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := activityDef("bad", store.OverlapSkip)
			c.change(&d)
			_, _, err := sc.s.Create(ctx, anyone, d)
			if !isInvalid(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("create: %v, want ErrInvalid naming %q", err, c.want)
			}
			if _, err := b.st.GetSchedule(ctx, "ns", d.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a refused create left a schedule: %v", err)
			}
		})
	}
	// A refused update changes nothing either.
	b.create(sc, activityDef("ok", store.OverlapSkip))
	before := b.get(sc, "ok")
	bad := activityDef("ok", "never")
	if _, err := sc.s.Update(ctx, anyone, bad); !isInvalid(err) || !strings.Contains(err.Error(), `overlap: "never"`) {
		t.Fatalf("update: %v, want ErrInvalid naming the overlap", err)
	}
	if _, err := sc.s.Backfill(ctx, anyone, "ns", "ok", epoch, epoch.Add(24*time.Hour), ""); !isInvalid(err) || !strings.Contains(err.Error(), "end_time:") {
		t.Fatalf("backfill into the future: %v, want ErrInvalid naming end_time", err)
	}
	if after := b.get(sc, "ok"); after.Version != before.Version {
		t.Fatalf("refused calls changed the schedule: version %d -> %d", before.Version, after.Version)
	}
}

func TestACallerOutsideTheNamespaceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	ctx := context.Background()
	b.create(sc, activityDef("x", store.OverlapSkip))
	other := namespace.Identity{Name: "other", Namespaces: []string{"elsewhere"}}
	calls := map[string]func() error{
		"create":  func() error { _, _, err := sc.s.Create(ctx, other, activityDef("y", store.OverlapSkip)); return err },
		"get":     func() error { _, err := sc.s.Get(ctx, other, "ns", "x", 0); return err },
		"update":  func() error { _, err := sc.s.Update(ctx, other, activityDef("x", store.OverlapSkip)); return err },
		"pause":   func() error { _, err := sc.s.Pause(ctx, other, "ns", "x", ""); return err },
		"resume":  func() error { _, err := sc.s.Resume(ctx, other, "ns", "x", ""); return err },
		"trigger": func() error { _, err := sc.s.Trigger(ctx, other, "ns", "x", ""); return err },
		"backfill": func() error {
			_, err := sc.s.Backfill(ctx, other, "ns", "x", epoch.Add(-time.Hour), epoch, "")
			return err
		},
		"delete": func() error { return sc.s.Delete(ctx, other, "ns", "x") },
	}
	for op, call := range calls {
		if err := call(); !errors.Is(err, namespace.ErrPermissionDenied) {
			t.Errorf("%s by a caller without the namespace: %v, want PermissionDenied", op, err)
		}
	}
	if rec := b.get(sc, "x"); rec.Version != 1 {
		t.Fatalf("refused calls changed the schedule to version %d", rec.Version)
	}
}

func TestAFireThatFailsForAPassingReasonIsTriedAgainWithBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	fails := 2
	sc := b.scheduler(flaky{Engine: b.eng, mu: &mu, fails: &fails, err: fmt.Errorf("store down: %w", engine.ErrUnavailable)})
	b.create(sc, activityDef("f", store.OverlapAllowAll))
	b.advanceTo(epoch.Add(time.Minute))
	rec := b.get(sc, "f")
	if len(rec.State.Pending) != 1 || rec.State.Pending[0].Attempts != 1 || !rec.State.Pending[0].RetryAt.Equal(epoch.Add(time.Minute+time.Second)) {
		t.Fatalf("after a failed try: pending %+v, want one fire to try again in 1s", rec.State.Pending)
	}
	b.advanceTo(epoch.Add(time.Minute + time.Second)) // fails again: next try 2s later
	if rec := b.get(sc, "f"); len(rec.State.Pending) != 1 || !rec.State.Pending[0].RetryAt.Equal(epoch.Add(time.Minute+3*time.Second)) {
		t.Fatalf("after a second failed try: pending %+v, want a retry 2s later", rec.State.Pending)
	}
	b.advanceTo(epoch.Add(time.Minute + 3*time.Second))
	if got := b.activities("ns", "f@"); fmt.Sprint(got) != fmt.Sprint(ids("f", time.Minute)) {
		t.Fatalf("activities %v after the third try, want the 1m tick's", got)
	}
	if rec := b.get(sc, "f"); len(rec.State.Pending) != 0 || rec.State.Fired != 1 || sc.obs.failed != 0 {
		t.Fatalf("after the start: pending %d, fired %d, failed %d", len(rec.State.Pending), rec.State.Fired, sc.obs.failed)
	}
}

func TestAFireRefusedForGoodIsRecordedAsFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	fails := 1
	sc := b.scheduler(flaky{Engine: b.eng, mu: &mu, fails: &fails, err: fmt.Errorf("payload: refused: %w", engine.ErrInvalid)})
	b.create(sc, activityDef("r", store.OverlapAllowAll))
	b.advanceTo(epoch.Add(time.Minute))
	rec := b.get(sc, "r")
	last := rec.State.Recent[len(rec.State.Recent)-1]
	if len(rec.State.Pending) != 0 || last.Outcome != store.RecordFailed || !strings.Contains(last.Detail, "payload: refused") ||
		sc.obs.failed != 1 || rec.State.Fired != 0 {
		t.Fatalf("pending %d, last record %+v, failed %d, fired %d; want the fire recorded as failed with the error", len(rec.State.Pending),
			last, sc.obs.failed, rec.State.Fired)
	}
	b.advanceTo(epoch.Add(2 * time.Minute))
	if got := b.activities("ns", "r@"); fmt.Sprint(got) != fmt.Sprint(ids("r", 2*time.Minute)) {
		t.Fatalf("activities %v: the next tick fires as usual", got)
	}
}

// A trigger is carried out once by this process: the loop, woken by the
// trigger's own write, does not start the same fire beside the call, so
// every trigger counts as one fire.
func TestEachTriggerCountsOnceWhileTheLoopRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := b.scheduler(nil)
	ctx := context.Background()
	b.create(sc, activityDef("t", store.OverlapAllowAll))
	const n = 30
	for i := range n {
		b.clk.Advance(time.Millisecond) // each trigger has its own nominal time
		v, err := sc.s.Trigger(ctx, anyone, "ns", "t", "")
		if err != nil {
			t.Fatalf("trigger %d: %v", i, err)
		}
		// The answer shows the trigger's own fire recorded, even when the
		// loop carried it out.
		want := "t@" + b.clk.Now().Truncate(time.Millisecond).UTC().Format(time.RFC3339Nano)
		recent := v.Schedule.State.Recent
		if len(recent) == 0 || recent[len(recent)-1].ActionID != want {
			t.Fatalf("trigger %d answered with recent actions %+v, want the last to be %s", i, recent, want)
		}
		if last := recent[len(recent)-1]; last.Detail != "" {
			t.Fatalf("trigger %d recorded %+v: its own fire was found started before", i, last)
		}
	}
	b.sync()
	v, err := sc.s.Get(ctx, anyone, "ns", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.Schedule.State.Fired != n || sc.obs.fired[schedule.OriginTrigger] != n {
		t.Fatalf("fired %d (metric %d) after %d triggers, want each counted once", v.Schedule.State.Fired, sc.obs.fired[schedule.OriginTrigger], n)
	}
}
