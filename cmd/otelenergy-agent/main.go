// Command otelenergy-agent meters the GPU energy of every compute process
// on a node and exports it over OTLP: run one per node. It reads each
// board's energy counter through the otelenergy library (NVML), splits
// each counter interval into the board's static part
// (otelenergy.energy.idle), the processes' shares by SM utilization
// (otelenergy.process.energy, with container.id and k8s.pod.uid from the
// process's cgroup) and what no process can be given
// (otelenergy.energy.unattributed), and exports hw.energy and hw.power per
// board. docs/agent.md describes the split, MIG, vGPU and containers.
//
//	otelenergy-agent                      # NVML, OTLP to localhost:4318
//	OTEL_METRICS_EXPORTER=prometheus otelenergy-agent -simulate
//
// Exporters are contrib's autoexport: every standard OTEL_* variable
// works (OTEL_METRICS_EXPORTER=otlp|prometheus|console|none,
// OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). Each
// flag can also be set by the OTELENERGY_* variable named in -h; a flag on
// the command line wins. The agent needs the host's PID namespace to read
// /proc/<pid>/cgroup of the pids NVML reports.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.LookupEnv, os.Stderr))
}

// options are the agent's flags.
type options struct {
	simulate        bool
	simDevices      int
	devices         string
	procRoot        string
	processInterval time.Duration
	sampleInterval  time.Duration
	maxSeries       int
	idleWatts       float64
	logFormat       string
	adminListen     string
	duration        time.Duration
}

// parse reads the flags from args, each defaulting to its OTELENERGY_*
// variable when set. A bad value, in a flag or a variable, is an error
// naming it.
func parse(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("otelenergy-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// def appends the flag's variable to its usage, so -h shows both.
	def := func(flagName, usage string) string { return usage + " (env " + envName(flagName) + ")" }
	fs.BoolVar(&o.simulate, "simulate", false, def("simulate", "meter simulated GPUs running scripted processes instead of NVML; never chosen silently"))
	fs.IntVar(&o.simDevices, "simulate-devices", 8, def("simulate-devices", "number of simulated GPUs with -simulate"))
	fs.StringVar(&o.devices, "devices", "", def("devices", "GPUs to meter: comma-separated NVML indices, GPU- or MIG- UUIDs; empty meters every GPU NVML shows, narrowed by CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES"))
	fs.StringVar(&o.procRoot, "proc-root", "/proc", def("proc-root", "where the host's /proc is mounted; the agent must share the host's PID namespace"))
	fs.DurationVar(&o.processInterval, "process-interval", time.Second, def("process-interval", "how often each board's processes and SM utilization are read and its energy split"))
	fs.DurationVar(&o.sampleInterval, "sample-interval", otelenergy.DefaultInterval, def("sample-interval", "how often the energy counters are read; faster than they step"))
	fs.IntVar(&o.maxSeries, "max-series", agent.DefaultMaxSeries, def("max-series", "most per-process series held at once; processes beyond go to the overflow series and are counted"))
	fs.Float64Var(&o.idleWatts, "idle-watts", 0, def("idle-watts", "fixed static power per board in W; 0 learns it per board"))
	fs.StringVar(&o.logFormat, "log-format", "text", def("log-format", "log format: text or json"))
	fs.StringVar(&o.adminListen, "admin-listen", ":8081", def("admin-listen", "address of /healthz and /readyz; empty disables"))
	fs.DurationVar(&o.duration, "duration", 0, def("duration", "exit after this long; 0 runs until SIGTERM or SIGINT"))
	// The variables first, so that a flag on the command line wins.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := lookupEnv(envName(f.Name))
		if !ok || envErr != nil {
			return
		}
		if err := f.Value.Set(v); err != nil {
			envErr = fmt.Errorf("invalid value %q for %s: %v", v, envName(f.Name), err)
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.processInterval < 100*time.Millisecond:
		return o, fmt.Errorf("invalid value %v for -process-interval: at least 100ms", o.processInterval)
	case o.sampleInterval <= 5*time.Millisecond:
		return o, fmt.Errorf("invalid value %v for -sample-interval: above 5ms", o.sampleInterval)
	case o.maxSeries < 1:
		return o, fmt.Errorf("invalid value %d for -max-series: at least 1", o.maxSeries)
	case o.idleWatts < 0 || o.idleWatts != o.idleWatts:
		return o, fmt.Errorf("invalid value %v for -idle-watts: 0 or more", o.idleWatts)
	case o.logFormat != "text" && o.logFormat != "json":
		return o, fmt.Errorf("invalid value %q for -log-format: text or json", o.logFormat)
	case o.simDevices < 1 || o.simDevices > 64:
		return o, fmt.Errorf("invalid value %d for -simulate-devices: 1 to 64", o.simDevices)
	case o.simulate && o.devices != "":
		return o, fmt.Errorf("invalid value %q for -devices: it chooses NVML GPUs; with -simulate, -simulate-devices sets their number", o.devices)
	case o.duration < 0:
		return o, fmt.Errorf("invalid value %v for -duration", o.duration)
	}
	if o.adminListen != "" {
		if _, _, err := net.SplitHostPort(o.adminListen); err != nil {
			return o, fmt.Errorf("invalid value %q for -admin-listen: %v", o.adminListen, err)
		}
	}
	return o, nil
}

// envName is the variable that sets a flag: -max-series is
// OTELENERGY_MAX_SERIES.
func envName(flagName string) string {
	return "OTELENERGY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// run is the agent's life: it returns the exit status.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	o, err := parse(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "otelenergy-agent:", err)
		return 2
	}
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("background error", "err", err) }))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	if err := serve(ctx, o, log); err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}

// node is what the agent meters: a Source and how to list its processes.
type node struct {
	src      otelenergy.Source
	lister   agent.Lister
	resolver agent.Resolver
	start    func()
}

func openNode(o options, log *slog.Logger) (node, error) {
	if o.simulate {
		nd, err := sim.New(o.simDevices, nil)
		if err != nil {
			return node{}, err
		}
		log.Info("metering simulated GPUs (-simulate): no figure is a real measurement", "devices", o.simDevices)
		return node{src: nd, lister: nd, resolver: nd, start: nd.Start}, nil
	}
	var opts []nvmlsource.Option
	if o.devices != "" {
		opts = append(opts, nvmlsource.WithDevices(strings.Split(o.devices, ",")...))
	}
	src, err := nvmlsource.New(opts...)
	if err != nil {
		return node{}, fmt.Errorf("NVML: %w (use -simulate to run without GPUs)", err)
	}
	return node{src: src, lister: src.NewProcessReader(), resolver: procfs.FS{Root: o.procRoot}, start: func() {}}, nil
}

// monitorViews drop the library's request-oriented instruments, which mean
// nothing on a node without requests, and its hw.energy and
// otelenergy.energy.unattributed, which the agent exports itself per board
// at the counter step it has split up to.
func monitorViews() []sdkmetric.Option {
	var vs []sdkmetric.Option
	for _, n := range []string{
		"hw.energy", "otelenergy.energy.unattributed", "otelenergy.energy.other_processes",
		"otelenergy.tokens", "otelenergy.energy_per_token", "otelenergy.tokens.rejected",
		"otelenergy.requests.dropped", "otelenergy.request.energy", "otelenergy.ledger.coefficient",
	} {
		vs = append(vs, sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: n, Scope: instrumentation.Scope{Name: otelenergy.ScopeName}},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}},
		)))
	}
	return vs
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	nd, err := openNode(o, log)
	if err != nil {
		return err
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("otelenergy-agent"), attrSource(nd.src.Kind())),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		nd.src.Close()
		return err
	}
	if host, err := resource.New(ctx, resource.WithHost()); err == nil {
		res, _ = resource.Merge(host, res)
	}
	reader, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		nd.src.Close()
		return fmt.Errorf("metric exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(append(monitorViews(), sdkmetric.WithReader(reader), sdkmetric.WithResource(res))...)
	mon, err := otelenergy.NewMonitor(nd.src, otelenergy.WithMeterProvider(mp), otelenergy.WithInterval(o.sampleInterval))
	if err != nil {
		nd.src.Close()
		_ = mp.Shutdown(context.Background())
		return err
	}
	ag, err := agent.New(agent.Config{Rings: mon, Lister: nd.lister, Resolver: nd.resolver,
		MaxSeries: o.maxSeries, IdleWatts: o.idleWatts, MeterProvider: mp})
	if err != nil {
		_ = mon.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
		return err
	}
	nd.start()
	if err := mon.Start(); err != nil {
		_ = ag.Shutdown()
		_ = mon.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
		return err
	}
	for _, d := range mon.Devices() {
		log.Info("metering GPU", "hw.id", d.ID, "hw.name", d.Name, "index", d.Index)
	}
	for _, sk := range mon.Stats().Skipped {
		log.Info("GPU left out", "hw.id", sk.Device.ID, "reason", sk.Reason)
	}

	var admin *http.Server
	if o.adminListen != "" {
		ln, err := net.Listen("tcp", o.adminListen)
		if err != nil {
			_ = ag.Shutdown()
			_ = mon.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
			return fmt.Errorf("-admin-listen: %w", err)
		}
		admin = &http.Server{Handler: adminHandler(ag), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server", "err", err)
			}
		}()
		log.Info("admin endpoints", "addr", ln.Addr().String())
	}

	t := time.NewTicker(o.processInterval)
	ag.Pass()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			ag.Pass()
		}
	}
	t.Stop()
	log.Info("shutting down")
	// The last pass and export come before the Monitor stops, so that the
	// last window is split with its listing.
	ag.Pass()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if admin != nil {
		errs = append(errs, admin.Shutdown(sctx))
	}
	errs = append(errs, mp.Shutdown(sctx), ag.Shutdown(), mon.Shutdown(sctx))
	return errors.Join(errs...)
}

func adminHandler(ag *agent.Agent) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ag.Ready() {
			http.Error(w, "not ready: no pass yet, or every GPU lost", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready: " + strconv.FormatUint(ag.Passes(), 10) + " passes\n"))
	})
	return mux
}

func attrSource(kind string) attribute.KeyValue {
	return attribute.String("otelenergy.source", kind)
}
