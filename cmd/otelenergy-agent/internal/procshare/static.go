package procshare

import (
	"math"
	"time"

	"github.com/otelenergy/otelenergy/internal/idlepower"
)

// DefaultStaticHorizon is the time constant over which [Static] forgets:
// long enough to span idle gaps between jobs, short enough to follow a
// board whose clocks or power limit change.
const DefaultStaticHorizon = 300.0 // seconds

// Static learns a board's static power: what it draws when no process
// keeps its SMs busy. It is the agent's counterpart of the ledger's static
// term (E ≈ Ps·Δt + the work's part), fitted from windows instead of
// requests. The agent uses it on boards without per-process utilization
// (MIG, vGPU), which it observes at utilization zero when they list no
// process; boards with utilization learn theirs in package attrib. The
// zero value learns with [DefaultStaticHorizon].
//
// Ps is, in this order of preference:
//
//  1. Fixed, when positive;
//  2. the mean power of the windows whose board utilization was zero
//     (no listed process had an SM sample), once they add up to
//     idlepower.MinSeconds: a direct measurement (package idlepower, as
//     the boards with utilization measure theirs);
//  3. the intercept of the least-squares line P = Ps + k·U through the
//     windows' mean power P against their board utilization U in [0, 1],
//     weighted by window length, once the windows span minFitSeconds and
//     U varies by at least minUtilStdDev; clamped to [0, mean P];
//  4. zero: until the board has been seen idle or its load has varied,
//     nothing is called idle, and processes carry the static part.
//
// Only steady windows are learned from: a window whose utilization is
// within steadyUtil of the window before it. Where the load changes, a
// window's utilization samples (up to a second old, more when stale) and
// its counter intervals can describe different moments, and a window that
// reads idle can still hold the end of a busy spell.
//
// Every sum decays with exp(−Δt/Horizon). Static is not safe for
// concurrent use.
type Static struct {
	// Fixed, when positive, is the static power in W, and nothing is
	// learned.
	Fixed float64
	// Horizon is the forgetting time constant in seconds; zero or less
	// selects DefaultStaticHorizon.
	Horizon float64

	w, wu, wuu, wp, wup float64
	idle                idlepower.Mean // the zero-utilization windows' power
	t                   int64          // Σ window lengths, ns: idle's clock
	prevU               float64
	primed              bool
}

const (
	minFitSeconds = 30
	minUtilStdDev = 0.05
	steadyUtil    = 0.02
)

// Observe adds one window of length dtNs and energy energyMJ at board
// utilization util (clamped to [0, 1]). Windows whose utilization is
// unknown (MIG, vGPU, a failed listing) must not be observed.
func (s *Static) Observe(dtNs int64, energyMJ uint64, util float64) {
	if dtNs <= 0 || math.IsNaN(util) {
		return
	}
	dt := float64(dtNs) / 1e9
	h := s.Horizon
	if h <= 0 {
		h = DefaultStaticHorizon
	}
	d := math.Exp(-dt / h)
	s.w, s.wu, s.wuu, s.wp, s.wup = s.w*d, s.wu*d, s.wuu*d, s.wp*d, s.wup*d
	s.t += dtNs
	s.idle.Horizon = time.Duration(h * 1e9)
	s.idle.Forget(s.t)
	u := min(max(util, 0), 1)
	steady := s.primed && math.Abs(u-s.prevU) <= steadyUtil
	s.primed, s.prevU = true, u
	if !steady {
		return
	}
	p := float64(energyMJ) / 1000 / dt
	s.w += dt
	s.wu += dt * u
	s.wuu += dt * u * u
	s.wp += dt * p
	s.wup += dt * u * p
	if u == 0 {
		s.idle.Add(dt, float64(energyMJ))
	}
}

// Measured returns the seconds of idle windows behind [Static.Watts]
// after forgetting, and whether Watts is their mean (rather than Fixed,
// the fit's intercept or zero).
func (s *Static) Measured() (seconds float64, ok bool) {
	_, measured := s.idle.Watts()
	return s.idle.Seconds(), s.Fixed <= 0 && measured
}

// Watts returns the static power learned so far, in W; see [Static].
func (s *Static) Watts() float64 {
	if s.Fixed > 0 {
		return s.Fixed
	}
	if w, ok := s.idle.Watts(); ok {
		return w
	}
	if s.w < minFitSeconds {
		return 0
	}
	mu := s.wu / s.w
	varU := s.wuu/s.w - mu*mu
	if varU < minUtilStdDev*minUtilStdDev {
		return 0
	}
	mp := s.wp / s.w
	k := (s.wup/s.w - mu*mp) / varU
	return min(max(mp-k*mu, 0), mp)
}
