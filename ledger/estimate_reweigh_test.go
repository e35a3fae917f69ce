package ledger

import (
	"math"
	"testing"
)

// TestEstimateReweighsThePromptReportedAtEnd checks reweighed through
// Estimate. A request reported nothing while it ran, so the provisional
// split weighed it with the recent prompts' mean, 500 tokens: its share
// is 5000 mJ through 300 ms, of which 1000 mJ was driven by its prompt,
// and 2000 mJ came from the 8000 mJ the model weighed. The prefill time
// learned is 50 ms + 0.1 s per 1000 tokens. The 2000-token prompt it
// reports at the end has four times the mean's tokens and 2.5 times its
// prefill time. When the 1000 mJ was all input tokens' energy, Δ = 3000
// mJ; when all prefill pool, Δ = 1500 mJ; when a quarter was input
// tokens', Δ = 1000·(¼·3 + ¾·1.5) = 1875 mJ. The rest of the pool gives
// way:
//
//	5000 + Δ × (1 − 2000/8000) / (1 + Δ/8000)
//
// A shorter prompt than the mean takes some back; a request alone in its
// pool changes nothing.
func TestEstimateReweighsThePromptReportedAtEnd(t *testing.T) {
	g, r := provisionalAt(t, estThru, 5000)
	const thru = estThru
	publish := func(own, pool, inputShare float64) {
		publishProvisional(r, estThru, 5000)
		r.est.pfGive.Store(math.Float64bits(1000 * (1 - own/pool)))
		r.est.pfFrac.Store(packFracs(1000/pool, inputShare))
		l := &g.l.est
		l.meanIn.Store(math.Float64bits(500))
		for i, v := range [3]float64{0.05, 0.1, 0} {
			l.pfCoef[i].Store(math.Float64bits(v))
		}
		l.pfCoefOK.Store(true)
		setPrices(g.l, prices{})
	}
	want := func(delta float64) float64 { return 5000 + delta*(1-2000.0/8000)/(1+delta/8000) }
	for _, c := range []struct {
		name       string
		inputShare float64
		prompt     uint64
		delta      float64
	}{
		{"all input tokens' energy, 2000 tokens", 1, 2000, 3000},
		{"all prefill pool, 2000 tokens", 0, 2000, 1500},
		{"a quarter input tokens', 2000 tokens", 0.25, 2000, 1875},
		// 250 tokens: half the mean's tokens, 0.075/0.1 of its time.
		{"all input tokens' energy, 250 tokens", 1, 250, -500},
		{"all prefill pool, 250 tokens", 0, 250, -250},
	} {
		publish(2000, 8000, c.inputShare)
		r.in.Store(c.prompt)
		if got, w := float64(g.l.Estimate(r, thru)), want(c.delta); math.Abs(got-w) > 1 {
			t.Errorf("%s, weighed as the 500-token mean: estimate %.0f mJ, want %.1f (Δ = %.0f mJ)", c.name, got, w, c.delta)
		}
	}

	r.in.Store(2000)
	publish(8000, 8000, 0.5)
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
	publish := func() (give, frac, q float64) {
		g.l.buf.prov = append(g.l.buf.prov[:0], provShare{mj: 3000, pf: 1000, pfIn: 250, dyn: 2000, pool: 8000})
		g.l.publishEstimate(r, 0)
		give = math.Float64frombits(r.est.pfGive.Load())
		frac, q = unpack2(r.est.pfFrac.Load())
		return give, frac, q
	}
	if give, frac, q := publish(); give != 750 || frac != 0.125 || q != 0.25 {
		t.Fatalf("prompt unreported: published give %v, frac %v, input tokens' share %v; want 1000 × (1 − 2000/8000) = 750, 1000/8000 = 0.125 and 250/1000 = 0.25", give, frac, q)
	}
	r.AddInput(400)
	r.AddOutput(1)
	g.step(2e8, 1000, nil)
	if give, _, _ := publish(); give != 0 {
		t.Fatalf("prompt reported before the pass: published give %v, want 0 (the split weighed the prompt itself)", give)
	}
}

// TestEstimateWithUnreadablePricesKeepsTheProvisionalFigure: prices or a
// published fraction that are not numbers (a model gone wrong) move the
// estimate nowhere; before, NaN reached an unsigned conversion and the
// figure was whatever the conversion gave.
func TestEstimateWithUnreadablePricesKeepsTheProvisionalFigure(t *testing.T) {
	g, r := provisionalAt(t, estThru, 5000)
	const thru = estThru
	nan := math.NaN()
	r.est.pfGive.Store(math.Float64bits(750))
	r.est.pfFrac.Store(packFracs(nan, nan))
	g.l.est.meanIn.Store(math.Float64bits(500))
	r.in.Store(2000)
	r.AddOutput(10)
	setPrices(g.l, prices{staticW: nan, tokJ: nan, decBusyW: nan, outJ: nan})
	for _, at := range []int64{thru, thru + 50e6} {
		if got := g.l.Estimate(r, at); got != 5000 {
			t.Errorf("NaN prices, estimate at %d ns: %d mJ, want the provisional 5000", at, got)
		}
	}
}

// estThru is how far the estimate tests' provisional figure covers, ns.
const estThru = 300e6

// provisionalAt returns a ledger and a request in it, started at 0, whose
// published estimate is mj mJ through thru: what a provisional pass
// leaves.
func provisionalAt(t *testing.T, thru int64, mj uint64) (*rig, *Account) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	publishProvisional(r, thru, mj)
	return g, r
}

// publishProvisional publishes r's estimate as mj mJ through thru.
func publishProvisional(r *Account, thru int64, mj uint64) {
	r.est.mj.Store(mj)
	r.est.thru.Store(thru)
	r.through.Store(thru)
}
