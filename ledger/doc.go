// Package ledger splits metered energy among the requests that were active
// while it was metered, and conserves it exactly. It is pure: it knows
// nothing of OpenTelemetry, and it reads its intervals from the seqlock
// rings (package ring) that the sampler fills, so no second copy of the
// samples exists.
//
// # Stages
//
// Requests and metered energy go through five stages, each a type of its
// own, in one direction:
//
//   - intake (intake.go): the lock-free stacks where [Ledger.Add] leaves
//     requests and [Ledger.End] counts their ends. [Ledger.Observe]
//     (ledger.go) drains them into the active requests and notes each
//     one's reports on its timeline.
//   - intervals (intervals.go): each device's walk over its ring, which
//     yields the interval between consecutive counter steps once it is
//     ready, first to the model and then, never ahead of it, to the
//     split. Each interval is yielded once, and together they hold the
//     ring's energy.
//   - model (fit.go): what is learned (each device's power model and
//     reporting lag, the prefill time, where a prefill ends, and, in
//     prefillrate.go, the prefill time per prompt token that places the
//     prefills no timing placed) and when it is solved. It reads the
//     requests only through the features of each interval it learns.
//   - split (divide.go): an interval's attributable energy, divided by
//     the weighing of its requests under the model into integer shares
//     and a rest that add up to it exactly. A pure function.
//   - settlement (settle.go): finalizes the requests whose intervals are
//     all split, lets go of them, prunes the others' timelines,
//     reconciles the escrow, and runs the provisional split behind the
//     estimates.
//
// [Ledger.Settle] runs intervals, model, split and settlement in that
// order. The weighing (weigh.go) reads the requests' timelines for the
// model and the split: the features of an interval, and its requests'
// weights under the model. The sections below describe what each stage
// computes.
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
//   - a request's prefill runs from its start to one decode step before its
//     first output token (the first token comes a step after the prefill
//     ends). A first report of n tokens took n steps; the request's next
//     reports time its step, and until they do the batch's recent step
//     places it. A request that ends with a single report is placed by the
//     prefill time learned, against prompt length n, as a + b·n + c·n²,
//     from the requests whose first token was seen, or, while too few
//     show it, from whole requests' lengths under continuous batching
//     (prefill + a step per output token, the step growing with the
//     mean number of requests active over the request's life); when
//     that fit holds and the request decoded for less time than it
//     prefilled, by its end less a batch step per token. The learned time also times prefills still
//     running;
//   - whether the prefill ends a step before the first token or at it is
//     chosen by the data: a second model, at the chosen lag, learns the
//     other placement and takes over when it explains the steps clearly
//     better;
//   - input tokens are spread over the prefill, over its expected length
//     while it runs.
//
// # Deferred splitting and escrow
//
// An interval is split only when every request active in it has reported
// past its end or ended, or when it is older than the horizon. Split at
// the horizon, each request still silent in it is escrowed its expected
// share: it is taken to produce output tokens at its recent rate (the
// batch's if it never reported) from its last report or its expected
// prefill end, and the interval is split with those tokens; the other
// requests' shares are final. A late report changes only the intervals
// not yet split, and [Ledger.Escrow] counts the tokens assumed against
// those reported for the same time. A silent request holds one timeline
// point, so memory is bounded by MaxActive however long it stays silent. The model
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
//	    + Pdec·(seconds with any decode) + Pdr·(request-seconds decoding)
//
// by non-negative least squares with exponential forgetting (about two
// minutes), choosing among the subsets of these terms by the Bayesian
// information criterion: prefill as power that grows with the number of
// prefills, as power that saturates, as energy per input token, or a mix;
// decode likewise as busy power that rises with the batch slower than the
// tokens do, plus a part per token. Fixed static power and fixed token
// weights are supported through [Config].
//
// # Split
//
// An interval's energy E is first scaled to the attributed processes'
// share of a shared device (the rest goes to OtherProcesses). Of the rest,
// the static part min(E, Ps·Δt) is shared by time: at every instant the
// requests active then share it equally, and time with none is
// unattributed. The modelled prefill energy is shared among the requests
// in prefill by their input-token rate (input tokens per second of
// prefill: batched prefill shares the board by compute), at every instant
// among those in prefill then. The modelled decode energy, busy power
// included, is shared among the decoding requests by their output tokens
// in the interval, that is by token rate. The residual (metered −
// modelled) is laid on the prefill and decode pools in proportion to
// their variances, prefill's far larger, and shared within each like the
// pool. Tokens reported outside any request take their share to
// unattributed. Before the model is learned, the static power measured
// while the device was idle, once half a second of idle is seen, is
// shared by time as above; tokens weigh the rest (an input token a tenth
// of an output token), and time when no token was produced.
//
// # Time rings
//
// [Config.TimeRings] are rings whose energy follows requests by presence
// alone, such as the attributed processes' share of a host's CPU and DRAM
// energy. Each interval is split as the static part is, at every instant
// equally among the requests active then, as soon as its end is pushed
// (no report is awaited and nothing is learned), and each share goes to
// [Config.TimeGive], not to [Account.EnergyMJ]. A request is final only
// once the time rings too are split past its end; a time ring that has
// not stepped for [Config.TimeHorizon] stops holding requests back, and
// those it released are flagged [FlagTimeForced]. Per time ring, the
// requests' shares + its unattributed = its split energy, exactly
// ([Ledger.TimeSplit]).
//
// # Estimates
//
// At every Settle the sampler also splits, provisionally and with the
// current model, the intervals pushed but not yet split (at most a bounded
// number of groups of them), with each silent request's tokens
// extrapolated at its rate since its last report. [Ledger.Estimate] adds
// to the split energy that provisional share, the request's power for the
// time since the newest step, and the model's price of the tokens it
// reported beyond what was extrapolated. Of that power, the static part
// is priced with the share the request gets among the requests still
// running, which [Ledger.End] counts as they end. It is what End returns
// before the figure is final.
//
// # Guarantees
//
//   - Conservation: requests + Unattributed + OtherProcesses = SplitMJ,
//     exactly, in integer millijoules. Each part is split by cumulative
//     rounding, so the shares telescope. With [Config].OnSplit, every
//     interval of SplitMJ is handed over once, as split (shares, rest and
//     time covers), so that a converter (package carbon) conserves what it
//     converts; the provisional split never calls it.
//   - The request path ([Ledger.Add], [Account.AddOutput],
//     [Account.AddInput], [Ledger.End], [Account.End], [Ledger.Estimate]) takes no lock
//     and allocates nothing: Add is an atomic add on its shard's count of
//     waiting requests and one compare-and-swap on one of sixteen stacks, the rest
//     are atomic operations on the request.
//   - The sampler side ([Ledger.Observe], [Ledger.Settle]) is O(active
//     requests) per read plus O(active requests) per split interval, plus
//     a provisional pass that weighs at most max(1024, active)
//     request-intervals per device, only after a step or a split, and
//     less often beyond 1024 requests, and allocates nothing in steady
//     state: request timelines are recycled.
//   - At most MaxActive requests are tracked or waiting to be adopted, even
//     while the sampler hangs; a request beyond that gets nothing and is
//     counted ([Ledger.Dropped]). A request not ended within
//     MaxAge stops accruing then and is counted ([Ledger.Expired]).
package ledger
