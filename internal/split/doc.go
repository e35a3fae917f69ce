// Package split divides an integer quantity (millijoules of energy,
// micrograms of CO2e) among parts in proportion to their weights, so that
// nothing is invented and nothing is lost to rounding. It is the one home
// of that arithmetic: the agent's per-process and per-host splits, the
// carbon conversion and the ledger's per-request split differ only in
// what they feed it.
//
// # The rule
//
// Every split here is a cumulative rounding. With the parts' cumulative
// weights C₁ ≤ … ≤ Cₙ, part i gets R(f(Cᵢ)) − R(f(Cᵢ₋₁)), where f scales
// a cumulative weight to the quantity and R rounds it. The shares
// telescope: they add up to R(f(Cₙ)) exactly, whatever the weights, and
// each is within one unit of its exact share. Rounding each share on its
// own instead would drop up to n−1 units per split (or invent them,
// rounding up), which over millions of intervals is real energy.
//
//   - [Cumulative]: integer weights, f(C) = C·num/den on 128 bits,
//     rounded down or half up, with a rest that goes to no part: the
//     conversions (energy to emissions, device time to embodied
//     emissions) and every split whose weights do not add up to the
//     whole.
//   - [Among]: e among integer weights out of a total of at least their
//     sum, rounded down; what the weights do not cover is the rest.
//   - [Floats]: e among float64 weights out of a float64 total, rounded
//     down, each cumulative figure held within [the previous one, e]: the
//     ledger's split of an interval by coverage or by modelled energy,
//     bit for bit (see the package's tests, which pin that arithmetic).
//   - [Evenly]: e in equal parts, the remainder one unit each to the
//     first parts.
//
// # Guarantees
//
//   - Conservation: Σ shares + rest = the whole, exactly, in integers.
//   - No share is negative and no split gives more than its whole: bad
//     totals (zero, negative, NaN, infinite) give nothing.
//   - Determinism: the same inputs give the same shares.
//   - Nothing here allocates; every function adds to the out slice it is
//     given (callers that want the shares alone clear it first) and
//     panics, as a slice index out of range, when out is shorter than the
//     weights.
package split
