// Package otelenergy meters GPU energy and attributes it to requests, as
// OpenTelemetry metrics and span attributes.
//
// A [Monitor] reads every device of a [Source] (NVML through
// [NewNVMLSource], a deterministic [SimulatedSource], or a counter of your
// own through [NewFuncSource]) from one background goroutine, turns the raw
// cumulative counters into non-negative deltas (see package tracker), and
// records (time, energy, tokens) points into a lock-free ring (package
// ring). Everything else is derived from those points.
//
//	src, err := otelenergy.NewNVMLSource()
//	if err != nil { /* ErrUnavailable: no NVML here */ }
//	mon, err := otelenergy.NewMonitor(src) // instruments on the global MeterProvider
//	mon.Start()
//	defer mon.Shutdown(ctx)
//	handler := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "server")
//	// in a handler, per token or chunk:
//	mon.AddTokens(r.Context(), n)
//
// # Metrics
//
// NewMonitor registers observable instruments on the configured
// MeterProvider: hw.energy (J, per GPU, cumulative), hw.power (W, from
// counter deltas over the live window), otelenergy.tokens,
// otelenergy.energy_per_token (live window and current run), sampler health,
// otelenergy.energy.unattributed, and the synchronous histogram
// otelenergy.request.energy, recorded in each request's span context so its
// exemplars link to traces. docs/metrics.md documents each one.
// [Monitor.RegisterRunMetrics] adds run-scoped views on a per-run provider.
//
// # Attribution
//
// [NewMiddleware], [UnaryServerInterceptor] and [StreamServerInterceptor]
// track each request and set energy.millijoules on its span. The default
// [AttributionLedger] splits each sample interval's energy among the requests
// active in it by the tokens each produced, and conserves energy exactly;
// [AttributionWindowShare] gives each request its token share of its own
// window. [NewSpanExporter] replaces the estimate taken at a request's end
// with the exact ledger figure from the next sample.
//
// # Runs
//
// [Monitor.BeginRun] starts a run (a model load or hot-swap): per-run views
// are cumulative totals minus a baseline taken at the swap, so exported
// counters never go backwards while each run starts from zero. See package
// runscope.
//
// # Guarantees
//
//   - A failed energy read never fails or delays a request: the request path
//     reads only the ring and atomics, and a request without energy gets no
//     energy attribute rather than 0.
//   - A wrap is counted exactly, and a failed read loses nothing: the next
//     good reading's delta covers the gap. A reset (driver reload) is
//     charged from the new reading, so nothing observed is lost or counted
//     twice; only the energy between the last reading and the reset itself,
//     which no reader can see, is missing.
//   - Exported counters never decrease.
//   - The token path is one atomic add per counter with no allocation;
//     steady-state sampling allocates nothing.
//   - Shutdown leaves no goroutine behind.
//   - The library never falls back to a simulated source on its own; the
//     source kind is exported as the resource attribute otelenergy.source
//     (see [Monitor.Resource]).
//
// The Monitor does not take a TracerProvider or propagators: it creates no
// spans of its own and annotates the span that otelhttp or otelgrpc put in
// the request context.
package otelenergy
