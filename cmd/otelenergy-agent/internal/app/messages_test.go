package app_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
)

// TestWarnsOfDefaultEndpoint: with no OTEL_* variable, the agent exports
// to autoexport's default on localhost, and says so loudly at start, with
// the variable to set; with an endpoint set it does not.
func TestWarnsOfDefaultEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		warn bool
	}{
		{"no variable", nil, true},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{"prometheus", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			d := h.deps(nil)
			d.LookupEnv = func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- app.Run(ctx, config(t), h.logger, d) }()
			h.ticks <- time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			log := h.log.String()
			warned := strings.Contains(log, `level=WARN msg="no OTLP endpoint is set: the metrics go to autoexport's default, https://localhost:4318/v1/metrics`) &&
				strings.Contains(log, "OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318")
			if warned != tc.warn {
				t.Fatalf("warned %v, want %v:\n%s", warned, tc.warn, log)
			}
		})
	}
}

// TestFailedStartNamesItsCause: a start that fails after the telemetry
// started has exported nothing, and its final export's failure would be
// the first warning a reader sees; only the start's failure is reported.
func TestFailedStartNamesItsCause(t *testing.T) {
	h := newHarness()
	h.exp.fail = errors.New("collector gone")
	d := h.deps(nil)
	d.Listen = func(string, string) (net.Listener, error) { return nil, errors.New("address already in use") }
	err := app.Run(context.Background(), config(t), h.logger, d)
	if err == nil || !strings.Contains(err.Error(), "failed to start admin server") {
		t.Fatalf("Run: %v", err)
	}
	if log := h.log.String(); strings.Contains(log, "level=WARN msg=\"the final metric export failed") {
		t.Fatalf("a failed start warns of its final export:\n%s", log)
	}
}
