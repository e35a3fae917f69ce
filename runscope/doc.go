// Package runscope scopes energy and token totals to runs without ever
// making an exported counter go backwards.
//
// A run is one model load, or any span of work an application names. When a
// model is hot-swapped, a reader asking "what has this model cost" wants
// figures that start from zero at the swap, while Prometheus wants the
// process's counters to keep climbing: a counter that drops reads to it as a
// restart and corrupts rate() and increase() across the swap. Both are served
// from one authoritative set of cumulative totals. Beginning a run takes a
// [Snapshot] of them as the run's baseline, and the run's own view is always
// derived as cumulative − baseline. Nothing is ever zeroed.
//
// # Identity
//
// Each [Run] has a generated unique id, a model name and a start time. Its
// identity is meant to travel as resource attributes (otelenergy.run.id and
// gen_ai.request.model): [Run.Resource] returns a schemaless resource that
// merges with any other without a schema conflict. A MeterProvider's resource
// cannot change once built, so per-run instruments live on a MeterProvider
// built for the run; their cumulative start time is then the run's start.
//
// # Guarantees
//
// [Scope.Begin] ends the current run and begins the next atomically with
// respect to [Scope.Current]: a reader sees either the old run or the new one,
// never a mixture. An ended run keeps its end snapshot, so its final values
// stay readable (and exportable one last time) after the swap. All methods
// are safe for concurrent use.
package runscope
