// Package attrib divides one board's metered energy among its processes
// by what each one's utilization samples say it drew: it aligns the
// samples with the counter's intervals by their timestamps, learns the
// board's power model and its idle power, and hands each interval to
// package procshare, which conserves it exactly.
//
// # Alignment
//
// NVML stamps each utilization sample with the CPU time in µs at which it
// was taken; it describes the process's use of the board since the
// driver's previous sample. A sample becomes visible some hundreds of
// milliseconds after its timestamp. [Board] keeps each sample's span and
// splits each counter interval by the samples whose spans overlap it,
// weighted by the overlap. An interval is held until a sample ending at or
// after its end has been seen (then every sample that covers it has
// arrived, since the driver samples all processes at once), or until its
// hold ([Config.Hold], [DefaultHold]) has passed; only then is its energy
// above idle called unattributed, if no sample's span comes within 300 ms
// of it. The hold bounds how far the agent's hw.energy trails the counter.
//
// # The power model
//
// Each split adds one row to a non-negative least-squares fit with
// forgetting (package nnls, the ledger's method): the energy E of the
// split intervals against
//
//	E ≈ Ps·Δt + Csm·SMc + Csmmem·OV + Cmem·MEMx + Cenc·ENC + Cdec·DEC
//
// where, for each process's sample, OV = min(SM, MEM) is the time its
// kernels ran while memory was busy, SMc = SM − OV the rest of its SM
// time and MEMx = MEM − OV the rest of its memory time; each is summed
// over the processes and integrated over the intervals, in seconds at
// 100 %, as are ENC and DEC. SM = SMc + OV and MEM = OV + MEMx, so
// Csm·SM + Cmem·MEM is the case Csmmem = Csm + Cmem; the split also
// represents memory-bound work that draws less per percent of SM than
// compute-bound work (Csmmem < Csm, a negative memory term in SM and
// MEM) with every coefficient, and so every process's modelled power,
// non-negative. Once the fit has about 8 seconds of rows and some
// utilization coefficient is positive, each interval's energy above idle
// is split by each process's modelled power over it, Σ C·u; until then,
// by SM utilization, as Kepler does.
//
// A row whose residual under the current model is far out of line (over
// 3.75 mean absolute residuals) is down-weighed by Huber's weight before
// it is added, so that one row the alignment got wrong (samples counted
// twice across a wall clock step, a counter glitch) cannot skew the
// model for the forgetting horizon.
//
// # Idle power
//
// An interval no sample's span comes within 300 ms of is idle: its mean
// power is the board's idle power once such intervals add up to two
// seconds (the first seconds of a board's life included). Otherwise the
// idle power identical boards measured on their own idle intervals is
// ([Board.SetPrior]); failing that, the model's static term Ps, fitted as
// its intercept. The peers come before the intercept: both measure and
// the intercept extrapolates, to zero utilization, a line fitted where
// the board is busy, and where power bends with load (saturating near
// its limit) that line meets the axis far from idle. While the idle
// power is known from idle intervals, the fit takes it as given. Both
// forget with [DefaultHorizon].
//
// # Guarantees
//
// Every interval's energy is conserved exactly (package procshare):
// Σ shares + idle + unattributed = Σ interval energy, in integer
// millijoules.
// Split allocates nothing once its scratch has grown. A Board is not safe
// for concurrent use.
package attrib
