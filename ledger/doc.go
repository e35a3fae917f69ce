// Package ledger splits metered energy among the requests that were active
// while it was metered, and conserves it exactly. It is pure: it knows
// nothing of OpenTelemetry, and it reads its intervals from the seqlock
// rings (package ring) that the sampler fills, so no second copy of the
// samples exists. docs/attribution.md describes the model on one page.
//
// # Stages
//
// Requests and metered energy go one way through stages that each own
// their state; [Ledger] only composes them:
//
//   - intake (intake.go): the lock-free stacks where [Ledger.Add] leaves
//     requests and [Ledger.End] counts their ends.
//   - timelines (timeline.go): [Ledger.Observe] adopts the requests and
//     notes each one's reports on its timeline, and where its prefill
//     ended. Placing a prefill teaches the model stage.
//   - intervals (intervals.go): each device's walk over its ring, which
//     yields the interval between consecutive counter steps, first to
//     the model and then, never ahead of it, to the split.
//   - features (features.go): the one reading of the timelines. For an
//     interval it returns who was active, in prefill or decoding, with
//     how many tokens, and the interval's feature vector. Learning and
//     splitting both use it. It writes only its scratch.
//   - model (model.go, idle.go, timing.go): every learned value. Each
//     device's power model is fitted by non-negative least squares
//     (internal/nnls), with the idle power measured on idle intervals
//     and the counter's timing chosen among candidates. The prefill time
//     and the batch's running figures live here too.
//   - split (split.go, coverage.go): the weighing of an interval's
//     requests under the model, and its division into integer shares
//     that add up exactly. Pure functions: they read the features and the
//     model and write nothing else.
//   - settlement (settle.go): [Ledger.Settle] runs intervals, model and
//     split per device, gives the shares, finalizes the requests whose
//     intervals are all split and lets go of them. It is the only stage
//     that decides when a figure is final and the only one that holds
//     memory across intervals: the tracked requests' timelines, bounded
//     by MaxActive.
//   - estimates (estimate.go): after each settle the sampler publishes
//     each request's split energy plus a provisional split of what is
//     metered but not split, and the newest interval's prices;
//     [Ledger.Estimate] prices the rest of the request's life with them,
//     lock-free, and reweighs the provisional prefill share of a request
//     whose prompt was reported only after the split weighed it.
//
// # Intervals
//
// Each device has a ring whose points are its counter's steps: T the step's
// estimated instant (see internal/steptime), EnergyMJ the device's
// cumulative energy. An interval is the span between two consecutive
// points, and its energy is their difference. A read that saw no step adds
// no point, so it splits nothing. An interval is split once every request
// active in it has reported past it or ended, or once it is older than the
// horizon; then each request still silent in it is taken to produce
// tokens at its own recent rate, or the batch's, from its expected prefill
// end, and is flagged [FlagForced].
//
// # Model
//
// Each device learns an interval's energy as
//
//	E ≈ Ps·Δt + eOut·out + Ppf·(request-seconds in prefill)
//	    + Pbusy·(seconds with any prefill) + eIn·(uncached input tokens)
//	    + Pdec·(seconds with any decode) + Pdr·(request-seconds decoding)
//
// with non-negative coefficients, forgetting over two minutes, the terms
// chosen by the Bayesian information criterion. Ps is the static power
// measured on idle intervals once half a second of them is seen (or fixed
// by [Config]). Before a device has learned 16 intervals with work in
// them, its splits wait for it, up to the horizon, and then share the
// static power by time and the rest by tokens.
//
// # Split
//
// An interval's energy is first scaled to the attributed processes'
// share of a shared device (the rest goes to OtherProcesses). The static
// part min(E, Ps·Δt) is shared by time: at every instant equally among
// the requests active then; time with none is unattributed. The prefill
// pool is shared among the requests in prefill by their uncached input
// tokens per second of prefill; the decode pool among the decoding
// requests by their output tokens. The residual (metered − modelled) is
// laid on the two pools in proportion to their variances, prefill's far
// larger. Tokens reported outside any request take their share to
// unattributed.
//
// # Time rings
//
// [Config.TimeRings] are rings whose energy follows requests by presence
// alone, such as the attributed processes' share of a host's CPU and DRAM
// energy. Each interval is split as the static part is, as soon as its
// end is pushed, and each share goes to [Config.TimeGive], not to
// [Account.EnergyMJ]. A request is final only once the time rings too are
// split past its end; a time ring that has not stepped for
// [Config.TimeHorizon] stops holding requests back, and those it released
// are flagged [FlagTimeForced]. Per time ring, the requests' shares + its
// unattributed = its split energy, exactly ([Ledger.TimeSplit]).
//
// # Guarantees
//
//   - Conservation: requests + Unattributed + OtherProcesses = SplitMJ,
//     exactly, in integer millijoules, at every settle. Each part is split
//     by cumulative rounding, so the shares telescope. With
//     [Config].OnSplit, every interval of SplitMJ is handed over once, as
//     split; the provisional split never calls it.
//   - The split and the weighing change neither the model nor the
//     requests (TestSplitLeavesModelUnchanged).
//   - The request path ([Ledger.Add], [Account.AddOutput],
//     [Account.AddInput], [Account.AddCached], [Ledger.End], [Account.End],
//     [Ledger.Estimate]) takes no lock and allocates nothing: Add is an
//     atomic add on its shard's count of waiting requests and one
//     compare-and-swap on one of sixteen stacks, the rest are atomic
//     operations on the request and loads of what the sampler published.
//   - The sampler side ([Ledger.Observe], [Ledger.Settle]) is O(running
//     requests) per read (an ended request waiting for its splits is not
//     read again, and a running one that reported nothing new costs a
//     few loads of its own fields) plus O(active requests) per interval
//     learned and split (one build serves both, and one more per
//     candidate timing while at most 64 requests are active), plus,
//     while some request runs, a provisional pass that weighs at most
//     max(1024, active) request-intervals per device, only after a step
//     or a split, and allocates nothing in steady state: request
//     timelines are recycled.
//   - At most MaxActive requests are tracked or waiting to be adopted, even
//     while the sampler hangs; a request beyond that gets nothing and is
//     counted ([Ledger.Dropped]). A request not ended within MaxAge stops
//     accruing then and is counted ([Ledger.Expired]).
package ledger
