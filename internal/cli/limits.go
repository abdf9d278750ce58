package cli

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/aion-run/aion/internal/server"
)

// limitKeys are the server flags bounding memory and connections, settable
// from a config file too.
var limitKeys = []string{
	"max-pending-bytes-per-namespace", "max-list-bytes",
	"grpc-handshake-timeout", "grpc-idle-timeout", "grpc-max-streams", "grpc-max-stream-rate", "worker-transport",
	"http-read-header-timeout", "http-read-timeout", "http-write-timeout", "http-idle-timeout",
}

// The config file takes them like the other server flags.
func init() { configKeys = append(configKeys, limitKeys...) }

// limitFlags are the values of those flags.
type limitFlags struct {
	maxPendingBytes int64
	maxListBytes    int
	conn            server.ConnLimits
}

// register adds the flags, with d's values as defaults.
func (l *limitFlags) register(fl *pflag.FlagSet, d server.Config) {
	fl.Int64Var(&l.maxPendingBytes, "max-pending-bytes-per-namespace", d.MaxPendingBytesPerNamespace,
		"cap on the payload bytes of a namespace's activities not yet closed; Schedule past it is refused (0: none)")
	bindEnv(fl, "max-pending-bytes-per-namespace", "AION_MAX_PENDING_BYTES_PER_NAMESPACE")
	fl.IntVar(&l.maxListBytes, "max-list-bytes", d.MaxListBytes,
		"bytes one page of an activity listing may hold; a page past it ends early with a next-page token")
	bindEnv(fl, "max-list-bytes", "AION_MAX_LIST_BYTES")
	c := d.Conn
	durations := []struct {
		v         *time.Duration
		name, env string
		def       time.Duration
		usage     string
	}{
		{&l.conn.GRPCHandshakeTimeout, "grpc-handshake-timeout", "AION_GRPC_HANDSHAKE_TIMEOUT", c.GRPCHandshakeTimeout,
			"a gRPC connection that has not finished its TLS and HTTP/2 handshake by then is closed (0: none)"},
		{&l.conn.GRPCIdleTimeout, "grpc-idle-timeout", "AION_GRPC_IDLE_TIMEOUT", c.GRPCIdleTimeout,
			"a gRPC connection without any call or stream for this long is closed; clients reconnect on their next call (0: none)"},
		{&l.conn.HTTPReadHeaderTimeout, "http-read-header-timeout", "AION_HTTP_READ_HEADER_TIMEOUT", c.HTTPReadHeaderTimeout,
			"an HTTP request's headers must arrive within this (0: none)"},
		{&l.conn.HTTPReadTimeout, "http-read-timeout", "AION_HTTP_READ_TIMEOUT", c.HTTPReadTimeout,
			"an HTTP request, body included, must arrive within this (0: none)"},
		{&l.conn.HTTPWriteTimeout, "http-write-timeout", "AION_HTTP_WRITE_TIMEOUT", c.HTTPWriteTimeout,
			"an HTTP response must be written within this; on the event stream, each write (0: none)"},
		{&l.conn.HTTPIdleTimeout, "http-idle-timeout", "AION_HTTP_IDLE_TIMEOUT", c.HTTPIdleTimeout,
			"a keep-alive HTTP connection waiting this long for its next request is closed (0: none)"},
	}
	for _, d := range durations {
		fl.DurationVar(d.v, d.name, d.def, d.usage)
		bindEnv(fl, d.name, d.env)
	}
	fl.Uint32Var(&l.conn.GRPCMaxStreams, "grpc-max-streams", c.GRPCMaxStreams,
		"calls and streams open at once on one gRPC connection; a client past it waits (0: no cap)")
	bindEnv(fl, "grpc-max-streams", "AION_GRPC_MAX_STREAMS")
	fl.Uint32Var(&l.conn.GRPCMaxStreamRate, "grpc-max-stream-rate", c.GRPCMaxStreamRate,
		"calls and streams a second one gRPC connection may open beyond a burst of 1000; past it the connection is read only as fast as the rate allows (0: no limit)")
	bindEnv(fl, "grpc-max-stream-rate", "AION_GRPC_MAX_STREAM_RATE")
	fl.StringVar(&l.conn.WorkerTransport, "worker-transport", c.WorkerTransport,
		"who serves a connection whose first call is a worker's stream: grpc (grpc-go's, as every other connection) "+
			"or lean (experimental: aion's own HTTP/2 transport, under half the memory a worker, not yet hardened against every attack grpc-go is; see docs/security.md)")
	bindEnv(fl, "worker-transport", "AION_WORKER_TRANSPORT")
}

// apply sets the values on cfg; cfg.Validate checks them.
func (l *limitFlags) apply(cfg *server.Config) {
	cfg.MaxPendingBytesPerNamespace, cfg.MaxListBytes, cfg.Conn = l.maxPendingBytes, l.maxListBytes, l.conn
}
