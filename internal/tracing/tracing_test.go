package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aion-run/aion/internal/tracing"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestFromEnvIsOffUnlessAnExporterIsNamed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		vars map[string]string
		want tracing.Config
		err  string
	}{
		{"nothing set", nil, tracing.Config{}, ""},
		{"an endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, tracing.Config{}, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, tracing.Config{}, ""},
		{"otlp, default protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			tracing.Config{Exporter: "otlp", Protocol: "http/protobuf"}, ""},
		{"otlp over grpc", map[string]string{"OTEL_TRACES_EXPORTER": " OTLP ", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			tracing.Config{Exporter: "otlp", Protocol: "grpc"}, ""},
		{"the traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, tracing.Config{Exporter: "otlp", Protocol: "http/protobuf"}, ""},
		{"sdk disabled wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, tracing.Config{}, ""},
		{"sdk disabled false", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"},
			tracing.Config{Exporter: "otlp", Protocol: "http/protobuf"}, ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, tracing.Config{},
			`OTEL_TRACES_EXPORTER: "zipkin" is not supported`},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, tracing.Config{},
			`OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is not supported`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := tracing.FromEnv(env(c.vars))
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("FromEnv = %+v, %v; want an error containing %q", got, err, c.err)
			case c.err == "" && err != nil:
				t.Fatalf("FromEnv: %v", err)
			case got != c.want:
				t.Fatalf("FromEnv = %+v, want %+v", got, c.want)
			}
			if got.Enabled() != (c.want.Exporter == "otlp") {
				t.Errorf("Enabled() = %v for %+v", got.Enabled(), got)
			}
		})
	}
}

func TestStartWithTracingOffInstallsNothing(t *testing.T) {
	t.Parallel()
	tr, err := tracing.Start(context.Background(), tracing.Config{}, nil)
	if err != nil || tr != nil {
		t.Fatalf("Start(off) = %v, %v; want nil, nil", tr, err)
	}
	// A nil Tracing is safe to use.
	if tr.Tracer() != nil || tr.TracerProvider() != nil || tr.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Tracing did something")
	}
}
