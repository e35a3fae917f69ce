// Command app is a small LLM-style HTTP server instrumented with otelhttp and
// otelenergy. It streams completions token by token, meters the GPU (through
// NVML, or a simulated, hardware-like GPU from package simgpu when NVML is
// absent, whose jobs the completions drive), and prints the energy of each
// request and a live J/token summary.
//
//	go run ./example/app                       # demo with built-in load
//	go run ./example/app -duration 15s         # exits by itself
//	go run ./example/app -swap-every 10s       # hot-swaps the model
//	go run ./example/app -carbon-intensity 436 -pue 1.135  # emissions too
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set it exports traces and metrics over
// OTLP gRPC, configured by the standard OTEL_* variables only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/simgpu"
)

// liveWindow is the window of the live J/token and power in the summary,
// the same as the Monitor's live metrics.
const liveWindow = 10 * time.Second

type options struct {
	addr        string
	duration    time.Duration
	swapEvery   time.Duration
	load        bool
	concurrency int
	gpus        int
	simulate    bool
	tokenRate   float64
	summary     time.Duration
	meter       bool
	intensity   string
	pue         string
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address")
	flag.DurationVar(&o.duration, "duration", 0, "exit after this long (0: run until interrupted)")
	flag.DurationVar(&o.swapEvery, "swap-every", 0, "hot-swap the model, beginning a new run, this often (0: never)")
	flag.BoolVar(&o.load, "load", true, "run the built-in load generator")
	flag.IntVar(&o.concurrency, "concurrency", 4, "concurrent requests of the load generator")
	flag.IntVar(&o.gpus, "gpus", 1, "simulated GPUs, when NVML is absent (each an H100 serving an 8B model: simgpu.H100)")
	flag.BoolVar(&o.simulate, "simulate", false, "use the simulated GPU even when NVML is present")
	flag.Float64Var(&o.tokenRate, "token-rate", 130, "tokens per second each completion streams (130: vLLM's 7.7 ms between tokens on an H100)")
	flag.DurationVar(&o.summary, "summary-every", 2*time.Second, "how often to print the live summary")
	flag.BoolVar(&o.meter, "meter", true, "meter energy; -meter=false serves the API alone, as a backend behind otelenergy-proxy, which meters it")
	flag.StringVar(&o.intensity, "carbon-intensity", "", "grid carbon intensity in g CO2e/kWh; set, it puts each request's emissions on its span (empty: no emissions)")
	flag.StringVar(&o.pue, "pue", "1", "the facility's power usage effectiveness, which multiplies the energy converted to emissions")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

var models = []string{"llama-3.1-8b-instruct", "mistral-7b-instruct", "qwen2.5-14b-instruct"}

func run(ctx context.Context, o options) error {
	if !o.meter {
		return serveUnmetered(ctx, o)
	}
	src, gpu, err := openSource(o)
	if err != nil {
		return err
	}
	// The Monitor registers its instruments on the global MeterProvider,
	// which forwards them to the one setupTelemetry installs; the
	// telemetry's resource needs the Monitor's. The demo is the inference
	// server itself, so it records the GenAI server metrics too.
	opts := []otelenergy.Option{otelenergy.WithModel(models[0]),
		otelenergy.WithGenAIMetrics("text_completion", "otelenergy-demo")}
	if cm, err := carbonModel(o); err != nil {
		return err
	} else if cm != nil {
		opts = append(opts, otelenergy.WithCarbon(cm))
	}
	mon, err := otelenergy.NewMonitor(src, opts...)
	if err != nil {
		return err
	}
	tel, err := setupTelemetry(ctx, mon.Resource())
	if err != nil {
		return err
	}
	if err := tel.startTracing(mon); err != nil {
		return err
	}
	if err := tel.beginRunMetrics(ctx, mon, mon.Run()); err != nil {
		return err
	}
	if err := mon.Start(); err != nil {
		return err
	}
	fmt.Printf("otelenergy demo: source=%s devices=%d model=%s run=%s\n", src.Kind(), len(mon.Devices()), models[0], mon.Run().ID())

	srv := &http.Server{Handler: newServer(mon, gpu, o.tokenRate), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening on http://%s/v1/completions\n", ln.Addr())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(err)
		}
	}()

	var wg sync.WaitGroup
	if o.load {
		for i := range o.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				loadWorker(ctx, "http://"+ln.Addr().String(), uint64(i))
			}()
		}
	}
	sum := &liveSummary{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		loop(ctx, o, mon, tel, sum)
	}()

	<-ctx.Done()
	wg.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(
		srv.Shutdown(shutdownCtx),
		tel.shutdown(shutdownCtx), // flushes spans while the monitor still samples
	)
	if merr := mon.Shutdown(shutdownCtx); merr != nil {
		err = errors.Join(err, fmt.Errorf("the monitor's shutdown: %w", merr))
	}
	sum.print(mon)
	fmt.Println("bye")
	return err
}

// serveUnmetered serves the completion API with no Monitor, no GPU and no
// telemetry: behind otelenergy-proxy, which meters the GPU itself, the
// demo would otherwise meter a simulated GPU of its own and print a
// second, different figure for the same request.
func serveUnmetered(ctx context.Context, o options) error {
	srv := &http.Server{Handler: newServer(nil, nil, o.tokenRate), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	fmt.Printf("otelenergy demo: serving without metering (-meter=false) on http://%s/v1\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var wg sync.WaitGroup
	if o.load {
		for i := range o.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				loadWorker(ctx, "http://"+ln.Addr().String(), uint64(i))
			}()
		}
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	wg.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// openSource returns NVML's source, or a simulated GPU, which it also
// returns so that the completions can run jobs on it.
func openSource(o options) (otelenergy.Source, *simgpu.GPU, error) {
	if !o.simulate {
		src, err := otelenergy.NewNVMLSource()
		if err == nil {
			return src, nil, nil
		}
		fmt.Printf("NVML not available (%v): using a simulated GPU\n", err)
	}
	// A board as a public vLLM run on an H100 measured it: a plateau of
	// about 400 W whenever it decodes, whatever the batch, and about
	// 0.65 J per output token at this load (0.35 J above idle).
	c := simgpu.H100()
	c.Devices, c.Noise, c.Seed = o.gpus, 0.02, 1
	gpu, err := simgpu.New(c)
	return gpu, gpu, err
}

// loop prints the live summary and hot-swaps the model.
func loop(ctx context.Context, o options, mon *otelenergy.Monitor, tel *telemetry, sum *liveSummary) {
	summary := time.NewTicker(o.summary)
	defer summary.Stop()
	var swap <-chan time.Time
	if o.swapEvery > 0 {
		t := time.NewTicker(o.swapEvery)
		defer t.Stop()
		swap = t.C
	}
	next := 1
	for {
		select {
		case <-ctx.Done():
			return
		case <-summary.C:
			sum.print(mon)
		case <-swap:
			model := models[next%len(models)]
			next++
			run := mon.BeginRun(model)
			fmt.Printf("hot swap: model=%s run=%s\n", model, run.ID())
			if err := tel.beginRunMetrics(ctx, mon, run); err != nil {
				otel.Handle(err)
			}
		}
	}
}

// liveSummary keeps the Monitor's recent totals, so that the live J/token
// and power are measured over the last liveWindow from what any user of
// the library reads (Monitor.Totals), one snapshot per summary.
type liveSummary struct{ snaps []otelenergy.Snapshot }

func (l *liveSummary) print(mon *otelenergy.Monitor) {
	now := mon.Totals()
	l.snaps = append(l.snaps, now)
	// Keep the newest snapshot at or before the window's start, and those
	// after it.
	for len(l.snaps) > 2 && now.T-l.snaps[1].T >= int64(liveWindow) {
		l.snaps = l.snaps[1:]
	}
	liveJPT, power := "n/a", "n/a"
	if first := l.snaps[0]; now.T > first.T {
		e := now.TotalEnergyMJ() - min(first.TotalEnergyMJ(), now.TotalEnergyMJ())
		if v, ok := ring.JoulesPerToken(e, now.OutputTokens-min(first.OutputTokens, now.OutputTokens)); ok {
			liveJPT = fmt.Sprintf("%.3f", v)
		}
		power = fmt.Sprintf("%.1f", float64(e)/1000/(float64(now.T-first.T)/1e9))
	}
	run := mon.Run()
	view := run.Since(mon.Totals())
	runJPT := "n/a"
	if v, ok := ring.JoulesPerToken(view.TotalEnergyMJ(), view.OutputTokens); ok {
		runJPT = fmt.Sprintf("%.3f", v)
	}
	st := mon.Stats()
	var readErrors uint64
	for _, d := range st.Devices {
		readErrors += d.ReadErrors
	}
	fmt.Printf("summary model=%s run=%.8s J/token(live)=%s J/token(run)=%s power=%s W run_energy=%.1f J run_tokens=%d read_errors=%d dropped=%d\n",
		run.Model(), run.ID(), liveJPT, runJPT, power, float64(view.TotalEnergyMJ())/1000, view.OutputTokens, readErrors, st.DroppedRequests)
}

// loadWorker sends completions until ctx ends. Its loop is bounded by ctx.
func loadWorker(ctx context.Context, base string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}
	for ctx.Err() == nil {
		url := fmt.Sprintf("%s/v1/completions?prompt_tokens=%d&max_tokens=%d", base, 50+rng.IntN(450), 10+rng.IntN(60))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		drain(resp)
	}
}

// carbonModel returns the static carbon model -carbon-intensity and -pue
// describe, or nil when -carbon-intensity is empty. The binaries take a
// provider too (docs/carbon.md); a demo needs no network.
func carbonModel(o options) (*carbon.Model, error) {
	if o.intensity == "" {
		if o.pue != "" && o.pue != "1" {
			return nil, fmt.Errorf("-pue %s without -carbon-intensity: %w", o.pue, carbon.ErrInvalidConfig)
		}
		return nil, nil
	}
	mg, err := carbon.ParseGramsPerKWh(o.intensity)
	if err != nil {
		return nil, fmt.Errorf("-carbon-intensity: %w", err)
	}
	pue := carbon.PUE(1_000_000)
	if o.pue != "" {
		pue, err = carbon.ParsePUE(o.pue)
	}
	if err != nil {
		return nil, fmt.Errorf("-pue: %w", err)
	}
	return carbon.NewModel(carbon.NewStatic(carbon.Intensity{MgPerKWh: mg}), carbon.WithPUE(pue))
}
