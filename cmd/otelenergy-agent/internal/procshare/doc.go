// Package procshare divides a GPU board's metered energy among the
// compute processes that used it, window by window, and conserves it
// exactly. It is pure and deterministic: it knows nothing of NVML, /proc
// or OpenTelemetry. It is the arithmetic; the weights come from package
// attrib, which aligns each board's utilization samples with its counter
// intervals and learns its power model, or from the agent itself for
// boards without per-process utilization. (The library's package ledger
// does the same for requests rather than processes.)
//
// # Windows and intervals
//
// The agent lists each board's processes and reads their SM utilization
// once per window (its process interval, one second by default). A window
// holds counter intervals: the spans between consecutive steps of the
// board's energy counter, as the library's sampler records them in its
// ring. [Window] applies one set of weights to all of its intervals; the
// agent's package attrib calls it once per interval, with the weights of
// the utilization samples that cover that interval.
//
// # The split
//
// For each interval of energy E and length Δt, the static part
// min(E, Ps·Δt) is idle energy (Ps from [Static]); the rest is active.
// The window's active energy then goes, by [Mode]:
//
//   - [Measured]: to the processes in proportion to their weights (the
//     agent gives each process's modelled power over the interval, or
//     its SM utilization until the model is learned). When no process is
//     given, or no weight is positive (no sample covers the interval), it
//     is unattributed.
//   - [Unmeasured]: the board gives no per-process utilization (MIG,
//     vGPU, GetProcessUtilization NOT_SUPPORTED). The active energy is
//     split by the weights the board gives instead (under MIG, each
//     instance's compute slices, or its GPM SM activity times its slices,
//     shared among the instance's processes), or evenly when it gives
//     none, and the result says so (Shared), so that the exported figures
//     are marked as a share of a shared board rather than a measurement.
//     With no process listed it is unattributed.
//   - [Unknown]: the listing failed. The active energy is unattributed.
//
// # Guarantees
//
//   - Conservation: Σ process + idle + unattributed = Σ E over the
//     window's intervals, exactly, in integer millijoules. Each share is
//     the difference of two cumulative floors, floor(A·c_i/W) −
//     floor(A·c_{i−1}/W), computed in 128-bit integer arithmetic, so the
//     shares telescope to A and no float rounding can lose or invent a
//     millijoule.
//   - Determinism: the same inputs give the same shares, in any process.
//   - [Window] allocates nothing.
package procshare
