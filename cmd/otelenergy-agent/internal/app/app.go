package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/admin"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/lifecycle"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/carbonconf"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/otelenv"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// Node is what the agent meters: a Source and how to list and identify
// its processes. Start starts any load of its own (the simulator's).
// Host, when not nil, is the host's RAPL source (CPU packages and DRAM),
// split among the processes by CPU time through CPU; Whole is a
// whole-host RAPL domain (psys), exported as hw.host.energy.
type Node struct {
	Source   otelenergy.Source
	Lister   agent.Lister
	Resolver agent.Resolver
	Start    func()
	Host     otelenergy.Source
	Whole    otelenergy.Source
	CPU      hostshare.CPU
}

// Deps are the seams a test replaces; the zero value is the real world.
type Deps struct {
	// LookupEnv reads the environment for the exporter's description;
	// nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// NewReader builds the metric reader; nil is autoexport's.
	NewReader func(context.Context) (sdkmetric.Reader, error)
	// OpenNode opens the metered node; nil is OpenNode.
	OpenNode func(flags.Config, *slog.Logger) (Node, error)
	// Listen opens the admin listener; nil is net.Listen.
	Listen func(network, addr string) (net.Listener, error)
	// NewTicker drives the interval loop; nil is a real ticker.
	NewTicker agent.NewTicker
	// Stack receives the services; nil is a new one. A test sets its hooks.
	Stack *lifecycle.Stack
	// ShutdownTimeout bounds the shutdown; zero is 10 s.
	ShutdownTimeout time.Duration
	// CarbonClient configures the carbon provider's HTTP client; a test
	// points it at a fake server.
	CarbonClient []carbon.ClientOption
}

// Run starts the agent's services, runs until ctx ends, and shuts them
// down. It returns the start failure or the shutdown failures.
func Run(ctx context.Context, cfg flags.Config, log *slog.Logger, d Deps) error {
	if d.LookupEnv == nil {
		d.LookupEnv = os.LookupEnv
	}
	if d.NewReader == nil {
		d.NewReader = func(ctx context.Context) (sdkmetric.Reader, error) { return autoexport.NewMetricReader(ctx) }
	}
	if d.OpenNode == nil {
		d.OpenNode = OpenNode
	}
	if d.ShutdownTimeout <= 0 {
		d.ShutdownTimeout = 10 * time.Second
	}
	st := d.Stack
	if st == nil {
		st = &lifecycle.Stack{}
	}
	var ran bool
	ag, err := start(ctx, st, cfg, log, d, &ran)
	if err == nil {
		ran = true
		ag.Run(ctx, cfg.ProcessInterval, d.NewTicker)
		log.Info("shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), d.ShutdownTimeout)
	defer cancel()
	// The services above the telemetry get half the budget, so that a GPU
	// hung in a call no context reaches still leaves the final export the
	// other half.
	gctx, gcancel := context.WithTimeout(sctx, d.ShutdownTimeout/2)
	defer gcancel()
	return errors.Join(err, st.ShutdownAfter(gctx, "telemetry"), st.Shutdown(sctx))
}

// start starts every service onto st, in the order of the package doc.
// *ran is read by the telemetry's stop: true once every service started.
func start(ctx context.Context, st *lifecycle.Stack, cfg flags.Config, log *slog.Logger, d Deps, ran *bool) (*agent.Agent, error) {
	var nd Node
	var mon *otelenergy.Monitor
	if err := st.Start("GPU source", func() (func(context.Context) error, error) {
		var err error
		nd, err = d.OpenNode(cfg, log)
		if err != nil {
			return nil, err
		}
		return func(context.Context) error {
			// The host's sources are read by the agent's passes only,
			// which have stopped by now.
			closeHost(nd)
			if mon != nil {
				// The Monitor's Shutdown closes the source, and after a
				// read that outlived it, closes it once that read returns:
				// a Close here would wait for the hung read.
				return nil
			}
			return nd.Source.Close()
		}, nil
	}); err != nil {
		return nil, err
	}
	var mp *sdkmetric.MeterProvider
	err := st.Start("telemetry", func() (func(context.Context) error, error) {
		// The source is open: the resource names the one metered
		// (nvml, amdsmi, intel-hwmon, simulated).
		res, err := resource.Merge(
			resource.NewSchemaless(semconv.ServiceName("otelenergy-agent"), attribute.String("otelenergy.source", nd.Source.Kind())),
			resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		)
		if err != nil {
			return nil, err
		}
		if host, err := resource.New(ctx, resource.WithHost()); err == nil {
			res, _ = resource.Merge(host, res)
		}
		reader, err := d.NewReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric exporter: %w", err)
		}
		mp = sdkmetric.NewMeterProvider(append(views(), sdkmetric.WithReader(reader), sdkmetric.WithResource(res))...)
		ex := otelenv.MetricsExporter(d.LookupEnv)
		log.Info("exporting metrics", "exporter", ex.Kind, "protocol", ex.Protocol, "endpoint", ex.Endpoint)
		if ex.Default {
			// autoexport's default is https on localhost, where a node
			// rarely runs a Collector: every export would fail.
			log.Warn("no OTLP endpoint is set: the metrics go to autoexport's default, "+ex.Endpoint+
				", where a node rarely runs a Collector; set OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318, "+
				"or OTEL_METRICS_EXPORTER=prometheus to be scraped on :9464 (otelenergy-agent doctor checks it)",
				"exporter", ex.Kind, "endpoint", ex.Endpoint)
		}
		// A failed final export is logged and does not fail the exit: the
		// figures it lost cannot be sent by failing, and a collector down
		// at a node's drain must not turn a clean stop into a crash loop.
		// After a failed start it carried no pass: that failure, not the
		// export's, is the news.
		return func(ctx context.Context) error {
			if err := mp.Shutdown(ctx); err != nil {
				lvl := slog.LevelWarn
				if !*ran {
					lvl = slog.LevelDebug
				}
				log.Log(ctx, lvl, "the final metric export failed; its figures are lost", "exporter", ex.Kind, "endpoint", ex.Endpoint, "err", err)
			}
			return nil
		}, nil
	})
	if err != nil {
		return nil, err
	}
	// The poller stops after the agent's final pass (the stack stops in
	// reverse), so that the pass converts at the readings it was metered
	// at; its errors go to otel.Handle.
	var cb *carbonconf.Carbon
	if err := st.Start("carbon", func() (func(context.Context) error, error) {
		var err error
		if cb, err = carbonconf.Build(cfg.Carbon, d.CarbonClient...); err != nil {
			return nil, err
		}
		if err := cb.Start(); err != nil {
			return nil, err
		}
		cb.Log(log)
		return cb.Shutdown, nil
	}); err != nil {
		return nil, err
	}
	var rings agent.ClockedRings
	if err := st.Start("monitor", func() (func(context.Context) error, error) {
		var err error
		mon, rings, err = agent.NewMonitor(nd.Source, otelenergy.WithMeterProvider(mp), otelenergy.WithInterval(cfg.SampleInterval))
		if err != nil {
			return nil, err
		}
		return mon.Shutdown, nil
	}); err != nil {
		return nil, err
	}
	var ag *agent.Agent
	if err := st.Start("agent", func() (func(context.Context) error, error) {
		host, err := newHost(nd)
		if err != nil {
			return nil, err
		}
		acfg := agent.Config{Rings: rings, Lister: nd.Lister, Resolver: nd.Resolver,
			MaxSeries: cfg.MaxSeries, IdleWatts: cfg.IdleWatts, SampleHold: cfg.SampleHold, MeterProvider: mp, Host: host}
		if cb != nil {
			acfg.Carbon, acfg.CarbonAge = cb.Model, cb.Age
		}
		ag, err = agent.New(acfg)
		if err != nil {
			return nil, err
		}
		// The final pass, after a sample of its own, splits the counter
		// steps up to the shutdown while the source can still list
		// processes; the instruments stay registered for the telemetry's
		// final export, and go with its provider.
		return func(context.Context) error {
			mon.Sample()
			ag.Pass()
			return nil
		}, nil
	}); err != nil {
		return nil, err
	}
	if err := st.Start("sampling", func() (func(context.Context) error, error) {
		if nd.Start != nil {
			nd.Start()
		}
		return nil, mon.Start()
	}); err != nil {
		return nil, err
	}
	for _, dv := range mon.Devices() {
		log.Info("metering GPU", "hw.id", dv.ID, "hw.name", dv.Name, "index", dv.Index)
	}
	for _, sk := range mon.Stats().Skipped {
		log.Info("GPU left out", "hw.id", sk.Device.ID, "reason", sk.Reason)
	}
	if cfg.AdminListen == "" {
		return ag, nil
	}
	var srv *admin.Server
	if err := st.Start("admin server", func() (func(context.Context) error, error) {
		var err error
		srv, err = admin.Listen(cfg.AdminListen, ag, d.Listen, log)
		if err != nil {
			return nil, fmt.Errorf("-admin-listen: %w", err)
		}
		log.Info("admin endpoints", "addr", srv.Addr())
		return srv.Shutdown, nil
	}); err != nil {
		return nil, err
	}
	if err := st.Start("readiness", func() (func(context.Context) error, error) {
		return func(context.Context) error { srv.Stopping(); return nil }, nil
	}); err != nil {
		return nil, err
	}
	return ag, nil
}

// OpenNode opens the simulator with -simulate, else the first
// accelerator of -sources that finds a readable GPU and, when -sources is
// auto or names rapl, the host's RAPL domains. Each source tried logs one
// line: what it found and left out, or why it is unusable. With auto, a
// host whose RAPL cannot be read (a VM, no grant) is metered without it;
// named, it is an error.
func OpenNode(cfg flags.Config, log *slog.Logger) (Node, error) {
	if cfg.Simulate {
		nd, err := sim.New(cfg.SimulateDevices, nil)
		if err != nil {
			return Node{}, err
		}
		log.Info("metering simulated GPUs (-simulate): no figure is a real measurement", "devices", cfg.SimulateDevices)
		node := Node{Source: nd, Lister: nd, Resolver: nd, Start: nd.Start}
		if h := nd.Host(); h != nil {
			node.Host, node.CPU = h, nd
			log.Info("metering a simulated host too (-simulate): its CPU packages and DRAM, split by CPU time", "domains", len(h.Devices()))
		}
		return node, nil
	}
	sysRoot := cmp.Or(cfg.SysRoot, "/sys")
	var accel []string
	for _, k := range cfg.Sources {
		if k != energysource.RAPL {
			accel = append(accel, k)
		}
	}
	opts := []energysource.Option{energysource.WithSysfs(sysRoot), energysource.WithLogger(log)}
	if len(cfg.Devices) > 0 {
		opts = append(opts, energysource.WithDevices(cfg.Devices...))
	}
	if len(accel) > 0 {
		opts = append(opts, energysource.WithKinds(accel...))
	}
	src, _, err := energysource.Accelerator(opts...)
	if err != nil {
		return Node{}, fmt.Errorf("no GPU energy source is usable (NVML, AMD SMI, Intel hwmon): %w (run otelenergy-agent doctor to see why; -simulate runs without GPUs)", err)
	}
	nd := Node{Source: src, Resolver: procfs.FS{Root: cfg.ProcRoot}}
	switch ss := src.(type) {
	case *nvmlsource.Source:
		nd.Lister = ss.NewProcessReader()
	case *amdsmi.Source:
		nd.Lister = newAMDLister(ss, time.Now)
	default:
		nd.Lister = noListing{kind: src.Kind()}
		log.Warn("this source lists no processes to the agent: each GPU's energy is exported as idle and unattributed, not per process",
			"otelenergy.source", src.Kind())
	}
	if cfg.Sources != nil && !slices.Contains(cfg.Sources, energysource.RAPL) {
		return nd, nil
	}
	host, _, err := energysource.Host(energysource.WithSysfs(sysRoot), energysource.WithLogger(log))
	if err != nil {
		if cfg.Sources != nil {
			src.Close()
			return Node{}, fmt.Errorf("-sources names rapl: %w", err)
		}
		return nd, nil // auto: the line above said why
	}
	nd.Host, nd.CPU = host, &cputime.Trees{Root: cfg.ProcRoot}
	// psys covers the packages and DRAM: it is opened on its own, and
	// only where the platform has it.
	if whole, f, err := energysource.Host(energysource.WithSysfs(sysRoot), energysource.WithRAPLDomains("psys")); err == nil {
		nd.Whole = whole
		log.Info("energy source found", "otelenergy.source", energysource.RAPL, "finding", f.String()+" (exported as hw.host.energy only)")
	}
	return nd, nil
}

// errNoListing is what a source that lists no processes to the agent
// answers each pass: the board's active energy is then unattributed.
var errNoListing = errors.New("app: this energy source lists no processes")

// noListing is the Lister of a source that lists no processes to the
// agent (Intel hwmon).
type noListing struct{ kind string }

func (n noListing) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	return fmt.Errorf("%w: %s", errNoListing, n.kind)
}

// newHost builds the host's split over nd's RAPL sources, or nil without
// them.
func newHost(nd Node) (*hostshare.Host, error) {
	if nd.Host == nil {
		return nil, nil
	}
	cpu := nd.CPU
	if cpu == nil {
		cpu = &cputime.Trees{}
	}
	return hostshare.New(hostshare.Config{Domains: nd.Host, Whole: nd.Whole, CPU: cpu})
}

// closeHost closes nd's host sources.
func closeHost(nd Node) {
	if nd.Host != nil {
		nd.Host.Close()
	}
	if nd.Whole != nil {
		nd.Whole.Close()
	}
}

// droppedMonitorInstruments are the library's request-oriented
// instruments, which mean nothing on a node without requests, and its
// hw.energy, otelenergy.energy.unattributed and
// otelenergy.device.processes, which the agent exports itself per board: the
// first two at the counter step it has split up to, the last from its own
// listing (the library's counts the processes of its own share listing,
// which the agent does not run).
var droppedMonitorInstruments = []string{
	"hw.energy", "otelenergy.energy.unattributed", "otelenergy.energy.other_processes",
	"otelenergy.tokens", "otelenergy.energy_per_token", "otelenergy.tokens.rejected",
	"otelenergy.requests.dropped", "otelenergy.request.energy", "otelenergy.ledger.coefficient",
	"otelenergy.device.processes",
}

// views drop droppedMonitorInstruments from the library's scope only.
func views() []sdkmetric.Option {
	var vs []sdkmetric.Option
	for _, n := range droppedMonitorInstruments {
		vs = append(vs, sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: n, Scope: instrumentation.Scope{Name: otelenergy.ScopeName}},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}},
		)))
	}
	return vs
}
