// Package app is the agent's life between its flags and its exit status:
// it starts the agent's services in order on a [lifecycle.Stack], runs the
// interval loop until its context ends, and shuts the services down in
// reverse order.
//
// # Services, in start order
//
//  1. GPU source: the accelerator -sources chooses (NVML, AMD SMI or
//     Intel hwmon, through package energysource) or the simulator, and
//     the host's RAPL domains where -sources allows and they are
//     readable; first, so that the telemetry's resource names the source
//     metered (otelenergy.source); its stop closes the host's sources,
//     after the agent's final pass and the final export.
//  2. telemetry: the MeterProvider and its exporter (autoexport), which
//     every later service writes to; stopped after them, with the final
//     export.
//  3. carbon: the carbon flags' model and its poller (internal/carbonconf),
//     when carbon is on; stopped after the agent's final pass, which
//     converts the last intervals at the readings they were metered at.
//  4. monitor: the library's Monitor, whose sampler fills the rings.
//  5. agent: the split (the boards', and the host's through package
//     hostshare); its stop takes a sample and makes the final pass,
//     while the source can still list processes, so the counter steps up
//     to the shutdown are split and exported by the telemetry's final
//     export.
//  6. sampling: the Monitor's sampler (and the simulator's load).
//  7. admin server: /healthz and /readyz, when -admin-listen is set.
//  8. readiness: its stop turns /readyz to 503, first of all.
//
// The Monitor produces the counter steps the agent splits, yet stops after
// the agent's final pass: its stop closes NVML, which that pass's listing
// needs. Only the Monitor's own last sample, taken right after the final
// pass, is not split; hw.energy, which the agent exports at the step it
// split up to, stops there too, so every export still conserves each
// board's energy. Once the Monitor started, it owns the source: its
// Shutdown closes it, and after a read that hangs past the shutdown, closes
// it when that read returns.
//
// # Shutdown budget
//
// The services above the telemetry stop within half of the shutdown
// timeout, the telemetry within what is left: a GPU hung in a call that no
// context reaches still leaves the final export time. A stop that outlives
// its budget is left running and reported (see [lifecycle.Stack.Shutdown]).
//
// A failed start stops what already started, in reverse, and is returned
// as "failed to start X: %w"; a failed stop as "failed to shut down X: %w".
// A failed final export is logged, not returned, and the exit stays 0:
// what could not be sent cannot be sent by failing the exit, and a
// collector down while a node drains must not turn a clean stop into a
// crash loop.
package app
