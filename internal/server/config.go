package server

import (
	"time"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/namespace"
)

// Config is everything `aion server` and `aion dev` can set.
type Config struct {
	// GRPCAddr is where the gRPC services listen.
	GRPCAddr string
	// HTTPAddr is where /healthz, /readyz (and later metrics and the
	// console) listen.
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
	// SQLiteSync is the SQLite synchronous mode: "full" or "normal".
	SQLiteSync string
	// Dev marks the embedded developer server (authorization off).
	Dev bool
	// Pprof serves Go profiles under /debug/pprof/ on the HTTP address.
	Pprof bool
	// Store selects the store: empty for the SQLite file under DataDir, or
	// a postgres:// URL. Several servers may share one PostgreSQL database:
	// they form a cluster.
	Store string
	// ServerName names this server among the servers sharing a PostgreSQL
	// store; it must be unique among the live ones. Empty means the host
	// name and the gRPC port.
	ServerName string
	// Lease is how long a clustered server stays a member without renewing:
	// when it dies, its running attempts are retried elsewhere after this.
	Lease time.Duration
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
	// ExpiryGrace is how long a worker stream outlives its token's expiry.
	ExpiryGrace time.Duration
}

// Defaults returns the configuration `aion server` starts from.
func Defaults() Config {
	return Config{
		GRPCAddr:        "127.0.0.1:50051",
		HTTPAddr:        "127.0.0.1:8080",
		DataDir:         ".aion",
		AutoCreate:      namespace.Open,
		DrainTimeout:    30 * time.Second,
		HeartbeatWindow: 15 * time.Second,
		SQLiteSync:      "full",
		Lease:           10 * time.Second,
		Auth:            AuthConfig{Mode: "none", ExpiryGrace: 30 * time.Second},

		MaxNamespaces:     namespace.DefaultMaxNamespaces,
		MaxMintPerRequest: namespace.DefaultMaxMintPerRequest,
	}
}
