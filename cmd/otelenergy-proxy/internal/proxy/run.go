package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/carbonconf"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// readHeaderTimeout bounds how long a client may take to send a request's
// headers, so that idle or slow connections cannot pin goroutines.
var readHeaderTimeout = 10 * time.Second // a variable for the tests

// idleTimeout closes keep-alive connections idle for this long.
const idleTimeout = 2 * time.Minute

// flushSlack is how long, beyond the horizon, shutdown waits for the
// exporters to flush final figures.
const flushSlack = 5 * time.Second

// ErrNoNVML is returned when no accelerator source (NVML, AMD SMI, Intel
// hwmon) can be used and -simulate is not set.
var ErrNoNVML = errors.New("NVML is not available")

// errChildExited is returned when the backend exits before it answers.
var errChildExited = errors.New("the backend exited before it answered")

// carbonClient configures the carbon provider's HTTP client; a test
// points it at a fake server on 127.0.0.1.
var carbonClient []carbon.ClientOption

// hostOptions configure the host's RAPL source under -sources rapl; a
// test points it at a fake sysfs tree.
var hostOptions []energysource.Option

// errHostNeedsBackend is the start's error under -sources rapl when the
// backend's pids are unknown: the host's share follows their CPU time.
var errHostNeedsBackend = errors.New("-sources rapl needs the backend's pids")

// startHook, when a test sets it, is called after each stage of the
// start with the stage's name; its error fails the start there.
var startHook func(stage string) error

// interrupted is the start's end when a signal came first.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string { return "interrupted by " + e.sig.String() }

// runner is one run of otelenergy-proxy: its configuration, its started
// services and its state.
type runner struct {
	cfg    flags.Config
	log    *slog.Logger
	env    Env
	errLog *onceLog
	after  func(time.Duration) <-chan time.Time

	lc      lifecycle
	backend *backendCheck
	ch      *child
	stopSig os.Signal    // forwarded to the child at shutdown
	failed  chan error   // a server's unexpected end
	apiLn   net.Listener // bound at the start, served once metering runs
	adminLn net.Listener // bound and served at the start
	api     *http.Server
	carbon  *carbonconf.Carbon // nil: carbon off
	host    otelenergy.Source  // -sources rapl: the host's RAPL domains
	pids    []int              // the backend's at the start, whose share is attributed
	procs   *backendProcs      // the backend's process set; nil when none is followed

	started  atomic.Bool // the first energy sample was taken
	draining atomic.Bool
}

func newRunner(cfg flags.Config, lg *slog.Logger, env Env) *runner {
	p := &runner{cfg: cfg, log: lg, env: env, errLog: newOnceLog(lg, "error"), after: time.After,
		stopSig: syscall.SIGTERM, failed: make(chan error, 2)}
	if env.After != nil {
		p.after = env.After
	}
	return p
}

// run starts the proxy, serves until a signal, a server's failure or the
// wrapped backend's exit, and shuts down. Every path out, a failed start
// included, stops exactly what started, through p.lc.
func run(cfg flags.Config, lg *slog.Logger, env Env) (int, error) {
	p := newRunner(cfg, lg, env)
	defer p.errLog.Close()
	otel.SetErrorHandler(p.errLog)

	var intr interrupted
	switch err := p.start(); {
	case errors.As(err, &intr):
		lg.Info("signal before the backend was ready: stopping", slog.String("signal", intr.sig.String()))
		p.stopSig = intr.sig
		p.shutdown(false)
		return p.childCode(exitOK), nil
	case err != nil:
		p.shutdown(false)
		if errors.Is(err, errChildExited) {
			return p.ch.Code(), err
		}
		return exitFailure, err
	}

	code := exitOK
	var exited <-chan struct{}
	if p.ch != nil {
		exited = p.ch.Exited()
	}
	delay := true
	select {
	case sig := <-p.env.Signals:
		p.stopSig = sig
		lg.Info("draining", slog.String("signal", sig.String()), slog.Duration("shutdown_delay", cfg.ShutdownDelay),
			slog.Duration("drain_timeout", cfg.DrainTimeout))
	case <-exited:
		lg.Error("the backend exited", slog.Int("status", p.ch.Code()))
		delay = false // nothing serves the requests the delay would admit
	case err := <-p.failed:
		lg.Error("shutting down", slog.Any("error", err))
		code, delay = exitFailure, false
	}
	p.shutdown(delay)
	if code == exitOK {
		code = p.childCode(code) // a failed server's 1 stands
	}
	lg.Info("otelenergy-proxy stopped", slog.Int("status", code))
	return code, nil
}

// childCode is the wrapped backend's exit status, or def in front mode.
func (p *runner) childCode(def int) int {
	if p.ch == nil {
		return def
	}
	return p.ch.Code()
}

// stage ends one stage of the start.
func (p *runner) stage(name string) error {
	if startHook != nil {
		return startHook(name)
	}
	return nil
}

// start binds both addresses first, so that a taken port fails in
// milliseconds rather than after a model has loaded, then starts the
// admin server, checks NVML, starts the backend in wrapper mode and waits
// for it, and opens the source, telemetry, the Monitor and the API
// server, recording each in p.lc as it starts.
func (p *runner) start() error {
	cfg, lg := p.cfg, p.log
	var err error
	if p.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		return fmt.Errorf("-admin-listen: %w", err)
	}
	p.lc.add("admin listener", closeListener(p.adminLn))
	if p.apiLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	p.lc.add("API listener", closeListener(p.apiLn))
	if err := p.stage("listeners"); err != nil {
		return err
	}

	httpLog := log.New(errorLogWriter{p.errLog}, "", 0)
	admin := &http.Server{Handler: p.adminHandler(), ReadHeaderTimeout: readHeaderTimeout, ErrorLog: httpLog}
	go p.serveHTTP("admin server", admin, p.adminLn)
	p.lc.add("admin server", admin.Shutdown)
	if err := p.stage("admin server"); err != nil {
		return err
	}

	// In wrapper mode NVML is checked before the backend starts: a pod
	// without the driver's utility capability fails now, not after the
	// model has loaded.
	if len(cfg.Command) > 0 && !cfg.Simulate {
		src, err := p.openSource(nil)
		if err != nil {
			return err
		}
		src.Close()
		if err := p.stage("NVML check"); err != nil {
			return err
		}
	}

	p.backend = newBackendCheck(cfg, lg)
	p.lc.add("backend check", func(context.Context) error { p.backend.Stop(); return nil })
	if err := p.stage("backend check"); err != nil {
		return err
	}

	// In wrapper mode the backend starts first, and metering waits until
	// it answers: by then it has spawned the processes that hold its GPUs
	// (vLLM's engine core, its tensor-parallel workers), whose pids the
	// source attributes.
	if len(cfg.Command) > 0 {
		rp, err := startReaper(lg)
		if err != nil {
			lg.Warn("cannot reap orphans (prctl PR_SET_CHILD_SUBREAPER); as PID 1, run under an init such as tini", slog.Any("error", err))
		} else if rp != nil {
			p.lc.add("orphan reaper", func(context.Context) error { rp.Stop(); return nil })
		}
		if p.ch, err = startChild(cfg.Command, p.env, lg, rp); err != nil {
			return err
		}
		// Normally the API server's stop has stopped the backend already
		// (see there); this stops it after a failed start.
		p.lc.add("backend", func(context.Context) error { p.ch.Stop(p.stopSig, cfg.DrainTimeout); return nil })
		if err := p.stage("backend"); err != nil {
			return err
		}
		select {
		case <-p.backend.Healthy():
		case <-p.ch.Exited():
			return fmt.Errorf("%w on %s%s", errChildExited, cfg.Backend, cfg.BackendHealth)
		case s := <-p.env.Signals:
			return interrupted{s}
		case err := <-p.failed:
			return err
		}
	}
	pids := p.backendProcesses()
	src, err := p.openSource(pids)
	if err != nil {
		return err
	}
	monOwnsSource := false // once built, the Monitor closes the sources
	p.lc.add("energy source", func(context.Context) error {
		if monOwnsSource {
			return nil
		}
		return errors.Join(src.Close(), closeSource(p.host))
	})
	p.pids = pids
	if cfg.Host {
		if p.host, err = p.openHost(); err != nil {
			return err
		}
	}
	if err := p.stage("energy source"); err != nil {
		return err
	}

	tel, err := newTelemetry(context.Background(), src.Kind(), p.env.LookupEnv)
	if err != nil {
		return err
	}
	flushCtx := func(ctx context.Context) (context.Context, context.CancelFunc) {
		// A second signal cuts the drain, not the flush of final figures.
		return context.WithTimeout(context.WithoutCancel(ctx), cfg.Horizon+flushSlack)
	}
	p.lc.add("metrics", func(ctx context.Context) error {
		ctx, cancel := flushCtx(ctx)
		defer cancel()
		return tel.shutdownMetrics(ctx)
	})
	if err := p.stage("telemetry"); err != nil {
		return err
	}

	// The poller stops after the Monitor (the lifecycle stops in
	// reverse), so that every interval the Monitor splits until its last
	// has the reading it was metered at; its errors go to otel.Handle,
	// the proxy's log.
	if p.carbon, err = carbonconf.Build(cfg.Carbon, carbonClient...); err != nil {
		return fmt.Errorf("carbon: %w", err)
	}
	if err := p.carbon.Start(); err != nil {
		return fmt.Errorf("carbon: %w", err)
	}
	p.lc.add("carbon poller", p.carbon.Shutdown)
	p.carbon.Log(lg)
	if err := p.stage("carbon"); err != nil {
		return err
	}

	mon, err := otelenergy.NewMonitor(src, p.monitorOptions(tel)...)
	if err != nil {
		return err
	}
	monOwnsSource = true
	p.lc.add("energy monitor", func(ctx context.Context) error {
		ctx, cancel := flushCtx(ctx)
		defer cancel()
		return mon.Shutdown(ctx)
	})
	// The span exporter holds each batch until its requests' figures are
	// final, which takes up to the horizon, while the Monitor samples on:
	// so traces flush before the Monitor stops.
	tel.startTraces(mon)
	p.lc.add("traces", func(ctx context.Context) error {
		ctx, cancel := flushCtx(ctx)
		defer cancel()
		return tel.flushTraces(ctx)
	})
	if err := mon.Start(); err != nil {
		return fmt.Errorf("starting the energy monitor: %w", err)
	}
	p.started.Store(true)
	if err := p.stage("energy monitor"); err != nil {
		return err
	}

	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	p.api = &http.Server{
		Handler:           p.apiHandler(mon, tel, httpLog),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		Protocols:         &protos,
		ErrorLog:          httpLog,
	}
	go p.serveHTTP("API server", p.api, p.apiLn)
	p.lc.add("API server", p.drain)
	if err := p.stage("API server"); err != nil {
		return err
	}

	attrs := []any{slog.String("listen", p.apiLn.Addr().String()), slog.String("admin", p.adminLn.Addr().String()),
		slog.String("backend", cfg.Backend.String()), slog.String("source", src.Kind()), slog.Int("devices", len(mon.Devices()))}
	if p.ch != nil {
		attrs = append(attrs, slog.Int("child_pid", p.ch.Pid()))
	}
	if len(pids) > 0 {
		attrs = append(attrs, slog.Any("attributed_pids", pids))
	}
	lg.Info("otelenergy-proxy serving", attrs...)
	if p.procs != nil && (cfg.Simulate || src.Kind() != energysource.NVML) {
		// NVML lists the set at each of its listings; for the other
		// sources the proxy lists it, so that the log follows the
		// backend.
		wctx, stopWatch := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.procs.watch(wctx, procsEvery)
		}()
		p.lc.add("backend process watch", func(context.Context) error { stopWatch(); <-done; return nil })
	}
	if p.env.Started != nil {
		p.env.Started(p.apiLn.Addr(), p.adminLn.Addr())
	}
	return nil
}

// serveHTTP serves srv on ln and reports an end other than a shutdown
// on p.failed, which ends the run.
func (p *runner) serveHTTP(name string, srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.failed <- fmt.Errorf("%s: %w", name, err)
	}
}

func closeListener(ln net.Listener) func(context.Context) error {
	return func(context.Context) error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}

// shutdown flips readiness, then, when delay is set and -shutdown-delay
// is positive, keeps serving that long (Kubernetes routes to a pod until
// its endpoints update, a few seconds after readiness fails), and stops
// every started service in reverse order. A second signal meanwhile means
// stop now: it is logged, forwarded to the backend's process group, and
// ends the delay and the drain at once.
func (p *runner) shutdown(delay bool) {
	p.draining.Store(true)
	now, stopNow := context.WithCancel(context.Background())
	defer stopNow()
	watched := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-p.env.Signals:
			p.log.Warn("second signal: stopping now", slog.String("signal", s.String()))
			if p.ch != nil {
				p.ch.Signal(s)
			}
			stopNow()
		case <-done:
		}
	}()
	if delay && p.cfg.ShutdownDelay > 0 {
		select {
		case <-p.after(p.cfg.ShutdownDelay):
		case <-now.Done():
		}
	}
	if err := p.lc.shutdown(now); err != nil {
		p.log.Warn("shutting down", slog.Any("error", err))
	}
	close(done)
	<-watched
}

// drain is the API server's stop: it lets in-flight requests finish
// within -drain-timeout (or until a second signal), closes what remains,
// and then stops the backend, forwarding the signal. The backend stops
// here rather than in its own place in the lifecycle because the Monitor
// must meter it to the end and the trace flush after this waits up to the
// horizon, which the backend's stop should not wait for.
func (p *runner) drain(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DrainTimeout)
	defer cancel()
	if err := p.api.Shutdown(dctx); err != nil {
		if ctx.Err() != nil {
			p.log.Warn("drain cut short by the second signal: closing the remaining connections")
		} else {
			p.log.Warn("drain timed out: closing the remaining connections", slog.Duration("drain_timeout", p.cfg.DrainTimeout))
		}
		p.api.Close()
	}
	if p.ch != nil {
		p.ch.Stop(p.stopSig, p.cfg.DrainTimeout)
	}
	return nil
}

// backendProcesses builds p.procs, the backend's process set (see
// backendProcs), and returns the attributed pids as they stand at the
// start: -backend-pid's, and the set's members. In wrapper mode the set
// is the child's tree and the listener's, beside -backend-pid; in front
// mode the listener's, unless -backend-pid names the backend's
// processes. With neither (a backend on another host, or no /proc) the
// source attributes this process's own work, so that on a GPU whose
// processes can be told apart the backend's work counts as other
// processes', and a warning says so.
func (p *runner) backendProcesses() []int {
	cfg := p.cfg
	pids := slices.Clone(cfg.BackendPIDs)
	if p.ch != nil || len(pids) == 0 {
		child := 0
		if p.ch != nil {
			child = p.ch.Pid()
		}
		p.procs = newBackendProcs(p.env.ProcRoot, child, cfg.Backend, p.log)
	}
	if p.procs != nil {
		pids = p.procs.AppendPIDs(pids)
	}
	switch {
	case cfg.Simulate || len(cfg.BackendPIDs) > 0 || p.ch != nil:
	case p.procs == nil:
		p.log.Warn("the backend is not on this host, or its processes cannot be listed: pass -backend-pid with the backend's host pids, "+
			"or on a GPU that NVML shows other processes on, the backend's work counts as otelenergy.energy.other_processes",
			slog.String("backend", cfg.Backend.Host))
	case len(pids) == 0:
		p.log.Warn("no process of this host's PID namespace listens on the backend's port yet: its processes are attributed from the first listing that finds one; "+
			"pass -backend-pid with the backend's host pids if it runs in another PID namespace",
			slog.Int("port", p.procs.port))
	}
	return pids
}

// openSource opens the first accelerator source of -sources (NVML, AMD
// SMI, Intel hwmon by default) that finds a readable GPU, or the
// openHost opens the host's RAPL domains for -sources rapl. The Monitor
// gives each request its share of them by the backend's CPU time, so the
// backend's pids must be known: wrapper mode, -backend-pid, or a process
// of this host listening on -backend's port.
func (p *runner) openHost() (otelenergy.Source, error) {
	if len(p.pids) == 0 {
		return nil, fmt.Errorf("%w (wrapper mode, -backend-pid, or a backend listening on this host); the proxy's own CPU time is not the backend's", errHostNeedsBackend)
	}
	src, _, err := energysource.Host(append(slices.Clip(hostOptions), energysource.WithLogger(p.log))...)
	if err != nil {
		return nil, fmt.Errorf("-sources rapl: %w", err)
	}
	return src, nil
}

func closeSource(s otelenergy.Source) error {
	if s == nil {
		return nil
	}
	return s.Close()
}

// simulated GPU under -simulate; each source tried logs one line. There is
// no fallback to the simulator: a host without any is an error.
func (p *runner) openSource(pids []int) (otelenergy.Source, error) {
	if p.cfg.Simulate {
		n := max(1, len(p.cfg.Devices))
		p.log.Warn("metering a simulated GPU, not hardware (-simulate): energy figures are synthetic",
			slog.Int("devices", n), slog.String("otelenergy.source", simgpu.SourceKind))
		c := simgpu.H100() // a plateau of about 400 W while it serves, as a real H100 under vLLM
		c.Devices = n
		return simgpu.New(c)
	}
	opts := []energysource.Option{energysource.WithLogger(p.log)}
	if len(p.cfg.Sources) > 0 {
		opts = append(opts, energysource.WithKinds(p.cfg.Sources...))
	}
	if len(p.cfg.Devices) > 0 {
		opts = append(opts, energysource.WithDevices(p.cfg.Devices...))
	}
	switch {
	case p.procs != nil:
		// The set is read at each listing; -backend-pid's beside it.
		if len(p.cfg.BackendPIDs) > 0 {
			opts = append(opts, energysource.WithProcesses(p.cfg.BackendPIDs...))
		}
		opts = append(opts, energysource.WithProcessSet(p.procs))
	case len(pids) > 0:
		opts = append(opts, energysource.WithProcesses(pids...))
	}
	src, _, err := energysource.Accelerator(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w (%w): run on the GPU's host with its driver (NVIDIA: libnvidia-ml.so.1, in a container NVIDIA_DRIVER_CAPABILITIES=utility; AMD: ROCm's libamd_smi.so; Intel: i915 or xe), or pass -simulate to meter a simulated GPU", ErrNoNVML, err)
	}
	return src, nil
}
