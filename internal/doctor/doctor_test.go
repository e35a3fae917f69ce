package doctor_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/internal/doctor"
)

func TestMetricsExporter(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want doctor.Exporter
	}{
		{"autoexport's default", nil, doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "https://localhost:4318/v1/metrics", Default: true}},
		{"insecure default", map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "true"}, doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "http://localhost:4318/v1/metrics", Default: true}},
		{"base endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "http://collector:4318/v1/metrics"}},
		{"signal endpoint used as is", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://b:9/m"},
			doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "http://b:9/m"}},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, doctor.Exporter{Kind: "otlp", Protocol: "grpc", Endpoint: "collector:4317"}},
		{"grpc default", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}, doctor.Exporter{Kind: "otlp", Protocol: "grpc", Endpoint: "localhost:4317", Default: true}},
		{"prometheus default", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, doctor.Exporter{Kind: "prometheus", Endpoint: "localhost:9464"}},
		{"prometheus on every interface", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9400"},
			doctor.Exporter{Kind: "prometheus", Endpoint: "0.0.0.0:9400"}},
		{"none", map[string]string{"OTEL_METRICS_EXPORTER": "none"}, doctor.Exporter{Kind: "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := doctor.MetricsExporter(envOf(tt.env)); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestMainExitStatus checks the bad-argument status, and, on a machine
// without NVML (this one, unless it has a GPU), a failure that says so.
func TestMainExitStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	if got := doctor.Main(context.Background(), []string{"-window", "1ms"}, &out, &errOut, envOf(nil)); got != 2 || !strings.Contains(errOut.String(), "-window") {
		t.Fatalf("bad -window: status %d, stderr %q", got, errOut.String())
	}
	if got := doctor.Main(context.Background(), []string{"extra"}, &out, &errOut, envOf(nil)); got != 2 {
		t.Fatalf("stray argument: status %d", got)
	}
	out.Reset()
	got := doctor.Main(context.Background(), nil, &out, &errOut, envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"}))
	if strings.Contains(out.String(), "ok    nvml: driver") {
		t.Skip("NVML is present on this machine")
	}
	if got != 1 || !strings.Contains(out.String(), "FAIL  nvml: not usable") || !strings.Contains(out.String(), "fix: ") {
		t.Fatalf("without NVML: status %d, report:\n%s", got, out.String())
	}
}

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

// TestPIDNamespace checks the namespace check on /proc: the host's passes,
// another fails with a fix, and a host /proc mounted elsewhere is not
// judged by this process's namespace.
func TestPIDNamespace(t *testing.T) {
	tests := []struct {
		name, root, ns string
		any            bool
		want           doctor.Status
	}{
		{"host", "/proc", "pid:[4026531836]", false, doctor.OK},
		{"a container's", "/proc", "pid:[4026532712]", false, doctor.Fail},
		{"a container's, for the proxy", "/proc", "pid:[4026532712]", true, doctor.Warn},
		{"a container's, with the host's /proc mounted", "/host/proc", "pid:[4026532712]", false, doctor.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := doctor.Config{LookupEnv: envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"}), ProcRoot: tt.root,
				PIDNamespace: func() (string, error) { return tt.ns, nil }, AnyPIDNamespace: tt.any}
			r := doctor.Check(context.Background(), cfg)
			f := r.Find("PID namespace")
			if len(f) != 1 || f[0].Status != tt.want || (tt.want == doctor.Fail && f[0].Fix == "") {
				t.Fatalf("findings %+v, want one %v", f, tt.want)
			}
		})
	}
}
