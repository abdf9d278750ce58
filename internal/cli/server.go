package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/server"
	"github.com/aion-run/aion/internal/tracing"
)

// serverRunner runs a server until ctx ends.
type serverRunner func(ctx context.Context, cfg server.Config, log *slog.Logger) error

var defaultServerRunner serverRunner = server.Run

// serverFlags are the flags of `aion server` and `aion dev`.
type serverFlags struct {
	grpcAddr          string
	httpAddr          string
	dataDir           string
	drainTimeout      time.Duration
	heartbeatWindow   time.Duration
	autoCreate        string
	sqliteSync        string
	acceptDataLoss    bool
	pprof             bool
	maxReceiveRateMiB int64
	auth              string
	jwtSecretFile     string
	jwksFile          string
	jwtIssuer         string
	jwtAudience       string
	expiryGrace       time.Duration
	tlsCert           string
	tlsKey            string
	insecureNoAuth    bool
	maxPending        int
	maxInFlight       int
	maxNamespaces     int
	maxMint           int
	store             string
	serverName        string
	lease             time.Duration
	reapInterval      time.Duration
	maxReceiveMiB     int64
	memoryLimitMiB    int64
	tokens            []auth.APIKey
	limits            limitFlags
}

// config builds the server configuration from the flags and checks it with
// server.Config.Validate, whose errors name the flag and the value.
func (f *serverFlags) config(dev bool) (server.Config, error) {
	cfg := server.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = f.grpcAddr, f.httpAddr, f.dataDir
	cfg.DrainTimeout, cfg.HeartbeatWindow, cfg.Dev, cfg.Pprof = f.drainTimeout, f.heartbeatWindow, dev, f.pprof
	cfg.AutoCreate, cfg.SQLiteSync, cfg.AcceptDataLoss = namespace.AutoCreate(f.autoCreate), f.sqliteSync, f.acceptDataLoss
	cfg.Auth = server.AuthConfig{Mode: f.auth, Keys: f.tokens, JWTSecretFile: f.jwtSecretFile, JWKSFile: f.jwksFile,
		JWTIssuer: f.jwtIssuer, JWTAudience: f.jwtAudience, ExpiryGrace: f.expiryGrace}
	cfg.TLSCert, cfg.TLSKey, cfg.InsecureAllowNoAuth = f.tlsCert, f.tlsKey, f.insecureNoAuth
	cfg.MaxPendingPerNamespace, cfg.MaxInFlightPerNamespace = f.maxPending, f.maxInFlight
	cfg.MaxNamespaces, cfg.MaxMintPerRequest = f.maxNamespaces, f.maxMint
	cfg.Store, cfg.ServerName, cfg.Lease = f.store, f.serverName, f.lease
	cfg.ReapInterval = f.reapInterval
	cfg.MaxReceiveMemory = f.maxReceiveMiB << 20
	cfg.MaxReceiveRate = f.maxReceiveRateMiB << 20
	cfg.MemoryLimit = f.memoryLimitMiB << 20
	f.limits.apply(&cfg)
	return cfg, cfg.Validate()
}

func (a *app) serverCommand(dev bool) *cobra.Command {
	var f serverFlags
	defaults := server.Defaults()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run an aion server",
		Long: `Run an aion server. On --grpc-addr: the gRPC services (workers,
activities, namespaces, cluster, health, reflection). On --http-addr: /healthz
and /readyz, /metrics (Prometheus), the JSON API under /api/v1/ with the live
event stream (/api/v1/events), the ops console at /, and with --pprof the Go
profiles. --tls-cert and --tls-key serve both over TLS; --auth token or jwt
asks every caller for a bearer token (see docs/security.md).

State lives in one SQLite file, aion.db, under --data-dir; or, with --store
postgres://..., in PostgreSQL, where every server given the same database is
one server of a cluster (see docs/cluster.md). One process at a time serves
a data directory: it holds a lock on aion.db.lock while it runs, and a second
server given the same --data-dir exits at once naming the holder's pid.

Beside the SQLite file, aion.db.mark records which database it is and how
many commits it had acknowledged. A start that finds aion.db missing, empty, another database,
or holding fewer commits than the mark records (its write-ahead log cut short
or lost, an older copy restored) refuses, naming what is gone; restore the
data directory from a backup, or start once with --accept-data-loss to run on
what is there.

On SIGINT or SIGTERM the server asks its workers to drain, waits up to
--drain-timeout for in-flight attempts, then exits; whatever did not finish is
retried after the next start.`,
		Example: `  aion server
  aion server --grpc-addr 0.0.0.0:50051 --http-addr 0.0.0.0:8080 --data-dir /var/lib/aion
  AION_AUTO_CREATE=closed aion server --drain-timeout 1m`,
		Args: cobra.NoArgs,
	}
	dataDir := defaults.DataDir
	if dev {
		cmd.Use = "dev"
		cmd.Short = "Run a developer server (embedded SQLite, authorization off)"
		cmd.Long = `Run a developer server: the same server as 'aion server', with its state in
./.aion (or --data-dir) and authorization off, so any caller may use any
namespace. Do not expose it beyond your machine. A damaged data directory is
refused as by 'aion server' (see --accept-data-loss); so is a data directory
another server is running on: a second 'aion dev' needs its own --data-dir.`
		cmd.Example = `  aion dev
  aion dev --data-dir /tmp/aion-dev --grpc-addr 127.0.0.1:7233`
		dataDir = "./.aion"
	}

	fl := cmd.Flags()
	fl.StringVar(&f.grpcAddr, "grpc-addr", defaults.GRPCAddr, "address the gRPC services listen on")
	bindEnv(fl, "grpc-addr", "AION_GRPC_ADDR")
	fl.StringVar(&f.httpAddr, "http-addr", defaults.HTTPAddr, "address of the HTTP side: health, metrics, JSON API, event stream, console")
	bindEnv(fl, "http-addr", "AION_HTTP_ADDR")
	fl.StringVar(&f.dataDir, "data-dir", dataDir, "directory holding the SQLite file aion.db")
	bindEnv(fl, "data-dir", "AION_DATA_DIR")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", defaults.DrainTimeout, "how long shutdown waits for in-flight attempts")
	bindEnv(fl, "drain-timeout", "AION_DRAIN_TIMEOUT")
	fl.DurationVar(&f.heartbeatWindow, "heartbeat-window", defaults.HeartbeatWindow, "a worker silent for longer is deregistered (reason timeout)")
	bindEnv(fl, "heartbeat-window", "AION_HEARTBEAT_WINDOW")
	fl.StringVar(&f.autoCreate, "auto-create", string(defaults.AutoCreate), "namespace auto-create policy: open (mint on first use) or closed")
	bindEnv(fl, "auto-create", "AION_AUTO_CREATE")
	fl.StringVar(&f.sqliteSync, "sqlite-sync", defaults.SQLiteSync, "SQLite synchronous mode: full (durable on power loss) or normal")
	bindEnv(fl, "sqlite-sync", "AION_SQLITE_SYNC")
	fl.BoolVar(&f.acceptDataLoss, "accept-data-loss", false, "start even though aion.db is missing, empty, another database or behind the aion.db.mark file beside it (a cut write-ahead log, an older copy), logging what is lost; without it such a start is refused")
	bindEnv(fl, "accept-data-loss", "AION_ACCEPT_DATA_LOSS")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the HTTP address")
	bindEnv(fl, "pprof", "AION_PPROF")
	fl.StringVar(&f.auth, "auth", defaults.Auth.Mode, "authentication: none, token (API keys from [[tokens]] in --config) or jwt")
	bindEnv(fl, "auth", "AION_AUTH")
	fl.StringVar(&f.jwtSecretFile, "jwt-secret-file", "", "file holding the HS256 secret for --auth jwt")
	bindEnv(fl, "jwt-secret-file", "AION_JWT_SECRET_FILE")
	fl.StringVar(&f.jwksFile, "jwks-file", "", "JWKS file with the RS256 public keys for --auth jwt")
	bindEnv(fl, "jwks-file", "AION_JWKS_FILE")
	fl.StringVar(&f.jwtIssuer, "jwt-issuer", "", "with --auth jwt, accept only tokens whose iss claim is this (empty: iss not checked)")
	bindEnv(fl, "jwt-issuer", "AION_JWT_ISSUER")
	fl.StringVar(&f.jwtAudience, "jwt-audience", "", "with --auth jwt, accept only tokens whose aud claim contains this (empty: aud not checked); "+
		"set it and --jwt-issuer when the identity provider also issues tokens for other services")
	bindEnv(fl, "jwt-audience", "AION_JWT_AUDIENCE")
	fl.DurationVar(&f.expiryGrace, "token-expiry-grace", defaults.Auth.ExpiryGrace, "how long a worker stream outlives its credential's expiry")
	bindEnv(fl, "token-expiry-grace", "AION_TOKEN_EXPIRY_GRACE")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate: serve gRPC and HTTP over TLS (with --tls-key)")
	bindEnv(fl, "tls-cert", "AION_TLS_CERT")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	bindEnv(fl, "tls-key", "AION_TLS_KEY")
	fl.BoolVar(&f.insecureNoAuth, "insecure-allow-no-auth", false, "allow --auth none on an address other than loopback")
	bindEnv(fl, "insecure-allow-no-auth", "AION_INSECURE_ALLOW_NO_AUTH")
	fl.IntVar(&f.maxPending, "max-pending-per-namespace", 0, "cap on a namespace's activities not yet closed; Schedule past it is refused (0: none)")
	bindEnv(fl, "max-pending-per-namespace", "AION_MAX_PENDING_PER_NAMESPACE")
	fl.IntVar(&f.maxInFlight, "max-in-flight-per-namespace", 0, "cap on a namespace's running attempts; more wait in the queue (0: none)")
	bindEnv(fl, "max-in-flight-per-namespace", "AION_MAX_IN_FLIGHT_PER_NAMESPACE")
	fl.IntVar(&f.maxNamespaces, "max-namespaces", defaults.MaxNamespaces,
		"cap on the namespaces the server holds; minting or creating one more is refused with ResourceExhausted (0: none; approximate in a cluster)")
	bindEnv(fl, "max-namespaces", "AION_MAX_NAMESPACES")
	fl.IntVar(&f.maxMint, "max-mint-per-request", defaults.MaxMintPerRequest,
		"cap on the new namespaces one worker registration or one schedule batch may mint under --auto-create open; past it the registration is refused whole (0: none)")
	bindEnv(fl, "max-mint-per-request", "AION_MAX_MINT_PER_REQUEST")
	fl.StringVar(&f.store, "store", "", "store: empty for SQLite under --data-dir, or a postgres:// URL (servers sharing one database form a cluster)")
	bindEnv(fl, "store", "AION_STORE")
	fl.StringVar(&f.serverName, "server-name", "", "this server's name in a cluster, unique among the live servers (default: host name and gRPC port)")
	bindEnv(fl, "server-name", "AION_SERVER_NAME")
	fl.Int64Var(&f.maxReceiveMiB, "max-receive-memory", defaults.MaxReceiveMemory>>20, "MiB that gRPC requests being read may hold: reading a request holds 8 MiB "+
		"(the largest message) until it is in, one caller at most half; a read past it waits for room until the call's deadline")
	bindEnv(fl, "max-receive-memory", "AION_MAX_RECEIVE_MEMORY")
	fl.Int64Var(&f.maxReceiveRateMiB, "max-receive-rate", defaults.MaxReceiveRate>>20, "MiB a second of requests one authenticated caller may send (worker streams aside; not applied with --auth none), with a burst of one second's worth; "+
		"a call from a caller past it is refused from its headers (ResourceExhausted, with when to retry) (0: no limit)")
	bindEnv(fl, "max-receive-rate", "AION_MAX_RECEIVE_RATE")
	fl.Int64Var(&f.memoryLimitMiB, "memory-limit", 0, "MiB: the Go runtime's soft memory limit; nearing it, the garbage collector runs more often and returns memory sooner "+
		"(not a cap: below what the server holds live the collector runs without pause; set it above that) (0: leave GOMEMLIMIT, or none)")
	bindEnv(fl, "memory-limit", "AION_MEMORY_LIMIT")
	fl.DurationVar(&f.lease, "lease", defaults.Lease, "cluster lease: a server silent this long is declared lost and its running attempts are retried elsewhere")
	bindEnv(fl, "lease", "AION_LEASE")
	fl.DurationVar(&f.reapInterval, "reap-interval", defaults.ReapInterval,
		"how often closed activities and runs past their namespace's retention are deleted (0: never)")
	bindEnv(fl, "reap-interval", "AION_REAP_INTERVAL")
	f.limits.register(fl, defaults)
	var configPath string
	var print bool
	fl.StringVar(&configPath, "config", "", "TOML file with settings (keys are flag names with _, e.g. grpc_addr); flags and environment win over it")
	bindEnv(fl, "config", "AION_CONFIG")
	fl.BoolVar(&print, "print-config", false, "print the effective settings as a config file and exit")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if configPath != "" {
			tokens, err := applyConfigFile(cmd.Flags(), configPath, a.lookupEnv)
			if err != nil {
				return err
			}
			f.tokens = tokens
			if _, err := parseLevel(a.logLevel); err != nil {
				return err
			}
			if a.logFormat != "text" && a.logFormat != "json" {
				return fmt.Errorf("log_format %q: want text or json", a.logFormat)
			}
		}
		if print {
			printConfig(a.stdout, cmd.Flags(), f.tokens)
			_, err := f.config(dev)
			return err
		}
		cfg, err := f.config(dev)
		if err != nil {
			return err
		}
		if cfg.Tracing, err = tracing.FromEnv(a.lookupEnv); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		log := a.logger()
		log.Info("aion starting", "grpc_addr", cfg.GRPCAddr, "http_addr", cfg.HTTPAddr, "data_dir", cfg.DataDir,
			"auto_create", cfg.AutoCreate, "sqlite_sync", cfg.SQLiteSync, "drain_timeout", cfg.DrainTimeout,
			"heartbeat_window", cfg.HeartbeatWindow, "dev", cfg.Dev, "tracing", cfg.Tracing.Enabled())
		if cfg.Auth.Mode == "jwt" && (cfg.Auth.JWTIssuer == "" || cfg.Auth.JWTAudience == "") {
			log.Warn("--auth jwt without --jwt-issuer and --jwt-audience: any token the key signs is accepted, "+
				"including one the identity provider issued for another service", "jwt_issuer", cfg.Auth.JWTIssuer, "jwt_audience", cfg.Auth.JWTAudience)
		}
		return a.runServer(ctx, cfg, log)
	}
	return cmd
}
