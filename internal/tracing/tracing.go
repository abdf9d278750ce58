// Package tracing sets up the server's OpenTelemetry tracing from the
// standard OTEL_* environment variables; its subpackage w3c turns aion's
// carried trace contexts (tracectx) into OpenTelemetry span contexts and
// back.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter: no SDK is
// installed, Start returns a nil *Tracing, and every caller's hot path
// does one nil check. That differs from the OpenTelemetry default (otlp)
// on purpose: a server must not start exporting because a shared
// environment sets an endpoint for something else.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The exporters and OTLP protocols Config accepts.
const (
	ExporterNone = "none"
	ExporterOTLP = "otlp"

	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// InstrumentationName names the tracer aion's spans come from.
const InstrumentationName = "github.com/aion-run/aion"

// Config says whether and where to export spans. The zero value is off.
type Config struct {
	// Exporter is ExporterOTLP to export, or "" or ExporterNone for off.
	Exporter string
	// Protocol is the OTLP transport: ProtocolHTTP (the default, as in the
	// OpenTelemetry specification) or ProtocolGRPC.
	Protocol string
	// Endpoint, when set, is the collector's host:port, sent to in clear
	// text; it overrides OTEL_EXPORTER_OTLP_ENDPOINT and
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which (with the other
	// OTEL_EXPORTER_OTLP_* variables: headers, TLS, timeout, compression)
	// the exporter otherwise reads itself.
	Endpoint string
	// ServiceName is the service.name resource attribute unless
	// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES sets one.
	ServiceName string
}

// Enabled reports whether c exports spans.
func (c Config) Enabled() bool { return c.Exporter != "" && c.Exporter != ExporterNone }

// FromEnv reads the variables that turn tracing on and pick the OTLP
// protocol: OTEL_SDK_DISABLED (true turns tracing off whatever else is
// set), OTEL_TRACES_EXPORTER (otlp or none; unset is none), and
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or else OTEL_EXPORTER_OTLP_PROTOCOL
// (grpc or http/protobuf). An unsupported value is an error naming the
// variable. The others (endpoint, headers, sampler, batch sizes, resource
// attributes) are read where the SDK applies them.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var c Config
	if d := get("OTEL_SDK_DISABLED"); strings.EqualFold(d, "true") {
		return c, nil
	}
	switch e := strings.ToLower(get("OTEL_TRACES_EXPORTER")); e {
	case "", ExporterNone:
		return c, nil
	case ExporterOTLP:
		c.Exporter = e
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported; aion exports %q or %q", e, ExporterOTLP, ExporterNone)
	}
	p := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if p == "" {
		p, name = get("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch p {
	case "", ProtocolHTTP:
		c.Protocol = ProtocolHTTP
	case ProtocolGRPC:
		c.Protocol = ProtocolGRPC
	default:
		return Config{}, fmt.Errorf("%s: %q is not supported; use %q or %q", name, p, ProtocolGRPC, ProtocolHTTP)
	}
	return c, nil
}

// Tracing is an installed OpenTelemetry SDK: a tracer provider with a batch
// span processor exporting over OTLP. A nil *Tracing is tracing off; its
// methods are safe to call and do nothing.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Start installs the SDK c asks for; with c off it returns nil and
// installs nothing. It does not connect: the exporter dials when it first
// exports. Errors from exporting later (an unreachable collector) go to
// log, at warn. The caller ends it with Shutdown.
func Start(ctx context.Context, c Config, log *slog.Logger) (*Tracing, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.Exporter != ExporterOTLP {
		return nil, fmt.Errorf("tracing: exporter %q is not supported; use %q", c.Exporter, ExporterOTLP)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch c.Protocol {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint), otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP, "":
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint), otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported; use %q or %q", c.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: start the OTLP exporter: %w", err)
	}
	service := c.ServiceName
	if service == "" {
		service = "aion"
	}
	// Later options take precedence: the environment overrides the default
	// service name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	if log != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing: export failed", "err", err)
		}))
	}
	// The sampler (OTEL_TRACES_SAMPLER, default parentbased_always_on) and
	// the batch processor's sizes and delays (OTEL_BSP_*) come from the
	// environment, as the SDK reads them.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tracer: tp.Tracer(InstrumentationName)}, nil
}

// Shutdown exports the spans still queued, within ctx, and stops the SDK.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Tracer is the tracer aion's spans come from; nil when t is nil.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// TracerProvider is t's provider, for SDK clients and workers in the same
// process; nil when t is nil.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}
