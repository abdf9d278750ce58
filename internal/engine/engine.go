// Package engine runs the life of every activity: it keeps the open ones in
// memory (alone over SQLite, a window of the waiting ones: see spill.go),
// makes each change durable through the store's group committer,
// dispatches ready work to workers chosen by the registry, and drives
// timeouts, retries and recovery after a restart.
//
// One mutex guards the engine's state. Everything done under it is memory
// work (queue moves, a registry selection, handing a frame to a worker's
// outbound queue); durable writes are submitted to the committer and their
// completion handled in callbacks, so no lock is held across I/O.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aion-run/aion/internal/clock"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

// Errors callers branch on; each returned error wraps one and names the field
// or activity involved.
var (
	ErrInvalid            = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrClosed             = errors.New("engine closed")
	ErrUnavailable        = errors.New("unavailable")
)

// Failure types the engine itself assigns.
const (
	FailureWorkerLost      = "worker_lost"
	FailureStartToClose    = "start_to_close_timeout"
	FailureHeartbeat       = "heartbeat_timeout"
	FailureScheduleToStart = "schedule_to_start_timeout"
	FailureScheduleToClose = "schedule_to_close_timeout"
)

// Defaults fill what a Schedule request leaves unset.
type Defaults struct {
	Timeouts store.Timeouts
	Retry    store.RetryPolicy
}

// DefaultDefaults are the engine's defaults: wait up to a day for a worker and
// for the whole activity, ten minutes per attempt, no heartbeat requirement,
// and retries from one second doubling up to a hundred seconds, without a cap
// on attempts (the schedule-to-close timeout bounds them).
func DefaultDefaults() Defaults {
	return Defaults{
		Timeouts: store.Timeouts{
			ScheduleToStart: 24 * time.Hour,
			StartToClose:    10 * time.Minute,
			ScheduleToClose: 24 * time.Hour,
		},
		Retry: store.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    100 * time.Second,
		},
	}
}

// Config wires an engine.
type Config struct {
	Store    store.Store
	Registry *registry.Registry
	Minter   *namespace.Minter
	Defaults Defaults
	// MaxPayload caps an activity's input and a result, in bytes; 0 means 2 MiB.
	MaxPayload int
	Log        *slog.Logger
	// Clock times every deadline, backoff, poll and pause of the engine, and
	// stamps what it records; nil means clock.Real().
	Clock clock.Clock
	// CommitterOptions tune the group committer.
	CommitterOptions store.CommitterOptions
	// Observer is told about lifecycle steps, for metrics; nil for none.
	Observer Observer
	// WorkflowObserver is told about workflow steps, for metrics; nil for none.
	WorkflowObserver WorkflowObserver
	// RunChanges, when set, is told of every run whose start or close has
	// become durable, in that order per run, for the event stream. It runs
	// under the engine lock: it must be quick, must not block and must not
	// call back into the engine.
	RunChanges func(RunChange)
	// MaxPendingPerNamespace caps the activities of one namespace that are
	// not closed yet; Schedule past it fails with ErrResourceExhausted. 0
	// means no cap.
	MaxPendingPerNamespace int
	// MaxInFlightPerNamespace caps the attempts of one namespace running at
	// once; more wait in their queues. 0 means no cap. In cluster mode the
	// cap holds per server.
	MaxInFlightPerNamespace int
	// MaxPendingBytesPerNamespace caps the payload bytes of one namespace's
	// activities not yet closed; Schedule past it fails with
	// ErrResourceExhausted. 0 means no cap. In cluster mode it is checked
	// against a sample taken every few seconds plus what this server
	// scheduled since.
	MaxPendingBytesPerNamespace int64
	// MaxListBytes bounds the Size of the activities of one List page; 0
	// means 4 MiB.
	MaxListBytes int
	// Cluster, when set, makes the engine one server of a cluster sharing
	// the store; nil runs it alone, holding open work in memory (a window
	// of the waiting work over a store.WaitingStore).
	Cluster *ClusterConfig
	// Tracer is told of the moments tracing makes spans of; nil (tracing
	// off) for none.
	Tracer Tracer
	// Window is how many ready activities of one fairness key of one
	// priority of one queue are held in memory, alone over a store that
	// implements store.WaitingStore; the rest wait in the store. 0 means
	// DefaultWindow.
	Window int
}

// Observer is told about activity lifecycle steps. Its methods run under the
// engine lock and must be quick and must not call back into the engine.
type Observer interface {
	// Scheduled: a new activity is durable.
	Scheduled(namespace string)
	// Started: an attempt was handed to a worker after waiting since it
	// became ready.
	Started(namespace string, waited time.Duration)
	// AttemptEnded: an attempt ended after running for ran.
	AttemptEnded(namespace string, outcome store.AttemptOutcome, ran time.Duration)
	// Retried: a failed attempt will be followed by another.
	Retried(namespace string)
	// Closed: the activity reached a terminal state.
	Closed(namespace string, state store.ActivityState)
	// Throttled: a flow limit held work back; limit is ThrottleConcurrency
	// or ThrottleRate. Alone, once per activity held; in a cluster, once
	// per claim a limit cut short.
	Throttled(namespace, limit string)
}

type noObserver struct{}

func (noObserver) Scheduled(string)                                         {}
func (noObserver) Started(string, time.Duration)                            {}
func (noObserver) AttemptEnded(string, store.AttemptOutcome, time.Duration) {}
func (noObserver) Retried(string)                                           {}
func (noObserver) Closed(string, store.ActivityState)                       {}
func (noObserver) Throttled(string, string)                                 {}

// Task is one attempt handed to a worker.
type Task struct {
	Namespace        string
	ActivityID       string
	Attempt          int
	TaskQueue        string
	ActivityType     string
	Payload          []byte
	Node             string
	ScheduledAt      time.Time
	StartedAt        time.Time
	StartToClose     time.Duration
	Heartbeat        time.Duration
	Deadline         time.Time
	HeartbeatDetails []byte
	// WorkflowID, RunID and Step name the workflow step the attempt runs;
	// empty for an activity scheduled on its own.
	WorkflowID, RunID string
	Step              int64
	// Trace is the activity's trace context; zero for none.
	Trace tracectx.Context
}

// Conn is how the engine reaches a worker; a worker's registry Delivery must
// implement it. Both calls must not block.
type Conn interface {
	// SendTask pushes one attempt to the worker.
	SendTask(Task) error
	// SendCancel asks the worker to stop one attempt.
	SendCancel(namespace, activityID string, attempt int, reason string) error
}

// key identifies an activity: ids are unique per namespace only.
type key struct{ ns, id string }

// Engine is the activity lifecycle. Create it with New, start it with
// Start, stop it with Stop.
type Engine struct {
	st         store.Store
	reg        *registry.Registry
	minter     *namespace.Minter
	commit     *store.Committer
	defaults   Defaults
	maxPayload int
	log        *slog.Logger
	clock      clock.Clock
	obs        Observer
	tracer     Tracer
	maxPending int
	maxRunning int
	// maxPendingBytes and maxListBytes are the byte caps of Config.
	maxPendingBytes int64
	maxListBytes    int

	mu         sync.Mutex
	open       map[key]*activity
	queues     map[registry.Triple]*pool
	inflight   map[registry.WorkerID]map[key]*activity
	zombies    map[registry.WorkerID]map[attemptRef]struct{}
	placements map[string]store.Placement
	// limits are the namespaces' flow limits (see limit.go).
	limits map[limitID]*flowLimit
	// wfLimits are the concurrency limits of workflow types; wfGroups the
	// admitted and held runs per concurrency key (see wflimit.go).
	wfLimits map[limitID]int
	wfGroups map[wfGroupKey]*wfGroup
	// recoveringRuns holds every unadmitted limited run while runs are
	// read back, so those admitted before a restart count first.
	recoveringRuns bool
	// pending and running count open activities and running attempts per
	// namespace, for the caps; entries are deleted at zero.
	pending map[string]int
	running map[string]int
	// pendingBytes sums the payload bytes of the open activities per
	// namespace; entries are deleted at zero.
	pendingBytes map[string]int64
	// heldPayload sums the payloads held in memory (see shedPayloadLocked);
	// heldBudget is where it stops growing: heldPayloadBudget, lowered by
	// tests so they need not write that much.
	heldPayload int
	heldBudget  int
	timers      timerHeap

	// ws pages waiting work from the store, nil when all open work is held
	// in memory (see spill.go); window is Config.Window. spilled counts the
	// open activities in the store only; spillWaiters are the Waits on
	// them. sweepAt is when the next sweep of their deadlines is armed
	// (zero for none); sweeping and sweepAgain track the one running.
	ws                   store.WaitingStore
	window               int
	pageMu               sync.Mutex
	spilled              int
	spillWaiters         map[key][]chan struct{}
	sweepAt              time.Time
	sweeping, sweepAgain bool
	// paging is set while a page read is in flight (pageMu lets one at a
	// time); leftWhilePaging holds the activities that left memory closed
	// meanwhile, which that page may have read as still waiting.
	paging          bool
	leftWhilePaging map[key]struct{}

	// Workflows: open runs by run and by workflow id, runs waiting for a
	// workflow task per workflow triple, and tasks in flight per worker.
	runs       map[runKey]*wfRun
	openWF     map[wfKey]*wfRun
	wfQueues   map[registry.Triple]*wfQueue
	wfInflight map[registry.WorkerID]map[runKey]*wfRun
	obsWF      WorkflowObserver
	runChanges func(RunChange)
	queryN     uint64
	// rc is the cluster state of runs; unused alone.
	rc *runClaims
	// compactAt is the heap size at which stale timers are swept out next.
	compactAt int
	closed    bool
	// waitsReleased makes Wait return at once: the server is stopping.
	waitsReleased bool

	timerWake chan struct{}
	stop      chan struct{}
	done      sync.WaitGroup

	// cl and claims are set in cluster mode only.
	cl     *ClusterConfig
	claims *claims
	// bgCtx bounds the store calls of background work; it ends at Stop.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// attemptRef names one attempt of one activity.
type attemptRef struct {
	key
	attempt int
}

// New returns an engine over cfg. Nothing runs until Start; Stop ends it.
func New(cfg Config) *Engine {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 2 << 20
	}
	if cfg.MaxListBytes <= 0 {
		cfg.MaxListBytes = 4 << 20
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.WorkflowObserver == nil {
		cfg.WorkflowObserver = noWorkflowObserver{}
	}
	if cfg.RunChanges == nil {
		cfg.RunChanges = func(RunChange) {}
	}
	var cl *ClusterConfig
	if cfg.Cluster != nil {
		c := *cfg.Cluster
		if c.Poll <= 0 {
			c.Poll = time.Second
		}
		if c.PreferGrace <= 0 {
			c.PreferGrace = 200 * time.Millisecond
		}
		cl = &c
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	ws, _ := cfg.Store.(store.WaitingStore)
	if cl != nil {
		ws = nil // a cluster keeps its waiting work in the store anyway
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	e := &Engine{
		cl:         cl,
		claims:     newClaims(),
		bgCtx:      bgCtx,
		bgCancel:   bgCancel,
		st:         cfg.Store,
		reg:        cfg.Registry,
		minter:     cfg.Minter,
		commit:     store.NewCommitter(cfg.Store, cfg.CommitterOptions),
		defaults:   cfg.Defaults,
		maxPayload: cfg.MaxPayload,
		log:        cfg.Log,
		clock:      cfg.Clock,
		obs:        cfg.Observer,
		tracer:     cfg.Tracer,
		maxPending: cfg.MaxPendingPerNamespace,
		maxRunning: cfg.MaxInFlightPerNamespace,
		pending:    make(map[string]int),

		maxPendingBytes: cfg.MaxPendingBytesPerNamespace,
		maxListBytes:    cfg.MaxListBytes,
		pendingBytes:    make(map[string]int64),
		running:         make(map[string]int),
		open:            make(map[key]*activity),
		queues:          make(map[registry.Triple]*pool),
		inflight:        make(map[registry.WorkerID]map[key]*activity),
		zombies:         make(map[registry.WorkerID]map[attemptRef]struct{}),
		placements:      make(map[string]store.Placement),
		limits:          make(map[limitID]*flowLimit),
		wfLimits:        make(map[limitID]int),
		wfGroups:        make(map[wfGroupKey]*wfGroup),
		heldBudget:      heldPayloadBudget,
		runs:            make(map[runKey]*wfRun),
		openWF:          make(map[wfKey]*wfRun),
		wfQueues:        make(map[registry.Triple]*wfQueue),
		wfInflight:      make(map[registry.WorkerID]map[runKey]*wfRun),
		obsWF:           cfg.WorkflowObserver,
		rc:              newRunClaims(),
		runChanges:      cfg.RunChanges,
		timerWake:       make(chan struct{}, 1),
		stop:            make(chan struct{}),
	}
	e.ws, e.window = ws, max(cfg.Window, 2)
	e.spillWaiters = make(map[key][]chan struct{})
	e.leftWhilePaging = make(map[key]struct{})
	return e
}

// Stop ends the engine's goroutines and the committer after every queued
// write is durable; open activities stay in the store for the next start.
// It returns once all of them have ended: the wait is bounded by the
// store's own timeouts, not by ctx. Stop before Start, or twice, is fine.
func (e *Engine) Stop(context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	for _, r := range e.runs {
		for _, ch := range r.waiters {
			close(ch)
		}
		r.waiters = nil
	}
	for _, a := range e.open {
		a.wakeWaiters()
	}
	e.wakeSpillWaitersLocked()
	e.mu.Unlock()
	close(e.stop)
	e.bgCancel()
	e.done.Wait()
	e.commit.Close()
	e.bg.Wait()
	return nil
}

// InFlight reports how many attempts are running on workers.
func (e *Engine) InFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, m := range e.inflight {
		n += len(m)
	}
	return n
}

// PoolBacklog is the waiting work of one (namespace, task queue) pool.
type PoolBacklog struct {
	Namespace, TaskQueue string
	// Waiting counts activities ready and waiting for a worker.
	Waiting int
	// OldestAge is how long the oldest of them has waited.
	OldestAge time.Duration
	// ByPriority counts them by priority: index 0 for priority 1.
	ByPriority [store.LowestPriority]int
}

// Backlog reports every pool with waiting work.
func (e *Engine) Backlog() []PoolBacklog {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if e.cl != nil {
		return e.clusterBacklogLocked(now)
	}
	byPool := make(map[registry.PoolAddress]*PoolBacklog)
	for t, p := range e.queues {
		for _, q := range p.byPin {
			if q.live == 0 {
				continue
			}
			b := backlogOf(byPool, t.Pool)
			b.Waiting += q.live
			for i, n := range q.liveByLane {
				b.ByPriority[i] += n
			}
			for i := range q.lanes {
				q.lanes[i].oldest(q, func(a *activity) { // the oldest still waiting of each key
					b.OldestAge = max(b.OldestAge, now.Sub(a.readyAt))
				})
			}
		}
	}
	e.heldBacklogLocked(byPool, now)
	e.spilledBacklogLocked(byPool, now)
	out := make([]PoolBacklog, 0, len(byPool))
	for _, b := range byPool {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(x, y PoolBacklog) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.TaskQueue, y.TaskQueue))
	})
	return out
}

// backlogOf returns pool's entry of byPool, made if need be.
func backlogOf(byPool map[registry.PoolAddress]*PoolBacklog, pool registry.PoolAddress) *PoolBacklog {
	b := byPool[pool]
	if b == nil {
		b = &PoolBacklog{Namespace: pool.Namespace, TaskQueue: pool.TaskQueue}
		byPool[pool] = b
	}
	return b
}

func (e *Engine) placementLocked(ns string) store.Placement { return e.placements[ns] }

// ensureNamespace authorizes nothing: callers authorize first. It mints or
// gates ns for a schedule and caches its placement.
func (e *Engine) ensureNamespace(ctx context.Context, ns string) error {
	e.mu.Lock()
	_, known := e.placements[ns]
	e.mu.Unlock()
	if known {
		return nil
	}
	recs, err := e.minter.Ensure(ctx, []string{ns}, store.OriginSchedule)
	if err != nil {
		return err
	}
	e.NoteNamespace(recs[0])
	return nil
}

// NoteNamespace records a namespace's current placement (after minting, a
// registration or a placement change) and re-runs dispatch for its queues,
// since a new placement may let waiting work through.
func (e *Engine) NoteNamespace(ns store.Namespace) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old, had := e.placements[ns.Name]
	e.placements[ns.Name] = ns.Placement.Normalize()
	if had && old.String() == ns.Placement.Normalize().String() {
		return
	}
	for t := range e.claims.tallies {
		if t.Pool.Namespace == ns.Name {
			delete(e.claims.tallies, t) // whether it may count depends on the placement
		}
	}
	for t, p := range e.queues {
		if t.Pool.Namespace != ns.Name {
			continue
		}
		for _, q := range p.byPin {
			q.match = matchFor(q.pin, e.placements[ns.Name])
			e.dispatchLocked(q)
		}
	}
}

// addOpenLocked and dropOpenLocked keep the per-namespace open count and
// payload bytes, and the bytes of payloads held in memory.
func (e *Engine) addOpenLocked(a *activity) {
	e.open[a.key()] = a
	e.pending[a.rec.Namespace]++
	e.pendingBytes[a.rec.Namespace] += int64(a.size)
	e.heldPayload += len(a.rec.Payload)
}

func (e *Engine) dropOpenLocked(a *activity) {
	k := a.key()
	if e.open[k] != a {
		return
	}
	delete(e.open, k)
	if e.paging {
		e.leftWhilePaging[k] = struct{}{}
	}
	if e.pending[k.ns]--; e.pending[k.ns] <= 0 {
		delete(e.pending, k.ns)
	}
	if e.pendingBytes[k.ns] -= int64(a.size); e.pendingBytes[k.ns] <= 0 {
		delete(e.pendingBytes, k.ns)
	}
	e.heldPayload -= len(a.rec.Payload)
}

// Payloads of open activities are held in memory only while they are small
// and few: a payload over inlinePayload bytes, or any payload once those
// held reach heldPayloadBudget, is dropped from memory once durable and read
// back from the store when an attempt starts. So a backlog of large
// payloads costs the server its metadata only, not its payloads.
const (
	inlinePayload     = 64 << 10
	heldPayloadBudget = 32 << 20
)

// shedPayloadLocked drops a's payload from memory if it should not be held
// there (alone mode only: in cluster mode waiting work is in the store).
func (e *Engine) shedPayloadLocked(a *activity) {
	n := len(a.rec.Payload)
	if e.cl != nil || n == 0 || e.open[a.key()] != a || (n <= inlinePayload && e.heldPayload <= e.heldBudget) {
		return
	}
	a.rec.Payload = nil
	e.heldPayload -= n
}

// now is the engine clock's time.
func (e *Engine) now() time.Time { return e.clock.Now() }

func (e *Engine) wakeTimers() {
	select {
	case e.timerWake <- struct{}{}:
	default:
	}
}

func (e *Engine) errClosed(op string) error { return fmt.Errorf("%s: %w", op, ErrClosed) }
