// Package simgpu simulates a set of GPU boards that run inference requests
// and meter their energy the way NVML's total-energy counters do, with the
// ground truth of every board and every request at hand. It is a
// [source.Source] for demos and for tests that check an attribution
// against the truth.
//
// The physics differs from the model an attribution ledger fits, in what
// a board draws: prefill draws power for a time that is neither fixed nor
// proportional to the prompt, concurrent prefills draw sublinearly, decode
// power follows the batch along a curve (or a plateau), not the tokens, a
// board's power state ramps up under load and lingers after it, and the
// counter is a staircase with a phase of its own (optionally lagging, or
// blind outside a window). How the truth shares what a board draws among
// the jobs is, by default, the ledger's own rule (see Ground truth), so
// the truth checks how well a ledger infers who drew what from the
// counter and the reports, not the rule itself. [Idealized] gives the old
// simulator's model, idle power × time plus a fixed cost per token, for
// tests that need exact arithmetic. [H100], [A100], [H200] and [MI300X]
// are profiles of real boards, each sourced in its doc.
//
// # Time
//
// Every method first advances the physics to the clock's now
// ([Config.Now]), handling prefill ends and counter steps that fall in the
// advanced span in time order, and then acts at now. The integration is
// exact in continuous time (in ns, on float64 millijoules). If the clock
// goes backwards, the step back is ignored: the call acts at the latest
// instant already reached, as if the clock had stood still. All instants
// count from [GPU.Start], the clock's reading at [New].
//
// # Physics
//
// A [Job] runs on all boards at once, as under tensor parallelism, from
// [GPU.Begin] to [Job.End]. Its prefill starts at Begin and lasts
// (PrefillBase + PrefillPerInputToken × u) × f_len for its u uncached
// input tokens (all of them, unless [GPU.BeginCached] says how many a
// prefix cache served); the job's power factor f_pow scales its prefill
// power. f_len and f_pow are drawn
// independently per job, uniform in [1-s, 1+s) with s = PrefillSpread for
// f_len and PrefillPowerSpread for f_pow.
// The prefill ends at [Job.PrefillEnd], or earlier at the job's first
// Tokens or its End.
//
// Each board's power at instant t is
//
//	IdleWatts + s(t) × (PrefillWatts × Σ f_pow / √k + DecodeCurve(n))
//
// where the sum runs over the k jobs in prefill at t and n is the number
// of jobs past their prefill (decoding) and not ended, and s(t) is the
// board's power state: 1 by default, and with [Config.RampTime]
// RampFloor + (1 − RampFloor) × ℓ(t), for a level ℓ that rises towards 1
// while any job is active and decays towards 0 while none is, when the
// board draws IdleWatts + TailWatts × ℓ(t). A compute-bound
// prefill already keeps much of the board busy, so k batched prefills draw
// √k times their mean power rather than k times it. By default
// ([ShareByTokenRate]) the jobs in prefill share that power by their
// uncached prompt tokens per second of prefill, u / nominal length: batched
// prefill shares the board by compute, so a prompt five times longer
// takes about five times the share. [ShareByPowerFactor] shares it by f_pow
// instead, each job drawing its own PrefillWatts × f_pow / √k. Prefill
// energy per prompt token therefore varies with the prompt's length
// (through PrefillBase), with the job's draws and with what overlaps it.
//
// Decode is memory-bound. Under [DecodeBatch] (the default) the board draws
// DecodeCurve(n) above idle while n jobs decode, a curve that rises far
// slower than n (ML.ENERGY's H100 figures: 486 W board power at batch 8,
// 688 W at 512), so energy per token falls with the batch; the decoding
// jobs share it by their token rates ([Job.SetDecodeRate]; equal rates by
// default, as under continuous batching). A job's first token is due one
// decode step after its prefill ends ([Job.FirstTokenAt]). Every
// [Job.Tokens](n) call also adds JoulesPerToken × n × f_noise / Devices to
// every board at that instant, f_noise uniform in [1-Noise, 1+Noise) per
// call; under [DecodePerToken] that is all of decode. Begin adds
// JoulesPerInputToken × input tokens / Devices to every board at its
// instant. Board b's energy is all of this times its gain g_b (Gain,
// spread by GainSpread), and the package reports energy only in these
// gained millijoules.
//
// A profile's power state models what real boards do: clocks rise under
// load and fall after it. The jobs' share of their power is scaled by it,
// so that the first request after a long idle draws less than the same
// request later, and the tail after the last job is drawn by no job.
//
// The defaults model Llama-3.1-8B-class serving on an H100 under vLLM:
// 100 W idle with a CUDA context and a model loaded, 300 W of prefill for
// 80 ms plus 0.25 ms per prompt token with a 30 % spread, decode power
// along [DefaultDecodeCurve] plus 0.02 J per output token, a first token
// 25 ms after the prefill for a job whose rate is not set.
//
// # Counter
//
// Board b's counter steps at τ_k = Start + phase_b + k × UpdatePeriod +
// jitter_{b,k} for the integers k with τ_k > Start. The value published
// at τ_k is
//
//	(InitialCounter + floor(E_b(τ_k - ReportLag))) mod (CounterMax + 1)
//
// where E_b(t) is the board's gained energy from Start to t (zero before
// Start). E_b(t) includes token energy charged strictly before t: a step
// whose sample instant equals a Tokens call's instant excludes those
// tokens. A read returns the value of the latest step at or before the
// read, so reads between steps return the old value, and a read at exactly
// τ_k sees step k. The counter is the floor of the float truth, never a
// running sum of rounded increments, so it never drifts from the truth by
// a millijoule or more (the floor forgives 1 nJ of float rounding).
//
// With [Config.TokensAtRead] the token part of a step's value is taken
// when the first read (or [GPU.InjectReset]) of that board at or after τ_k
// publishes it, not at
// τ_k - ReportLag: token energy produced before that read appears in it,
// while idle and prefill energy still count up to the sample instant. A
// later read before the next step returns the same value. This is the old
// simulator's counter, which charged every token produced before a read
// to the step that read crossed.
//
// With [Config.CounterWindow] W, the counter integrates only [s_k - W, s_k)
// before each step's sample instant s_k = τ_k - ReportLag, scaled by
// UpdatePeriod / W, as a counter fed by a part-time power sensor would:
// under constant power it is exact, and a load that changes within a
// period aliases. Token energy counts, scaled, when it falls in a window.
//
// # Faults
//
// [GPU.InjectReset] zeroes a counter now, as a driver reload does; later
// steps count up from zero, so energy not yet published at the reset
// shows up after it. [GPU.InjectReadErrors] fails the next reads with
// [source.ErrRead], [GPU.InjectLost] every later read with
// [source.ErrDeviceLost], and [GPU.Close] every read with
// [source.ErrUnavailable]. [GPU.InjectJitter] and [GPU.InjectGlitch] move
// the next successful read down or up once. A wrap comes from an
// InitialCounter just below CounterMax. Faults change what reads return,
// never the physics or the truth.
//
// # Ground truth
//
// [GPU.TrueEnergyMJ] is a board's E_b up to now. [Job.TrueEnergyMJ] is,
// summed over the boards and times their gains, the job's share of idle
// power, its share of the prefill and decode power as drawn (times the
// power state), and its own token energy: at each instant idle power is
// split equally among the jobs active then (from Begin to End), prefill
// power among the jobs in prefill by their uncached prompt tokens per
// second ([ShareByTokenRate]; by power factor with [ShareByPowerFactor]),
// and decode power among the decoding jobs by their token rates. Energy at
// instants with no active job, idle and the tail after the last job, is
// nobody's and is counted by [GPU.UnownedEnergyMJ]. So the jobs' truths
// plus the unowned energy equal the boards' energy, up to float rounding.
//
// These are the rules an attribution ledger's split uses (package ledger:
// static power by time, prefill by input-token rate, decode by token
// rate). So the truth coincides with the ledger's rule, and a ledger that
// placed every prefill and token where it happened and knew the board's
// power in each phase would match it exactly; what it measures is how
// well the ledger infers those from a staircase counter and the clients'
// reports. Where the ledger is weak, it is because what it infers is off:
// the phases' timing (reports in chunks or at the end), the power drawn in
// each (a prefill's own length and power factor, the batch curve, the
// power state), or the counter's instants. [ShareByPowerFactor] is the one
// rule the ledger does not share.
//
// # Determinism and concurrency
//
// Phases, gains and jitter depend only on Seed and the board. Per-job
// factors and noise are drawn from one Seed-fixed stream in call order, so
// a given Seed, clock and sequence of calls gives the same readings and
// truths every time. Every method is safe for concurrent use; one mutex
// serializes them, and each costs O(active jobs + boards) per prefill end
// it advances past, plus O(boards × ReportLag / UpdatePeriod), plus, with a
// CounterWindow, O(boards × span / UpdatePeriod) for the span advanced. The GPU keeps
// no reference to an ended job.
//
// The package does not import otelenergy, whose tests import it.
package simgpu
