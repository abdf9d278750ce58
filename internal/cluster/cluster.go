// Package cluster is one server's part in a cluster: several aion servers
// sharing one store (store.Cluster). It holds the server's membership (a
// lease it renews, and stops on losing), reaps the servers whose lease ran
// out, publishes the directory of its workers that the others read, acts on
// the notices the others send, and carries the calls one server makes to
// another (cancel, drain, intervene).
//
// A Membership follows the same start/stop pattern as the server and the
// engine: New builds it and starts nothing, Start starts the goroutines it
// owns, and Stop returns once every one of them has ended. Joining and
// leaving the cluster are the store writes around it (Join, Leave), so a
// server can learn its ID before it builds what the membership acts on.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
)

// workerIDBlock is how many worker IDs each server start reserves: a server
// numbers its workers from its ID times this, so a worker ID names one
// worker across the cluster and across restarts.
const workerIDBlock = 1_000_000_000

// FirstWorkerID is the first worker ID the server with this ID hands out.
func FirstWorkerID(id store.ServerID) registry.WorkerID {
	return registry.WorkerID(id)*workerIDBlock + 1
}

// Self is this server's membership as Join recorded it.
type Self struct {
	store.ServerRecord
	// Lease is how long the membership lasts without a renewal.
	Lease time.Duration
	// JoinSent is when the join was sent: the lease runs from no earlier.
	JoinSent time.Time
}

// Join records this server as a cluster member. When a previous server of
// the same name has not been reaped yet (a restart after a crash), the
// store takes over at once if it can prove that server's process gone (see
// store.Cluster.JoinCluster); otherwise Join retries, reaping meanwhile, up
// to one and a half leases for that lease to run out; past that the error
// wraps store.ErrNameTaken. log may be nil.
func Join(ctx context.Context, st store.Cluster, r store.JoinRequest, log *slog.Logger) (Self, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	deadline := time.Now().Add(r.Lease + r.Lease/2)
	// The first retries come soon: a killed process's database session
	// ends a moment after it, and then the name is free at once.
	pause := joinRetry
	for warned := false; ; warned = true {
		sent := time.Now()
		rec, err := st.JoinCluster(ctx, r)
		if err == nil {
			// A previous member of the name let the join through because
			// its lease ran out; it is reaped now, not at some other
			// server's next pass, so its work goes back at once.
			if _, err := st.ReapServers(ctx); err != nil {
				log.Warn("reap expired servers", "err", err)
			}
			return Self{ServerRecord: rec, Lease: r.Lease, JoinSent: sent}, nil
		}
		if !errors.Is(err, store.ErrNameTaken) || time.Now().After(deadline) {
			return Self{}, fmt.Errorf("%w; give each server its own --server-name", err)
		}
		if !warned {
			log.Warn("another server holds this name; waiting for it to be gone or its lease to end", "server_name", r.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return Self{}, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, max(r.Lease/4, joinRetry))
		if _, err := st.ReapServers(ctx); err != nil {
			log.Warn("reap expired servers", "err", err)
		}
	}
}

// joinRetry is the first pause before Join tries a taken name again.
const joinRetry = 50 * time.Millisecond

// Leave ends the membership: whatever this server still runs is handed to
// the other servers now, rather than after its lease. A membership that was
// already reaped is no error.
func Leave(ctx context.Context, st store.Cluster, self Self) error {
	if err := st.LeaveCluster(ctx, self.ID); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	return nil
}

// Engine is what a membership tells the engine.
type Engine interface {
	// NewWork says work may be waiting for these triples (all when nil).
	NewWork(triples []registry.Triple)
	// CancelOwned cancels an activity this server runs, for another server.
	CancelOwned(namespace, id, reason string)
	// NoteNamespace records a namespace another server created or changed.
	NoteNamespace(ns store.Namespace)
	// NoteFlowLimits records the flow limits of a namespace, as the store
	// holds them after another server's change.
	NoteFlowLimits(ns string, limits []store.FlowLimit)
}

// NamespaceReader reads the namespace records and flow limits other
// servers write.
type NamespaceReader interface {
	store.NamespaceStore
	store.FlowStore
}

// Registry is what a membership reads and drains of this server's workers.
type Registry interface {
	Workers() []registry.WorkerInfo
	Lookup(id registry.WorkerID) (registry.WorkerInfo, bool)
	IsRegistered(id registry.WorkerID) bool
	Drain(id registry.WorkerID) bool
}

// Minter caches namespace records; a membership feeds it the records other
// servers wrote.
type Minter interface {
	Note(ns store.Namespace)
}

// Deps is everything a membership acts on. Every field is required but Log.
type Deps struct {
	// Self is this server's membership, from Join.
	Self Self
	// Store is the shared store; Namespaces reads the namespace records
	// and their flow limits
	// other servers create or change (usually the same store).
	Store      store.Cluster
	Namespaces NamespaceReader
	Engine     Engine
	Registry   Registry
	Minter     Minter
	// Bus is this server's event bus: the other servers' workers and
	// namespaces are published on it.
	Bus *events.Bus
	// Intervene delivers an intervention another server forwarded to the
	// worker of this server that runs the attempt.
	Intervene func(r *aionv1.InterveneRequest) (*aionv1.InterveneResponse, error)
	// Lost is told, once, that the membership ended without this server
	// leaving (its lease could not be renewed in time, or was reaped). The
	// server must then stop: the others are taking its work over.
	Lost func(err error)
	// Observer is told of lease renewals that failed and of servers reaped
	// after their lease ran out, for metrics; nil for none.
	Observer Observer
	Log      *slog.Logger
}

// Observer is told what happens to leases. Its methods must be quick.
type Observer interface {
	// RenewFailed: a renewal of this server's lease failed (it is tried
	// again until three quarters of the lease have passed).
	RenewFailed()
	// LeaseLost: this server's membership ended without it leaving.
	LeaseLost()
	// Reaped: this server removed n servers whose lease ran out.
	Reaped(n int)
}

type noObserver struct{}

func (noObserver) RenewFailed() {}
func (noObserver) LeaseLost()   {}
func (noObserver) Reaped(int)   {}

// Membership is this server's part in a cluster.
type Membership struct {
	d   Deps
	log *slog.Logger

	notices chan store.Notice
	// missed is set when the notice buffer overflowed: everything is
	// re-read on the next pass.
	missed atomic.Bool

	callsMu  sync.Mutex
	calls    map[int64]chan store.Message
	nextCall atomic.Int64

	// remote holds the workers of the other servers as the bus last heard
	// of them; only the notice loop touches it.
	remote map[registry.WorkerID]registry.WorkerInfo
	// lostServers names the servers reaped since the last topology pass:
	// their workers leave with reason server_lost.
	lostServers map[string]bool
	// goneReasons carries why a remote worker left, from its server's notice.
	goneReasons map[registry.WorkerID]registry.Reason

	dirMu    sync.Mutex
	dirQueue []func(context.Context) error
	dirWake  chan struct{}
	// published holds the slot usage last written per local worker; only
	// the directory loop touches it.
	published map[registry.WorkerID]int

	// Start and Stop.
	lifeMu  sync.Mutex
	started bool
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a membership over d. Nothing runs until Start.
func New(d Deps) *Membership {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Observer == nil {
		d.Observer = noObserver{}
	}
	return &Membership{
		d:           d,
		log:         d.Log,
		notices:     make(chan store.Notice, 4096),
		calls:       make(map[int64]chan store.Message),
		remote:      make(map[registry.WorkerID]registry.WorkerInfo),
		lostServers: make(map[string]bool),
		goneReasons: make(map[registry.WorkerID]registry.Reason),
		dirWake:     make(chan struct{}, 1),
		published:   make(map[registry.WorkerID]int),
	}
}

// Self is this server's membership.
func (m *Membership) Self() Self { return m.d.Self }

// Start starts the membership's goroutines: lease renewal, reaping, notice
// listening and handling, and the worker directory. They run until Stop; the
// first notice pass reads everything the other servers published. Starting
// twice is an error.
func (m *Membership) Start(context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.started {
		return errors.New("cluster membership: started twice")
	}
	m.started = true
	ctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	m.wg.Add(5)
	go func() { defer m.wg.Done(); m.renew(ctx) }()
	go func() { defer m.wg.Done(); m.reap(ctx) }()
	go func() {
		defer m.wg.Done()
		_ = m.d.Store.ListenNotices(ctx, m.d.Self.ID, func(n store.Notice) {
			select {
			case m.notices <- n:
			default:
				m.missed.Store(true)
			}
		})
	}()
	go func() { defer m.wg.Done(); m.handleNotices(ctx) }()
	go func() { defer m.wg.Done(); m.writeDirectory(ctx) }()
	m.notices <- store.Notice{Kind: store.NoticeReconnected} // first pass: read what exists
	return nil
}

// Stop ends the membership's goroutines and returns once they all have, or
// when ctx ends (with its error; they are told to end either way). It does
// not leave the cluster: the server leaves (Leave) once its engine stopped,
// so its last results are written while it still owns their activities.
// Stop before Start, or twice, is fine.
func (m *Membership) Stop(ctx context.Context) error {
	m.lifeMu.Lock()
	stop := m.stop
	m.lifeMu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop cluster membership: %w", ctx.Err())
	}
}

// renew extends the lease four times per lease period. A lease another
// server reaped, or one not renewed for three quarters of a lease period,
// ends this server: it stops before the others may reap it and retry its
// running attempts. The lease is counted from when a renewal was sent, which
// is never later than when the database extended it.
func (m *Membership) renew(ctx context.Context) {
	lease := m.d.Self.Lease
	t := time.NewTicker(lease / 8) // fine enough to stop close to the deadline
	defer t.Stop()
	last := m.d.Self.JoinSent // the last renewal that succeeded, as sent
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		if !failing && sent.Sub(last) < lease/4 {
			continue
		}
		deadline := last.Add(lease * 3 / 4)
		callEnd := sent.Add(lease / 4)
		if deadline.Before(callEnd) {
			callEnd = deadline
		}
		rctx, cancel := context.WithDeadline(ctx, callEnd)
		err := m.d.Store.RenewLease(rctx, m.d.Self.ID, lease)
		cancel()
		switch {
		case err == nil:
			last, failing = sent, false
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrLeaseLost) || !time.Now().Before(deadline):
			m.d.Observer.RenewFailed()
			m.d.Observer.LeaseLost()
			m.d.Lost(fmt.Errorf("cluster membership of server %q (%d) ended: %w", m.d.Self.Name, m.d.Self.ID, err))
			return
		default:
			m.d.Observer.RenewFailed()
			if !failing { // once per outage; the deadline decides the rest
				m.log.Warn("renew cluster lease failed; retrying", "err", err,
					"stop_in", time.Until(deadline).Round(time.Millisecond))
			}
			failing = true
		}
	}
}

// reap removes servers whose lease ran out, twice per lease period.
func (m *Membership) reap(ctx context.Context) {
	lease := m.d.Self.Lease
	t := time.NewTicker(max(lease/2, 100*time.Millisecond))
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, lease)
		reaped, err := m.d.Store.ReapServers(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !failing {
				m.log.Warn("reap expired servers failed; retrying", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		if len(reaped) > 0 {
			m.d.Observer.Reaped(len(reaped))
		}
		for _, r := range reaped {
			m.log.Warn("server lost: its lease ran out", "server_name", r.Server.Name, "server_id", r.Server.ID,
				"requeued_attempts", r.Requeued, "canceled", r.Canceled, "workers", len(r.Workers))
		}
	}
}
