package server

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/limit"
	"github.com/aion-run/aion/internal/name"
	"github.com/aion-run/aion/internal/namespace"
	"github.com/aion-run/aion/internal/reaper"
	"github.com/aion-run/aion/internal/tracing"
)

// Config is everything `aion server` and `aion dev` can set. Validate checks
// it; errors name the command-line flag of the field at fault.
type Config struct {
	// GRPCAddr is where the gRPC services listen.
	GRPCAddr string
	// HTTPAddr is where the HTTP side listens: /healthz, /readyz, /metrics,
	// the JSON API, the event stream and the console.
	HTTPAddr string
	// DataDir holds the SQLite file (aion.db).
	DataDir string
	// AutoCreate is the namespace auto-create policy.
	AutoCreate namespace.AutoCreate
	// DrainTimeout bounds how long shutdown waits for in-flight work.
	DrainTimeout time.Duration
	// HeartbeatWindow is how long a worker may stay silent before it is
	// deregistered with reason timeout.
	HeartbeatWindow time.Duration
	// SQLiteSync is the SQLite synchronous mode: "full" or "normal"; empty
	// means full.
	SQLiteSync string
	// AcceptDataLoss starts on a SQLite database that is missing, empty,
	// another one or behind the mark file beside it, logging what is lost
	// at error level, instead of refusing to start.
	AcceptDataLoss bool
	// Dev marks the embedded developer server (authorization off).
	Dev bool
	// Pprof serves Go profiles under /debug/pprof/ on the HTTP address.
	Pprof bool
	// Store selects the store: empty for the SQLite file under DataDir, or
	// a postgres:// URL. Several servers may share one PostgreSQL database:
	// they form a cluster.
	Store string
	// ServerName names this server among the servers of a cluster; it must
	// be unique among the live ones. Empty means the host name and the gRPC
	// port.
	ServerName string
	// Lease is how long a server of a cluster stays a member without
	// renewing: when it dies, its running attempts are retried elsewhere
	// after this. At least minLease.
	Lease time.Duration
	// ReapInterval is how often the reaper deletes closed activities and
	// runs past their namespace's retention; 0 turns reaping off.
	ReapInterval time.Duration
	// Auth is how callers are authenticated.
	Auth AuthConfig
	// TLSCert and TLSKey, when both set, serve gRPC and HTTP over TLS.
	TLSCert, TLSKey string
	// MaxPendingPerNamespace caps a namespace's activities not yet closed
	// (Schedule past it is ResourceExhausted); 0 means no cap.
	MaxPendingPerNamespace int
	// MaxInFlightPerNamespace caps a namespace's running attempts (more
	// wait in their queue); 0 means no cap.
	MaxInFlightPerNamespace int
	// MaxReceiveMemory bounds the memory that requests being read may
	// hold: reading one holds room for a whole message (limit.Message)
	// until it is in, one caller at most half of it; a read past it waits
	// for room until the call's deadline. At least two messages' worth
	// (minReceiveMemory).
	MaxReceiveMemory int64
	// MaxReceiveRate bounds the request bytes one caller may send a
	// second (with a burst of one second's worth); a call from a
	// caller past it is ResourceExhausted before its body is read. Worker
	// streams are not counted, nor any caller when auth is "none" (all
	// callers are one anonymous caller then). Zero means no limit.
	MaxReceiveRate int64
	// MemoryLimit, when positive, is the Go runtime's soft memory limit in
	// bytes (runtime/debug.SetMemoryLimit), set by Run: as the process's
	// Go memory nears it, the garbage collector runs more often and returns
	// freed memory to the system sooner. It is not a cap: set below what the
	// server holds live it cannot be kept, and the collector then runs
	// without pause. Zero leaves the runtime's limit as it is (GOMEMLIMIT
	// from the environment, or none).
	MemoryLimit int64
	// MaxNamespaces caps the namespaces the server holds: minting or
	// creating one more is ResourceExhausted; 0 means no cap. In a cluster
	// each server counts what it knows of, so the cap is approximate.
	MaxNamespaces int
	// MaxMintPerRequest caps the new namespaces one Register frame or one
	// ScheduleBatch may mint (refused whole, or per batch item past it);
	// 0 means no cap.
	MaxMintPerRequest int
	// InsecureAllowNoAuth lets a server with auth "none" listen on an
	// address other than loopback.
	InsecureAllowNoAuth bool

	// MaxPendingBytesPerNamespace caps the total input (payload) bytes of a
	// namespace's activities not yet closed (Schedule past it is
	// ResourceExhausted); 0 means no cap.
	MaxPendingBytesPerNamespace int64
	// MaxListBytes bounds one page of an activity listing: a page stops
	// early, with a next-page token, before its activities pass it. The first
	// activity of a page is always returned.
	MaxListBytes int
	// Conn bounds how long connections may be held without progress.
	Conn ConnLimits
	// Tracing says whether and where to export OpenTelemetry spans; the
	// zero value is off. The commands read it from the OTEL_* environment
	// variables (tracing.FromEnv).
	Tracing tracing.Config
}

// ConnLimits are the connection timeouts of the gRPC and HTTP listeners.
// Zero durations mean none (not recommended on an exposed server).
type ConnLimits struct {
	// GRPCHandshakeTimeout closes a gRPC connection that has not finished
	// its handshake (TLS and the HTTP/2 preface) in time.
	GRPCHandshakeTimeout time.Duration
	// GRPCIdleTimeout closes a gRPC connection without any call or stream
	// for this long; clients reconnect transparently on their next call.
	GRPCIdleTimeout time.Duration
	// GRPCMaxStreams caps the calls and streams open at once on one gRPC
	// connection; a client past it waits for one to end. 0 means no cap.
	GRPCMaxStreams uint32
	// GRPCMaxStreamRate is how many calls and streams a second one gRPC
	// connection may open, beyond a burst of 1,000; past it, the
	// connection's frames are read only as fast as the rate allows. 0 means
	// no limit.
	GRPCMaxStreamRate uint32
	// WorkerTransport serves connections whose first call is a worker's
	// Connect: "grpc" (or empty, the default) with grpc-go's transport, as
	// every other connection is; "lean", experimental, with aion's own
	// HTTP/2 transport, one goroutine a connection and none a waiting
	// worker stream, which does not yet hold against every attack grpc-go
	// holds against (docs/security.md).
	WorkerTransport string
	// HTTPReadHeaderTimeout bounds reading a request's headers.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout bounds reading a whole request, body included.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout bounds writing one response; on the event stream it
	// bounds each write, so a reader that stops reading is cut off.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive connection waiting this long for
	// its next request.
	HTTPIdleTimeout time.Duration
}

// AuthConfig selects and configures authentication.
type AuthConfig struct {
	// Mode is "none" (every caller is an admin of every namespace), "token"
	// (API keys) or "jwt".
	Mode string
	// Keys are the API keys of mode "token", stored as SHA-256 hashes.
	Keys []auth.APIKey
	// JWTSecretFile holds the HS256 secret of mode "jwt".
	JWTSecretFile string
	// JWKSFile holds the RS256 public keys of mode "jwt".
	JWKSFile string
	// JWTIssuer, when set, is the only iss claim mode "jwt" accepts.
	JWTIssuer string
	// JWTAudience, when set, must be in the aud claim of every token of
	// mode "jwt". Empty checks neither; set both when the identity provider
	// also signs tokens for other services.
	JWTAudience string
	// ExpiryGrace is how long a worker stream outlives its token's expiry.
	ExpiryGrace time.Duration
}

// Defaults returns the configuration `aion server` starts from.
func Defaults() Config {
	return Config{
		GRPCAddr:         "127.0.0.1:50051",
		HTTPAddr:         "127.0.0.1:8080",
		DataDir:          ".aion",
		AutoCreate:       namespace.Open,
		DrainTimeout:     30 * time.Second,
		HeartbeatWindow:  15 * time.Second,
		SQLiteSync:       "full",
		Lease:            10 * time.Second,
		ReapInterval:     reaper.DefaultInterval,
		MaxReceiveMemory: defaultReceiveMemory,
		MaxReceiveRate:   defaultReceiveRate,
		Auth:             AuthConfig{Mode: "none", ExpiryGrace: 30 * time.Second},

		MaxPendingBytesPerNamespace: 1 << 30,
		MaxListBytes:                4 << 20,
		Conn:                        DefaultConnLimits(),
		MaxNamespaces:               namespace.DefaultMaxNamespaces,
		MaxMintPerRequest:           namespace.DefaultMaxMintPerRequest,
	}
}

// DefaultConnLimits are the connection timeouts a server starts with: long
// enough for a slow honest client, short enough that a connection held open
// without progress is let go within a minute or two.
func DefaultConnLimits() ConnLimits {
	return ConnLimits{
		GRPCHandshakeTimeout:  10 * time.Second,
		GRPCIdleTimeout:       5 * time.Minute,
		GRPCMaxStreams:        1000,
		GRPCMaxStreamRate:     20000,
		WorkerTransport:       WorkerTransportGRPC,
		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPReadTimeout:       30 * time.Second,
		HTTPWriteTimeout:      30 * time.Second,
		HTTPIdleTimeout:       2 * time.Minute,
	}
}

// minLease is the shortest cluster lease: renewals go out every quarter of
// it, and a database round trip must fit well inside that.
const minLease = 300 * time.Millisecond

// minReceiveMemory lets two requests of the largest size arrive at once.
const minReceiveMemory = 2 * limit.Message

// Validate checks every setting and is the only place they are checked. An
// error names the flag at fault and the value it refused. It checks what can
// be known without touching the network or the disk: files named by the
// settings are read when the server is built.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.GRPCAddr == "":
		bad("--grpc-addr: must not be empty")
	case c.DataDir == "":
		bad("--data-dir: must not be empty")
	}
	if c.DrainTimeout < 0 {
		bad("--drain-timeout %v: must not be negative", c.DrainTimeout)
	}
	if c.HeartbeatWindow <= 0 {
		bad("--heartbeat-window %v: must be more than zero", c.HeartbeatWindow)
	}
	switch c.AutoCreate {
	case namespace.Open, namespace.Closed:
	default:
		bad("--auto-create %q: want %q or %q", c.AutoCreate, namespace.Open, namespace.Closed)
	}
	switch c.Conn.WorkerTransport {
	case "", WorkerTransportLean, WorkerTransportGRPC:
	default:
		bad("--worker-transport %q: want %s or %s", c.Conn.WorkerTransport, WorkerTransportGRPC, WorkerTransportLean)
	}
	switch c.SQLiteSync {
	case "", "full", "normal":
	default:
		bad("--sqlite-sync %q: want full or normal", c.SQLiteSync)
	}
	if c.Store != "" && !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
		bad("--store %q: want empty (SQLite under --data-dir) or a postgres:// URL", redact(c.Store))
	}
	if c.ServerName != "" {
		if err := name.Check("--server-name", c.ServerName, name.MaxName); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ReapInterval < 0 {
		bad("--reap-interval %v: must not be negative (0: no reaping)", c.ReapInterval)
	}
	if c.Lease < minLease {
		bad("--lease %v: want at least %v", c.Lease, minLease)
	}
	for _, n := range []struct {
		flag  string
		value int64
	}{
		{"--max-pending-per-namespace", int64(c.MaxPendingPerNamespace)},
		{"--max-in-flight-per-namespace", int64(c.MaxInFlightPerNamespace)},
		{"--max-namespaces", int64(c.MaxNamespaces)},
		{"--max-mint-per-request", int64(c.MaxMintPerRequest)},
		{"--max-pending-bytes-per-namespace", c.MaxPendingBytesPerNamespace},
		{"--max-list-bytes", int64(c.MaxListBytes)},
		{"--max-receive-rate", c.MaxReceiveRate >> 20},
		{"--memory-limit", c.MemoryLimit >> 20},
	} {
		if n.value < 0 {
			bad("%s %d: must not be negative (0: no cap)", n.flag, n.value)
		}
	}
	if c.MaxReceiveMemory < minReceiveMemory {
		bad("--max-receive-memory %d: want at least %d (MiB: two requests of the largest size)",
			c.MaxReceiveMemory>>20, minReceiveMemory>>20)
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--grpc-handshake-timeout", c.Conn.GRPCHandshakeTimeout},
		{"--grpc-idle-timeout", c.Conn.GRPCIdleTimeout},
		{"--http-read-header-timeout", c.Conn.HTTPReadHeaderTimeout},
		{"--http-read-timeout", c.Conn.HTTPReadTimeout},
		{"--http-write-timeout", c.Conn.HTTPWriteTimeout},
		{"--http-idle-timeout", c.Conn.HTTPIdleTimeout},
	} {
		if d.value < 0 {
			bad("%s %v: must not be negative", d.flag, d.value)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("--tls-cert %q / --tls-key %q: set both, or neither", c.TLSCert, c.TLSKey)
	}
	errs = append(errs, c.Auth.validate(c.Dev)...)
	if err := c.checkExposure(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validate checks the authentication settings.
func (a AuthConfig) validate(dev bool) []error {
	var errs []error
	switch a.Mode {
	case "", "none":
	case "token":
		if len(a.Keys) == 0 {
			errs = append(errs, errors.New("--auth token: no API keys configured ([[tokens]] in the --config file)"))
		}
	case "jwt":
		switch {
		case a.JWTSecretFile != "" && a.JWKSFile != "":
			errs = append(errs, fmt.Errorf("--auth jwt: --jwt-secret-file %q and --jwks-file %q: set one, not both", a.JWTSecretFile, a.JWKSFile))
		case a.JWTSecretFile == "" && a.JWKSFile == "":
			errs = append(errs, errors.New("--auth jwt: needs --jwt-secret-file (HS256) or --jwks-file (RS256)"))
		}
	default:
		errs = append(errs, fmt.Errorf("--auth %q: want none, token or jwt", a.Mode))
	}
	if dev && a.Mode != "" && a.Mode != "none" {
		errs = append(errs, fmt.Errorf("--auth %q: aion dev always runs with authorization off; use aion server", a.Mode))
	}
	return errs
}

// checkExposure refuses auth "none" on an address beyond loopback, unless
// InsecureAllowNoAuth says that is meant.
func (c Config) checkExposure() error {
	if (c.Auth.Mode != "" && c.Auth.Mode != "none") || c.InsecureAllowNoAuth {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if !loopback(a.addr) {
			return fmt.Errorf("--%s %s is not a loopback address and auth is none: anyone who can reach it could run "+
				"and read every tenant's work; configure auth (token or jwt) or pass --insecure-allow-no-auth", a.flag, a.addr)
		}
	}
	return nil
}
