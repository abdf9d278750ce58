// Package server is aion's edge: the gRPC services (worker stream, activity,
// namespace, cluster), gRPC health and reflection, and the HTTP side
// (health, readiness, metrics, the JSON API, the event stream, the console).
// It wires the store, the namespace plane, the registry, the engine and, on a
// shared store, the cluster membership together, and maps their errors to
// gRPC status codes.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/cluster"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/h2"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/metrics"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/reaper"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/scheduler"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"github.com/aion-run/aion/internal/store/sqlite"
	"github.com/aion-run/aion/internal/tracing"
	"github.com/aion-run/aion/web"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

// Server is one running aion server: on SQLite alone, on PostgreSQL a
// member of a cluster (a cluster of one when alone).
//
// Server, engine and cluster membership share one life cycle: New builds and
// starts nothing that runs, Start starts the goroutines the value owns, and
// Stop returns once every one of them has ended.
type Server struct {
	cfg     Config
	log     *slog.Logger
	st      store.Store
	where   string // the store, for the log
	minter  *namespace.Minter
	reg     *registry.Registry
	eng     *engine.Engine
	sched   *scheduler.Scheduler
	bus     *events.Bus
	runs    *runFeed
	metrics *metrics.Metrics
	authn   auth.Authenticator
	tls     *tls.Config
	// tracing is the OpenTelemetry SDK when Config.Tracing is on; nil
	// (tracing off) otherwise, and every traced path checks for nil first.
	tracing *tracing.Tracing

	// reaper deletes expired closed work; nil when reaping is off.
	reaper *reaper.Reaper

	// receiving bounds the requests being received at once; clientStreams
	// names the methods whose caller sends a stream of messages.
	receiving     *receiveBudget
	receiveRate   *receiveRate
	decoder       *decoder
	asides        asides // deep work of worker streams, off their goroutines
	clientStreams map[string]bool

	grpc *grpc.Server
	// lean serves worker streams on the gRPC listener, handing every other
	// connection to grpc through handoff; nil when grpc serves them all.
	lean    *h2.Server
	handoff *h2.Handoff
	// The interceptors both transports run, and the methods registered.
	unaryIntercept  grpc.UnaryServerInterceptor
	streamIntercept grpc.StreamServerInterceptor
	methods         map[string]method
	health          *health.Server
	http            *http.Server
	grpcLis         net.Listener
	// refusedOpen counts refused calls whose context has not ended yet.
	refusedOpen atomic.Int64
	httpLis     net.Listener
	bg          sync.WaitGroup
	stopBG      context.CancelFunc
	serving     sync.WaitGroup
	serveErr    chan error

	connsMu sync.Mutex
	conns   map[registry.WorkerID]*conn

	// cluster is this server's cluster membership and self what Join
	// recorded; cluster is nil on SQLite.
	cluster *cluster.Membership
	self    cluster.Self

	ready        atomic.Bool
	shuttingDown atomic.Bool
	clusterLost  atomic.Bool
	drainUntil   atomic.Int64
	stopOnce     sync.Once
	stopErr      error
	httpOpen     atomic.Int64 // HTTP connections open
}

// New checks cfg (Config.Validate), opens the store and the listeners, joins
// the cluster when the store is shared, and wires the parts together.
// Nothing is served until Start. Once New succeeded the caller must call
// Stop, whether or not Start ran or succeeded.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, bus: events.New(), runs: newRunFeed(), conns: make(map[registry.WorkerID]*conn),
		serveErr: make(chan error, 3)}
	if err := s.open(ctx); err != nil {
		s.release(context.WithoutCancel(ctx))
		return nil, err
	}
	s.wire()
	return s, nil
}

// open acquires what the server holds: the key files, the store, the
// listeners and, on a shared store, its cluster membership.
func (s *Server) open(ctx context.Context) error {
	var err error
	if s.authn, err = newAuthenticator(s.cfg.Auth); err != nil {
		return err
	}
	if s.tls, err = loadTLS(s.cfg); err != nil {
		return err
	}
	if s.tracing, err = tracing.Start(ctx, s.cfg.Tracing, s.log); err != nil {
		return err
	}
	if s.tracing != nil {
		s.log.Info("tracing on: exporting spans over OTLP", "protocol", s.cfg.Tracing.Protocol)
	}
	// The store before the listeners: a data directory another server
	// holds is refused before this one takes any port.
	if s.st, s.where, err = openStore(ctx, s.cfg, s.log); err != nil {
		return err
	}
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen for gRPC on %s: %w", s.cfg.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", s.cfg.HTTPAddr, err)
	}
	cl, ok := s.st.(store.Cluster)
	if !ok {
		return nil
	}
	name := cmp.Or(s.cfg.ServerName, defaultServerName(s.grpcLis.Addr()))
	s.self, err = cluster.Join(ctx, cl, store.JoinRequest{Name: name, Addr: s.grpcLis.Addr().String(), Lease: s.cfg.Lease}, s.log)
	if err != nil {
		return err
	}
	s.log = s.log.With("server_name", name)
	s.log.Info("joined cluster", "server_id", s.self.ID, "lease", s.cfg.Lease)
	return nil
}

// release lets go of what open acquired, in reverse: the cluster membership
// (whatever this server still runs is handed over at once), the listeners,
// the store.
func (s *Server) release(ctx context.Context) error {
	var errs []error
	if s.self.ID != 0 {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		errs = append(errs, cluster.Leave(lctx, s.st.(store.Cluster), s.self))
	}
	for _, l := range []net.Listener{s.grpcLis, s.httpLis} {
		if l != nil {
			_ = l.Close() // closed already once served
		}
	}
	if s.st != nil {
		errs = append(errs, s.st.Close())
	}
	// Last, so the spans of the work finished above are exported; a
	// collector that does not answer holds the shutdown up 5s at most, and
	// spans it missed are no reason to fail the shutdown.
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.tracing.Shutdown(tctx); err != nil {
		s.log.Warn("spans not exported at shutdown", "err", err)
	}
	return errors.Join(errs...)
}

// wire builds the parts over what open acquired: metrics, namespace minter,
// worker registry, engine, cluster membership, and the gRPC and HTTP
// servers. Nothing runs yet.
func (s *Server) wire() {
	cfg := s.cfg
	s.metrics = metrics.New(s.backlog)
	s.minter = namespace.NewMinter(s.st, cfg.AutoCreate, s.namespaceCreated)
	s.minter.SetLimits(namespace.Limits{PerRequest: cfg.MaxMintPerRequest, Total: cfg.MaxNamespaces})
	regOpts := registry.Options{Admission: s.minter, Hooks: s.registryHooks()}
	var clusterCfg *engine.ClusterConfig
	cl, clustered := s.st.(store.Cluster)
	if clustered {
		regOpts.Server, regOpts.FirstID = s.self.Name, cluster.FirstWorkerID(s.self.ID)
		clusterCfg = &engine.ClusterConfig{Store: cl, Self: s.self.ID,
			ForwardCancel: func(ctx context.Context, owner store.ServerID, ns, id, reason string) {
				s.cluster.ForwardCancel(ctx, owner, ns, id, reason)
			}}
	}
	s.reg = registry.New(regOpts)
	var tracer engine.Tracer // a nil interface, not a nil pointer in one: the engine checks for nil
	if s.tracing != nil {
		tracer = engineTracer{s.tracing}
	}
	s.eng = engine.New(engine.Config{
		Tracer:                  tracer,
		Cluster:                 clusterCfg,
		Store:                   s.st,
		Registry:                s.reg,
		Minter:                  s.minter,
		Defaults:                engine.DefaultDefaults(),
		MaxPayload:              limit.Payload,
		Log:                     s.log,
		Observer:                s.metrics,
		WorkflowObserver:        s.metrics.Workflows(),
		RunChanges:              s.runs.add,
		MaxPendingPerNamespace:  cfg.MaxPendingPerNamespace,
		MaxInFlightPerNamespace: cfg.MaxInFlightPerNamespace,
		CommitterOptions:        store.CommitterOptions{Observe: s.metrics.Commit},

		MaxPendingBytesPerNamespace: cfg.MaxPendingBytesPerNamespace,
		MaxListBytes:                cfg.MaxListBytes,
	})
	s.sched = scheduler.New(scheduler.Config{Store: s.st, Engine: s.eng, Namespaces: s.minter, Log: s.log.With("part", "scheduler"),
		Observer: s.metrics.Schedules(), MaxPayload: limit.Payload, Events: s.publishFire})
	if cfg.ReapInterval > 0 {
		s.reaper = reaper.New(reaper.Config{Store: s.st, Interval: cfg.ReapInterval,
			Observer: s.metrics.Reaping(), Log: s.log.With("part", "reaper")})
	}
	if clustered {
		s.cluster = cluster.New(cluster.Deps{Self: s.self, Store: cl, Namespaces: s.st, Engine: s.eng,
			Registry: s.reg, Minter: s.minter, Bus: s.bus, Intervene: s.deliverIntervention,
			Lost: s.lostCluster, Observer: s.metrics.Leases(), Log: s.log})
	}
	s.grpc = s.grpcServer()
	s.lean, s.handoff = s.leanTransport()
	s.http = httpServer(s.httpAuth(s.httpMux()), cfg.Conn, &s.httpOpen)
	if s.tls != nil {
		s.httpLis = tls.NewListener(s.httpLis, s.tls)
	}
}

// namespaceCreated is told by the minter about every namespace it created.
func (s *Server) namespaceCreated(ns store.Namespace) {
	s.log.Info("namespace created", "namespace", ns.Name, "origin", ns.Origin)
	s.eng.NoteNamespace(ns)
	s.bus.Publish(namespaceEvent(events.NamespaceCreated, ns))
	if s.cluster != nil {
		s.cluster.AnnounceNamespace(ns.Name)
	}
}

// registryHooks publish worker arrivals, drains and departures on the bus,
// in the metrics and, in a cluster, to the other servers.
func (s *Server) registryHooks() registry.Hooks {
	return registry.Hooks{
		Connected: func(w registry.WorkerInfo) {
			s.bus.Publish(events.Event{Kind: events.WorkerConnected, Worker: &w})
			if s.cluster != nil {
				s.cluster.WorkerChanged(w)
			}
		},
		Draining: func(w registry.WorkerInfo) {
			s.log.Info("worker draining", "worker", w.ID)
			s.bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &w})
			if s.cluster != nil {
				s.cluster.WorkerChanged(w)
			}
		},
		Disconnected: func(w registry.WorkerInfo, reason registry.Reason) {
			s.metrics.WorkerLeft(string(reason))
			s.bus.Publish(events.Event{Kind: events.WorkerDisconnected, Worker: &w, Reason: reason})
			if s.cluster != nil {
				s.cluster.WorkerLeft(w, reason)
			}
		},
		NamespaceWorkers: s.metrics.NamespaceWorkers,
	}
}

// lostCluster is told that this server's cluster membership ended without it
// leaving: it stops, as Err reports.
func (s *Server) lostCluster(err error) {
	s.clusterLost.Store(true)
	s.log.Error("stopping: this server is no longer a cluster member", "err", err)
	select {
	case s.serveErr <- err:
	default:
	}
}

// grpcServer builds the gRPC server with every service registered.
func (s *Server) grpcServer() *grpc.Server {
	s.receiving = newReceiveBudget(s.cfg.MaxReceiveMemory)
	rate := s.cfg.MaxReceiveRate
	if s.cfg.Auth.Mode == "" || s.cfg.Auth.Mode == "none" {
		rate = 0 // every caller is the same anonymous one: nobody to tell apart
	}
	s.receiveRate = newReceiveRate(rate, time.Now)
	s.decoder = newDecoder(&s.asides)
	s.unaryIntercept = s.metrics.UnaryInterceptor()
	s.streamIntercept = chainStream(s.metrics.StreamInterceptor(h2.ErrDetached), s.streamDecode)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit.Message),
		grpc.MaxHeaderListSize(limit.Metadata),
		grpc.InTapHandle(s.admitCall),
		grpc.ForceServerCodecV2(s.decoder),
		grpc.UnaryInterceptor(s.unaryIntercept),
		grpc.StreamInterceptor(s.streamIntercept),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	opts = append(opts, connectionOptions(s.cfg.Conn)...)
	switch {
	case s.cfg.Conn.WorkerTransport == WorkerTransportLean && s.tls != nil:
		opts = append(opts, grpc.Creds(handedCreds{credentials.NewTLS(s.tls)})) // the lean transport shakes hands first
	case s.cfg.Conn.WorkerTransport == WorkerTransportLean:
	case s.tls != nil:
		opts = append(opts, grpc.Creds(s.guarded(credentials.NewTLS(s.tls))))
	default:
		opts = append(opts, grpc.Creds(s.guarded(insecure.NewCredentials())))
	}
	s.grpc = grpc.NewServer(opts...)
	s.register(&aionv1.WorkerService_ServiceDesc, &workerService{s: s})
	s.register(&aionv1.ActivityService_ServiceDesc, &activityService{s: s})
	s.register(&aionv1.WorkflowService_ServiceDesc, &workflowService{s: s})
	s.register(&aionv1.NamespaceService_ServiceDesc, &namespaceService{s: s})
	s.register(&aionv1.ClusterService_ServiceDesc, &clusterService{s: s})
	s.register(&aionv1.ScheduleService_ServiceDesc, &scheduleService{s: s})
	s.health = health.NewServer()
	s.register(&healthpb.Health_ServiceDesc, s.health)
	// Reflection is registered as the other services are, so a connection
	// the lean transport serves answers it too.
	reflectOn := reflection.ServerOptions{Services: s.grpc}
	s.register(&reflectionv1.ServerReflection_ServiceDesc, reflection.NewServerV1(reflectOn))
	s.register(&reflectionv1alpha.ServerReflection_ServiceDesc, reflection.NewServer(reflectOn))
	s.clientStreams = make(map[string]bool)
	for svc, info := range s.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			s.clientStreams["/"+svc+"/"+m.Name] = m.IsClientStream
		}
	}
	return s.grpc
}

// httpMux routes the HTTP side: health, readiness, metrics, the JSON API,
// the console, and Go profiles when asked for.
func (s *Server) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() || s.shuttingDown.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", s.metrics.Handler())
	s.routeAPI(mux)
	web.Mount(mux) // the ops console: "/" and "/assets/"
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Start recovers the open work, starts the engine, the cluster membership
// and the server's own goroutines, and serves gRPC and HTTP. On an error
// the caller still calls Stop.
func (s *Server) Start(ctx context.Context) error {
	namespaces, err := s.st.ListNamespaces(ctx)
	if err != nil {
		return err
	}
	s.bus.Seed(namespaces)
	if err := s.eng.Start(ctx); err != nil {
		return err
	}
	if s.cluster != nil {
		if err := s.cluster.Start(ctx); err != nil {
			return err
		}
		s.log.Info("store opened", "store", s.where, "mode", "cluster: open work stays in the store, claimed per worker")
	} else {
		s.log.Info("store opened", "store", s.where)
	}
	// Every server runs the scheduler; on a shared store their
	// compare-and-set decisions and the ticks' deterministic action ids
	// keep each tick to one fire.
	if err := s.sched.Start(ctx); err != nil {
		return err
	}
	if s.reaper != nil {
		if err := s.reaper.Start(ctx); err != nil {
			return err
		}
	}

	bgCtx, stop := context.WithCancel(context.Background())
	s.stopBG = stop
	s.bg.Add(3)
	go s.sweep(bgCtx)
	go s.publishPoolStats(bgCtx, time.Second)
	go s.publishRuns(bgCtx)
	s.serving.Add(2)
	go func() {
		defer s.serving.Done()
		if s.lean == nil {
			if err := s.grpc.Serve(s.grpcLis); err != nil {
				s.failed(err)
			}
			return
		}
		s.serving.Go(func() {
			if err := s.lean.Serve(s.grpcLis); !errors.Is(err, h2.ErrServerClosed) {
				s.failed(err)
			}
		})
		if err := s.grpc.Serve(s.handoff); err != nil {
			s.failed(err)
		}
	}()
	go func() {
		defer s.serving.Done()
		if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
			s.failed(err)
		}
	}()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.ready.Store(true)
	s.log.Info("serving", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String())
	return nil
}

// failed reports a listener that stopped serving on Err.
func (s *Server) failed(err error) {
	select {
	case s.serveErr <- err:
	default:
	}
}

// openStore opens the configured store and says where it is, for the log.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, string, error) {
	if cfg.Store != "" {
		st, err := postgres.Open(ctx, cfg.Store)
		if err != nil {
			return nil, "", err
		}
		return st, "postgres " + redact(cfg.Store), nil
	}
	path := filepath.Join(cfg.DataDir, "aion.db")
	mode := cmp.Or(cfg.SQLiteSync, "full")
	st, err := sqlite.Open(ctx, path, sqlite.WithSynchronous(mode), sqlite.WithAcceptDataLoss(cfg.AcceptDataLoss))
	if errors.Is(err, sqlite.ErrDataLoss) {
		return nil, "", fmt.Errorf("%w. Refusing to start: restore the data directory from a backup, "+
			"or start once with --accept-data-loss to run on what is there", err)
	}
	if errors.Is(err, sqlite.ErrLocked) {
		return nil, "", fmt.Errorf("%w: stop it, or use another --data-dir", err)
	}
	if err != nil {
		return nil, "", err
	}
	if loss := st.AcceptedLoss(); loss != nil {
		lost := loss.Lost()
		log.Error("starting on a damaged database, accepting the loss (--accept-data-loss)", "err", loss,
			"lost_commits", lost.Commits, "lost_writes", lost.Writes, "lost_activities", lost.Activities)
	} else if cfg.AcceptDataLoss {
		log.Warn("--accept-data-loss is set: a missing, empty or damaged database would start without refusing; remove it once the loss is accepted")
	}
	// Log the mode SQLite applies, read back, not the one asked for.
	applied, err := st.Synchronous(ctx)
	if err != nil {
		st.Close()
		return nil, "", err
	}
	return st, "sqlite " + path + " synchronous=" + applied, nil
}

// redact drops the password from a URL before it is logged.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// GRPCAddr is the address the gRPC services listen on.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the address the HTTP side listens on.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Registry exposes the connected-worker registry (for tests and tooling).
func (s *Server) Registry() *registry.Registry { return s.reg }

// Err returns a channel that yields an error if a listener fails.
func (s *Server) Err() <-chan error { return s.serveErr }

func (s *Server) drainDeadline() time.Time {
	if n := s.drainUntil.Load(); n > 0 {
		return time.Unix(0, n)
	}
	return time.Now().Add(s.cfg.DrainTimeout)
}

// Stop drains: new streams are refused, every worker is asked to drain,
// and in-flight attempts get up to the drain timeout (or until ctx ends) to
// finish. Whatever is still running then is recorded as lost and retried on
// the next start (in a cluster, at once on another server). Then the
// listeners, the goroutines, the engine and the store stop, and the server
// leaves its cluster. Stop returns once everything it started has ended;
// calling it again returns the first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	s.shuttingDown.Store(true)
	s.health.Shutdown()
	s.drain(ctx)
	s.bus.Close()          // ends Watch streams and event-stream requests
	s.eng.ReleaseWaiters() // ends Wait long polls; clients retry on the next server
	s.connsMu.Lock()
	for _, c := range s.conns {
		c.end(status.Error(codes.Unavailable, "server is shutting down"))
	}
	s.connsMu.Unlock()
	stopped := make(chan struct{})
	leanCtx, leanStop := context.WithCancel(context.Background())
	defer leanStop()
	go func() {
		var wg sync.WaitGroup
		if s.lean != nil {
			wg.Go(func() { _ = s.lean.Shutdown(leanCtx) })
		}
		s.grpc.GracefulStop()
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		leanStop()
		s.grpc.Stop()
		<-stopped
	}
	s.asides.close()
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer hcancel()
	herr := s.http.Shutdown(hctx)
	s.serving.Wait()
	if s.stopBG != nil {
		s.stopBG()
	}
	s.bg.Wait()
	// The scheduler stops before the engine it starts work through; a fire
	// it decided and had not carried out is carried out after a restart or
	// by another server.
	serr := s.sched.Stop(ctx)
	var rerr error
	if s.reaper != nil {
		rerr = s.reaper.Stop(ctx)
	}
	// The membership's loops stop before the engine, and the server leaves
	// only after it: its last results are written while it still owns
	// their activities, and whatever still runs is then handed over at once.
	var cerr error
	if s.cluster != nil {
		cerr = s.cluster.Stop(ctx)
	}
	eerr := s.eng.Stop(ctx)
	return errors.Join(herr, serr, rerr, cerr, eerr, s.release(context.WithoutCancel(ctx)))
}

// drain asks every worker to drain and waits, up to the drain timeout or
// until ctx ends, for their attempts to finish and their streams to close.
func (s *Server) drain(ctx context.Context) {
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	if s.clusterLost.Load() {
		// Other servers are taking this one's work over; results here
		// could not be written, so there is nothing to wait for.
		deadline = time.Now()
	}
	s.drainUntil.Store(deadline.UnixNano())
	asked := s.reg.DrainAll()
	s.log.Info("draining", "workers", asked, "in_flight", s.eng.InFlight(), "timeout", s.cfg.DrainTimeout)

	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.eng.InFlight() > 0 || s.connected() > 0 {
		select {
		case <-dctx.Done():
			s.log.Warn("drain timeout reached; unfinished attempts will be retried after restart",
				"in_flight", s.eng.InFlight(), "workers", s.connected())
			return
		case <-tick.C:
		}
	}
}

// defaultServerName is the host name and the gRPC port, which tells servers
// on one host apart (and stays within the name rules: a host name has at
// most 64 bytes of letters, digits, '-' and '.').
func defaultServerName(addr net.Addr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "aion"
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		return fmt.Sprintf("%s:%d", host, ta.Port)
	}
	return host
}

// Run starts a server with cfg and serves until ctx ends or the server
// fails, then stops it. It is what `aion server` and `aion dev` run.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Dev {
		log.Warn("dev mode: authorization is off, every caller may use every namespace", "data_dir", cfg.DataDir)
	}
	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
		log.Info("soft memory limit set", "bytes", cfg.MemoryLimit)
	}
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return errors.Join(err, s.Stop(context.WithoutCancel(ctx)))
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout)
	case err = <-s.Err():
		log.Error("stopping after a failure", "err", err)
	}
	return errors.Join(err, s.Stop(context.WithoutCancel(ctx)))
}

// backlog adapts the engine's backlog for the metrics collector.
func (s *Server) backlog() []metrics.Backlog {
	var out []metrics.Backlog
	for _, b := range s.eng.Backlog() {
		out = append(out, metrics.Backlog{Namespace: b.Namespace, TaskQueue: b.TaskQueue, Waiting: b.Waiting, OldestAge: b.OldestAge,
			ByPriority: b.ByPriority})
	}
	return out
}

// Events exposes the cluster event bus.
func (s *Server) Events() *events.Bus { return s.bus }

func (s *Server) track(id registry.WorkerID, c *conn) {
	s.connsMu.Lock()
	s.conns[id] = c
	s.connsMu.Unlock()
}

func (s *Server) untrack(id registry.WorkerID) {
	s.connsMu.Lock()
	delete(s.conns, id)
	s.connsMu.Unlock()
}

func (s *Server) connected() int {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return len(s.conns)
}
