// Package ledger splits metered energy among the requests that were active
// while it was metered, and conserves it exactly. It is pure: it knows
// nothing of OpenTelemetry, and it reads its intervals from the seqlock
// rings (package ring) that the sampler fills, so no second copy of the
// samples exists.
//
// # Intervals
//
// Each device has a ring whose points are its counter's steps: T the step's
// estimated instant (see internal/steptime), EnergyMJ the device's
// cumulative energy. An interval is the span between two consecutive
// points, and its energy is their difference. A read that saw no step adds
// no point, so it splits nothing.
//
// # Token timing
//
// The sampler calls [Ledger.Observe] at every read. It adopts the requests
// added since the previous read and notes, per request, the cumulative
// tokens first seen at this read, placed at the middle of the read
// interval. From these points:
//
//   - tokens reported in one call are taken as produced evenly since the
//     request's previous report, so chunked and end-of-request reports are
//     spread back to when they were produced;
//   - a request's prefill runs from its start to its first output token.
//     One or two tokens in the first report mark that instant. A larger
//     first report hides it: the request's next report gives its decode
//     rate, and the first chunk took that long; a request that ends with
//     a single report is placed by the time to first token learned from
//     the others, as a + b·input tokens;
//   - input tokens are spread over the prefill.
//
// # Deferred splitting
//
// An interval is split only when every request active in it has reported
// past its end or ended, or when it is older than the horizon. The model
// (below) learns from every ready interval first; while it has seen less
// than three quarters of a horizon of data, splitting waits for it, up to
// the horizon. A request's figure is final once every interval up to its
// end is split on every device that is not lost. A device that has not
// stepped for a horizon (stuck, or failing every read) stops holding
// requests back: they become final without its energy for that time, and
// are flagged forced, so their figures are marked approximate.
//
// # Model
//
// Each device learns
//
//	E ≈ Ps·Δt + eOut·out + Ppf·(request-seconds in prefill)
//	    + Pbusy·(seconds with any prefill) + eIn·in
//
// by non-negative least squares with exponential forgetting (about two
// minutes), choosing among the subsets of these terms by the Bayesian
// information criterion: prefill as power that grows with the number of
// prefills, as power that saturates, as energy per input token, or a mix.
// Fixed static power and fixed token weights are
// supported through [Config].
//
// # Split
//
// An interval's energy E is first scaled to the attributed processes'
// share of a shared device (the rest goes to OtherProcesses). Of the rest,
// the static part min(E, Ps·Δt) is shared by time: at every instant the
// requests active then share it equally, and time with none is
// unattributed. The dynamic part is shared by each request's modelled
// energy in the interval, with the residual (metered − modelled) spread in
// proportion to each part's variance: prefill, which varies most, takes
// most of it. Tokens reported outside any request take their share to
// unattributed. Before the model is learned, tokens weigh the dynamic part
// (an input token a tenth of an output token), and time when no token was
// produced.
//
// # Guarantees
//
//   - Conservation: requests + Unattributed + OtherProcesses = SplitMJ,
//     exactly, in integer millijoules. Each part is split by cumulative
//     rounding, so the shares telescope.
//   - The request path ([Ledger.Add], [Request.AddOutput],
//     [Request.AddInput], [Request.End], [Ledger.Estimate]) takes no lock
//     and allocates nothing: Add is an atomic add on the count of waiting
//     requests and one compare-and-swap on one of sixteen stacks, the rest
//     are atomic operations on the request.
//   - The sampler side ([Ledger.Observe], [Ledger.Settle]) is O(active
//     requests) per read plus O(active requests) per split interval, and
//     allocates nothing in steady state: request timelines are recycled.
//   - At most MaxActive requests are tracked or waiting to be adopted, even
//     while the sampler hangs; a request beyond that gets nothing and is
//     counted ([Ledger.Dropped]). A request not ended within
//     MaxAge stops accruing then and is counted ([Ledger.Expired]).
package ledger
