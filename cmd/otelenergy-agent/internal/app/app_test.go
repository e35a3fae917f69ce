package app_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exporter keeps the last export and fails it on demand.
type exporter struct {
	mu   sync.Mutex
	last *metricdata.ResourceMetrics
	fail error
}

func (e *exporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}
func (e *exporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}
func (e *exporter) Export(_ context.Context, rm *metricdata.ResourceMetrics) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cp := *rm
	e.last = &cp
	return e.fail
}
func (e *exporter) ForceFlush(context.Context) error { return nil }
func (e *exporter) Shutdown(context.Context) error   { return nil }

// metrics returns the last export's metric names.
func (e *exporter) metrics() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	if e.last == nil {
		return nil
	}
	for _, sm := range e.last.ScopeMetrics {
		for _, m := range sm.Metrics {
			out = append(out, m.Name)
		}
	}
	return out
}

func config(t *testing.T) flags.Config {
	cfg, err := flags.Parse([]string{"-simulate", "-simulate-devices", "2", "-admin-listen", "127.0.0.1:0"}, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type harness struct {
	exp    *exporter
	ticks  chan time.Time
	addr   string
	mu     sync.Mutex
	stops  []string
	ready  map[string]int // /readyz's status right after each stop
	log    bytes.Buffer
	logger *slog.Logger
}

func newHarness() *harness {
	h := &harness{exp: &exporter{}, ticks: make(chan time.Time), ready: map[string]int{}}
	h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &h.log}, nil))
	return h
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (h *harness) readyz() int {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + h.addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (h *harness) deps(before func(string) error) app.Deps {
	return app.Deps{
		LookupEnv: func(string) (string, bool) { return "", false },
		NewReader: func(context.Context) (sdkmetric.Reader, error) {
			return sdkmetric.NewPeriodicReader(h.exp, sdkmetric.WithInterval(time.Hour)), nil
		},
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err == nil {
				h.addr = ln.Addr().String()
			}
			return ln, err
		},
		NewTicker: func(time.Duration) (<-chan time.Time, func()) { return h.ticks, func() {} },
		Stack: &lifecycle.Stack{BeforeStart: before, AfterStop: func(name string) {
			h.mu.Lock()
			h.stops = append(h.stops, name)
			h.mu.Unlock()
			if name == "readiness" || name == "admin server" {
				h.ready[name] = h.readyz()
			}
		}},
	}
}

// TestRunLifecycle runs the agent on simulated GPUs with a fake ticker,
// then ends it: the services stop in reverse order, readiness first,
// /readyz answers 503 while the listener still serves, the final export
// carries the agent's metrics, and a failed final export does not fail the
// run. TestFinalPassSplitsLastSteps checks the final export's values.
func TestRunLifecycle(t *testing.T) {
	h := newHarness()
	h.exp.fail = errors.New("collector gone")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, config(t), h.logger, h.deps(nil)) }()
	for range 3 {
		h.ticks <- time.Now()
	}
	if c := h.readyz(); c != http.StatusOK {
		t.Fatalf("/readyz while running = %d", c)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"readiness", "admin server", "sampling", "agent", "monitor", "carbon", "telemetry", "GPU source"}
	if !slices.Equal(h.stops, want) {
		t.Fatalf("stopped %q, want %q", h.stops, want)
	}
	if h.ready["readiness"] != http.StatusServiceUnavailable {
		t.Errorf("/readyz after readiness stopped = %d, want 503 from a listener still open", h.ready["readiness"])
	}
	if h.ready["admin server"] != 0 {
		t.Errorf("/readyz answered %d after the admin server stopped", h.ready["admin server"])
	}
	got := h.exp.metrics()
	for _, m := range []string{"hw.energy", "otelenergy.process.energy", "otelenergy.energy.idle", "otelenergy.energy.unattributed", "otelenergy.device.processes"} {
		if !slices.Contains(got, m) {
			t.Errorf("the final export lacks %s: %q", m, got)
		}
	}
	if !strings.Contains(h.log.String(), "the final metric export failed") || !strings.Contains(h.log.String(), "exporting metrics") {
		t.Errorf("log:\n%s", h.log.String())
	}
}

// TestStartFailureAtEveryStage fails each service's start in turn: Run
// returns the failure naming the stage, stops exactly the services started
// before it, in reverse, and leaks no goroutine.
func TestStartFailureAtEveryStage(t *testing.T) {
	stages := []string{"GPU source", "telemetry", "carbon", "monitor", "agent", "sampling", "admin server", "readiness"}
	for i, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			h := newHarness()
			before := func(name string) error {
				if name == stage {
					return errors.New("injected")
				}
				return nil
			}
			err := app.Run(context.Background(), config(t), h.logger, h.deps(before))
			if err == nil || err.Error() != "failed to start "+stage+": injected" {
				t.Fatalf("Run: %v", err)
			}
			want := slices.Clone(stages[:i])
			slices.Reverse(want)
			if !slices.Equal(h.stops, want) {
				t.Fatalf("stopped %q, want %q", h.stops, want)
			}
			goleak.VerifyNone(t)
		})
	}
}

// TestPrometheusScrape runs the agent with autoexport's Prometheus
// exporter, configured as the DaemonSet configures it (a host and a port),
// and scrapes it: the agent's metrics, otelenergy.device.processes
// included, are there.
func TestPrometheusScrape(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	t.Setenv("OTEL_METRICS_EXPORTER", "prometheus")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_HOST", host)
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_PORT", port)
	h := newHarness()
	d := h.deps(nil)
	d.NewReader = nil // autoexport's, from the variables above
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, config(t), h.logger, d) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for range 2 {
		h.ticks <- time.Now()
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"otelenergy_device_processes", "otelenergy_process_energy_joules_total", "hw_energy_joules_total", "otelenergy_energy_idle_joules_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("the scrape lacks %s", m)
		}
	}
	if strings.Count(string(body), "# TYPE otelenergy_device_processes") != 1 {
		t.Errorf("otelenergy_device_processes is not one metric family:\n%s", body)
	}
}
