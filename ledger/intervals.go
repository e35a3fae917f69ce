package ledger

import "github.com/otelenergy/otelenergy/ring"

// This file is the intervals stage: it walks each ring's points, which the
// sampler pushes and the ledger only reads, and yields the intervals
// between consecutive ones, each once, in order, with its energy. It
// decides nothing about requests; the ledger says when an interval is
// ready (its requests have reported past it, or it is past the horizon),
// and the stage moves on.
//
// Invariant: the intervals a cursor yields tile the time from its first
// point on, and their energies sum to its ring's energy since then (a
// counter that went backwards adds none): nothing is yielded twice or
// skipped, even when the ring laps the ledger.

// interval is ring.Interval: (T0, T1] on the ring's clock with the
// energy metered in it, mJ. The cursors are ring.Cursors.
type interval = ring.Interval

// intervals is one device's walk over its ring: a learning cursor, which
// runs ahead so that the model has seen an interval before it is split,
// and a splitting cursor, which never passes it.
type intervals struct {
	ring  *ring.Ring
	learn ring.Cursor
	split ring.Cursor
	// firstT is the first point learned.
	firstT int64
	// provWritten is the ring's Written count when the provisional pass
	// last looked (see stepped).
	provWritten uint64
}

// nextLearn returns the next interval for the model, and false when the
// next point is not ready: it is ready once every running request has
// reported past it (minKnown) or it is older than horizon as of t. An
// interval longer than maxLen follows a stall: the requests' timelines no
// longer cover it, so it would teach the model wrong features; it is
// passed over, and teach says so.
func (v *intervals) nextLearn(minKnown, t, horizon, maxLen int64) (iv interval, teach, ok bool) {
	j, p, ok := v.learn.Peek(v.ring.View())
	if !ok || (v.learn.Primed() && p.T > minKnown && t-p.T <= horizon) {
		return interval{}, false, false
	}
	if !v.learn.Primed() {
		v.firstT = p.T
	}
	iv, primed := v.learn.Advance(j, p)
	return iv, primed && iv.T1-iv.T0 <= maxLen, true
}

// learnedFor returns how long a span of the ring the model has learned
// from, ns.
func (v *intervals) learnedFor() int64 {
	t, _ := v.learn.Last()
	return t - v.firstT
}

// nextSplit returns the next interval to split, and false when there is
// none: the model has not learned past it, or wait says to wait for the
// model and it is younger than horizon as of t. split is false for the
// ring's first point, which starts the first interval.
func (v *intervals) nextSplit(wait bool, t, horizon int64) (iv interval, split, ok bool) {
	if v.split.Index() >= v.learn.Index() {
		return interval{}, false, false
	}
	j, p, ok := v.split.Peek(v.ring.View())
	if !ok || (v.split.Primed() && wait && t-p.T <= horizon) {
		return interval{}, false, false
	}
	iv, split = v.split.Advance(j, p)
	return iv, split, true
}

// newest reports whether the interval split last ends at the ring's
// newest point.
func (v *intervals) newest() bool {
	_, more := v.ring.At(v.split.Index())
	return !more
}

// splitThrough returns the instant up to which every interval pushed is
// split (firstRead before the first point), and whether the ring has not
// stepped since for longer than horizon as of t (stuck, or failing every
// read): then it must not hold requests back.
func (v *intervals) splitThrough(firstRead, t, horizon int64) (int64, bool) {
	through, _ := v.split.Last()
	if !v.split.Primed() {
		through = firstRead
	}
	_, more := v.ring.At(v.split.Index())
	return through, !more && t-horizon > through
}

// stepped reports whether the ring was pushed since it last said so.
func (v *intervals) stepped() bool {
	w := v.ring.Written()
	if w == v.provWritten {
		return false
	}
	v.provWritten = w
	return true
}

// pending hands the intervals pushed but not split yet to visit, merged
// into at most groups intervals, and returns the instant through which it
// did (that of the last split point when none is pending). Before the
// first split, they start at the ring's oldest point. The cursors do
// not move: the provisional split looks ahead of the final one.
func (v *intervals) pending(groups int, visit func(iv interval)) int64 {
	newest := v.ring.Written()
	if newest == 0 || newest-1 < v.split.Index() {
		t, _ := v.split.Last()
		return t
	}
	first := max(v.split.Index(), v.ring.Oldest())
	a, ea := v.split.Last()
	if !v.split.Primed() {
		// Nothing is split yet: the pending intervals start at the
		// point the split will start from, as the split's do.
		p, ok := v.ring.At(first)
		if !ok {
			return a
		}
		a, ea, first = p.T, p.EnergyMJ, first+1
		if first >= newest {
			return a
		}
	}
	n := newest - first
	per := max(1, (n+uint64(groups)-1)/uint64(groups))
	for j := first; j < newest; j += per {
		p, ok := v.ring.At(min(j+per, newest) - 1)
		if !ok {
			break
		}
		if p.T > a {
			visit(interval{T0: a, T1: p.T, EnergyMJ: satSub(p.EnergyMJ, ea)})
		}
		a, ea = p.T, p.EnergyMJ
	}
	return a
}

// newestW returns the power over the ring's newest whole interval, W: the
// one between its two newest counter steps. The first point is a read,
// not a step, so the interval after it is partial and not used; 0 until
// there is a whole one.
func (v *intervals) newestW() float64 {
	w := v.ring.Written()
	if w < 3 {
		return 0
	}
	p, ok := v.ring.At(w - 1)
	q, okQ := v.ring.At(w - 2)
	if !ok || !okQ || p.T <= q.T {
		return 0
	}
	return float64(satSub(p.EnergyMJ, q.EnergyMJ)) / 1000 / (float64(p.T-q.T) / nsPerSecond)
}
