package ledger

import (
	"math"
	"testing"
)

// TestEstimateReweighsThePromptReportedAtEnd checks reweighed through
// Estimate. A request reported nothing while it ran, so the provisional
// split weighed it with the recent prompts' mean, 500 tokens: its share
// is 5000 mJ through 300 ms, of which 1000 mJ was its prefill pool share
// and 2000 mJ came from the 8000 mJ the model weighed. The 2000-token
// prompt it reports at the end weighs four times the mean in the split,
// Δ = 3000 mJ, whatever the prefill time learned (here 50 ms + 0.1 s per
// 1000 tokens, under which it would take 2.5 times the mean's prefill),
// and the rest of the pool gives way:
//
//	5000 + 3000 × (1 − 2000/8000) / (1 + 3000/8000) ≈ 6636.4 mJ
//
// A shorter prompt than the mean takes some back; a request alone in its
// pool changes nothing.
func TestEstimateReweighsThePromptReportedAtEnd(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	const thru = 300e6
	publish := func(own, pool float64) {
		r.est.mj.Store(5000)
		r.est.thru.Store(thru)
		r.through.Store(thru)
		r.est.pfGive.Store(math.Float64bits(1000 * (1 - own/pool)))
		r.est.pfFrac.Store(math.Float64bits(1000 / pool))
		l := &g.l.est
		l.meanIn.Store(math.Float64bits(500))
		for i, v := range [3]float64{0.05, 0.1, 0} {
			l.pfCoef[i].Store(math.Float64bits(v))
		}
		l.pfCoefOK.Store(true)
		setPrices(g.l, prices{})
	}
	publish(2000, 8000)
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

	publish(8000, 8000)
	if got := g.l.Estimate(r, thru); got != 5000 {
		t.Fatalf("alone in its pool: estimate %d mJ, want the provisional 5000 (the metered energy is all its own already)", got)
	}
}

// TestPublishReweighOnlyUnreportedPrompts checks what publishEstimate
// gives reweighed: for a request whose prompt the provisional split
// weighed unreported, its prefill share less what the pool gives way
// for, and that share over the pool; nothing once a prompt is reported,
// since the split weighed that prompt itself.
func TestPublishReweighOnlyUnreportedPrompts(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	r := newAccount(1e6, nil)
	g.l.Add(r)
	g.step(1e8, 1000, nil)
	publish := func() (give, frac float64) {
		g.l.buf.prov = append(g.l.buf.prov[:0], provShare{mj: 3000, pf: 1000, dyn: 2000, pool: 8000})
		g.l.publishEstimate(r, 0)
		return math.Float64frombits(r.est.pfGive.Load()), math.Float64frombits(r.est.pfFrac.Load())
	}
	if give, frac := publish(); give != 750 || frac != 0.125 {
		t.Fatalf("prompt unreported: published give %v, frac %v; want 1000 × (1 − 2000/8000) = 750 and 1000/8000 = 0.125", give, frac)
	}
	r.AddInput(400)
	r.AddOutput(1)
	g.step(2e8, 1000, nil)
	if give, _ := publish(); give != 0 {
		t.Fatalf("prompt reported before the pass: published give %v, want 0 (the split weighed the prompt itself)", give)
	}
}
