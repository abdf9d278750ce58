package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/registry"
)

// workflowSpec registers a worker that advances workflowTypes at build with
// wfSlots workflow slots and one activity type, "step", with one slot.
func workflowSpec(ns, build string, wfSlots int, workflowTypes ...string) registry.Spec {
	s := spec([]string{ns}, "", "", "step")
	s.WorkflowTypes = workflowTypes
	s.BuildID = build
	s.WorkflowSlots = wfSlots
	return s
}

func TestWorkflowTasksRouteOnlyToTheRunsBuild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v1 := b.accept(t, caller("orders"), workflowSpec("orders", "v1", 10, "order"))
	v2 := b.accept(t, caller("orders"), workflowSpec("orders", "v2", 10, "order"))
	for _, tc := range []struct {
		build string
		want  registry.WorkerID
	}{{"v1", v1.ID()}, {"v2", v2.ID()}, {"v1", v1.ID()}} {
		w, ok := b.reg.Select(registry.NewWorkflowTriple("orders", "", "order", tc.build), registry.AnyNode())
		if !ok || w.ID() != tc.want {
			t.Fatalf("select build %s: got %v %v, want worker %d", tc.build, w, ok, tc.want)
		}
	}
	if _, ok := b.reg.Select(registry.NewWorkflowTriple("orders", "", "order", "v3"), registry.AnyNode()); ok {
		t.Fatal("a build no worker runs was selected")
	}
	if _, ok := b.reg.Select(registry.NewTriple("orders", "", "order"), registry.AnyNode()); ok {
		t.Fatal("a workflow type was selected as an activity type")
	}
}

func TestWorkflowSlotsAreApartFromActivitySlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := b.accept(t, caller("orders"), workflowSpec("orders", "v1", 2, "order"))
	act := registry.NewTriple("orders", "", "step")
	wf := registry.NewWorkflowTriple("orders", "", "order", "v1")

	if _, ok := b.reg.Select(act, registry.AnyNode()); !ok {
		t.Fatal("activity slot not taken")
	}
	if _, ok := b.reg.Select(act, registry.AnyNode()); ok {
		t.Fatal("a second activity was given a one-slot worker")
	}
	// The activity slot is full; both workflow slots are still free.
	for i := range 2 {
		if _, ok := b.reg.Select(wf, registry.AnyNode()); !ok {
			t.Fatalf("workflow slot %d not taken while the activity slot is full", i+1)
		}
	}
	if _, ok := b.reg.Select(wf, registry.AnyNode()); ok {
		t.Fatal("a third workflow task was given a two-slot worker")
	}
	if b.reg.Take(g.Worker(), registry.KindWorkflow) {
		t.Fatal("Take succeeded on a worker with no free workflow slot")
	}
	info, _ := b.reg.Lookup(g.ID())
	if info.SlotsInUse != 1 || info.WorkflowSlotsInUse != 2 {
		t.Fatalf("slots in use: activity %d workflow %d, want 1 and 2", info.SlotsInUse, info.WorkflowSlotsInUse)
	}
	b.reg.ReleaseKind(g.Worker(), registry.KindWorkflow)
	if !b.reg.Take(g.Worker(), registry.KindWorkflow) {
		t.Fatal("Take failed after a workflow slot was released")
	}
	b.reg.Release(g.Worker())
	if _, ok := b.reg.Select(act, registry.AnyNode()); !ok {
		t.Fatal("activity slot not free after release")
	}
}

func TestTakeRefusesDrainingAndDepartedWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := b.accept(t, caller("orders"), workflowSpec("orders", "v1", 5, "order"))
	if !b.reg.Take(g.Worker(), registry.KindWorkflow) {
		t.Fatal("Take failed on a free worker")
	}
	b.reg.Drain(g.ID())
	if b.reg.Take(g.Worker(), registry.KindWorkflow) {
		t.Fatal("Take succeeded on a draining worker")
	}
	g.Close()
	if b.reg.Take(g.Worker(), registry.KindWorkflow) {
		t.Fatal("Take succeeded on a worker that left")
	}
}

func TestDefaultBuildIsTheNewestConnectedBuild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := registry.Pool("orders", "")
	if _, ok := b.reg.DefaultBuild(pool, "order"); ok {
		t.Fatal("a default build with no worker connected")
	}
	v1 := b.accept(t, caller("orders"), workflowSpec("orders", "v1", 1, "order"))
	if got, _ := b.reg.DefaultBuild(pool, "order"); got != "v1" {
		t.Fatalf("default build = %q, want v1", got)
	}
	v2 := b.accept(t, caller("orders"), workflowSpec("orders", "v2", 1, "order"))
	if got, _ := b.reg.DefaultBuild(pool, "order"); got != "v2" {
		t.Fatalf("after v2 joined: default build = %q, want v2", got)
	}
	// A v1 worker reconnecting does not make v1 the default again.
	v1.Close()
	b.accept(t, caller("orders"), workflowSpec("orders", "v1", 1, "order"))
	if got, _ := b.reg.DefaultBuild(pool, "order"); got != "v2" {
		t.Fatalf("after a v1 worker reconnected: default build = %q, want v2", got)
	}
	// With v2 gone, new runs go to the build still connected.
	v2.Close()
	if got, _ := b.reg.DefaultBuild(pool, "order"); got != "v1" {
		t.Fatalf("after v2 left: default build = %q, want v1", got)
	}
}

func TestWorkflowWorkersLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var gs []*registry.Registration
	for i, build := range []string{"v1", "v2", "v3"} {
		s := workflowSpec("orders", build, 1+i, "order", "agent")
		s.Node = "gpu-1"
		gs = append(gs, b.accept(t, caller("orders"), s))
	}
	b.reg.Select(registry.NewWorkflowTriple("orders", "", "agent", "v2"), registry.OnNodes("gpu-1"))
	for _, g := range gs {
		g.Close()
	}
	if c := b.reg.Census(); c != (registry.Census{}) {
		t.Fatalf("census after every worker left: %+v, want all zero", c)
	}
}

func TestWorkflowRegistrationNeedsBuildAndSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*registry.Spec)
		field string
	}{
		{"no build id", func(s *registry.Spec) { s.BuildID = "" }, "build_id"},
		{"no workflow slots", func(s *registry.Spec) { s.WorkflowSlots = 0 }, "workflow_slots"},
		{"empty workflow type", func(s *registry.Spec) { s.WorkflowTypes = []string{""} }, "workflow_types"},
		{"no types at all", func(s *registry.Spec) { s.WorkflowTypes, s.ActivityTypes = nil, nil }, "activity_types"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := workflowSpec("orders", "v1", 1, "order")
			tc.edit(&s)
			_, err := b.reg.Register(s)
			if !errors.Is(err, registry.ErrInvalidSpec) {
				t.Fatalf("register: %v, want ErrInvalidSpec", err)
			}
			if got := err.Error(); !contains(got, tc.field) {
				t.Fatalf("error %q does not name %s", got, tc.field)
			}
			if c := b.reg.Census(); c.Workers != 0 {
				t.Fatalf("a refused registration left %d workers", c.Workers)
			}
		})
	}
}

func TestWorkflowOnlyWorkerRegisters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := workflowSpec("orders", "v1", 1, "order")
	s.ActivityTypes = nil
	g := b.accept(t, caller("orders"), s)
	if _, ok := b.reg.Select(registry.NewWorkflowTriple("orders", "", "order", "v1"), registry.AnyNode()); !ok {
		t.Fatal("workflow-only worker not selected")
	}
	if got := len(b.reg.Triples()); got != 0 {
		t.Fatalf("Triples lists %d activity triples for a workflow-only worker", got)
	}
	g.Close()
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestCompatibleBuildTakesTheOlderBuildsRunsButIsNotTheirDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := workflowSpec("orders", "v2", 5, "order")
	s.CompatibleBuilds = []string{"v1"}
	g := b.accept(t, caller("orders"), s)
	for _, build := range []string{"v1", "v2"} {
		w, ok := b.reg.Select(registry.NewWorkflowTriple("orders", "", "order", build), registry.AnyNode())
		if !ok || w.ID() != g.ID() {
			t.Fatalf("a run of build %s was not given to the worker declaring it compatible", build)
		}
	}
	if got, _ := b.reg.DefaultBuild(registry.Pool("orders", ""), "order"); got != "v2" {
		t.Fatalf("default build = %q, want the worker's own v2", got)
	}
	info, _ := b.reg.Lookup(g.ID())
	if len(info.CompatibleBuilds) != 1 || info.CompatibleBuilds[0] != "v1" || info.WorkflowSlotsInUse != 2 {
		t.Fatalf("worker info %+v", info)
	}
	own := workflowSpec("orders", "v2", 1, "order")
	own.CompatibleBuilds = []string{"v2"}
	if _, err := b.reg.Register(own); !errors.Is(err, registry.ErrInvalidSpec) || !strings.Contains(err.Error(), "compatible_build_ids") {
		t.Fatalf("a worker declaring its own build compatible: %v, want an error naming compatible_build_ids", err)
	}
	g.Close()
	if c := b.reg.Census(); c != (registry.Census{}) {
		t.Fatalf("census after the worker left: %+v", c)
	}
}
