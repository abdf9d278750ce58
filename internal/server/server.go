// Package server is aion's edge: the gRPC services (worker stream, activity,
// namespace), gRPC health and reflection, and the HTTP side (health and
// readiness). It wires the store, the namespace plane, the registry and the
// engine together, and maps their errors to gRPC status codes.
package server

import (
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/engine"
	"github.com/aion-run/aion/internal/events"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/metrics"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/registry"
	"github.com/aion-run/aion/internal/store"
	"github.com/aion-run/aion/internal/store/postgres"
	"github.com/aion-run/aion/internal/store/sqlite"
	"github.com/aion-run/aion/web"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Server is one running aion node.
type Server struct {
	cfg     Config
	log     *slog.Logger
	st      store.Store
	minter  *namespace.Minter
	reg     *registry.Registry
	eng     *engine.Engine
	bus     *events.Bus
	metrics *metrics.Metrics
	authn   auth.Authenticator

	// receiving bounds the requests being received at once; clientStreams
	// names the methods whose caller sends a stream of messages.
	receiving     *receiveBudget
	decoder       *decoder
	clientStreams map[string]bool

	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	bg       sync.WaitGroup
	stopBG   context.CancelFunc
	serveErr chan error

	connsMu sync.Mutex
	conns   map[registry.WorkerID]*conn

	// member is this server's cluster membership; nil on SQLite.
	member *member

	ready        atomic.Bool
	shuttingDown atomic.Bool
	memberLost   atomic.Bool
	drainUntil   atomic.Int64
	stopOnce     sync.Once
	httpOpen     atomic.Int64 // HTTP connections open
}

// Start opens the store, recovers open activities, and starts serving. The
// caller must call Shutdown.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.HeartbeatWindow <= 0 {
		return nil, fmt.Errorf("heartbeat window: %v, want more than zero", cfg.HeartbeatWindow)
	}
	if cfg.DrainTimeout < 0 {
		return nil, fmt.Errorf("drain timeout: %v is negative", cfg.DrainTimeout)
	}
	if cfg.SQLiteSync == "" {
		cfg.SQLiteSync = "full"
	}
	if err := checkExposure(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Conn.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxPendingBytesPerNamespace < 0 || cfg.MaxListBytes < 0 {
		return nil, fmt.Errorf("--max-pending-bytes-per-namespace %d / --max-list-bytes %d: must not be negative",
			cfg.MaxPendingBytesPerNamespace, cfg.MaxListBytes)
	}
	authn, err := newAuthenticator(cfg.Auth)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Lease < 300*time.Millisecond {
		return nil, fmt.Errorf("--lease: %v, want at least 300ms", cfg.Lease)
	}
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for gRPC on %s: %w", cfg.GRPCAddr, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return nil, fmt.Errorf("listen for HTTP on %s: %w", cfg.HTTPAddr, err)
	}
	st, where, err := openStore(ctx, cfg, log)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, st: st, conns: make(map[registry.WorkerID]*conn),
		bus: events.New(), authn: authn, grpcLis: grpcLis, httpLis: httpLis}
	fail := func(error) {
		grpcLis.Close()
		httpLis.Close()
		st.Close()
	}
	var regOpts registry.Options
	var clusterCfg *engine.ClusterConfig
	if cl, ok := st.(store.Cluster); ok {
		name := cfg.ServerName
		if name == "" {
			name = defaultServerName(grpcLis.Addr())
		}
		if err := checkServerName(name); err != nil {
			fail(err)
			return nil, err
		}
		if s.member, err = joinCluster(ctx, s, cl, name, grpcLis.Addr().String(), cfg.Lease); err != nil {
			fail(err)
			return nil, err
		}
		regOpts.Server = name
		regOpts.FirstID = registry.WorkerID(s.member.self.ID)*workerIDBlock + 1
		clusterCfg = &engine.ClusterConfig{Store: cl, Self: s.member.self.ID, ForwardCancel: s.member.forwardCancel}
		log = log.With("server_name", name)
		s.log = log
		log.Info("joined cluster", "server_id", s.member.self.ID, "lease", cfg.Lease)
	}
	s.metrics = metrics.New(s.backlog)
	s.minter = namespace.NewMinter(st, cfg.AutoCreate, func(ns store.Namespace) {
		s.log.Info("namespace created", "namespace", ns.Name, "origin", ns.Origin)
		s.eng.NoteNamespace(ns)
		s.bus.Publish(namespaceEvent(events.NamespaceCreated, ns))
		if s.member != nil {
			s.member.announceNamespace(ns.Name)
		}
	})
	s.minter.SetLimits(namespace.Limits{PerRequest: cfg.MaxMintPerRequest, Total: cfg.MaxNamespaces})
	regOpts.Admission = s.minter
	regOpts.Hooks = registry.Hooks{
		Connected: func(w registry.WorkerInfo) {
			s.bus.Publish(events.Event{Kind: events.WorkerConnected, Worker: &w})
			if s.member != nil {
				s.member.putWorker(w)
			}
		},
		Draining: func(w registry.WorkerInfo) {
			s.log.Info("worker draining", "worker", w.ID)
			s.bus.Publish(events.Event{Kind: events.WorkerDraining, Worker: &w})
			if s.member != nil {
				s.member.putWorker(w)
			}
		},
		Disconnected: func(w registry.WorkerInfo, reason registry.Reason) {
			s.metrics.WorkerLeft(string(reason))
			s.bus.Publish(events.Event{Kind: events.WorkerDisconnected, Worker: &w, Reason: reason})
			if s.member != nil {
				s.member.workerLeft(w, reason)
			}
		},
		NamespaceWorkers: s.metrics.NamespaceWorkers,
	}
	s.reg = registry.New(regOpts)
	s.eng = engine.New(engine.Config{
		Cluster:                 clusterCfg,
		Store:                   st,
		Registry:                s.reg,
		Minter:                  s.minter,
		Defaults:                engine.DefaultDefaults(),
		MaxPayload:              limit.Payload,
		Log:                     log,
		Observer:                s.metrics,
		MaxPendingPerNamespace:  cfg.MaxPendingPerNamespace,
		MaxInFlightPerNamespace: cfg.MaxInFlightPerNamespace,
		CommitterOptions:        store.CommitterOptions{Observe: s.metrics.Commit},

		MaxPendingBytesPerNamespace: cfg.MaxPendingBytesPerNamespace,
		MaxListBytes:                cfg.MaxListBytes,
	})
	stopEarly := func(err error) (*Server, error) {
		s.eng.Close()
		if s.member != nil {
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.member.cl.Leave(lctx, s.member.self.ID)
		}
		fail(err)
		return nil, err
	}
	namespaces, err := st.ListNamespaces(ctx)
	if err != nil {
		return stopEarly(err)
	}
	s.bus.Seed(namespaces)
	n, err := s.eng.Recover(ctx)
	if err != nil {
		return stopEarly(err)
	}
	if s.member != nil {
		log.Info("store opened", "store", where, "mode", "cluster: open work stays in the store, claimed per worker")
	} else {
		log.Info("store opened", "store", where, "open_activities", n)
	}

	s.receiving = newReceiveBudget(cfg.MaxReceiveMemory)
	s.decoder = newDecoder()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit.Message),
		grpc.MaxHeaderListSize(limit.Metadata),
		grpc.InTapHandle(s.admitCall),
		grpc.ForceServerCodecV2(s.decoder),
		grpc.ChainUnaryInterceptor(s.metrics.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.metrics.StreamInterceptor(), s.streamDecode),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	opts = append(opts, connectionOptions(cfg.Conn)...)
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
		s.httpLis = tls.NewListener(s.httpLis, tlsConfig)
	}
	s.grpc = grpc.NewServer(opts...)
	s.register(&aionv1.WorkerService_ServiceDesc, &workerService{s: s})
	s.register(&aionv1.ActivityService_ServiceDesc, &activityService{s: s})
	s.register(&aionv1.NamespaceService_ServiceDesc, &namespaceService{s: s})
	s.register(&aionv1.ClusterService_ServiceDesc, &clusterService{s: s})
	s.health = health.NewServer()
	s.register(&healthpb.Health_ServiceDesc, s.health)
	reflection.Register(s.grpc)
	s.clientStreams = make(map[string]bool)
	for svc, info := range s.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			s.clientStreams["/"+svc+"/"+m.Name] = m.IsClientStream
		}
	}

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
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.http = httpServer(s.httpAuth(mux), cfg.Conn, &s.httpOpen)

	bgCtx, stop := context.WithCancel(context.Background())
	s.stopBG = stop
	s.serveErr = make(chan error, 3)
	s.bg.Add(2)
	go s.sweep(bgCtx)
	go s.publishPoolStats(bgCtx, time.Second)
	if s.member != nil {
		s.member.start(bgCtx, &s.bg, func(err error) {
			s.memberLost.Store(true)
			log.Error("stopping: this server is no longer a cluster member", "err", err)
			select {
			case s.serveErr <- err:
			default:
			}
		})
	}
	go func() { s.serveErr <- s.grpc.Serve(s.grpcLis) }()
	go func() {
		if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr <- err
		}
	}()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.ready.Store(true)
	log.Info("serving", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String())
	return s, nil
}

// openStore opens the configured store and says where it is, for the log.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, string, error) {
	switch {
	case cfg.Store == "":
		path := filepath.Join(cfg.DataDir, "aion.db")
		st, err := sqlite.Open(ctx, path, sqlite.WithSynchronous(cfg.SQLiteSync), sqlite.WithAcceptDataLoss(cfg.AcceptDataLoss))
		if errors.Is(err, sqlite.ErrDataLoss) {
			return nil, "", fmt.Errorf("%w. Refusing to start: restore the data directory from a backup, "+
				"or start once with --accept-data-loss to run on what is there", err)
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
		mode, err := st.Synchronous(ctx)
		if err != nil {
			st.Close()
			return nil, "", err
		}
		return st, "sqlite " + path + " synchronous=" + mode, nil
	case strings.HasPrefix(cfg.Store, "postgres://"), strings.HasPrefix(cfg.Store, "postgresql://"):
		st, err := postgres.Open(ctx, cfg.Store)
		if err != nil {
			return nil, "", err
		}
		return st, "postgres " + redact(cfg.Store), nil
	}
	return nil, "", fmt.Errorf("--store %q: want empty (SQLite under --data-dir) or a postgres:// URL", redact(cfg.Store))
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

// Shutdown drains: new streams are refused, every worker is asked to drain,
// and in-flight attempts get up to the drain timeout (or until ctx ends) to
// finish. Whatever is still running then is recorded as lost and retried on
// the next start. Then the listeners and the store close.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() { err = s.shutdown(ctx) })
	return err
}

func (s *Server) shutdown(ctx context.Context) error {
	s.shuttingDown.Store(true)
	s.health.Shutdown()
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	if s.memberLost.Load() {
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
			goto stop
		case <-tick.C:
		}
	}
stop:
	s.bus.Close()          // ends Watch streams and event-stream requests
	s.eng.ReleaseWaiters() // ends Wait long polls; clients retry on the next server
	s.connsMu.Lock()
	for _, c := range s.conns {
		c.end(status.Error(codes.Unavailable, "server is shutting down"))
	}
	s.connsMu.Unlock()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
		<-stopped
	}
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	herr := s.http.Shutdown(hctx)
	s.stopBG()
	s.bg.Wait()
	s.eng.Close()
	var lerr error
	if s.member != nil {
		// Whatever still runs here is handed to the other servers now,
		// rather than after the lease runs out.
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer lcancel()
		if err := s.member.cl.Leave(lctx, s.member.self.ID); err != nil && !errors.Is(err, store.ErrLeaseLost) {
			lerr = err
		}
	}
	return errors.Join(herr, lerr, s.st.Close())
}

// defaultServerName is the host name and the gRPC port, which tells servers
// on one host apart.
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

func checkServerName(n string) error {
	if err := name.Check("server_name", n, name.MaxName); err != nil {
		return fmt.Errorf("--server-name: %w", err)
	}
	return nil
}

// Run starts a server with cfg and serves until ctx ends, then drains and
// stops. It is what `aion server` and `aion dev` run.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Dev {
		log.Warn("dev mode: authorization is off, every caller may use every namespace", "data_dir", cfg.DataDir)
	}
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout)
	case err = <-s.Err():
		log.Error("stopping after a failure", "err", err)
	}
	return errors.Join(err, s.Shutdown(context.Background()))
}

// backlog adapts the engine's backlog for the metrics collector.
func (s *Server) backlog() []metrics.Backlog {
	var out []metrics.Backlog
	for _, b := range s.eng.Backlog() {
		out = append(out, metrics.Backlog{Namespace: b.Namespace, TaskQueue: b.TaskQueue, Waiting: b.Waiting, OldestAge: b.OldestAge})
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
