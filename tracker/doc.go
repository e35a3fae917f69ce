// Package tracker turns raw readings of a cumulative hardware counter into
// non-negative deltas, and keeps per-device totals that never go backwards.
//
// Hardware energy counters (NVML's GetTotalEnergyConsumption, RAPL's
// energy_uj, a BMC's accumulator) only ever climb, except in two situations
// the reader cannot see directly: the counter wraps past its maximum, or it
// restarts from zero because the driver was reloaded or the device reset.
// [Tracker] classifies every reading as one of four [Kind]s and charges a
// delta for each, so that a consumer summing the deltas neither loses nor
// double-counts energy.
//
// # The wrap-versus-reset rule
//
// A reading lower than the previous one is a wrap when, and only when, the
// previous reading lies in the top quarter of the counter's range and the new
// one in the bottom quarter. The delta charged is then the distance travelled
// through the wrap point. Any other backwards step is a reset, charged as the
// new raw value: the counter restarted from zero and has counted exactly that
// much since. The energy between the last reading before the reset and the
// reset itself is unknowable and is not invented.
//
// The quarter rule is deliberately conservative. A genuine wrap between two
// readings taken at a sane cadence moves the counter a tiny fraction of its
// range, so it always lands in the bottom quarter from the top quarter. A
// reset from a low value (the common case: a driver reload minutes after
// boot) can never be mistaken for a wrap, because the previous reading was
// not in the top quarter.
//
// # Guarantees
//
// Deltas are never negative and are computed without overflow for every pair
// of readings within the range. An [Accumulator]'s total is the saturating
// sum of its deltas, so it never decreases. A [Tracker] is not safe for
// concurrent use; an Accumulator's Total may be read from any goroutine while
// one goroutine calls Advance.
package tracker
