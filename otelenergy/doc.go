// Package otelenergy meters GPU energy and attributes it to requests, as
// OpenTelemetry metrics and span attributes.
//
//	src, err := otelenergy.NewNVMLSource()   // the GPUs this process uses
//	if err != nil { /* ErrUnavailable: no NVML here */ }
//	mon, err := otelenergy.NewMonitor(src)   // instruments on the global MeterProvider
//	mon.Start()
//	defer mon.Shutdown(ctx)
//	handler := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "server")
//	// in a handler, per token or chunk:
//	mon.AddTokens(r.Context(), n)
//
// A [Monitor] reads every device of a [Source] (NVML through
// [NewNVMLSource], a counter of your own through [NewFuncSource], or the
// simulated GPU of package simgpu) from one background goroutine, every
// [DefaultInterval]. It turns raw cumulative counters into non-negative
// deltas, bounded by what each device can draw (package tracker), learns
// when each counter steps, and records each step into a lock-free ring per
// device (package ring; the node agent reads them through an internal
// seam, not through this package's API).
//
// # Attribution
//
// [NewMiddleware], [UnaryServerInterceptor] and [StreamServerInterceptor]
// track each request and set energy.millijoules on its span. The ledger
// (package ledger) splits each counter step's energy among the requests
// active in it with an energy model it learns from the steps (static
// power, energy per output token, prefill power), spreads chunked and
// end-of-request token reports back to when they were produced, and
// conserves energy exactly. A request's figure is final once the intervals
// at its end are split, up to the horizon ([WithHorizon]) later;
// [NewSpanExporter] waits for it and puts it on the span.
//
// # Emissions
//
// With [WithCarbon], every interval the ledger splits is converted into
// emissions (package carbon) at the grid intensity in force when it was
// metered, times the PUE, plus embodied emissions by device time: each
// request carries its µg ([Result].Co2eMicrograms, the span attribute
// energy.co2e.milligrams, the histogram otelenergy.request.co2e), and
// what no request got is exported as otelenergy.co2e.unattributed, so
// that, interval by interval, the two add up to the interval's figure
// exactly. docs/carbon.md explains the arithmetic.
//
// # The host
//
// With [WithHostSource] the Monitor also meters the host's CPU packages
// and DRAM, and gives each request its share of them
// (energy.cpu.millijoules, energy.memory.millijoules): the attributed
// processes' CPU-time share of each 250 ms host window, split among the
// requests active in it by time. energy.millijoules stays the
// accelerator's.
//
// # Metrics
//
// NewMonitor registers observable instruments on the configured
// MeterProvider: hw.energy (J, per device, cumulative) and hw.power (W)
// with the hardware semantic conventions' attributes, tokens, energy per
// token (live window and run), the ledger's learned model, unattributed
// energy and other processes' energy on shared devices, sampler health,
// and the histogram otelenergy.request.energy, recorded in each request's
// span context when its figure is final so that its exemplars link to
// traces. docs/metrics.md documents each one. [Monitor.RunMeterProvider]
// adds a run's own view on a provider of its own.
//
// # Runs
//
// [Monitor.BeginRun] starts a run (a model load or hot-swap): per-run views
// are cumulative totals minus a baseline taken at the swap, so exported
// counters never go backwards while each run starts from zero.
//
// # The request path
//
// What each call on a request's path costs, and what it never does. The
// benchmarks BenchmarkStartEnd, BenchmarkAddTokens and BenchmarkHandler
// measure these claims, and BenchmarkStartEnd/sampling checks that none of
// them waits for the sampler.
//
//   - [Monitor.StartRequest]: two allocations (the Request context and the
//     state the ledger keeps after it ends; with [WithHostSource] that
//     state holds the host balance too, so it is larger, not another) and
//     one compare-and-swap on one of sixteen stacks. No lock.
//   - [Monitor.AddTokens], [Monitor.AddInputTokens]: a context lookup and
//     one atomic add, on the request's own counter, for a request the
//     ledger tracks; nothing every request shares. A request's first
//     output report also reads the Monitor's clock once: it stamps when
//     the first tokens came, the end of the request's prefill. So does a
//     report of more than one token: it stamps when the chunk came. The
//     Monitor's token
//     totals are derived by the sampler at each sample, from the tracked
//     requests' counters, the counts of the requests it has let go, and
//     the reports outside any tracked request (one more atomic add, on a
//     shared counter, for those), so [Monitor.Totals] and the exported
//     token counter show a report from the next sample on, like energy.
//     No lock, no allocation.
//   - [Request.End]: atomic stores and loads; with [WithCarbon], one
//     atomic load of the intensity and an integer conversion besides. No
//     lock, no allocation.
//   - The middleware and interceptors: StartRequest, End, one span
//     attribute set of at most seven attributes, and, with [NewSpanExporter]
//     in the pipeline, one insertion into a map sharded 32 ways by span id
//     (one small lock, never one shared by every request).
//
// # Guarantees
//
//   - A failed energy read never fails or delays a request: the request
//     path reads only atomics, and a request without energy gets no energy
//     attribute rather than 0.
//   - A wrap is counted exactly, and a failed read loses nothing: the next
//     good reading's delta covers the gap. A reset (driver reload) is
//     charged from the new reading. A reading that implies more than the
//     device's power bound since the previous one is a glitch, and a small
//     step backwards is jitter; neither is charged beyond what the device
//     could have drawn.
//   - Exported counters never decrease.
//   - Every exported method is safe on a nil Monitor.
//   - Shutdown leaves no goroutine behind.
//   - The library never falls back to a simulated source on its own; the
//     source kind is exported as the resource attribute otelenergy.source
//     (see [Monitor.Resource]).
//
// The Monitor does not take a TracerProvider or propagators: it creates no
// spans of its own and annotates the span that otelhttp or otelgrpc put in
// the request context.
package otelenergy
