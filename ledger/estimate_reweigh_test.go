package ledger

import (
	"math"
	"testing"
)

// TestEstimateReweighsThePromptReportedAtEnd checks reweighed through
// Estimate. A request reported nothing while it ran, so the provisional
// split weighed it with the recent prompts' mean, 500 tokens: its share
// is 5000 mJ through 300 ms, of which 1000 mJ was its prefill pool share
// and 2000 mJ came from the 8000 mJ the model weighed. With a prefill
// time of 0.1 s per 1000 tokens, the 2000-token prompt it reports at the
// end takes four times the mean's prefill, Δ = 3000 mJ, and the rest of
// the pool gives way:
//
//	5000 + 3000 × (1 − 2000/8000) / (1 + 3000/8000) ≈ 6636.4 mJ
//
// A shorter prompt than the mean takes some back; a prompt the split
// weighed already, or a request alone in its pool, changes nothing.
func TestEstimateReweighsThePromptReportedAtEnd(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	const thru = 300e6
	publish := func(seen uint64, own, pool float64) {
		r.est.mj.Store(5000)
		r.est.thru.Store(thru)
		r.through.Store(thru)
		r.est.pfGive.Store(math.Float64bits(1000 * (1 - own/pool)))
		r.est.pfFrac.Store(math.Float64bits(1000 / pool))
		r.est.in.Store(seen)
		l := &g.l.est
		l.meanIn.Store(math.Float64bits(500))
		for i, v := range [3]float64{0, 0.1, 0} {
			l.pfCoef[i].Store(math.Float64bits(v))
		}
		l.pfCoefOK.Store(true)
		setPrices(g.l, prices{})
	}
	publish(0, 2000, 8000)
	r.in.Store(2000)
	want := 5000 + 3000*(1-2000.0/8000)/(1+3000.0/8000)
	if got := float64(g.l.Estimate(r, thru)); math.Abs(got-want) > 1 {
		t.Fatalf("2000-token prompt reported at the end, weighed as the 500-token mean: estimate %.0f mJ, want %.1f", got, want)
	}

	r.in.Store(250) // half the mean: Δ = −500 mJ
	want = 5000 - 500*(1-2000.0/8000)/(1-500.0/8000)
	if got := float64(g.l.Estimate(r, thru)); math.Abs(got-want) > 1 {
		t.Fatalf("250-token prompt against the 500-token mean: estimate %.0f mJ, want %.1f", got, want)
	}

	publish(2000, 2000, 8000)
	r.in.Store(2000)
	if got := g.l.Estimate(r, thru); got != 5000 {
		t.Fatalf("prompt weighed already: estimate %d mJ, want the provisional 5000", got)
	}

	publish(0, 8000, 8000)
	if got := g.l.Estimate(r, thru); got != 5000 {
		t.Fatalf("alone in its pool: estimate %d mJ, want the provisional 5000 (the metered energy is all its own already)", got)
	}
}
