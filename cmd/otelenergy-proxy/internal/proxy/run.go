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
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
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

// ErrNoNVML is returned when NVML cannot be used and -simulate is not set.
var ErrNoNVML = errors.New("NVML is not available")

// proxy is one run of otelenergy-proxy.
type proxy struct {
	cfg    flags.Config
	log    *slog.Logger
	env    Env
	errLog *onceLog

	started  atomic.Bool // the first energy sample was taken
	draining atomic.Bool
	backend  *backendCheck
}

func run(cfg flags.Config, lg *slog.Logger, env Env) (int, error) {
	p := &proxy{cfg: cfg, log: lg, env: env, errLog: newOnceLog(lg, "error")}
	defer p.errLog.Close()
	otel.SetErrorHandler(p.errLog)
	httpLog := log.New(errorLogWriter{p.errLog}, "", 0)

	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return exitFailure, fmt.Errorf("-admin-listen: %w", err)
	}
	admin := &http.Server{Handler: p.adminHandler(), ReadHeaderTimeout: readHeaderTimeout, ErrorLog: httpLog}
	go admin.Serve(adminLn)
	defer admin.Close()

	p.backend = newBackendCheck(cfg, lg)
	defer p.backend.Stop()

	// In wrapper mode the backend starts first, and metering waits until
	// it answers: by then it has spawned the processes that hold its GPUs
	// (vLLM's engine core, its tensor-parallel workers), whose pids the
	// source attributes.
	var ch *child
	if len(cfg.Command) > 0 {
		if ch, err = startChild(cfg.Command, env, lg); err != nil {
			return exitFailure, err
		}
		select {
		case <-p.backend.Healthy():
		case <-ch.Exited():
			return ch.Code(), fmt.Errorf("the backend exited before it answered on %s%s", cfg.Backend, cfg.BackendHealth)
		case s := <-env.Signals:
			lg.Info("signal before the backend was ready: stopping it", slog.String("signal", s.String()))
			return ch.Stop(s, cfg.DrainTimeout), nil
		}
	}
	pids := cfg.BackendPIDs
	switch {
	case ch != nil:
		pids = append(pids, processTree(ch.Pid())...)
	case len(pids) == 0 && !cfg.Simulate:
		pids = p.findBackend()
	}
	src, err := p.openSource(pids)
	if err != nil {
		if ch != nil {
			ch.Stop(syscall.SIGTERM, cfg.DrainTimeout)
		}
		return exitFailure, err
	}
	tel, err := newTelemetry(context.Background(), src.Kind())
	if err != nil {
		src.Close()
		if ch != nil {
			ch.Stop(syscall.SIGTERM, cfg.DrainTimeout)
		}
		return exitFailure, err
	}
	mopts := []otelenergy.Option{otelenergy.WithMeterProvider(tel.mp), otelenergy.WithHorizon(cfg.Horizon)}
	mopts = append(mopts, baggageOptions(cfg)...)
	mon, err := otelenergy.NewMonitor(src, mopts...)
	if err != nil {
		src.Close()
		tel.shutdown(context.Background())
		if ch != nil {
			ch.Stop(syscall.SIGTERM, cfg.DrainTimeout)
		}
		return exitFailure, err
	}
	tel.startTraces(mon)
	if err := mon.Start(); err != nil {
		return exitFailure, err
	}
	p.started.Store(true)

	apiLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		p.finish(nil, ch, mon, tel, nil)
		return exitFailure, fmt.Errorf("-listen: %w", err)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	api := &http.Server{
		Handler:           p.apiHandler(mon, tel),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		Protocols:         &protos,
		ErrorLog:          httpLog,
	}
	served := make(chan error, 1)
	go func() { served <- api.Serve(apiLn) }()
	attrs := []any{slog.String("listen", apiLn.Addr().String()), slog.String("admin", adminLn.Addr().String()),
		slog.String("backend", cfg.Backend.String()), slog.String("source", src.Kind()), slog.Int("devices", len(mon.Devices()))}
	if ch != nil {
		attrs = append(attrs, slog.Int("child_pid", ch.Pid()))
	}
	if len(pids) > 0 {
		attrs = append(attrs, slog.Any("attributed_pids", pids))
	}
	lg.Info("otelenergy-proxy serving", attrs...)
	if ch != nil && !p.cfg.Simulate {
		wctx, stopWatch := context.WithCancel(context.Background())
		defer stopWatch()
		go watchTree(wctx, lg, ch.Pid(), pids, treeWatchEvery)
	}
	if env.Started != nil {
		env.Started(apiLn.Addr(), adminLn.Addr())
	}

	var exited <-chan struct{}
	if ch != nil {
		exited = ch.Exited()
	}
	var sig os.Signal
	select {
	case sig = <-env.Signals:
		lg.Info("draining", slog.String("signal", sig.String()), slog.Duration("drain_timeout", cfg.DrainTimeout))
	case <-exited:
		lg.Error("the backend exited", slog.Int("status", ch.Code()))
	case err := <-served:
		p.finish(api, ch, mon, tel, syscall.SIGTERM)
		return exitFailure, fmt.Errorf("serving: %w", err)
	}
	code := p.finish(api, ch, mon, tel, sig)
	return code, nil
}

// finish drains the API server, stops the child (forwarding sig), waits
// for the figures of finished requests, flushes telemetry and shuts the
// Monitor down. It returns the exit status: the child's in wrapper mode.
func (p *proxy) finish(api *http.Server, ch *child, mon *otelenergy.Monitor, tel *telemetry, sig os.Signal) int {
	p.draining.Store(true)
	if api != nil {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DrainTimeout)
		go func() {
			// A second signal cuts the drain short.
			select {
			case <-p.env.Signals:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := api.Shutdown(ctx); err != nil {
			p.log.Warn("drain timed out: closing the remaining connections", slog.Any("error", err))
			api.Close()
		}
		cancel()
	}
	code := exitOK
	if ch != nil {
		if sig == nil {
			sig = syscall.SIGTERM
		}
		code = ch.Stop(sig, p.cfg.DrainTimeout)
	}
	// The span exporter holds each batch until its requests' figures are
	// final, which takes up to the horizon, while the Monitor samples on.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Horizon+flushSlack)
	defer cancel()
	if err := tel.flushTraces(ctx); err != nil {
		p.log.Warn("flushing traces", slog.Any("error", err))
	}
	if err := mon.Shutdown(ctx); err != nil {
		p.log.Warn("stopping the energy monitor", slog.Any("error", err))
	}
	if err := tel.shutdown(ctx); err != nil {
		p.log.Warn("flushing metrics", slog.Any("error", err))
	}
	p.log.Info("otelenergy-proxy stopped", slog.Int("status", code))
	return code
}

// findBackend returns the process tree of the process on this host that
// listens on the backend's port, or nil, with a warning, when there is
// none to be found: the source then attributes this process's own work,
// so on a GPU whose processes can be told apart the backend's work would
// count as other processes'.
func (p *proxy) findBackend() []int {
	port, _ := strconv.Atoi(p.cfg.Backend.Port())
	if port == 0 {
		port = map[string]int{"http": 80, "https": 443}[p.cfg.Backend.Scheme]
	}
	if pid := listenerPID(port); pid > 0 {
		tree := processTree(pid)
		p.log.Info("attributing the process tree listening on the backend's port", slog.Int("port", port), slog.Any("pids", tree))
		return tree
	}
	p.log.Warn("no process of this host's PID namespace listens on the backend's port: pass -backend-pid with the backend's host pids, "+
		"or on a GPU that NVML shows other processes on, the backend's work counts as otelenergy.energy.other_processes",
		slog.Int("port", port))
	return nil
}

// openSource opens NVML, or the simulated GPU under -simulate. There is
// no fallback: a host without NVML is an error.
func (p *proxy) openSource(pids []int) (otelenergy.Source, error) {
	if p.cfg.Simulate {
		n := max(1, len(p.cfg.Devices))
		p.log.Warn("metering a simulated GPU, not hardware (-simulate): energy figures are synthetic",
			slog.Int("devices", n), slog.String("otelenergy.source", simgpu.SourceKind))
		return simgpu.New(simgpu.Config{Devices: n})
	}
	var opts []otelenergy.NVMLOption
	if len(p.cfg.Devices) > 0 {
		opts = append(opts, otelenergy.WithDevices(p.cfg.Devices...))
	}
	if len(pids) > 0 {
		opts = append(opts, otelenergy.WithProcesses(pids...))
	}
	src, err := otelenergy.NewNVMLSource(opts...)
	if errors.Is(err, otelenergy.ErrUnavailable) {
		return nil, fmt.Errorf("%w (%w): run on the GPU's host with the NVIDIA driver (libnvidia-ml.so.1; in a container, NVIDIA_DRIVER_CAPABILITIES=utility), or pass -simulate to meter a simulated GPU", ErrNoNVML, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening NVML: %w", err)
	}
	return src, nil
}

// apiHandler is otelhttp's server span around the energy middleware
// around the proxy, behind the request body limit.
func (p *proxy) apiHandler(mon *otelenergy.Monitor, tel *telemetry) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = p.cfg.BackendTimeout
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1024
	tr.DisableCompression = true // the client's Accept-Encoding passes as it came
	var inner http.Handler = openaiproxy.New(p.cfg.Backend, mon,
		openaiproxy.WithMeterProvider(tel.mp),
		openaiproxy.WithIncludeUsage(p.cfg.IncludeUsage),
		openaiproxy.WithEnergyTrailers(p.cfg.Trailers),
		openaiproxy.WithMaxBodyBytes(int(min(p.cfg.MaxRequestBytes, 1<<30))),
		openaiproxy.WithTransport(otelhttp.NewTransport(tr,
			otelhttp.WithTracerProvider(tel.tp), otelhttp.WithMeterProvider(tel.mp), otelhttp.WithPropagators(tel.prop))))
	if p.cfg.LogRequests {
		inner = requestLog(p.log, inner)
	}
	h := otelenergy.NewMiddleware(mon)(inner)
	h = bodyLimit(p.cfg.MaxRequestBytes, h)
	return otelhttp.NewHandler(h, "otelenergy-proxy",
		otelhttp.WithTracerProvider(tel.tp), otelhttp.WithMeterProvider(tel.mp), otelhttp.WithPropagators(tel.prop),
		otelhttp.WithSpanNameFormatter(spanName))
}

// spanName names server spans by method and, for the OpenAI routes, path;
// any other path would make span names unbounded.
func spanName(_ string, r *http.Request) string {
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models":
		return r.Method + " " + r.URL.Path
	}
	return r.Method
}

// bodyLimit answers 413 to a request whose declared body is above limit,
// and bounds the body of every other one.
func bodyLimit(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			openaiproxy.WriteError(w, r, &http.MaxBytesError{Limit: limit})
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(w, r)
	})
}
