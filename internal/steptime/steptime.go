// Package steptime learns when a staircase energy counter steps.
//
// NVML's total-energy counter publishes a new value every 20–100 ms, at a
// phase fixed when the driver started; a read between two steps returns the
// old value. A sampler that reads faster than the counter steps sees each
// step in exactly one read, and knows only that it happened in the bracket
// (previous read, this read]. An [Estimator] counts the steps, takes the
// period from the first and the latest bracket (its error shrinks as one
// over the number of steps), intersects the recent brackets shifted by
// whole periods to pin the phase, and places each new step at the
// prediction clamped into its own bracket, so the estimate is never outside
// what was observed.
//
// # Guarantees
//
//   - [Estimator.Observe] returns a time in the step's bracket (prev, t], and
//     never earlier than the instant it returned for the previous step.
//   - Until the period is resolved, each step is placed at the read that saw
//     it, as a sampler without phase learning would.
//   - The period is resolved only when some reads see no step: when every
//     read sees one, the counter may be stepping more than once per read
//     and no period is claimed.
//   - A step that contradicts the learned period and phase (a driver
//     reload, a counter whose timing changed) restarts the learning.
//   - Observe allocates nothing.
package steptime

import "math"

// history is the number of recent brackets intersected for the phase.
const history = 32

// minSteps is how many steps the estimator needs before it is trusted.
const minSteps = 16

// Estimator learns one counter's update period and phase. The zero value is
// ready to use. It is not safe for concurrent use; the sampler owns it.
type Estimator struct {
	prevRead int64
	started  bool

	// The steps since learning (re)started: the first bracket's midpoint,
	// the index of the newest step, and whether any read saw no step.
	refMid       float64
	refLo, refHi int64
	k            int64
	steps        int64
	quiet        bool

	// Brackets of the recent steps with their step index, in ring order.
	lo, hi [history]int64
	idx    [history]int64
	n      int
	head   int

	period float64 // ns; 0 until resolved
	last   int64   // the previous estimate
}

// Observe records a read at time t and whether it saw the counter change.
// For a read that saw a step it returns the step's estimated instant and
// true; otherwise it returns 0 and false. t must not go backwards; a t
// before the previous read is treated as the previous read's time.
func (e *Estimator) Observe(t int64, changed bool) (int64, bool) {
	if !e.started {
		e.started, e.prevRead = true, t
		if changed {
			e.last = t
			return t, true
		}
		return 0, false
	}
	a := e.prevRead
	t = max(t, a)
	e.prevRead = t
	if !changed {
		if e.steps > 0 {
			e.quiet = true
		}
		return 0, false
	}
	at := t
	if p, phase, ok := e.model(); ok {
		// Steps the bracket holds by the model; at least one.
		k := e.k + max(1, stepsIn(a, t, phase, p))
		pred := phase + float64(k)*p
		if pred < float64(a)-p/2 || pred > float64(t)+p/2 {
			e.restart()
		} else {
			e.k = k
			at = min(max(int64(math.Round(pred)), a+1), t)
		}
	}
	if e.steps == 0 {
		e.refMid, e.refLo, e.refHi, e.k = mid(a, t), a, t, 0
	} else if e.period == 0 {
		e.k++ // one step per changed read until the period is known
	}
	e.steps++
	e.push(a, t, e.k)
	if e.steps >= minSteps && e.quiet && e.k > 0 {
		e.period = e.fitPeriod((mid(a, t) - e.refMid) / float64(e.k))
	}
	at = max(at, e.last)
	e.last = at
	return at, true
}

// Period returns the learned update period in ns, or 0 while unresolved.
func (e *Estimator) Period() int64 { return int64(math.Round(e.period)) }

func (e *Estimator) restart() {
	e.steps, e.k, e.n, e.head, e.period, e.quiet = 0, 0, 0, 0, 0, false
}

// model returns the period and the phase (the instant of step 0) that
// every recent bracket agrees with.
func (e *Estimator) model() (p, phase float64, ok bool) {
	p = e.period
	if p <= 0 {
		return 0, 0, false
	}
	// Each bracket (lo, hi] of step k bounds the phase to (lo−kp, hi−kp];
	// their intersection is where the phase can be. Jitter can make it
	// empty; the mean of the bracket midpoints then stands in.
	lo, hi := math.Inf(-1), math.Inf(1)
	var sum float64
	for i := range e.n {
		j := (e.head + i) % history
		s := float64(e.idx[j]) * p
		lo = max(lo, float64(e.lo[j])-s)
		hi = min(hi, float64(e.hi[j])-s)
		sum += mid(e.lo[j], e.hi[j]) - s
	}
	if e.n == 0 {
		return 0, 0, false
	}
	if lo < hi {
		return p, (lo + hi) / 2, true
	}
	return p, sum / float64(e.n), true
}

// fitPeriod narrows the period to what every pair of brackets allows:
// steps i < j bound it to ((lo_j − hi_i)/(j−i), (hi_j − lo_i)/(j−i)). With
// reads whose cadence does not divide the period, the brackets land at
// every offset and the intersection is far narrower than one bracket over
// the span. guess stands in when jitter leaves the intersection empty.
func (e *Estimator) fitPeriod(guess float64) float64 {
	lo, hi := math.Inf(-1), math.Inf(1)
	bound := func(l0, h0, k0, l1, h1, k1 int64) {
		if d := float64(k1 - k0); d > 0 {
			lo = max(lo, float64(l1-h0)/d)
			hi = min(hi, float64(h1-l0)/d)
		}
	}
	for i := range e.n {
		ji := (e.head + i) % history
		bound(e.refLo, e.refHi, 0, e.lo[ji], e.hi[ji], e.idx[ji])
		for j := i + 1; j < e.n; j++ {
			jj := (e.head + j) % history
			bound(e.lo[ji], e.hi[ji], e.idx[ji], e.lo[jj], e.hi[jj], e.idx[jj])
		}
	}
	if lo < hi {
		return (lo + hi) / 2
	}
	return guess
}

// stepsIn counts the model's steps in (a, t].
func stepsIn(a, t int64, phase, p float64) int64 {
	return int64(math.Floor((float64(t)-phase)/p) - math.Floor((float64(a)-phase)/p))
}

func (e *Estimator) push(a, b, k int64) {
	if e.n < history {
		e.lo[e.n], e.hi[e.n], e.idx[e.n] = a, b, k
		e.n++
		return
	}
	e.lo[e.head], e.hi[e.head], e.idx[e.head] = a, b, k
	e.head = (e.head + 1) % history
}

func mid(a, b int64) float64 { return (float64(a) + float64(b)) / 2 }

// offsetWindow is how many reads the device-to-sampler clock offset is
// taken over: a minimum over a bounded window follows a device clock that
// drifts or restarts.
const offsetWindow = 256

// Stamped places the steps of a counter that stamps its own updates (see
// source.Stamper). The zero value is ready to use; it is not safe for
// concurrent use.
//
// The device's clock maps onto the sampler's by an offset: a read that
// returns at t shows a value stamped s, updated no later than t, so the
// offset is at most t − s, and the smallest t − s over recent reads is
// the tightest bound, reached by a read that came just after an update.
// A step is placed at its stamp plus that offset, clamped into the step's
// bracket (previous read, t] and never before the previous step, the
// guarantees of [Estimator.Observe]. The Estimator still learns the
// period from the same reads.
type Stamped struct {
	Estimator
	curMin, prevMin int64
	n               int
	haveMin         bool
	lastStamp       int64
	prev            int64 // the previous read's t
	started         bool
}

// ObserveStamped records a read at t that showed a value stamped stamp
// (device ns) and whether the value changed, and returns the step's
// instant as [Estimator.Observe] does.
func (e *Stamped) ObserveStamped(t int64, changed bool, stamp int64) (int64, bool) {
	prev, started, last := e.prev, e.started, e.last
	at, ok := e.Observe(t, changed)
	t = max(t, prev)
	e.prev, e.started = t, true
	if stamp < e.lastStamp {
		e.haveMin, e.n = false, 0 // the device clock restarted
	}
	e.lastStamp = stamp
	d := t - stamp
	if !e.haveMin {
		e.curMin, e.prevMin, e.haveMin = d, d, true
	}
	e.curMin = min(e.curMin, d)
	if e.n++; e.n == offsetWindow {
		e.prevMin, e.curMin, e.n = e.curMin, d, 0
	}
	if !ok || !started {
		return at, ok
	}
	placed := stamp + min(e.curMin, e.prevMin)
	placed = min(max(placed, prev+1), t)
	placed = max(placed, last)
	e.last = placed
	return placed, true
}
