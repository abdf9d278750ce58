package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/aion-run/aion/client"
	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/worker"
	"github.com/aion-run/aion/workflow"
)

// The bench's own workflow and activity types, and the build id of its
// workflow code.
const (
	StepsWorkflowType  = "bench-steps"
	FanoutWorkflowType = "bench-fanout"
	StepActivityType   = "bench-step"
	BuildID            = "aion-bench-1"
)

// registerWait bounds the wait for the bench's workers to register, so
// that a server that never takes them ends the run instead of hanging it.
const registerWait = 30 * time.Second

// stepsInput is the input of the workflow mode's workflow.
type stepsInput struct {
	Steps   int             `json:"steps"`
	Payload json.RawMessage `json:"payload"`
}

// fanoutInput is the input of the fan-out mode's workflow.
type fanoutInput struct {
	Activities int             `json:"activities"`
	Payload    json.RawMessage `json:"payload"`
}

// fanoutResult is what the fan-out workflow saw of its activities.
type fanoutResult struct {
	Completed  int    `json:"completed"`
	FirstError string `json:"first_error,omitempty"`
}

// stepsWorkflow runs its steps one after the other, each given the
// previous one's result.
func stepsWorkflow(ctx workflow.Context, in stepsInput) (struct{}, error) {
	p := in.Payload
	for range in.Steps {
		out, err := workflow.ExecuteActivity[json.RawMessage](ctx, StepActivityType, p).Get(ctx)
		if err != nil {
			return struct{}{}, err
		}
		p = out
	}
	return struct{}{}, nil
}

// fanoutWorkflow starts all its activities in one workflow task, waits for
// every one, and reports how many completed.
func fanoutWorkflow(ctx workflow.Context, in fanoutInput) (fanoutResult, error) {
	fs := make([]workflow.Future[json.RawMessage], in.Activities)
	all := make([]workflow.Awaitable, in.Activities)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity[json.RawMessage](ctx, StepActivityType, in.Payload)
		all[i] = fs[i]
	}
	if err := workflow.AwaitAll(ctx, all...); err != nil {
		return fanoutResult{}, err
	}
	var res fanoutResult
	for _, f := range fs {
		if _, err := f.Get(ctx); err != nil {
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			continue
		}
		res.Completed++
	}
	return res, nil
}

// stepKey names one step of one run.
type stepKey struct {
	runID string
	step  int64
}

// stepTimes are when a step's first attempt began on a bench worker and
// when an attempt of it first returned its result there.
type stepTimes struct {
	start, end time.Time
}

// wfRunner is the workflow and fan-out modes. Its tally counts workflow
// runs.
type wfRunner struct {
	o Options
	tally
	mode string
	// prefix starts the id of every workflow this run starts, so that its
	// workers measure only this run's steps.
	prefix string
	seq    atomic.Int64
	typ    string
	input  []byte
	// stepsRun counts step attempts that returned a result (the fan-out's
	// progress).
	stepsRun atomic.Int64

	// Guarded by tally.mu. steps is kept in the workflow mode only.
	steps      map[stepKey]*stepTimes
	toStart    []time.Duration
	endToEnd   []sample
	doneRuns   []string // run ids of completed workflows
	fanoutDone int      // activities the fan-out's workflow saw complete
}

// runWorkflows is the workflow and fan-out modes: SDK workers serve the
// bench's workflows and step activities, and a client starts workflows and
// waits for each to close.
func runWorkflows(ctx context.Context, o Options, addrs []string, conns []*grpc.ClientConn, rep Report) (Report, error) {
	payload := json.RawMessage(`"` + strings.Repeat("x", o.Payload-2) + `"`)
	r := &wfRunner{o: o, mode: rep.Mode, prefix: "bench-" + strings.ToLower(rand.Text()[:12]) + "-"}
	var err error
	if r.mode == ModeFanout {
		r.tally = newTally(1)
		r.typ = FanoutWorkflowType
		r.input, err = json.Marshal(fanoutInput{Activities: o.Fanout, Payload: payload})
		rep.Fanout, rep.Scheduled, rep.WorkflowsPlanned = o.Fanout, o.Fanout, 1
	} else {
		r.tally = newTally(int64(o.Workflows))
		r.typ = StepsWorkflowType
		r.input, err = json.Marshal(stepsInput{Steps: o.Steps, Payload: payload})
		r.steps = make(map[stepKey]*stepTimes, o.Workflows*o.Steps)
		rep.Steps, rep.Scheduled, rep.WorkflowsPlanned = o.Steps, o.Workflows*o.Steps, o.Workflows
	}
	if err != nil {
		return Report{}, fmt.Errorf("encode the workflow input: %w", err)
	}
	if o.hooks.workflowType != "" {
		r.typ = o.hooks.workflowType
	}

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	if err := r.startWorkers(wctx, &wg, addrs, conns); err != nil {
		return Report{}, fmt.Errorf("connect bench workers: %w", err)
	}

	clients := make([]*client.Client, len(conns))
	for i, cc := range conns {
		clients[i] = client.New(cc)
	}
	if o.hooks.started != nil {
		o.hooks.started()
	}
	runCtx, stopRun := r.withTimeout(ctx, o.Timeout)
	defer stopRun()
	start := time.Now()
	counts, unit := r.counts, "workflows"
	if r.mode == ModeFanout {
		unit = "activities"
		counts = func() (int64, int64, int64, int64) {
			n := r.stepsRun.Load()
			return n, 0, n, int64(o.Fanout)
		}
	}
	stopProgress := progress(o.Progress, start, unit, counts)
	switch {
	case r.mode == ModeFanout:
		r.claim(1)
		r.issue()
		r.one(runCtx, clients[0], start)
	case o.Rate > 0:
		r.openLoop(runCtx, start, 1, o.Rate, o.hooks.issued, func(k int, _ int64, due time.Time) {
			r.one(runCtx, clients[k%len(clients)], due)
		})
	default:
		r.closedLoop(runCtx, o.Concurrency, 1, func(g int, _ int64, due time.Time) {
			r.one(runCtx, clients[g%len(clients)], due)
		})
	}
	elapsed := time.Since(start)
	stopProgress()
	stopRun()
	stopWorkers()
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.countMissing()
	rep.Seconds = elapsed.Seconds()
	rep.Workflows = int(r.completed.Load())
	rep.WorkflowsPerSec = float64(rep.Workflows) / elapsed.Seconds()
	rep.Calls = int(r.calls.Load())
	rep.MaxInFlight = int(r.maxInFlight.Load())
	unit, of := "workflows", o.Workflows
	if r.mode == ModeFanout {
		unit, of = "activities", o.Fanout
		rep.Activities = r.fanoutDone
		rep.Errors = o.Fanout - r.fanoutDone
	} else {
		rep.Activities = rep.Workflows * o.Steps
		rep.Errors = int(r.errors.Load())
		gaps := make([]time.Duration, 0, len(r.doneRuns)*(o.Steps-1))
		for _, id := range r.doneRuns {
			for s := int64(1); s < int64(o.Steps); s++ {
				a, b := r.steps[stepKey{id, s}], r.steps[stepKey{id, s + 1}]
				if a != nil && b != nil && !a.end.IsZero() {
					gaps = append(gaps, b.start.Sub(a.end))
				}
			}
		}
		rep.StepGaps = len(gaps)
		rep.StepGap = percentiles(gaps)
	}
	rep.PerSec = float64(rep.Activities) / elapsed.Seconds()
	rep.ScheduleToStart = percentiles(r.toStart)
	lat := make([]time.Duration, len(r.endToEnd))
	for i, s := range r.endToEnd {
		lat[i] = s.latency
	}
	rep.EndToEnd = percentiles(lat)
	rep.EndToEndTrend = trend(r.endToEnd)
	if rep.Errors > 0 && r.firstErr != nil {
		rep.FirstError = r.firstErr.Error()
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("bench interrupted after %d of %d workflows completed: %w", rep.Workflows, rep.WorkflowsPlanned, err)
	}
	if rep.Errors > 0 {
		first := r.firstErr
		if first == nil {
			first = errors.New("none recorded")
		}
		return rep, fmt.Errorf("bench: %d of %d %s did not complete; the first error: %w", rep.Errors, of, unit, first)
	}
	return rep, nil
}

// startWorkers runs the bench's SDK workers until ctx ends, spread over
// addrs, and returns once every one has registered.
func (r *wfRunner) startWorkers(ctx context.Context, wg *sync.WaitGroup, addrs []string, conns []*grpc.ClientConn) error {
	log := r.o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	want := make([]map[string]bool, len(addrs))
	for i := range want {
		want[i] = map[string]bool{}
	}
	stopped := make(chan error, r.o.Workers)
	for i := range r.o.Workers {
		at := i % len(addrs)
		identity := fmt.Sprintf("%sworker-%d", r.prefix, i+1)
		w, err := worker.New(addrs[at], worker.Options{Namespaces: []string{r.o.Namespace}, TaskQueue: r.o.TaskQueue,
			Slots: r.o.Slots, Identity: identity, Logger: log, BuildID: BuildID, StopTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		worker.RegisterWorkflow(w, StepsWorkflowType, stepsWorkflow)
		worker.RegisterWorkflow(w, FanoutWorkflowType, fanoutWorkflow)
		worker.RegisterActivity(w, StepActivityType, r.step)
		want[at][identity] = true
		wg.Go(func() {
			err := w.Run(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("it stopped")
				}
				stopped <- fmt.Errorf("bench worker %s: %w", identity, err)
			}
		})
	}
	return waitRegistered(ctx, addrs, conns, want, stopped)
}

// waitRegistered watches each server for the workers that connect to it,
// by identity, until all of want are registered, a worker stops, or
// registerWait passes.
func waitRegistered(ctx context.Context, addrs []string, conns []*grpc.ClientConn, want []map[string]bool, stopped <-chan error) error {
	errWait := fmt.Errorf("not all registered within %v", registerWait)
	ctx, cancel := context.WithTimeoutCause(ctx, registerWait, errWait)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	results := make(chan error, len(conns))
	for i, cc := range conns {
		wg.Go(func() {
			if err := watchFor(ctx, cc, want[i]); err != nil {
				results <- fmt.Errorf("watch for them on %s: %w", addrs[i], err)
				return
			}
			results <- nil
		})
	}
	for range conns {
		select {
		case err := <-results:
			if err != nil && context.Cause(ctx) == errWait {
				return fmt.Errorf("%w: %w", errWait, err)
			}
			if err != nil {
				return err
			}
		case err := <-stopped:
			return err
		}
	}
	return nil
}

// watchFor returns once every identity of want is a registered worker of
// the server cc reaches.
func watchFor(ctx context.Context, cc grpc.ClientConnInterface, want map[string]bool) error {
	if len(want) == 0 {
		return nil
	}
	stream, err := aionv1.NewClusterServiceClient(cc).Watch(ctx, &aionv1.WatchRequest{})
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(want))
	for len(seen) < len(want) {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		var ws []*aionv1.Worker
		switch e := ev.GetEvent().(type) {
		case *aionv1.ClusterEvent_Snapshot:
			ws = e.Snapshot.GetWorkers()
		case *aionv1.ClusterEvent_WorkerConnected:
			ws = []*aionv1.Worker{e.WorkerConnected.GetWorker()}
		}
		for _, w := range ws {
			if want[w.GetIdentity()] {
				seen[w.GetIdentity()] = true
			}
		}
	}
	return nil
}

// step is the bench's step activity: it returns its input, and records
// when it began and returned, by run and step, for this run's workflows.
func (r *wfRunner) step(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
	began := time.Now()
	info := worker.Info(ctx)
	if !strings.HasPrefix(info.WorkflowID, r.prefix) {
		return in, nil // another run's step: served, not measured
	}
	var st *stepTimes
	r.mu.Lock()
	r.toStart = append(r.toStart, info.StartedTime.Sub(info.ScheduledTime))
	if r.steps != nil {
		k := stepKey{info.RunID, info.Step}
		if st = r.steps[k]; st == nil {
			st = &stepTimes{start: began}
			r.steps[k] = st
		}
	}
	r.mu.Unlock()
	if r.o.hooks.step != nil {
		if err := r.o.hooks.step(ctx, info); err != nil {
			return nil, err
		}
	}
	returned := time.Now()
	r.stepsRun.Add(1)
	if st != nil {
		r.mu.Lock()
		if st.end.IsZero() {
			st.end = returned
		}
		r.mu.Unlock()
	}
	return in, nil
}

// one starts one workflow due at due, already counted in flight, waits for
// it to close and counts its outcome.
func (r *wfRunner) one(ctx context.Context, c *client.Client, due time.Time) {
	defer r.inFlight.Add(-1)
	id := fmt.Sprintf("%s%d", r.prefix, r.seq.Add(1))
	h, err := c.StartWorkflowRaw(ctx, client.StartWorkflowOptions{Namespace: r.o.Namespace, WorkflowID: id,
		WorkflowType: r.typ, TaskQueue: r.o.TaskQueue}, r.input)
	if err != nil {
		r.fail(1, err)
		return
	}
	run, err := h.Wait(ctx)
	if err != nil {
		r.fail(1, err)
		return
	}
	latency := time.Since(due)
	var res fanoutResult
	if r.mode == ModeFanout {
		res, err = client.WorkflowResult[fanoutResult](run)
	} else {
		_, err = client.WorkflowResult[json.RawMessage](run)
	}
	if err != nil {
		r.fail(1, err)
		return
	}
	r.mu.Lock()
	r.endToEnd = append(r.endToEnd, sample{due: due, latency: latency})
	r.doneRuns = append(r.doneRuns, run.RunID)
	if r.mode == ModeFanout {
		r.fanoutDone = res.Completed
		if res.Completed < r.o.Fanout && r.firstErr == nil {
			r.firstErr = fmt.Errorf("%d of the %d activities of workflow %q failed; the first: %s",
				r.o.Fanout-res.Completed, r.o.Fanout, id, res.FirstError)
		}
	}
	r.mu.Unlock()
	r.completed.Add(1)
	r.outcome(1)
}
