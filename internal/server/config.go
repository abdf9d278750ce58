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
	// MaxReceiveMemory bounds the memory that requests being read may
	// hold: reading one holds room for a whole message (limit.Message)
	// until it is in, one caller at most half of it; a read past it waits
	// for room until the call's deadline. Zero means 256 MiB.
	MaxReceiveMemory int64
	// MaxReceiveRate bounds the request bytes one caller may send a
	// second (with a burst of one second's worth); a call from a
	// caller past it is ResourceExhausted before its body is read. Worker
	// streams are not counted, nor any caller when auth is "none" (all
	// callers are one anonymous caller then). Zero means no limit.
	MaxReceiveRate int64
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
		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPReadTimeout:       30 * time.Second,
		HTTPWriteTimeout:      30 * time.Second,
		HTTPIdleTimeout:       2 * time.Minute,
	}
}
