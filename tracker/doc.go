// Package tracker turns raw readings of a cumulative hardware counter into
// non-negative deltas, and keeps per-device totals that never go backwards.
//
// Hardware energy counters (NVML's GetTotalEnergyConsumption, RAPL's
// energy_uj, a BMC's accumulator) only ever climb, except in two situations
// the reader cannot see directly: the counter wraps past its maximum, or it
// restarts from zero because the driver was reloaded or the device reset.
// Some also misread now and then, stepping back a little or jumping far.
// [Tracker] classifies every reading as one of six [Kind]s and charges a
// delta for each, so that a consumer summing the deltas neither loses nor
// double-counts energy, and never charges more than the device could draw.
//
// # Baseline and steps
//
// A Tracker measures each reading from its baseline: the high-water mark,
// set by the [First] reading and moved by every [Forward] with a nonzero
// delta, [Wrap], [Reset] and [Glitch] to that reading's raw value. A [Jitter]
// leaves the baseline where it was, so the next rise is measured from the
// high-water mark and a counter that steps back and then on is charged once.
//
// # The wrap-versus-reset rule
//
// A reading below the baseline is a wrap only if the baseline lies in the
// top quarter of the counter's range and the new reading in the bottom
// quarter. The delta charged is then the distance travelled through the wrap
// point. Any other backwards step is a reset, charged as the new raw value:
// the counter restarted from zero and has counted exactly that much since.
//
// The quarter rule is deliberately conservative. A genuine wrap between two
// readings taken at a sane cadence moves the counter a tiny fraction of its
// range, so it always lands in the bottom quarter from the top quarter. A
// reset from a low value (the common case: a driver reload minutes after
// boot) can never be mistaken for a wrap, because the previous reading was
// not in the top quarter.
//
// # Plausible steps
//
// With [Limits.MaxWatts] set, no reading may add more energy than the device
// could have drawn in the reading's window (anchor, at]. The bound is
// ⌊MaxWatts × (at − anchor) / 1e6⌋ mJ, at and anchor in ns, computed exactly
// and saturating at math.MaxUint64.
//
// The anchor is the time of the last reading, before the baseline was set,
// that showed a value other than the baseline's: for a counter that only
// climbs, the last reading before the baseline's value was first seen.
// Before the baseline first moves, the window starts [MaxUpdatePeriod]
// before the First reading. The anchor makes the bound sound for a
// staircase counter, one that publishes a step every update period while it
// is read more often (NVML publishes every 20 to 100 ms and may be read every
// 17 ms): the baseline's value appeared after its anchor, and a rise is the
// energy drawn between the baseline's appearance and the new value's, so it
// lies inside the window even when it is seen one short read after the last.
//
// A reading given by [Tracker.AdvanceRead] with a bracket [began, at] (a
// read that took time, and may have stalled before or after it reached the
// counter) is judged on the widest window it allows: the anchor is the
// began of the reading before the baseline appeared, and the window ends
// at the reading's at. [Tracker.Advance] is a reading with began = at.
//
// Against the bound:
//   - a rise within it is a [Forward] and a rise beyond it a [Glitch];
//   - a drop that passes the quarter rule and whose wrapped delta is within
//     it is a [Wrap];
//   - any other drop to a raw value within it, and to at most half the
//     baseline, is a [Reset]: a counter that restarted from zero inside the
//     window cannot have counted more, and a reload restarts near zero;
//   - any other drop is a [Jitter], charged nothing: a counter that steps
//     back by a few millijoules is jitter even while its value is small.
//
// A Glitch is charged the last known power times the time the step covers,
// from when the reading that set the baseline returned to the glitch's at
// (for a staircase counter, the time since the counter last moved, not the
// last read interval), and never more than the bound; 0 while no power is
// known. The last known power is the delta of the last Forward (with a
// nonzero delta) or Wrap over its window; for the step that first moves the
// baseline that window is measured from the First reading, without the
// [MaxUpdatePeriod] allowance. A Glitch that its next reading confirms (see
// below) sets it too, so that it keeps following the board as far as the
// bound lets it believe: the glitch's rise, at most its bound, over its
// window.
// A Glitch moves the baseline to its reading, but for one reading only it
// remembers the baseline it replaced: when the next reading comes back below
// the glitch, at or above that old baseline and within the bound measured
// from the old baseline's anchor, the glitch was a single bad reading, and
// the reading is a Forward from the old baseline, charged its rise less what
// the Glitch charged. So one bad reading neither adds energy nor freezes the
// counter until its true value passes the bad one.
//
// With no power bound (MaxWatts 0, NaN, infinite or negative) every rise is
// a Forward and every drop a Wrap or a Reset, by the quarter rule alone:
// Jitter and Glitch never occur.
//
// # Learning the bound
//
// A bound below what the device really draws (a power limit read once and
// raised since) makes every step a Glitch. A Glitch is confirmed by the
// next reading when that reading is not its recovery. Four confirmed
// glitches within 16 consecutive steps that moved the baseline, with no
// recovery, Jitter or Reset among them, whose implied powers, rise over
// window, agree within a factor of 2 show a board above the bound. A
// plausible Forward or Wrap between them does not end the run, so a load
// that swings across the bound (high for 50 ms, low for 150 ms) is learned
// as a steady one is; an older glitch falls out of the run once 16 steps
// have moved the baseline since it. The bound is then raised to 1.5 × the
// run's highest implied power, but never above [MaxBoundGrowth] ×
// MaxWatts, and the reading that confirmed the fourth is charged, on top
// of its own delta, what the run's glitches were not: for each,
// min(rise, new bound over its window) less what it was charged. That
// step has [Step.Raised] set and [Tracker.LastRaise] describes it. So a
// board above a stale bound loses nothing from the first glitch of the run
// on (its steps within the new bound are charged whole, and the run's
// glitches up to the new bound over their windows); only glitches before
// the run keep their lower charge. One corrupt reading, which comes back,
// is no confirmed glitch, ends the run, and still costs nothing. A run
// that is inconsistent, or implies more than MaxBoundGrowth × MaxWatts,
// raises nothing and its glitches stay charged as above. A bound with
// [Limits.MaxWattsFirm] set is never raised: the device cannot pass it, so
// glitches against it show a counter misreading.
//
// # Guarantees
//
// Deltas are never negative and are computed without overflow for every pair
// of readings within the range and every pair of times. An [Accumulator]'s
// total is the saturating sum of its deltas, so it never decreases.
//
// With a power bound, each step charges at most its bound under the bound
// then in force (a raise's credit tops a run's glitches up to at most the
// new bound over their windows), and the bound only rises. So with W the
// bound in force after the last accepted reading ([Tracker.MaxWatts], at
// most MaxBoundGrowth × MaxWatts), the total charged from the First
// reading at t₀ to the last accepted reading at tₙ, with tₙ₋₁ the accepted
// reading before it, is at most
//
//	W × ((tₙ − t₀) + (tₙ₋₁ − t₀) + MaxUpdatePeriod)
//	    ≤ W × (2 × (tₙ − t₀) + MaxUpdatePeriod).
//
// For bracketed readings that do not overlap (each began at or after the
// previous one's at), t₀ is the First reading's began, the tᵢ are the
// readings' at, and D, the total time the readings took (Σ at − began), is
// added inside the parentheses: a window reaches back to a reading's
// began.
//
// The factor of two is the price of the staircase. A window ends at the
// reading that moves the baseline, and the next window starts at the new
// baseline's anchor, the reading before it appeared; so consecutive windows
// overlap by one read interval for a counter that climbs, because the
// tracker cannot tell when in that interval the counter stepped. The bound
// is tight: a series that rises by its whole bound at every reading reaches
// it.
//
// If MaxWatts and [MaxUpdatePeriod] hold for the device and the counter
// restarts only from zero, a genuine rise is never a Glitch and a genuine
// restart never a Jitter. A reset then loses only the energy drawn between
// the last reading before it and the restart itself; that is unknowable and
// is not invented. A Glitch whose next reading does not come back holds the
// baseline at the glitch's value: the true readings after it are Jitter,
// charged nothing, until the counter passes that value. One that comes back
// at once resumes from the baseline before it, and what it charged is paid
// back from the following steps.
//
// # Time
//
// Readings carry their time in nanoseconds on a monotonic clock. A reading
// whose at is earlier than the previous accepted one's is rejected with
// [ErrTimeBackwards], with or without a power bound, and changes nothing. A
// began after at is taken as at.
//
// # Concurrency
//
// A [Tracker] is not safe for concurrent use. An Accumulator's Total and
// anomaly counts may be read from any goroutine while one goroutine calls
// Advance.
package tracker
