// Package idlepower learns a device's idle power from the stretches of
// time in which nothing ran on it: their mean power, forgotten over a
// horizon. It is the one home of that measurement; the callers differ
// only in what they call idle (the node agent's intervals that no
// process's utilization sample comes near, a MIG board's windows at zero
// utilization, the ledger's intervals with no request in them).
//
// # The measurement
//
// Each idle stretch adds its length and its energy; both sums decay by
// exp(−Δt/horizon) as time moves on, so the mean follows a device whose
// clocks or power limit change. The mean is taken as measured once
// [MinSeconds] of idle time have been seen, counted without decay: the
// measurement is made once, and a long busy spell that decays the sums
// does not unlearn it. Before that, [Mean.Provisional] gives the mean of
// what was seen, which beats no idle power at all.
//
// A Mean is not safe for concurrent use. Its zero value is ready to use
// with [DefaultHorizon].
package idlepower

import (
	"math"
	"time"
)

// MinSeconds is the idle time after which the mean power of the idle
// stretches is the idle power: two seconds, twenty of a 100 ms counter's
// steps, long enough that the counter's quantum (1 mJ) and one
// misplaced step weigh under a percent of a 70 W board's idle energy,
// short enough that a board idle between jobs learns it at once.
const MinSeconds = 2.0

// DefaultHorizon is the time constant over which the sums forget.
const DefaultHorizon = 300 * time.Second

// Mean is the decayed mean power of a device's idle stretches.
type Mean struct {
	// Horizon is the forgetting time constant; zero or less selects
	// DefaultHorizon.
	Horizon time.Duration
	// Min is the idle time, in seconds, after which the mean is the idle
	// power; zero or less selects MinSeconds. A caller whose idle
	// stretches run from one counter step to another (the ledger's
	// intervals) may ask less: no step is misplaced in them, so only the
	// counter's quantum weighs, and a service that idles for a second
	// between bursts learns its idle power.
	Min float64

	seconds float64 // Σ idle seconds, decayed
	mj      float64 // Σ idle energy, mJ, decayed
	seen    float64 // Σ idle seconds, not decayed
	last    int64   // the time, in ns on the caller's scale, decayed to
}

// Forget decays the sums to time t, in ns on the caller's monotonic
// scale. A t at or before the latest one forgets nothing.
func (m *Mean) Forget(t int64) {
	if m.last != 0 && t > m.last {
		h := m.Horizon
		if h <= 0 {
			h = DefaultHorizon
		}
		d := math.Exp(-float64(t-m.last) / 1e9 / h.Seconds())
		m.seconds *= d
		m.mj *= d
	}
	m.last = max(m.last, t)
}

// Add adds an idle stretch of seconds that drew mj millijoules. A
// stretch of no time, or of a negative or NaN length or energy, adds
// nothing.
func (m *Mean) Add(seconds, mj float64) {
	if !(seconds > 0) || !(mj >= 0) || math.IsInf(seconds, 0) || math.IsInf(mj, 0) {
		return
	}
	m.seconds += seconds
	m.seen += seconds
	m.mj += mj
}

// Watts returns the idle power, in W, once Min (by default MinSeconds)
// seconds of idle time have been seen; false before.
func (m *Mean) Watts() (float64, bool) {
	min := m.Min
	if min <= 0 {
		min = MinSeconds
	}
	if m.seen < min || m.seconds <= 0 {
		return 0, false
	}
	return m.mj / 1000 / m.seconds, true
}

// Provisional returns the mean power of the idle time seen so far,
// measured or not; false when none is left after forgetting.
func (m *Mean) Provisional() (float64, bool) {
	if m.seconds <= 0 {
		return 0, false
	}
	return m.mj / 1000 / m.seconds, true
}

// Seconds returns the idle time behind the mean after forgetting.
func (m *Mean) Seconds() float64 { return m.seconds }
