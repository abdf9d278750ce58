package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/tracectx"
)

// Request asks for one activity to be scheduled. Zero timeouts and retry
// fields take the engine's defaults.
type Request struct {
	Namespace string
	// ID makes scheduling idempotent; empty means the engine picks one.
	ID           string
	TaskQueue    string
	ActivityType string
	Node         string
	Payload      []byte
	Timeouts     store.Timeouts
	Retry        store.RetryPolicy
	// StartDelay or StartAt (at most one) delay the activity's start: it is
	// durable at once and ready only then. A StartAt in the past is now.
	StartDelay time.Duration
	StartAt    time.Time
	// Priority orders ready work within a pool: 1 first, 5 last; 0 means 3.
	Priority int
	// Flow carries the fairness and concurrency keys.
	Flow store.Flow
	// Origin names the schedule tick that asks for the activity; only the
	// scheduler sets it.
	Origin store.ScheduleOrigin
	// Trace is the trace context the activity's spans join; zero for none.
	// It is kept with the activity and handed to the worker with each
	// attempt, and is no part of the fingerprint.
	Trace tracectx.Context
}

// Scheduled is the outcome of one Request.
type Scheduled struct {
	Activity store.Activity
	// Existing is true when the id was already scheduled by the same request.
	Existing bool
	Err      error
}

// Schedule makes one activity durable and queues it for dispatch. It returns
// once the activity is durable. Scheduling the same id again with the same
// request returns the existing activity; with a different request it fails
// with ErrAlreadyExists.
func (e *Engine) Schedule(ctx context.Context, caller namespace.Identity, r Request) (store.Activity, bool, error) {
	out := e.ScheduleBatch(ctx, caller, []Request{r})
	return out[0].Activity, out[0].Existing, out[0].Err
}

// slot is one request's progress through ScheduleBatch.
type slot struct {
	done chan struct{} // closed when res is final
	res  Scheduled
	// lookup: the id exists durably (closed); compare against the store.
	lookup bool
	// wait: another request in flight is creating this id; wait for it.
	wait *activity
	rec  store.Activity
}

// ScheduleBatch schedules every request, committing them together, and
// returns one result per request in order. A refused request does not affect
// the others.
func (e *Engine) ScheduleBatch(ctx context.Context, caller namespace.Identity, reqs []Request) []Scheduled {
	ctx = namespace.OneRequest(ctx) // the batch's mints share one per-request cap
	slots := make([]*slot, len(reqs))
	for i, r := range reqs {
		s := &slot{done: make(chan struct{})}
		slots[i] = s
		rec, err := e.prepare(ctx, caller, r)
		if err != nil {
			s.res.Err = err
			close(s.done)
			continue
		}
		s.rec = rec
		e.reserve(s)
	}
	out := make([]Scheduled, len(reqs))
	for i, s := range slots {
		select {
		case <-s.done:
		case <-ctx.Done():
			out[i].Err = fmt.Errorf("schedule: %w", ctx.Err())
			continue
		}
		if s.wait != nil {
			s.res = e.awaitCreation(ctx, s.wait, s.rec)
		}
		if s.lookup {
			s.res = e.compareDurable(ctx, s.rec)
		}
		out[i] = s.res
	}
	return out
}

// reserve claims the id in memory and submits the insert, or finds the open
// activity that already holds it.
func (e *Engine) reserve(s *slot) {
	k := key{s.rec.Namespace, s.rec.ID}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		s.res.Err = e.errClosed("schedule")
		close(s.done)
		return
	}
	if a := e.open[k]; a != nil {
		s.wait = a
		close(s.done)
		return
	}
	if e.maxPending > 0 && e.pendingLocked(k.ns) >= e.maxPending {
		s.res.Err = fmt.Errorf("schedule: namespace %q has %d activities not yet closed, its cap (--max-pending-per-namespace): %w",
			k.ns, e.pendingLocked(k.ns), ErrResourceExhausted)
		close(s.done)
		return
	}
	size := len(s.rec.Payload)
	if held := e.pendingBytesLocked(k.ns); e.maxPendingBytes > 0 && held+int64(size) > e.maxPendingBytes {
		s.res.Err = fmt.Errorf("schedule: payload: namespace %q holds %d payload bytes in activities not yet closed; "+
			"%d more would pass its cap of %d (--max-pending-bytes-per-namespace): %w",
			k.ns, held, size, e.maxPendingBytes, ErrResourceExhausted)
		close(s.done)
		return
	}
	counted := e.cl != nil && (e.maxPending > 0 || e.maxPendingBytes > 0) // taken off at the next sample after it commits
	if counted {
		e.claims.scheduled[k.ns]++
		e.claims.scheduledBytes[k.ns] += int64(size)
	}
	a := &activity{rec: s.rec, creating: make(chan struct{}), size: size}
	e.addOpenLocked(a)
	e.insertLocked(s, a, counted, e.directWorkerLocked(a, e.now()))
}

// insertLocked submits the insert of a, reserved for s, and settles s once
// it is durable. With w set (cluster mode, see directWorkerLocked) the
// activity is inserted running on w and starts once durable; if the store
// did not insert it so (its id is in use, or this server is no member
// any more) it is inserted again as waiting work.
func (e *Engine) insertLocked(s *slot, a *activity, counted bool, w *registry.Worker) {
	k := a.key()
	size := a.size
	spill := e.spillsLocked(a, e.now())
	inWindow := !spill && e.ws != nil && !a.rec.ReadyAt.After(e.now())
	if inWindow {
		e.insertingLocked(&a.rec, 1)
	}
	write := store.InsertActivity{Activity: s.rec, Spilled: spill}
	if w != nil {
		write.Start = e.insertStartLocked(k.ns, w)
	}
	e.commit.Submit(write, func(created bool, err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if w != nil && e.settleStartLocked(k.ns, w, created, err) {
			e.insertLocked(s, a, counted, nil)
			return
		}
		defer close(s.done)
		if inWindow {
			e.insertingLocked(&a.rec, -1)
		}
		creating := a.creating
		a.creating = nil
		defer close(creating)
		if counted {
			if err == nil && created {
				e.claims.committed[k.ns]++
				e.claims.committedBytes[k.ns] += int64(size)
			} else {
				e.claims.scheduled[k.ns]--
				e.claims.scheduledBytes[k.ns] -= int64(size)
			}
		}
		switch {
		case err != nil:
			e.dropOpenLocked(a)
			s.res.Err = fmt.Errorf("schedule activity %q in namespace %q: %w", k.id, k.ns, err)
		case !created:
			// The id belongs to an activity closed before this server
			// started; it is in the store only.
			e.dropOpenLocked(a)
			s.lookup = true
		case w != nil:
			s.res.Activity = a.rec
			e.obs.Scheduled(k.ns)
			e.startInsertedLocked(a, w)
		default:
			s.res.Activity = a.rec
			e.obs.Scheduled(k.ns)
			now := e.now()
			if spill {
				e.spillLocked(a, now)
				return
			}
			if t := a.rec.Timeouts.ScheduleToClose; t > 0 && e.cl == nil {
				e.armLocked(a.rec.ScheduledAt.Add(t), k, 0, timerScheduleToClose)
			}
			if a.rec.ReadyAt.After(now) && e.cl == nil {
				e.armLocked(a.rec.ReadyAt, k, 0, timerReady) // a delayed start
			} else {
				e.readyLocked(a, now)
			}
			e.shedPayloadLocked(a)
		}
	})
}

// awaitCreation answers a request whose id an open activity already holds.
func (e *Engine) awaitCreation(ctx context.Context, a *activity, want store.Activity) Scheduled {
	e.mu.Lock()
	creating := a.creating
	e.mu.Unlock()
	if creating != nil {
		select {
		case <-creating:
		case <-ctx.Done():
			return Scheduled{Err: fmt.Errorf("schedule: %w", ctx.Err())}
		}
	}
	e.mu.Lock()
	got := a.rec
	lost := e.open[key{got.Namespace, got.ID}] != a && !got.State.Terminal()
	e.mu.Unlock()
	if got.Payload == nil {
		// Not held in memory; the same request (same fingerprint) has the
		// same payload.
		got.Payload = want.Payload
	}
	if lost { // its insert failed, or the id belongs to a closed record
		return e.compareDurable(ctx, want)
	}
	return sameRequest(got, want)
}

func (e *Engine) compareDurable(ctx context.Context, want store.Activity) Scheduled {
	got, err := e.st.GetActivity(ctx, want.Namespace, want.ID)
	if err != nil {
		return Scheduled{Err: fmt.Errorf("schedule activity %q in namespace %q: %w", want.ID, want.Namespace, err)}
	}
	return sameRequest(got, want)
}

func sameRequest(got, want store.Activity) Scheduled {
	if got.Fingerprint != want.Fingerprint {
		return Scheduled{Err: fmt.Errorf("id: activity %q already exists in namespace %q with a different request: %w",
			want.ID, want.Namespace, ErrAlreadyExists)}
	}
	return Scheduled{Activity: got, Existing: true}
}

// prepare validates and authorizes a request and builds its record.
func (e *Engine) prepare(ctx context.Context, caller namespace.Identity, r Request) (store.Activity, error) {
	if err := validate(r, e.maxPayload); err != nil {
		return store.Activity{}, fmt.Errorf("schedule: %w", err)
	}
	if err := namespace.Authorize(caller, r.Namespace); err != nil {
		return store.Activity{}, fmt.Errorf("schedule: %w", err)
	}
	if err := e.ensureNamespace(ctx, r.Namespace); err != nil {
		return store.Activity{}, fmt.Errorf("schedule: %w", err)
	}
	if r.Node != "" {
		e.mu.Lock()
		p := e.placementLocked(r.Namespace)
		e.mu.Unlock()
		if p.Mode == store.Pinned && !slices.Contains(p.Nodes, r.Node) {
			return store.Activity{}, fmt.Errorf("schedule: node: %q is outside namespace %q's placement %s, so no worker could run it: %w",
				r.Node, r.Namespace, p, ErrFailedPrecondition)
		}
	}
	now := e.now().UTC()
	id := r.ID
	if id == "" {
		id = newID(now)
	}
	ready := now
	switch {
	case r.StartDelay > 0:
		ready = now.Add(r.StartDelay)
	case r.StartAt.After(now):
		ready = r.StartAt.UTC()
	}
	timeouts := e.timeouts(r.Timeouts)
	if wait := ready.Sub(now); wait > 0 {
		if r.Timeouts.ScheduleToClose == 0 {
			// The default life counts from when the activity is ready.
			timeouts.ScheduleToClose += wait
		} else if r.Timeouts.ScheduleToClose <= wait {
			return store.Activity{}, fmt.Errorf("schedule: schedule_to_close_timeout: %v ends before the delayed start %v from now; raise it or leave it unset: %w",
				r.Timeouts.ScheduleToClose, wait, ErrInvalid)
		}
	}
	return store.Activity{
		Namespace:    r.Namespace,
		ID:           id,
		TaskQueue:    registry.Pool(r.Namespace, r.TaskQueue).TaskQueue,
		ActivityType: r.ActivityType,
		Node:         r.Node,
		Payload:      r.Payload,
		PayloadSize:  len(r.Payload),
		Fingerprint:  fingerprint(r),
		Timeouts:     timeouts,
		Retry:        e.retry(r.Retry),
		Priority:     store.EffectivePriority(r.Priority),
		Flow:         effectiveFlow(r.Flow),
		Origin:       r.Origin,
		Trace:        r.Trace,
		State:        store.StateScheduled,
		ScheduledAt:  now,
		ReadyAt:      ready,
	}, nil
}

func validate(r Request, maxPayload int) error {
	checks := []error{
		name.Check("namespace", r.Namespace, name.MaxName),
		name.Check("activity_type", r.ActivityType, name.MaxName),
		name.CheckOptional("task_queue", r.TaskQueue, name.MaxName),
		name.CheckOptional("node", r.Node, name.MaxName),
		name.CheckOptional("id", r.ID, name.MaxID),
	}
	for _, err := range checks {
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
	}
	if len(r.Payload) > maxPayload {
		return fmt.Errorf("payload: %d bytes, at most %d allowed: %w", len(r.Payload), maxPayload, ErrResourceExhausted)
	}
	if n := len(r.Retry.NonRetryableErrorTypes); n > limit.NonRetryableTypes {
		return fmt.Errorf("retry_policy.non_retryable_error_types: %d given, at most %d allowed: %w", n, limit.NonRetryableTypes, ErrInvalid)
	}
	for i, t := range r.Retry.NonRetryableErrorTypes {
		if err := limit.Check(fmt.Sprintf("retry_policy.non_retryable_error_types[%d]", i), t, limit.FailureType); err != nil {
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"schedule_to_start_timeout", r.Timeouts.ScheduleToStart},
		{"start_to_close_timeout", r.Timeouts.StartToClose},
		{"schedule_to_close_timeout", r.Timeouts.ScheduleToClose},
		{"heartbeat_timeout", r.Timeouts.Heartbeat},
		{"retry_policy.initial_interval", r.Retry.InitialInterval},
		{"retry_policy.maximum_interval", r.Retry.MaximumInterval},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: %v is negative: %w", d.field, d.v, ErrInvalid)
		}
	}
	if c := r.Retry.BackoffCoefficient; c != 0 && c < 1 {
		return fmt.Errorf("retry_policy.backoff_coefficient: %v, want at least 1: %w", c, ErrInvalid)
	}
	if r.StartDelay < 0 {
		return fmt.Errorf("start_delay: %v is negative: %w", r.StartDelay, ErrInvalid)
	}
	if r.StartDelay > 0 && !r.StartAt.IsZero() {
		return fmt.Errorf("start_delay: %v given with start_time %s; give at most one: %w", r.StartDelay, r.StartAt.Format(time.RFC3339), ErrInvalid)
	}
	if err := validateFlow(r.Priority, r.Flow, r.Origin); err != nil {
		return err
	}
	if err := r.Trace.Validate("trace_context"); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if r.Retry.MaximumAttempts < 0 {
		return fmt.Errorf("retry_policy.maximum_attempts: %d is negative: %w", r.Retry.MaximumAttempts, ErrInvalid)
	}
	if r.Retry.MaximumInterval > 0 && r.Retry.InitialInterval > r.Retry.MaximumInterval {
		return fmt.Errorf("retry_policy.maximum_interval: %v is below initial_interval %v: %w",
			r.Retry.MaximumInterval, r.Retry.InitialInterval, ErrInvalid)
	}
	return nil
}

// validateFlow checks the priority, flow keys and schedule origin a
// request for an activity or a run carries.
func validateFlow(priority int, f store.Flow, o store.ScheduleOrigin) error {
	if priority != 0 && (priority < store.HighestPriority || priority > store.LowestPriority) {
		return fmt.Errorf("priority: %d, want 1 (first) to 5 (last), or 0 for the default 3: %w", priority, ErrInvalid)
	}
	for _, err := range []error{
		name.CheckOptional("fairness_key", f.FairnessKey, name.MaxName),
		name.CheckOptional("concurrency_key", f.ConcurrencyKey, name.MaxName),
		name.CheckOptional("schedule_id", o.ScheduleID, name.MaxID),
	} {
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
	}
	if w := f.FairnessWeight; w < 0 || w > store.MaxFairnessWeight {
		return fmt.Errorf("fairness_weight: %d, want 1 to %d, or 0 for the default 1: %w", w, store.MaxFairnessWeight, ErrInvalid)
	}
	return nil
}

// effectiveFlow is f with its defaults filled in.
func effectiveFlow(f store.Flow) store.Flow {
	f.FairnessWeight = store.EffectiveWeight(f.FairnessWeight)
	return f
}

func (e *Engine) timeouts(t store.Timeouts) store.Timeouts {
	d := e.defaults.Timeouts
	if t.ScheduleToClose == 0 {
		t.ScheduleToClose = d.ScheduleToClose
	}
	if t.ScheduleToStart == 0 {
		t.ScheduleToStart = d.ScheduleToStart
		if t.ScheduleToClose > 0 && t.ScheduleToStart > t.ScheduleToClose {
			t.ScheduleToStart = t.ScheduleToClose
		}
	}
	if t.StartToClose == 0 {
		t.StartToClose = d.StartToClose
		if t.ScheduleToClose > 0 && t.StartToClose > t.ScheduleToClose {
			t.StartToClose = t.ScheduleToClose
		}
	}
	if t.Heartbeat == 0 {
		t.Heartbeat = d.Heartbeat
	}
	return t
}

func (e *Engine) retry(p store.RetryPolicy) store.RetryPolicy {
	d := e.defaults.Retry
	if p.InitialInterval == 0 {
		p.InitialInterval = d.InitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = d.BackoffCoefficient
	}
	if p.MaximumInterval == 0 {
		p.MaximumInterval = max(d.MaximumInterval, p.InitialInterval)
	}
	if p.MaximumAttempts == 0 {
		p.MaximumAttempts = d.MaximumAttempts
	}
	return p
}

// fingerprint identifies a request by everything the caller chose, so a
// retry of the same call matches even if server defaults changed meanwhile.
func fingerprint(r Request) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, s := range []string{r.Namespace, r.ID, registry.Pool(r.Namespace, r.TaskQueue).TaskQueue, r.ActivityType, r.Node} {
		field([]byte(s))
	}
	field(r.Payload)
	for _, d := range []time.Duration{r.Timeouts.ScheduleToStart, r.Timeouts.StartToClose, r.Timeouts.ScheduleToClose,
		r.Timeouts.Heartbeat, r.Retry.InitialInterval, r.Retry.MaximumInterval} {
		field(binary.BigEndian.AppendUint64(nil, uint64(d)))
	}
	field(fmt.Appendf(nil, "%v/%d/%q", r.Retry.BackoffCoefficient, r.Retry.MaximumAttempts, r.Retry.NonRetryableErrorTypes))
	if r.StartDelay != 0 || !r.StartAt.IsZero() {
		// A delayed start is part of the request; an undelayed one keeps
		// the fingerprint of before delays existed.
		field(fmt.Appendf(nil, "start %d %d", r.StartDelay, r.StartAt.UnixNano()))
	}
	if p := store.EffectivePriority(r.Priority); p != store.DefaultPriority {
		field(fmt.Appendf(nil, "priority %d", p)) // likewise for the default priority
	}
	if f := effectiveFlow(r.Flow); f != (store.Flow{FairnessWeight: 1}) {
		field(fmt.Appendf(nil, "flow %q %d %q", f.FairnessKey, f.FairnessWeight, f.ConcurrencyKey))
	}
	if o := r.Origin; o.ScheduleID != "" {
		field(fmt.Appendf(nil, "origin %q %d", o.ScheduleID, o.Time.UnixNano()))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// newID returns a 32-hex-digit id that sorts by its creation time now (the
// layout of a UUIDv7: 48 bits of milliseconds, then random bits), so the
// store's index on ids grows at its end instead of being written all over.
func newID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:])
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return hex.EncodeToString(b[:])
}
