// Package e2e runs the example app against real backends and checks what
// they stored. One app run feeds two metric paths at once:
//
//   - via a Collector: Jaeger v2 (an OTel Collector distribution with OTLP
//     in, traces in memory) serves the metrics on its Prometheus exporter,
//     which Prometheus 2 scrapes;
//   - OTLP-native: the same Collector forwards the metrics, unchanged, over
//     OTLP/HTTP into Prometheus 3's own OTLP receiver, which promotes the
//     run id, the model and the service name to labels.
//
// The forwarding hop exists because the demo app exports OTLP over gRPC
// only, and Prometheus 3 receives OTLP over HTTP only.
//
// It lives in its own module so that the library never requires Jaeger or
// Prometheus. Both are built from source, Prometheus 3 through its own
// modfile (prom3.mod), because its dependencies are newer than Jaeger's.
// With empty module and build caches the two builds need about 20 minutes
// of two idle cores (Jaeger about 11, Prometheus 3 about 9.5), and took 38
// minutes, in parallel, on two cores shared with other builds; warm, go
// build finds both binaries up to date in seconds. Run
//
//	cd e2e && go test -count=1 -v -timeout 60m ./...
//
// -short runs only the checks that need no backend, such as [TestDashboard].
//
// A real serving engine runs here too: Ollama, built from ollama.mod for
// the CPU in parallel with Jaeger and Prometheus 3 (about 4 minutes of two
// idle cores), serving a tiny random Llama that package gguf writes at
// test time; [TestOllama] runs the proxy in front of it and as its
// wrapper through the openai-go client (ollamadrive, a module of its own).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"
)

const (
	serviceName = "otelenergy-e2e"

	totalBudget  = 55 * time.Minute // capped further by go test -timeout
	buildTimeout = 45 * time.Minute // cold Jaeger and Prometheus 3 builds on a busy machine, downloads included
	// prebuildTimeout bounds TestBuildBackends, the cold builds alone,
	// under CI's 90 minutes.
	prebuildTimeout  = 75 * time.Minute
	provisionTimeout = 3 * time.Minute
	startTimeout     = time.Minute
	appDuration      = 20 * time.Second
	swapEvery        = 7 * time.Second
	appExitSlack     = 90 * time.Second
	assertTimeout    = time.Minute
	stopGrace        = 10 * time.Second

	// rateWindow replaces Grafana's $__rate_interval: at least four 1 s
	// scrapes, and it still covers the run when queried just after it.
	rateWindow = "1m"
)

func TestEndToEnd(t *testing.T) {
	summarize(t)
	if testing.Short() {
		t.Skip("end-to-end test: builds Jaeger and Prometheus 3 and runs real backends")
	}
	ctx := budgetContext(t, totalBudget)
	clk := newPhaseClock(t)

	root, binDir := repoDirs(t)

	// Cold, each build is minutes of compiling and about 2 GB of memory;
	// in parallel they overlap downloads with compiling. Warm, go build
	// finds the binaries up to date and relinks nothing.
	jaegerBin := filepath.Join(binDir, "jaeger")
	prom3Bin := filepath.Join(binDir, "prometheus3")
	buildAll(ctx, t, backendBuilds(root, jaegerBin, prom3Bin))
	clk.mark("build jaeger and prometheus 3")

	promBin, err := findPrometheus(ctx, binDir)
	if err != nil {
		fatalf(t, "prometheus: %v", err)
	}
	if out, err := exec.CommandContext(ctx, promBin, "--version").CombinedOutput(); err == nil {
		t.Logf("using %s: %s", promBin, firstLine(string(out)))
	}
	clk.mark("provision prometheus")

	appBin := filepath.Join(binDir, "app")
	// Built inside the example module, which works with the root's go.work
	// and with GOWORK=off alike.
	if err := runCommand(ctx, buildTimeout, filepath.Join(root, "example"), nil, "go", "build", "-o", appBin, "./app"); err != nil {
		fatalf(t, "build example app: %v", err)
	}
	clk.mark("build app")

	t.Run("collector config validates", func(t *testing.T) {
		// Jaeger v2 is a collector distribution with every component the
		// example config names.
		checkCommand(ctx, t, root, jaegerBin, "validate", "--config", filepath.Join(root, "example", "collector-config.yaml"))
	})
	t.Run("prometheus config validates", func(t *testing.T) {
		promtool := filepath.Join(filepath.Dir(promBin), "promtool")
		checkCommand(ctx, t, root, promtool, "check", "config", filepath.Join(root, "example", "prometheus.yaml"))
	})
	clk.mark("validate example configs")

	p := freePorts(t, 10)
	ports := backendPorts{
		OTLPGRPC: p[0], OTLPHTTP: p[1], QueryHTTP: p[2], QueryGRPC: p[3],
		Health: p[4], HealthGRPC: p[5], Exporter: p[6], Prometheus: p[7],
		Prometheus3: p[8],
	}
	appAddr := fmt.Sprintf("127.0.0.1:%d", p[9])
	jaegerURL := fmt.Sprintf("http://127.0.0.1:%d", ports.QueryHTTP)
	promURL := fmt.Sprintf("http://127.0.0.1:%d", ports.Prometheus)
	prom3URL := fmt.Sprintf("http://127.0.0.1:%d", ports.Prometheus3)

	// Prometheus 3 first: the collector forwards metrics to it from its
	// first export on.
	startPrometheus3(ctx, t, prom3Bin, ports)
	startJaeger(ctx, t, jaegerBin, ports)
	startPrometheus(ctx, t, promBin, ports)
	clk.mark("start backends")

	// Two simulated GPUs (the demo's default is one): hw.energy must
	// arrive per GPU.
	appStart := time.Now()
	app := startProcess(t, "app", root, appEnv(ports.OTLPGRPC), appBin, "-gpus", "2",
		"-addr", appAddr, "-duration", appDuration.String(), "-swap-every", swapEvery.String(),
		"-carbon-intensity", carbonGPerKWh, "-pue", carbonPUE)
	// The same app beside it, scraped directly: the dashboard's third path.
	direct := startDirectScrape(ctx, t, promBin, root, serviceName+"-direct", os.Environ(), appBin, "-gpus", "2",
		"-addr", fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0]), "-duration", appDuration.String(), "-swap-every", swapEvery.String(),
		"-carbon-intensity", carbonGPerKWh, "-pue", carbonPUE)
	direct.prom.at = appStart.Add(appDuration - 3*time.Second)
	if err := app.wait(ctx, appDuration+appExitSlack); err != nil {
		fatalf(t, "app did not exit 0 by itself within %v: %v", appDuration+appExitSlack, err)
	}
	if err := direct.proc.wait(ctx, appDuration+appExitSlack); err != nil {
		fatalf(t, "the directly scraped app did not exit 0 by itself within %v: %v", appDuration+appExitSlack, err)
	}
	if !strings.Contains(readFile(t, app.stdout)+readFile(t, app.stderr), "energy.millijoules=") {
		errorf(t, "app output has no per-request energy.millijoules= lines")
	}
	clk.mark("run app")

	// Every PromQL query is evaluated at evalAt, a few scrapes after the
	// app's final export, over a window that covers the whole run; slow
	// assertions then cannot slide the window off the run.
	evalAt := time.Now().Add(3 * time.Second)
	time.Sleep(time.Until(evalAt))
	base := checks{
		ctx:       ctx,
		root:      root,
		jaegerURL: jaegerURL,
		appStart:  appStart,
		sel:       fmt.Sprintf(`{service_name=%q}`, serviceName),
		window:    fmt.Sprintf("%ds", int(math.Ceil(evalAt.Sub(appStart).Seconds()))+5),
	}
	t.Run("jaeger has server spans with energy", base.serverSpans)
	clk.mark("asserts: jaeger")
	t.Run("direct scrape by prometheus 2: every dashboard query that works there returns data", func(t *testing.T) {
		checkDashboardOn(ctx, t, root, dashboardSetup{name: "direct scrape", from: "library", prom: direct.prom,
			service: serviceName + "-direct", has: map[string]bool{"carbon on": true}})
	})
	clk.mark("asserts: direct scrape")
	// The same assertions, with the same PromQL, on both metric paths.
	for _, path := range []struct{ name, url, setup string }{
		{"collector exporter scraped by prometheus 2", promURL, "Collector"},
		{"otlp into prometheus 3", prom3URL, "Prometheus 3"},
	} {
		c := base
		c.prom = promClient{base: path.url, at: evalAt}
		c.setup = path.setup
		t.Run(path.name, func(t *testing.T) {
			t.Run("metric names", c.metricNames)
			t.Run("hw.energy per GPU without resets", c.energyCounters)
			t.Run("per-run series carry the run id", c.runIDs)
			t.Run("exemplars link to Jaeger traces", c.exemplars)
			t.Run("every dashboard query returns data", c.dashboard)
			t.Run("request + unattributed emissions = split energy × intensity × PUE", c.emissions)
		})
		clk.mark("asserts: " + path.name)
	}
}

// The static carbon intensity and PUE the example app and the fleet's
// proxies run with, and the factor they give, in g CO2e per J.
const (
	carbonGPerKWh = "436"
	carbonPUE     = "1.135"
	gPerJ         = 436 * 1.135 / 3.6e6
)

// checks are the assertions on what the backends stored after one app run.
type checks struct {
	ctx       context.Context
	root      string
	jaegerURL string
	prom      promClient
	appStart  time.Time
	sel       string // PromQL label matchers selecting this test's service
	window    string // PromQL range covering the whole app run
	setup     string // the dashboard's name of this metric path
}

// serverSpans: Jaeger has server spans carrying the request's energy and
// output tokens.
func (c *checks) serverSpans(t *testing.T) {
	var n, withEnergy, withCo2e int
	var badCo2e []string
	err := poll(c.ctx, assertTimeout, func() error {
		spans, err := jaegerSpans(c.ctx, c.jaegerURL, serviceName, c.appStart.Add(-time.Minute), time.Now().Add(time.Minute), 20)
		if err != nil {
			return err
		}
		n, withEnergy, withCo2e, badCo2e = 0, 0, 0, nil
		for _, s := range spans {
			if !s.server() {
				continue
			}
			n++
			mj, ok := s.number("energy.millijoules")
			_, tokens := s.attr("gen_ai.usage.output_tokens")
			if ok && mj > 0 && tokens {
				withEnergy++
			}
			// The span's emissions are its energy at the static intensity,
			// to one µg per counter interval and the span's rounding.
			if mg, ok2 := s.number("energy.co2e.milligrams"); ok && ok2 {
				withCo2e++
				if want := mj * gPerJ; math.Abs(mg-want) > 0.05+0.001*want {
					badCo2e = append(badCo2e, fmt.Sprintf("%v mJ → %v mg, want %.3f", mj, mg, want))
				}
			}
		}
		if withEnergy == 0 {
			return fmt.Errorf("%d spans, %d server spans, none with energy.millijoules > 0 and gen_ai.usage.output_tokens", len(spans), n)
		}
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	t.Logf("%d of %d server spans carry energy.millijoules > 0 and gen_ai.usage.output_tokens; %d carry energy.co2e.milligrams", withEnergy, n, withCo2e)
	if withCo2e == 0 || len(badCo2e) > 0 {
		errorf(t, "%d spans with energy.co2e.milligrams; %d off their energy at %s g/kWh × %s: %q", withCo2e, len(badCo2e), carbonGPerKWh, carbonPUE, badCo2e)
	}
}

// emissions: the requests' emissions plus the unattributed ones equal the
// energy the ledger split (requests, unattributed, other processes) times
// the intensity and the PUE. Each counter interval's emissions are rounded
// to the µg once, so the two sides may differ by half a µg per interval.
func (c *checks) emissions(t *testing.T) {
	last := func(m string) float64 {
		var sum float64
		for _, s := range c.prom.poll(c.ctx, t, fmt.Sprintf(`sum(last_over_time(%s%s[%s]))`, m, c.sel, c.window)) {
			sum += s.value()
		}
		return sum
	}
	reqG, unG := last("otelenergy_request_co2e_grams_sum"), last("otelenergy_co2e_unattributed_grams_total")
	reqJ, unJ := last("otelenergy_request_energy_joules_sum"), last("otelenergy_energy_unattributed_joules_total")
	var otherJ float64
	if res, err := c.prom.query(c.ctx, fmt.Sprintf(`sum(last_over_time(otelenergy_energy_other_processes_joules_total%s[%s]))`, c.sel, c.window)); err == nil && len(res) > 0 {
		otherJ = res[0].value()
	}
	want := (reqJ + unJ + otherJ) * gPerJ
	// At most one µg per counter interval: a 100 ms counter on each of
	// the GPUs over the run, generously.
	tol := 2e-6 * 2 * 10 * (time.Since(c.appStart).Seconds() + 60)
	t.Logf("emissions: requests %.6f g + unattributed %.6f g = %.6f g; split energy (%.3f + %.3f + %.3f) J × %s g/kWh × %s = %.6f g (tolerance %.6f g)",
		reqG, unG, reqG+unG, reqJ, unJ, otherJ, carbonGPerKWh, carbonPUE, want, tol)
	if reqG <= 0 || want <= 0 {
		fatalf(t, "no emissions (%v g) or no energy (%v g worth)", reqG, want)
	}
	if math.Abs(reqG+unG-want) > tol {
		errorf(t, "requests + unattributed emissions %.6f g, want %.6f g ± %.6f g", reqG+unG, want, tol)
	}
}

// energyCounters: hw.energy arrives per GPU, grows, and never resets across
// the model swaps.
func (c *checks) energyCounters(t *testing.T) {
	gpus := labelValues(c.prom.poll(c.ctx, t, fmt.Sprintf(`group by (hw_id) (last_over_time(hw_energy_joules_total%s[%s]))`, c.sel, c.window)), "hw_id")
	if len(gpus) < 2 {
		errorf(t, "hw_energy_joules_total has hw_id values %q, want at least 2 GPUs", gpus)
	}
	for _, s := range c.prom.poll(c.ctx, t, fmt.Sprintf(`resets(hw_energy_joules_total%s[%s])`, c.sel, c.window)) {
		if s.value() != 0 {
			errorf(t, "hw_energy_joules_total{hw_id=%q} reset %v times across the run", s.Metric["hw_id"], s.value())
		}
	}
	for _, s := range c.prom.poll(c.ctx, t, fmt.Sprintf(`increase(hw_energy_joules_total%s[%s])`, c.sel, c.window)) {
		if !(s.value() > 0) {
			errorf(t, "hw_energy_joules_total{hw_id=%q} grew by %v J, want > 0", s.Metric["hw_id"], s.value())
		}
	}
	t.Logf("GPUs: %q", gpus)
}

// runIDs: the per-run series carry one otelenergy_run_id per run.
func (c *checks) runIDs(t *testing.T) {
	runs := c.prom.poll(c.ctx, t, fmt.Sprintf(`group by (otelenergy_run_id) (last_over_time(otelenergy_run_energy_joules_total%s[%s]))`, c.sel, c.window))
	ids := slices.DeleteFunc(labelValues(runs, "otelenergy_run_id"), func(s string) bool { return s == "" })
	if len(ids) < 2 {
		errorf(t, "otelenergy_run_energy_joules_total has otelenergy_run_id values %q, want one per run (at least 2 with a swap every %v)", ids, swapEvery)
	}
	t.Logf("runs: %q", ids)
}

// exemplars: the request-energy histogram's exemplars name traces that Jaeger
// has, which is the link Grafana follows.
func (c *checks) exemplars(t *testing.T) {
	var found string
	err := poll(c.ctx, assertTimeout, func() error {
		ids, err := c.prom.exemplarTraceIDs(c.ctx, `otelenergy_request_energy_joules_bucket`+c.sel, c.appStart.Add(-time.Minute))
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return errors.New("no exemplars with trace_id on otelenergy_request_energy_joules_bucket")
		}
		for _, id := range ids {
			if jaegerHasTrace(c.ctx, c.jaegerURL, id) {
				found = id
				return nil
			}
		}
		return fmt.Errorf("none of %d exemplar trace ids is in Jaeger", len(ids))
	})
	if err != nil {
		fatal(t, err)
	}
	t.Logf("exemplar trace %s is in Jaeger", found)
}

// metricNames logs the names this Prometheus stored for the app's metrics,
// so that a change in the OTLP-to-Prometheus naming shows in the log.
func (c *checks) metricNames(t *testing.T) {
	names, err := c.prom.metricNames(c.ctx)
	if err != nil {
		fatal(t, err)
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		return !strings.HasPrefix(n, "hw_") && !strings.HasPrefix(n, "otelenergy_") &&
			!strings.HasPrefix(n, "gen_ai_") && n != "target_info"
	})
	if len(names) == 0 {
		fatal(t, "no hw_*, otelenergy_* or gen_ai_* metrics")
	}
	t.Logf("%d metric names: %s", len(names), strings.Join(names, " "))
	for _, m := range []string{"hw_energy_joules_total", "otelenergy_run_energy_joules_total", "target_info"} {
		labels, err := c.prom.labelNames(c.ctx, m)
		if err != nil {
			fatal(t, err)
		}
		t.Logf("labels of %s: %s", m, strings.Join(labels, " "))
	}
}

// dashboard: every dashboard query that says it works on this path, with
// the library's metrics, reads names and labels this Prometheus has, and
// returns data (checkDashboardOn).
func (c *checks) dashboard(t *testing.T) {
	checkDashboardOn(c.ctx, t, c.root, dashboardSetup{name: c.setup, from: "library", prom: c.prom, service: serviceName,
		has: map[string]bool{"carbon on": true}})
}

// grafanaVars maps the dashboard's variables to values for this test:
// durations that fit a one-minute run, and this test's service.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", rateWindow,
	"$__interval", "5s",
	"$__range", "5m",
	"$service", regexp.QuoteMeta(serviceName),
)

// backendPorts are the loopback ports of one test's backends.
type backendPorts struct {
	OTLPGRPC, OTLPHTTP   int
	QueryHTTP, QueryGRPC int
	Health, HealthGRPC   int
	Exporter             int
	Prometheus           int
	Prometheus3          int
}

var jaegerConfig = template.Must(template.New("jaeger").Parse(`
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [prometheus, otlphttp/prometheus3]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{{.QueryHTTP}}
    grpc:
      endpoint: 127.0.0.1:{{.QueryGRPC}}
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{{.Health}}
    grpc:
      endpoint: 127.0.0.1:{{.HealthGRPC}}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{{.OTLPGRPC}}
      http:
        endpoint: 127.0.0.1:{{.OTLPHTTP}}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
  prometheus:
    endpoint: 127.0.0.1:{{.Exporter}}
    resource_to_telemetry_conversion:
      enabled: true
    enable_open_metrics: true
  # Prometheus 3's OTLP receiver speaks OTLP/HTTP only. No sending queue:
  # exports leave in order, one at a time, as a cumulative series needs.
  otlphttp/prometheus3:
    metrics_endpoint: http://127.0.0.1:{{.Prometheus3}}/api/v1/otlp/v1/metrics
    sending_queue:
      enabled: false
`))

var prometheusConfig = template.Must(template.New("prometheus").Parse(`
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: jaeger-exporter
    static_configs:
      - targets: ['127.0.0.1:{{.Exporter}}']
`))

// prometheus3Config is Prometheus 3 as an OTLP backend: no scrape jobs, the
// resource attributes the dashboard groups by promoted to labels, and
// out-of-order ingestion for exports that arrive late.
var prometheus3Config = template.Must(template.New("prometheus3").Parse(`
global:
  evaluation_interval: 1s
otlp:
  promote_resource_attributes:
    - service.name
    - otelenergy.run.id
    - gen_ai.request.model
storage:
  tsdb:
    out_of_order_time_window: 30m
`))

// repoDirs returns the repository root, checked to be the library's, and
// e2e/.bin, where the tests build their binaries.
func repoDirs(t *testing.T) (root, binDir string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		fatal(t, err)
	}
	if !isLibraryRoot(root) {
		fatalf(t, "%s is not the otelenergy repository root; run the test from e2e/", root)
	}
	binDir = filepath.Join(root, "e2e", ".bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		fatal(t, err)
	}
	return root, binDir
}

// goBuild is one go build the end-to-end tests run: args after "build",
// in dir, with env (nil: this process's), after prepare, when set, has
// provided what the build needs and the variables it adds to env.
type goBuild struct {
	name, dir string
	env       []string
	args      []string
	prepare   func(context.Context) ([]string, error)
}

// backendBuilds are the builds of Jaeger, Prometheus 3 and Ollama from
// e2e/'s modfiles. -modfile works only outside a workspace; the root's go.work
// lies above e2e/.
func backendBuilds(root, jaegerBin, prom3Bin string) []goBuild {
	noWork := append(os.Environ(), "GOWORK=off")
	dir := filepath.Join(root, "e2e")
	return []goBuild{
		{"jaeger", dir, noWork, []string{"-modfile=go.mod", "-o", jaegerBin, "github.com/jaegertracing/jaeger/cmd/jaeger"}, nil},
		{"prometheus 3", dir, noWork, []string{"-modfile=prom3.mod", "-o", prom3Bin, "github.com/prometheus/prometheus/cmd/prometheus"}, nil},
		// Ollama, which TestOllama runs, builds beside them, so that
		// whichever test runs first builds all three at once.
		ollamaBuild(root, filepath.Join(filepath.Dir(jaegerBin), "ollama")),
	}
}

// TestBuildBackends builds Jaeger, Prometheus 3 and Ollama and checks
// nothing else. scripts/test.sh runs it alone, in the background while the
// unit tests run, so that cold builds (tens of minutes on a loaded
// machine) spend none of the e2e tests' own -timeout, which budgetContext
// hands out to the tests in turn: the tests then find the binaries up to
// date in seconds. Run with the others, it is that warm check.
func TestBuildBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Jaeger, Prometheus 3 and Ollama")
	}
	root, binDir := repoDirs(t)
	ctx := budgetContext(t, prebuildTimeout)
	buildAllWithin(ctx, t, backendBuilds(root, filepath.Join(binDir, "jaeger"), filepath.Join(binDir, "prometheus3")), prebuildTimeout)
}

// buildAll runs builds in parallel and fails the test if any fails. Cold,
// Jaeger and Prometheus 3 are minutes of compiling and about 2 GB of
// memory each, and in parallel they overlap downloads with compiling;
// warm, go build finds them up to date and relinks nothing.
func buildAll(ctx context.Context, t *testing.T, builds []goBuild) {
	t.Helper()
	buildAllWithin(ctx, t, builds, buildTimeout)
}

// buildAllWithin is buildAll with each build bounded by timeout.
func buildAllWithin(ctx context.Context, t *testing.T, builds []goBuild, timeout time.Duration) {
	t.Helper()
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		wg.Go(func() {
			start := time.Now()
			if b.prepare != nil {
				env, err := b.prepare(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				b.env = append(slices.Clip(b.env), env...)
			}
			errs[i] = runCommand(ctx, timeout, b.dir, b.env, "go", append([]string{"build"}, b.args...)...)
			t.Logf("build %s took %v", b.name, time.Since(start).Round(100*time.Millisecond))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			fatalf(t, "build %s: %v", builds[i].name, err)
		}
	}
}

func startJaeger(ctx context.Context, t *testing.T, bin string, ports backendPorts) {
	t.Helper()
	cfg := writeTemplate(t, "jaeger.yaml", jaegerConfig, ports)
	startProcess(t, "jaeger", t.TempDir(), os.Environ(), bin, "--config", cfg)
	health := fmt.Sprintf("http://127.0.0.1:%d/status", ports.Health)
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, health) }); err != nil {
		fatalf(t, "jaeger not healthy: %v", err)
	}
}

func startPrometheus(ctx context.Context, t *testing.T, bin string, ports backendPorts) {
	t.Helper()
	cfg := writeTemplate(t, "prometheus.yaml", prometheusConfig, ports)
	dir := t.TempDir()
	startProcess(t, "prometheus", dir, os.Environ(), bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", ports.Prometheus),
		"--enable-feature=exemplar-storage",
	)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports.Prometheus)
	err := poll(ctx, startTimeout, func() error {
		if err := httpOK(ctx, base+"/-/ready"); err != nil {
			return err
		}
		up, err := promClient{base: base}.query(ctx, `up{job="jaeger-exporter"} == 1`)
		if err == nil && len(up) == 0 {
			err = errors.New("exporter target not up yet")
		}
		return err
	})
	if err != nil {
		fatalf(t, "prometheus not scraping the exporter: %v", err)
	}
}

func startPrometheus3(ctx context.Context, t *testing.T, bin string, ports backendPorts) {
	t.Helper()
	cfg := writeTemplate(t, "prometheus3.yaml", prometheus3Config, ports)
	dir := t.TempDir()
	startProcess(t, "prometheus3", dir, os.Environ(), bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", ports.Prometheus3),
		"--web.enable-otlp-receiver",
		"--enable-feature=exemplar-storage",
	)
	ready := fmt.Sprintf("http://127.0.0.1:%d/-/ready", ports.Prometheus3)
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, ready) }); err != nil {
		fatalf(t, "prometheus 3 not ready: %v", err)
	}
}

// appEnv is the environment of the example app: the caller's, less any
// OTEL_* variables, plus the standard ones that point it at Jaeger.
func appEnv(otlpPort int) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	return append(env,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", otlpPort),
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		// The default, made explicit: Prometheus 3 ingests cumulative OTLP
		// without feature flags.
		"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=cumulative",
		"OTEL_SERVICE_NAME="+serviceName,
		"OTEL_METRIC_EXPORT_INTERVAL=1000",
		"OTEL_BSP_SCHEDULE_DELAY=500",
	)
}

// findPrometheus returns a Prometheus binary: one on PATH, the system one, or
// one unpacked from the Debian package into binDir (kept for later runs).
func findPrometheus(ctx context.Context, binDir string) (string, error) {
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p, nil
	}
	unpacked := filepath.Join(binDir, "prometheus-root")
	for _, p := range []string{"/usr/bin/prometheus", filepath.Join(unpacked, "usr", "bin", "prometheus")} {
		if isExecutable(p) {
			return p, nil
		}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("not found on PATH or in /usr/bin, and no apt-get to fetch the Debian package; install prometheus (2.x, with exemplar storage)")
	}
	debDir := filepath.Join(binDir, "deb")
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return "", err
	}
	download := func() error {
		return runCommand(ctx, provisionTimeout, debDir, nil, "apt-get", "download", "prometheus")
	}
	if err := download(); err != nil {
		if uerr := runCommand(ctx, provisionTimeout, debDir, nil, "apt-get", "update"); uerr != nil {
			return "", fmt.Errorf("apt-get download prometheus: %v; apt-get update: %w", err, uerr)
		}
		if err := download(); err != nil {
			return "", fmt.Errorf("apt-get download prometheus: %w", err)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(debDir, "prometheus_*.deb"))
	if len(debs) == 0 {
		return "", fmt.Errorf("apt-get download left no prometheus_*.deb in %s", debDir)
	}
	// Unpack beside the target and rename, so an interrupted unpack is never
	// mistaken for a cached one.
	tmp, err := os.MkdirTemp(binDir, "prometheus-root-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := runCommand(ctx, provisionTimeout, binDir, nil, "dpkg-deb", "-x", debs[len(debs)-1], tmp); err != nil {
		return "", err
	}
	p := filepath.Join(unpacked, "usr", "bin", "prometheus")
	if err := os.Rename(tmp, unpacked); err != nil && !isExecutable(p) { // a concurrent run may have won
		return "", err
	}
	if !isExecutable(p) {
		return "", fmt.Errorf("%s missing after unpacking %s", p, debs[len(debs)-1])
	}
	return p, nil
}

// process is a started command whose output goes to files.
type process struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr string
	done           chan struct{}
	err            error // Wait's result; read after done is closed
}

// startProcess starts bin and registers a cleanup that stops it (interrupt,
// then kill after stopGrace) and, if the test failed, logs its output tails.
func startProcess(t *testing.T, name, dir string, env []string, bin string, args ...string) *process {
	t.Helper()
	logs := t.TempDir()
	p := &process{
		name:   name,
		stdout: filepath.Join(logs, name+".stdout"),
		stderr: filepath.Join(logs, name+".stderr"),
		done:   make(chan struct{}),
	}
	outF, err := os.Create(p.stdout)
	if err != nil {
		fatal(t, err)
	}
	errF, err := os.Create(p.stderr)
	if err != nil {
		fatal(t, err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir, p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = dir, env, outF, errF
	if err := p.cmd.Start(); err != nil {
		outF.Close()
		errF.Close()
		fatalf(t, "start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		outF.Close()
		errF.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			for _, f := range []string{p.stdout, p.stderr} {
				t.Logf("--- tail of %s (pid %d) %s:\n%s", name, p.cmd.Process.Pid, filepath.Base(f), tail(f, 40))
			}
		}
	})
	return p
}

// wait waits up to d for the process to exit by itself and returns its exit
// error; nil means exit status 0.
func (p *process) wait(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		return fmt.Errorf("%s still running after %v", p.name, d)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", p.name, ctx.Err())
	}
}

// stop interrupts the process, kills it after stopGrace and waits for it.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// runCommand runs a short-lived command to completion within d; on failure
// the error carries the tail of its output.
func runCommand(ctx context.Context, d time.Duration, dir string, env []string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.WaitDelay = stopGrace
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, lastBytes(out.Bytes(), 4000))
	}
	return nil
}

// checkCommand runs a validator and fails t if it fails.
func checkCommand(ctx context.Context, t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	if err := runCommand(ctx, startTimeout, dir, nil, bin, args...); err != nil {
		errorf(t, "%v", err)
	}
}

// budgetContext bounds the whole test by d and by go test's own deadline,
// leaving time for cleanups.
func budgetContext(t *testing.T, d time.Duration) context.Context {
	deadline := time.Now().Add(d)
	if td, ok := t.Deadline(); ok && td.Add(-30*time.Second).Before(deadline) {
		deadline = td.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// phaseClock logs the wall time of consecutive phases.
type phaseClock struct {
	t       *testing.T
	last    time.Time
	summary []string
}

func newPhaseClock(t *testing.T) *phaseClock {
	c := &phaseClock{t: t, last: time.Now()}
	t.Cleanup(func() { t.Logf("phases: %s", strings.Join(c.summary, ", ")) })
	return c
}

func (c *phaseClock) mark(name string) {
	now := time.Now()
	d := now.Sub(c.last).Round(100 * time.Millisecond)
	c.last = now
	c.summary = append(c.summary, fmt.Sprintf("%s %v", name, d))
	c.t.Logf("phase %q took %v", name, d)
}

// freePorts returns n distinct loopback ports that were free a moment
// ago. They are drawn below the kernel's ephemeral range (32768 and up on
// Linux), as package freeport of the main module draws them, which this
// module does not require: a port from that range, which port 0 gives,
// can be taken by any outgoing connection before the server binds it.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try == 100*n {
			fatal(t, fmt.Errorf("no %d free loopback ports below 32768 in %d tries", n, try))
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12768)))
		if err != nil {
			continue // held: draw another
		}
		defer l.Close() // held until all are drawn, so that they are distinct
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// poll calls check every 500 ms until it returns nil, d passes or ctx ends,
// and returns the last error.
func poll(ctx context.Context, d time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", d, err)
		case <-tick.C:
		}
	}
}

func httpGet(ctx context.Context, u string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

func httpOK(ctx context.Context, u string) error {
	body, code, err := httpGet(ctx, u)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", u, code, lastBytes(body, 200))
	}
	return nil
}

func getJSON(ctx context.Context, u string, v any) error {
	body, code, err := httpGet(ctx, u)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", u, code, lastBytes(body, 500))
	}
	return json.Unmarshal(body, v)
}

// promSample is one element of an instant-vector result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

func (s promSample) value() float64 {
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// promClient queries Prometheus's HTTP API at a fixed evaluation time (the
// current time if at is zero).
type promClient struct {
	base string
	at   time.Time
}

// query runs an instant PromQL query.
func (c promClient) query(ctx context.Context, query string) ([]promSample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	q := url.Values{"query": {query}}
	if !c.at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(c.at.UnixMilli())/1000, 'f', 3, 64))
	}
	if err := getJSON(ctx, c.base+"/api/v1/query?"+q.Encode(), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", query, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %q, want vector", query, r.Data.ResultType)
	}
	return r.Data.Result, nil
}

// metricNames returns every metric name this Prometheus has.
func (c promClient) metricNames(ctx context.Context) ([]string, error) {
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := getJSON(ctx, c.base+"/api/v1/label/__name__/values", &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("metric names: %s", r.Error)
	}
	return r.Data, nil
}

// labelNames returns the label names of metric's series.
func (c promClient) labelNames(ctx context.Context, metric string) ([]string, error) {
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := getJSON(ctx, c.base+"/api/v1/labels?"+url.Values{"match[]": {metric}}.Encode(), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("label names of %s: %s", metric, r.Error)
	}
	return r.Data, nil
}

// poll polls query until it returns a non-empty vector (the first queries
// after a scrape can come back empty), failing t if it never does.
func (c promClient) poll(ctx context.Context, t *testing.T, query string) []promSample {
	t.Helper()
	var res []promSample
	err := poll(ctx, assertTimeout, func() error {
		var err error
		res, err = c.query(ctx, query)
		if err == nil && len(res) == 0 {
			err = errors.New("empty result")
		}
		return err
	})
	if err != nil {
		errorf(t, "PromQL %s: %v", query, err)
	}
	return res
}

// labelValues returns the sorted distinct values of label in samples.
func labelValues(samples []promSample, label string) []string {
	var vs []string
	for _, s := range samples {
		vs = append(vs, s.Metric[label])
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// exemplarTraceIDs returns the trace_id labels of the exemplars Prometheus
// stored for query from from until the evaluation time.
func (c promClient) exemplarTraceIDs(ctx context.Context, query string, from time.Time) ([]string, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			Exemplars []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	to := c.at
	if to.IsZero() {
		to = time.Now()
	}
	q := url.Values{
		"query": {query},
		"start": {strconv.FormatInt(from.Unix(), 10)},
		"end":   {strconv.FormatInt(to.Unix()+1, 10)},
	}
	if err := getJSON(ctx, c.base+"/api/v1/query_exemplars?"+q.Encode(), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("exemplars %q: %s", query, r.Error)
	}
	var ids []string
	for _, series := range r.Data {
		for _, e := range series.Exemplars {
			if id := e.Labels["trace_id"]; id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// otlpSpan is the part of an OTLP/JSON span (Jaeger's /api/v3) the test reads.
type otlpSpan struct {
	TraceID    string          `json:"traceId"`
	Name       string          `json:"name"`
	Kind       json.RawMessage `json:"kind"` // a number, or an enum name
	Attributes []struct {
		Key   string                     `json:"key"`
		Value map[string]json.RawMessage `json:"value"` // {"intValue":"42"}, ...
	} `json:"attributes"`
}

func (s otlpSpan) server() bool {
	k := strings.Trim(string(s.Kind), `"`)
	return k == "2" || k == "SPAN_KIND_SERVER"
}

func (s otlpSpan) attr(key string) (map[string]json.RawMessage, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value, true
		}
	}
	return nil, false
}

// number returns a numeric attribute; OTLP/JSON writes int64 as a string.
func (s otlpSpan) number(key string) (float64, bool) {
	v, ok := s.attr(key)
	if !ok {
		return 0, false
	}
	for _, k := range []string{"intValue", "doubleValue"} {
		if raw, ok := v[k]; ok {
			f, err := strconv.ParseFloat(strings.Trim(string(raw), `"`), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// jaegerSpans returns the spans of up to n traces of service in [from, to].
func jaegerSpans(ctx context.Context, base, service string, from, to time.Time, n int) ([]otlpSpan, error) {
	q := url.Values{
		"query.service_name":   {service},
		"query.start_time_min": {from.UTC().Format(time.RFC3339Nano)},
		"query.start_time_max": {to.UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {strconv.Itoa(n)},
	}
	var r struct {
		Result struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	if err := getJSON(ctx, base+"/api/v3/traces?"+q.Encode(), &r); err != nil {
		return nil, err
	}
	var spans []otlpSpan
	for _, rs := range r.Result.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			spans = append(spans, ss.Spans...)
		}
	}
	return spans, nil
}

func jaegerHasTrace(ctx context.Context, base, traceID string) bool {
	_, code, err := httpGet(ctx, base+"/api/v3/traces/"+url.PathEscape(traceID))
	return err == nil && code == http.StatusOK
}

// dashboardExprs returns every PromQL expr in a Grafana dashboard, in order.
func dashboardExprs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if len(exprs) == 0 {
		return nil, fmt.Errorf("%s has no PromQL exprs", path)
	}
	return exprs, nil
}

func writeTemplate(t *testing.T, name string, tmpl *template.Template, data any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		fatal(t, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		fatal(t, err)
	}
	return path
}

var libraryModule = regexp.MustCompile(`(?m)^module github\.com/otelenergy/otelenergy\s*$`)

func isLibraryRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && libraryModule.Match(data)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		fatal(t, err)
	}
	return string(data)
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
