package ledger

import (
	"math"

	"github.com/otelenergy/otelenergy/internal/nnls"
)

// The counter's timing, chosen by the counter itself. Two things about a
// board's counter are not documented and differ between boards and
// engines: how late a step reports the energy it covers (a counter fed by
// a power sensor's averages lags them), and whether a request's prefill
// ends one decode step before its first token or at it (an engine whose
// prefill pass emits the first token). Both move energy between the
// requests at the boundaries they shift, so the model stage keeps a fit
// per candidate lag at the current placement, and the chosen lag's fit
// under the other placement, and takes the one that explains the steps
// best. This is the ledger's one candidate search; docs/attribution.md
// gives the figures with and without it.

// lags are the candidate reporting lags, ns: a counter's step at τ may
// report the energy consumed up to τ − lag.
var lags = [...]int64{0, 10e6, 20e6, 30e6, 40e6, 50e6, 60e6, 80e6, 100e6}

// Timing constants: the search learns every candidate while at most
// maxLagSearch requests are active (beyond, only the chosen one, so that
// a busy sampler's work stays O(active)); it chooses again every
// chooseEvery intervals learned; and another lag or the other placement
// must leave flipMargin of the chosen one's residual or less to be taken.
const (
	maxLagSearch = 64
	chooseEvery  = 32
	flipMargin   = 0.95
)

// lag returns device i's chosen lag, ns.
func (m *model) lag(i int) int64 { return lags[m.devs[i].best] }

// choose solves every candidate of d and takes the lag whose fit leaves
// clearly the least residual per interval (flipMargin of the chosen one's
// or less: a counter whose lag the data cannot tell keeps the one it has,
// and requests wait no longer for a lag's steps than they must), and notes
// whether the other placement explains the steps clearly better.
func (d *devModel) choose(base [nnls.MaxTerms]float64, given uint) {
	best, bestRSS := d.best, math.Inf(1)
	if r, ok := rssPer(&d.cands[d.best], base, given); ok {
		bestRSS = r
	}
	for c := range lags {
		if r, ok := rssPer(&d.cands[c], base, given); ok && r < flipMargin*bestRSS {
			best, bestRSS = c, r
		}
	}
	d.best = best
	r, ok := rssPer(&d.alt, base, given)
	d.wantFlip = ok && !math.IsInf(bestRSS, 1) && r < flipMargin*bestRSS
}

// rssPer returns f's residual per interval under its solution, and false
// when it has none.
func rssPer(f *nnls.Fit, base [nnls.MaxTerms]float64, given uint) (float64, bool) {
	th, ok := f.Solve(base, given)
	if !ok || f.Count() <= 0 {
		return 0, false
	}
	// Rounding leaves a near-exact fit's residual a little below zero.
	return max(f.RSS(th), 1e-12) / f.Count(), true
}

// maybeFlip moves every prefill's end to the other placement when every
// device that can tell (lost says which cannot) finds that it explains
// the steps clearly better: the chosen lag's fit and the alternative
// swap, as each learned under the placement it now has.
func (m *model) maybeFlip(lost func(i int) bool) {
	want := false
	for i := range m.devs {
		d := &m.devs[i]
		if lost(i) || d.alt.Count() == 0 {
			continue
		}
		if !d.wantFlip {
			return
		}
		want = true
	}
	if !want {
		return
	}
	m.shift = 1 - m.shift
	for i := range m.devs {
		d := &m.devs[i]
		d.cands[d.best], d.alt = d.alt, d.cands[d.best]
		d.wantFlip = false
	}
}
