// Package metrics exposes aion's Prometheus metrics. Label sets stay
// bounded: namespaces, task queues, states and reasons, never an activity id
// or a worker id.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/reaper"
	"github.com/aion-run/aion/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Backlog is the waiting work of one pool.
type Backlog struct {
	Namespace, TaskQueue string
	Waiting              int
	OldestAge            time.Duration
	// ByPriority counts the waiting by priority: index 0 for priority 1.
	ByPriority [5]int // store.LowestPriority priorities
}

// Metrics holds every aion metric on its own registry.
type Metrics struct {
	reg *prometheus.Registry

	workers         *prometheus.GaugeVec
	disconnects     *prometheus.CounterVec
	scheduled       *prometheus.CounterVec
	started         *prometheus.CounterVec
	closed          *prometheus.CounterVec
	retried         *prometheus.CounterVec
	throttled       *prometheus.CounterVec
	scheduleToStart *prometheus.HistogramVec
	attemptDuration *prometheus.HistogramVec
	commitSeconds   prometheus.Histogram
	commitBatch     prometheus.Histogram
	grpcRequests    *prometheus.CounterVec
	grpcSeconds     *prometheus.HistogramVec

	runsStarted   *prometheus.CounterVec
	runsClosed    *prometheus.CounterVec
	historyEvents *prometheus.HistogramVec
	wfTasks       *prometheus.CounterVec
	wfCompleted   *prometheus.CounterVec
	wfFailures    *prometheus.CounterVec
	wfReplays     *prometheus.CounterVec
	taskEvents    *prometheus.HistogramVec
	taskSeconds   *prometheus.HistogramVec
	replaySeconds *prometheus.HistogramVec

	scheduleFires  *prometheus.CounterVec
	scheduleSkips  *prometheus.CounterVec
	scheduleFailed *prometheus.CounterVec

	renewFailures, leasesLost, serversReaped prometheus.Counter
	scheduleLag                              *prometheus.HistogramVec

	reaped      *prometheus.CounterVec
	reapSeconds prometheus.Histogram
}

// latency buckets from 100µs to ~100s.
var latency = prometheus.ExponentialBuckets(0.0001, 2.5, 16)

// eventCounts are buckets for numbers of history events, 1 to 65,536.
var eventCounts = prometheus.ExponentialBuckets(1, 4, 9)

// New registers every metric. backlog, when not nil, is read at each scrape
// for the backlog gauges.
func New(backlog func() []Backlog) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.workers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "aion_workers_connected",
		Help: "Workers connected, by namespace they serve."}, []string{"namespace"})
	m.disconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_worker_disconnects_total",
		Help: "Workers that left, by reason: disconnect, timeout, deregistered, drained."}, []string{"reason"})
	m.scheduled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_activities_scheduled_total",
		Help: "Activities made durable by Schedule (not counting idempotent repeats)."}, []string{"namespace"})
	m.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_attempts_started_total",
		Help: "Attempts handed to a worker."}, []string{"namespace"})
	m.closed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_activities_closed_total",
		Help: "Activities that reached a terminal state, by state: completed, failed, canceled, timed_out."}, []string{"namespace", "state"})
	m.retried = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_activities_retried_total",
		Help: "Failed attempts followed by another attempt."}, []string{"namespace"})
	m.throttled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_flow_throttled_total",
		Help: "Times a flow limit held work back, by limit: concurrency, rate. Alone, once per activity held; in a cluster, once per claim a limit cut short."},
		[]string{"namespace", "limit"})
	m.scheduleToStart = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_schedule_to_start_seconds",
		Help: "Time from an attempt becoming ready to its start on a worker.", Buckets: latency}, []string{"namespace"})
	m.attemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_attempt_duration_seconds",
		Help: "Run time of ended attempts, by outcome.", Buckets: latency}, []string{"namespace", "outcome"})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aion_store_commit_seconds",
		Help: "Duration of one group-commit transaction.", Buckets: latency})
	m.commitBatch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aion_store_commit_batch_size",
		Help: "Writes carried by one group-commit transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)})
	m.grpcRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_grpc_requests_total",
		Help: "Finished gRPC calls and streams, by method and status code."}, []string{"method", "code"})
	m.grpcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_grpc_request_seconds",
		Help: "Duration of unary gRPC calls, by method.", Buckets: latency}, []string{"method"})
	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_runs_started_total",
		Help: "Workflow runs made durable: started, children and continue-as-new runs (not idempotent repeats)."}, []string{"namespace"})
	m.runsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_runs_closed_total",
		Help: "Workflow runs whose close is durable, by status: completed, failed, canceled, terminated, continued_as_new."},
		[]string{"namespace", "status"})
	m.historyEvents = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_workflow_history_events",
		Help: "History length of workflow runs when they closed, in events.", Buckets: eventCounts}, []string{"namespace"})
	m.wfTasks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_tasks_total",
		Help: "Workflow tasks handed to a worker (including those that only answer queries)."}, []string{"namespace"})
	m.wfCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_tasks_completed_total",
		Help: "Workflow tasks whose commands were accepted."}, []string{"namespace"})
	m.wfFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_task_failures_total",
		Help: "Workflow tasks that failed, by failure type: nondeterministic, panic, sticky_cache_miss, workflow_task_timeout, bad_command, bad_history, workflow_type_not_registered, task_in_progress, workflow_task_failed, other."},
		[]string{"namespace", "type"})
	m.wfReplays = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_workflow_replays_total",
		Help: "Workflow tasks that carried the whole history of a run whose code had run before, so a worker replayed it from the top (it did not hold the run in memory)."},
		[]string{"namespace"})
	m.taskEvents = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_workflow_task_events",
		Help: "History events delivered by one workflow task.", Buckets: eventCounts}, []string{"namespace"})
	m.taskSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_workflow_task_seconds",
		Help: "Time from a workflow task sent to its worker's result arriving, whatever the outcome.", Buckets: latency},
		[]string{"namespace"})
	m.replaySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_workflow_replay_seconds",
		Help: "The same for the workflow tasks that were replays (aion_workflow_replays_total): how long a replay of the whole history took, round trip included.", Buckets: latency},
		[]string{"namespace"})
	m.scheduleFires = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_schedule_fires_total",
		Help: "Schedule ticks whose workflow or activity started, by origin: tick, catch_up, trigger, backfill, buffered (each tick counted once across the servers of a cluster)."},
		[]string{"namespace", "origin"})
	m.scheduleSkips = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_schedule_ticks_not_fired_total",
		Help: "Schedule ticks that did not fire, by reason: overlap (skipped by the overlap policy), missed (later than the catch-up window and dropped by the catch-up policy)."},
		[]string{"namespace", "reason"})
	m.scheduleFailed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_schedule_fire_failures_total",
		Help: "Schedule fires whose workflow or activity could not be started, for good."}, []string{"namespace"})
	m.scheduleLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aion_schedule_fire_lag_seconds",
		Help: "Time from the instant a schedule tick was due (its nominal time plus jitter) to its action starting.", Buckets: latency},
		[]string{"namespace"})
	m.renewFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "aion_cluster_lease_renewal_failures_total",
		Help: "Renewals of this server's cluster lease that failed; it stops once three quarters of a lease pass without one."})
	m.leasesLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "aion_cluster_leases_lost_total",
		Help: "Times this server's cluster membership ended without it leaving (its lease lost): it stops."})
	m.serversReaped = prometheus.NewCounter(prometheus.CounterOpts{Name: "aion_cluster_servers_reaped_total",
		Help: "Other servers this server removed from the cluster because their lease ran out; their work was taken over."})
	f(m.renewFailures)
	f(m.leasesLost)
	f(m.serversReaped)
	m.reaped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aion_reaped_total",
		Help: "Closed work deleted because its namespace's retention passed, by kind: activity (with its attempts), run (with its history)."},
		[]string{"namespace", "kind"})
	m.reapSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aion_reap_pass_seconds",
		Help: "Duration of one reaping pass over every namespace, pauses between batches included.", Buckets: latency})
	f(m.reaped)
	f(m.reapSeconds)
	for _, c := range []prometheus.Collector{m.workers, m.disconnects, m.scheduled, m.started, m.closed, m.retried, m.throttled,
		m.scheduleToStart, m.attemptDuration, m.commitSeconds, m.commitBatch, m.grpcRequests, m.grpcSeconds,
		m.runsStarted, m.runsClosed, m.historyEvents, m.wfTasks, m.wfCompleted, m.wfFailures, m.wfReplays, m.taskEvents, m.taskSeconds, m.replaySeconds,
		m.scheduleFires, m.scheduleSkips, m.scheduleFailed, m.scheduleLag,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	if backlog != nil {
		f(&backlogCollector{read: backlog})
	}
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// NamespaceWorkers sets the connected-worker gauge of a namespace.
func (m *Metrics) NamespaceWorkers(ns string, n int) {
	if n == 0 {
		m.workers.DeleteLabelValues(ns)
		return
	}
	m.workers.WithLabelValues(ns).Set(float64(n))
}

// WorkerLeft counts a departure by reason.
func (m *Metrics) WorkerLeft(reason string) { m.disconnects.WithLabelValues(reason).Inc() }

// Scheduled counts a newly durable activity.
func (m *Metrics) Scheduled(ns string) { m.scheduled.WithLabelValues(ns).Inc() }

// Started counts an attempt start and how long it waited.
func (m *Metrics) Started(ns string, waited time.Duration) {
	m.started.WithLabelValues(ns).Inc()
	m.scheduleToStart.WithLabelValues(ns).Observe(waited.Seconds())
}

// AttemptEnded records an attempt's run time by outcome.
func (m *Metrics) AttemptEnded(ns string, outcome store.AttemptOutcome, ran time.Duration) {
	m.attemptDuration.WithLabelValues(ns, string(outcome)).Observe(ran.Seconds())
}

// Retried counts a failed attempt that will be tried again.
func (m *Metrics) Retried(ns string) { m.retried.WithLabelValues(ns).Inc() }

// Closed counts an activity reaching a terminal state.
func (m *Metrics) Closed(ns string, state store.ActivityState) {
	m.closed.WithLabelValues(ns, string(state)).Inc()
}

// Throttled counts a flow limit holding work back.
func (m *Metrics) Throttled(ns, limit string) { m.throttled.WithLabelValues(ns, limit).Inc() }

// Workflows returns the workflow metrics, for the engine's WorkflowObserver.
func (m *Metrics) Workflows() *Workflows { return &Workflows{m: m} }

// Workflows records workflow runs and tasks. It implements
// engine.WorkflowObserver (its methods have different names from the
// activity ones on Metrics, and Metrics.Closed would clash).
type Workflows struct{ m *Metrics }

// RunStarted counts a run made durable.
func (w *Workflows) RunStarted(ns string) { w.m.runsStarted.WithLabelValues(ns).Inc() }

// RunClosed counts a run's durable close by status and records its history
// length.
func (w *Workflows) RunClosed(ns string, status store.RunStatus, events int) {
	w.m.runsClosed.WithLabelValues(ns, string(status)).Inc()
	w.m.historyEvents.WithLabelValues(ns).Observe(float64(events))
}

// TaskStarted counts a workflow task handed to a worker, the events it
// carries, and whether it carries the whole history.
func (w *Workflows) TaskStarted(ns string, replay bool, events int) {
	w.m.wfTasks.WithLabelValues(ns).Inc()
	if replay {
		w.m.wfReplays.WithLabelValues(ns).Inc()
	}
	w.m.taskEvents.WithLabelValues(ns).Observe(float64(events))
}

// TaskCompleted counts a workflow task whose commands were accepted.
func (w *Workflows) TaskCompleted(ns string) { w.m.wfCompleted.WithLabelValues(ns).Inc() }

// taskFailureTypes are the workflow task failure types counted by name:
// the engine's own (workflow_task_timeout, bad_command) and those the Go
// workflow SDK reports. A worker may give any type, so the rest are counted
// as "other" to keep the label bounded.
var taskFailureTypes = map[string]bool{
	"nondeterministic": true, "panic": true, "sticky_cache_miss": true, "workflow_task_timeout": true, "bad_command": true,
	"bad_history": true, "workflow_type_not_registered": true, "task_in_progress": true, "workflow_task_failed": true,
}

// TaskFailed counts a failed workflow task by failure type.
func (w *Workflows) TaskFailed(ns, failureType string) {
	if !taskFailureTypes[failureType] {
		failureType = "other"
	}
	w.m.wfFailures.WithLabelValues(ns, failureType).Inc()
}

// TaskLatency records the time from a workflow task sent to its result.
func (w *Workflows) TaskLatency(ns string, took time.Duration, replay bool) {
	w.m.taskSeconds.WithLabelValues(ns).Observe(took.Seconds())
	if replay {
		w.m.replaySeconds.WithLabelValues(ns).Observe(took.Seconds())
	}
}

// Leases returns the cluster lease metrics, for the membership's Observer.
func (m *Metrics) Leases() *Leases { return &Leases{m: m} }

// Leases records what happens to cluster leases. It implements
// cluster.Observer.
type Leases struct{ m *Metrics }

// RenewFailed counts a failed renewal of this server's lease.
func (l *Leases) RenewFailed() { l.m.renewFailures.Inc() }

// LeaseLost counts this server's membership ending without it leaving.
func (l *Leases) LeaseLost() { l.m.leasesLost.Inc() }

// Reaped counts servers this server removed after their lease ran out.
func (l *Leases) Reaped(n int) { l.m.serversReaped.Add(float64(n)) }

// Reaping returns the retention metrics, for the reaper's Observer.
func (m *Metrics) Reaping() *Reaping { return &Reaping{m: m} }

// Reaping records what the reaper deletes. It implements reaper.Observer.
type Reaping struct{ m *Metrics }

// Reaped counts n rows of kind deleted from namespace ns.
func (r *Reaping) Reaped(ns string, kind reaper.Kind, n int) {
	r.m.reaped.WithLabelValues(ns, string(kind)).Add(float64(n))
}

// Passed records the duration of a reaping pass.
func (r *Reaping) Passed(p reaper.Pass) { r.m.reapSeconds.Observe(p.Took.Seconds()) }

// Schedules returns the schedule metrics, for the scheduler's Observer.
func (m *Metrics) Schedules() *Schedules { return &Schedules{m: m} }

// Schedules records what schedules do. It implements scheduler.Observer.
type Schedules struct{ m *Metrics }

// Fired counts a tick whose action started, by origin, and the lag from
// the instant it was due.
func (s *Schedules) Fired(ns, origin string, lag time.Duration) {
	s.m.scheduleFires.WithLabelValues(ns, origin).Inc()
	s.m.scheduleLag.WithLabelValues(ns).Observe(lag.Seconds())
}

// Skipped counts ticks the overlap policy skipped.
func (s *Schedules) Skipped(ns string, n int) {
	s.m.scheduleSkips.WithLabelValues(ns, "overlap").Add(float64(n))
}

// Missed counts ticks the catch-up policy dropped.
func (s *Schedules) Missed(ns string, n int) {
	s.m.scheduleSkips.WithLabelValues(ns, "missed").Add(float64(n))
}

// Failed counts a fire that could not start its action.
func (s *Schedules) Failed(ns string) { s.m.scheduleFailed.WithLabelValues(ns).Inc() }

// Commit records one group-commit transaction.
func (m *Metrics) Commit(batch int, took time.Duration) {
	m.commitBatch.Observe(float64(batch))
	m.commitSeconds.Observe(took.Seconds())
}

// UnaryInterceptor counts and times unary calls.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		method := shortMethod(info.FullMethod)
		m.grpcSeconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
		m.grpcRequests.WithLabelValues(method, status.Code(err).String()).Inc()
		return resp, err
	}
}

// StreamInterceptor counts finished streams. A handler that returns one of
// goesOn has left its stream open: StreamEnded counts it when it ends.
func (m *Metrics) StreamInterceptor(goesOn ...error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		for _, e := range goesOn {
			if errors.Is(err, e) {
				return err
			}
		}
		m.StreamEnded(info.FullMethod, err)
		return err
	}
}

// StreamEnded counts a finished stream of fullMethod that ended with err.
func (m *Metrics) StreamEnded(fullMethod string, err error) {
	m.grpcRequests.WithLabelValues(shortMethod(fullMethod), status.Code(err).String()).Inc()
}

// shortMethod turns /aion.v1.ActivityService/Schedule into ActivityService/Schedule.
func shortMethod(full string) string {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full, "/"); i > 0 {
		svc := full[:i]
		if j := strings.LastIndex(svc, "."); j >= 0 {
			svc = svc[j+1:]
		}
		return svc + full[i:]
	}
	return full
}

type backlogCollector struct{ read func() []Backlog }

var (
	backlogDesc = prometheus.NewDesc("aion_backlog_activities",
		"Activities ready and waiting for a worker, by pool.", []string{"namespace", "task_queue"}, nil)
	backlogAgeDesc = prometheus.NewDesc("aion_backlog_oldest_age_seconds",
		"How long the oldest waiting activity of a pool has waited.", []string{"namespace", "task_queue"}, nil)
	backlogPriorityDesc = prometheus.NewDesc("aion_backlog_by_priority_activities",
		"Activities ready and waiting for a worker, by pool and priority (1 first … 5 last); only priorities with work.",
		[]string{"namespace", "task_queue", "priority"}, nil)
)

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- backlogAgeDesc
	ch <- backlogPriorityDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.read() {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(b.Waiting), b.Namespace, b.TaskQueue)
		ch <- prometheus.MustNewConstMetric(backlogAgeDesc, prometheus.GaugeValue, b.OldestAge.Seconds(), b.Namespace, b.TaskQueue)
		for i, n := range b.ByPriority {
			if n > 0 {
				ch <- prometheus.MustNewConstMetric(backlogPriorityDesc, prometheus.GaugeValue, float64(n), b.Namespace, b.TaskQueue,
					strconv.Itoa(i+1))
			}
		}
	}
}
