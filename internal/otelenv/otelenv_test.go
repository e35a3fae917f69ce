package otelenv_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/internal/otelenv"
)

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

// TestExporterString checks what a message about an export names, signal
// by signal: the exporter, its protocol and where it sends.
func TestExporterString(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		traces  bool
		want    string
		dflt    bool
		wantsIt bool
	}{
		{name: "metrics by default", want: "otlp http/protobuf to https://localhost:4318/v1/metrics", dflt: true},
		{name: "the README's grpc command", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: "otlp grpc to 127.0.0.1:4317", wantsIt: true},
		{name: "traces over http", traces: true, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			want: "otlp http/protobuf to http://collector:4318/v1/traces", wantsIt: true},
		{name: "traces, a signal's own endpoint", traces: true, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/t"},
			want: "otlp http/protobuf to http://b:4318/t", wantsIt: true},
		{name: "prometheus", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, want: "prometheus on localhost:9464", wantsIt: true},
		{name: "console", env: map[string]string{"OTEL_METRICS_EXPORTER": "console"}, want: "console", wantsIt: true},
		{name: "none", env: map[string]string{"OTEL_METRICS_EXPORTER": "none"}, want: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, kind := otelenv.MetricsExporter(envOf(tt.env)), "METRICS"
			if tt.traces {
				ex, kind = otelenv.TracesExporter(envOf(tt.env)), "TRACES"
			}
			if got := ex.String(); got != tt.want || ex.Default != tt.dflt {
				t.Errorf("got %q (default %v), want %q (default %v)", got, ex.Default, tt.want, tt.dflt)
			}
			if got := otelenv.WantedIn(envOf(tt.env), kind); got != tt.wantsIt {
				t.Errorf("WantedIn = %v, want %v", got, tt.wantsIt)
			}
		})
	}
}
