// Command gateway is a reverse proxy in front of an OpenAI-compatible server
// (vLLM, TGI, llama.cpp server, Ollama, or the demo app) that puts each
// completion's energy on its span, with otelhttp, the otelenergy middleware
// and openaiproxy:
//
//	go run ./example/app -load=false                 # a backend on :8080
//	go run ./example/gateway -backend http://127.0.0.1:8080 -listen 127.0.0.1:8081
//
// It meters the backend's GPUs through NVML, or a simulated GPU when NVML
// is absent, and prints one line per completion with its tokens,
// energy.millijoules and whether the figure is approximate. With
// OTEL_EXPORTER_OTLP_ENDPOINT set it also exports traces and metrics over
// OTLP, configured by the standard OTEL_* variables only.
//
// On a GPU host, -backend-pid names the backend's processes by host pid
// (otelenergy.WithProcesses), so that each board's energy is split between
// the backend and whatever else runs there. Without it the gateway's own
// process is the attributed one; it runs on no GPU, so every request is
// charged its boards' whole energy and flagged shared and approximate.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/otelenergy/otelenergy/example/internal/tee"
	"github.com/otelenergy/otelenergy/internal/otelenv"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
	"github.com/otelenergy/otelenergy/simgpu"
)

type options struct {
	backend     string
	devices     string
	backendPIDs string
	duration    time.Duration
	out         io.Writer
}

// newNVMLSource opens NVML; a test seam.
var newNVMLSource = otelenergy.NewNVMLSource

func main() {
	var o options
	listen := flag.String("listen", "127.0.0.1:8081", "listen address")
	flag.StringVar(&o.backend, "backend", "http://127.0.0.1:8080", "URL of the OpenAI-compatible backend")
	flag.StringVar(&o.devices, "devices", "", "GPUs the backend runs on, comma-separated NVML indices or GPU- / MIG- UUIDs (otelenergy.WithDevices); without NVML, the number of simulated GPUs")
	flag.StringVar(&o.backendPIDs, "backend-pid", "", "host pids of the backend's GPU processes, comma-separated (otelenergy.WithProcesses), as nvidia-smi lists them; needed on a GPU host for a per-request split, and ignored without NVML")
	flag.DurationVar(&o.duration, "duration", 0, "exit after this long (0: run until interrupted)")
	flag.Parse()
	o.out = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, ln, o); err != nil {
		log.Fatal(err)
	}
}

// run serves on ln until ctx ends.
func run(ctx context.Context, ln net.Listener, o options) error {
	target, err := url.Parse(o.backend)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("-backend %q: want a URL such as http://127.0.0.1:8080", o.backend)
	}
	src, err := openSource(o)
	if err != nil {
		return err
	}
	// Exporters come from autoexport, so the standard variables choose
	// them (OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER,
	// OTEL_EXPORTER_OTLP_PROTOCOL, ...); with none set, nothing is exported.
	mopts := []sdkmetric.Option{}
	if otelenv.Wanted("METRICS") {
		rd, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return err
		}
		mopts = append(mopts, sdkmetric.WithReader(rd))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	mon, err := otelenergy.NewMonitor(src, otelenergy.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	var exp sdktrace.SpanExporter = printer{o.out}
	if otelenv.Wanted("TRACES") {
		otlp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return err
		}
		exp = tee.Exporters{exp, otlp}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(otelenergy.NewSpanExporter(exp, mon), sdktrace.WithBatchTimeout(200*time.Millisecond)))
	otel.SetTracerProvider(tp)
	if err := mon.Start(); err != nil {
		return err
	}

	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(openaiproxy.New(target, mon)), "gateway")
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(o.out, "otelenergy gateway: source=%s devices=%d backend=%s listening on http://%s\n", src.Kind(), len(mon.Devices()), target, ln.Addr())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(err)
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(srv.Shutdown(sctx), tp.Shutdown(sctx), mon.Shutdown(sctx), mp.Shutdown(sctx))
	fmt.Fprintln(o.out, "bye")
	return err
}

// openSource opens NVML, or a simulated GPU per -devices entry when NVML is
// absent.
func openSource(o options) (otelenergy.Source, error) {
	var opts []otelenergy.NVMLOption
	n := 1
	if o.devices != "" {
		ids := strings.Split(o.devices, ",")
		opts, n = append(opts, otelenergy.WithDevices(ids...)), len(ids)
	}
	pids, err := parsePIDs(o.backendPIDs)
	if err != nil {
		return nil, err
	}
	if len(pids) > 0 {
		opts = append(opts, otelenergy.WithProcesses(pids...))
	}
	src, err := newNVMLSource(opts...)
	if err == nil {
		if len(pids) == 0 {
			fmt.Fprintln(o.out, "no -backend-pid: energy is attributed to this gateway's process, which uses no GPU, so requests get their boards' whole energy, flagged shared and approximate")
		}
		return src, nil
	}
	// The simulated boards know nothing of the backend's work: they draw
	// idle power only, which the ledger splits among requests by time.
	fmt.Fprintf(o.out, "NVML not available (%v): using %d simulated GPU(s)\n", err, n)
	return simgpu.New(simgpu.Config{Devices: n, Seed: 1})
}

// parsePIDs reads -backend-pid: positive pids separated by commas.
func parsePIDs(v string) ([]int, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var pids []int
	for _, f := range strings.Split(v, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("-backend-pid %q: %q is not a pid; want host pids such as 4242,4243", v, f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// printer prints one line per completion span.
type printer struct{ w io.Writer }

func (p printer) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		var model, mj string
		var out, in int64
		var approx, shared bool
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case openaiproxy.ResponseModelKey:
				model = kv.Value.AsString()
			case "gen_ai.usage.output_tokens":
				out = kv.Value.AsInt64()
			case "gen_ai.usage.input_tokens":
				in = kv.Value.AsInt64()
			case otelenergy.EnergyMillijoulesKey:
				mj = fmt.Sprint(kv.Value.AsInt64())
			case "otelenergy.energy.approximate":
				approx = kv.Value.AsBool()
			case "otelenergy.energy.shared":
				shared = kv.Value.AsBool()
			}
		}
		if mj == "" {
			continue
		}
		fmt.Fprintf(p.w, "request trace=%s model=%s output_tokens=%d input_tokens=%d energy.millijoules=%s approximate=%t shared=%t duration=%s\n",
			s.SpanContext().TraceID(), model, out, in, mj, approx, shared, s.EndTime().Sub(s.StartTime()).Round(time.Millisecond))
	}
	return nil
}

func (printer) Shutdown(context.Context) error { return nil }
