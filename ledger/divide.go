package ledger

import (
	"math"
	"slices"
)

// This file is the split stage: it turns an interval's attributable
// energy and the weighing of the requests active in it (see weigh) into
// each request's millijoules and the rest. divide and give are pure: they
// read only the parts' cov and weight and write only the shares they are
// handed, so the ledger's conservation rests on these few lines alone,
// and they can be tested without a ledger. Ledger.split, at the end of
// the file, weighs an interval, divides it, and only then adds the shares
// to the requests and hands them to Config.OnSplit.
//
// Invariant: Σ shares + rest = attr, exactly, whatever the weighing
// (zero, negative, NaN or infinite totals and weights included).

// Pools of an interval's energy, by what their shares follow.
const (
	byCoverage = iota // each part's cov, its share of the interval's time
	byWeight          // each part's weight, its modelled energy
)

// weighing is how an interval's attributable energy is to be split: its
// static part by coverage out of dt, the rest by w.by out of total.
type weighing struct {
	static    uint64
	dt, total float64
	by        int
	tokPrice  float64 // modelled energy of one output token, decode power included, J
}

// fallBack makes the dynamic part go by coverage when nothing weighs
// anything (no token was produced and no model prices time): the
// requests then share it as they share the static part, and the time
// with none of them is nobody's.
// A NaN total is left as it is: give refuses it, and the pool goes to no
// request.
func (w *weighing) fallBack(parts []part) {
	if w.total <= 0 {
		w.by, w.total = byCoverage, 0
		for i := range parts {
			w.total += parts[i].cov
		}
	}
}

// divide splits attr, an interval's attributable energy, among parts as
// w says: w.static by coverage out of w.dt, and the rest by w.by out of
// w.total, each by cumulative rounding (see give). It sets shares[i],
// which must be as long as parts, to part i's mJ, and returns the rest,
// the mJ that went to no part: attr − Σ shares, exactly.
func divide(attr uint64, w weighing, parts []part, shares []uint64) (rest uint64) {
	clear(shares)
	static := min(w.static, attr)
	given := give(static, parts, byCoverage, w.dt, shares)
	given += give(attr-static, parts, w.by, w.total, shares)
	return attr - given
}

// give splits e among parts in proportion to their coverage or weight out
// of total, by cumulative rounding: with cumulative weights C₁ ≤ … ≤ Cₙ,
// part i gets ⌊e·min(1, Cᵢ/total)⌋ − ⌊e·min(1, Cᵢ₋₁/total)⌋, so the
// shares telescope, exactly floor(e·min(1, Σw/total)) is given, and it
// returns that. Each share is added to got[i], which must be as long as
// parts. A bad total (zero, negative, NaN or infinite) gives nothing;
// whatever the weights, each cumulative figure is held within [the
// previous one, e], so no share is negative and at most e is given.
func give(e uint64, parts []part, by int, total float64, got []uint64) uint64 {
	if e == 0 || total <= 0 || math.IsNaN(total) || math.IsInf(total, 0) {
		return 0
	}
	var cum float64
	var given uint64
	for i := range parts {
		w := parts[i].cov
		if by == byWeight {
			w = parts[i].weight
		}
		cum += w
		s := uint64(math.Floor(float64(e) * min(1, cum/total)))
		s = min(max(s, given), e)
		got[i] += s - given
		given = s
	}
	return given
}

// split divides the energy e metered by device d over (a, b] among the
// requests active in it, with the device's current model: weigh weighs
// them, divide splits by that weighing, and the shares are then added to
// the requests.
//
// Invariant: every millijoule of e goes to exactly one of a request, the
// unattributed counter, or the other-processes counter.
func (l *Ledger) split(d *device, a, b int64, e uint64, minKnown int64) {
	attr := attributable(d, e)
	l.other.Add(e - attr)
	if b <= a {
		l.unattributed.Add(attr)
		l.onSplit(d, a, b, nil, e)
		return
	}
	w := l.weigh(d, a, b, attr, minKnown, true, false)
	parts := l.parts
	shares := slices.Grow(l.shareMJ[:0], len(parts))[:len(parts)]
	l.shareMJ = shares
	rest := divide(attr, w, parts, shares)
	for i, mj := range shares {
		if mj > 0 {
			parts[i].r.mj.Add(mj)
		}
	}
	l.unattributed.Add(rest)
	if l.running > 0 {
		l.noteShares(w, attr, false)
	}
	l.onSplit(d, a, b, parts, e-attr+rest)
}

// onSplit hands the interval (a, b] of d, just split among parts (their
// shares in l.shareMJ), to Config.OnSplit, with rest the mJ no part got.
func (l *Ledger) onSplit(d *device, a, b int64, parts []part, rest uint64) {
	if l.cfg.OnSplit == nil {
		return
	}
	n := len(parts)
	reqs := slices.Grow(l.hookReqs[:0], n)[:n]
	cov := slices.Grow(l.hookCov[:0], n)[:n]
	for i := range parts {
		reqs[i] = parts[i].r
		// cov is a share of (a, b] in ns, at most b − a; the covers sum
		// to at most b − a, which truncation keeps.
		if c := parts[i].cov; c > 0 {
			cov[i] = uint64(min(c, float64(b-a)))
		} else {
			cov[i] = 0
		}
	}
	l.hookReqs, l.hookCov = reqs, cov
	l.cfg.OnSplit(d.idx, a, b, reqs, l.shareMJ[:n], rest, cov)
	clear(reqs) // hold no request past its split
}
