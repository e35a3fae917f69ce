package ledger

import (
	"math"
	"testing"
)

// TestEstimateEndedRequestCountsItselfUntilEnd checks the static power
// Estimate gives a request that has ended, priced up to its own end: it
// was running until then, so the number of requests at the end of the
// span counts it, and its own end is not one of the ends that thinned
// the others out. Three requests share a board drawing 90 W, all of it
// static, for the first 100 ms (settled: 9000 mJ, 3000 each); then one
// ends 50 ms later and the request under test 100 ms later. The estimate
// prices the static power over those 100 ms at static/n(s), n(s) going
// from n0 = 3 to n1 = 2 (the other running request and itself) over the
// part of the span centred on the ends' mean time: one end, 50 ms in, so
// linear over the whole span:
//
//	3000 mJ + 90 W × 100 ms × ln(3/2)/(3−2) ≈ 6649.2 mJ
//
// (the truth, a step at 50 ms, is 6750 mJ). Counting the request out of
// n1 (n1 = 1) would price its last part as if it ran alone, and counting
// its own end among the ends (a mean end time of 75 ms) kept n = 3 for
// the first half, 6324.6 mJ.
func TestEstimateEndedRequestCountsItselfUntilEnd(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	rs := []*Account{newAccount(10, nil), newAccount(10, nil), newAccount(10, nil)}
	for _, r := range rs {
		g.l.Add(r)
	}
	const staticW, firstMJ, spanMS = 90, 9000, 100
	g.step(spanMS*1e6, firstMJ, nil)
	setPrices(g.l, prices{staticW: staticW})
	a := rs[0]
	g.l.End(rs[2], 150e6)
	g.l.End(a, 200e6)

	want := firstMJ/3 + staticW*spanMS*math.Log(3.0/2)/(3-2)
	got := float64(g.l.Estimate(a, 200e6))
	if math.Abs(got-want) > 1 {
		t.Fatalf("estimate of a request ended at the estimate's time = %.0f mJ, want %.1f (itself counted among the 2 running at its end)", got, want)
	}
}

// TestEstimateShortfallFallsBackToSplit checks the clamp at the end of
// Estimate. A request was split 1000 mJ and provisionally 1500 mJ, which
// counted 300 output tokens (reported and extrapolated) through 300 ms;
// it reported 100. At 2 J per output token the 200 it did not make take
// 400 J off, far more than the 500 mJ provisional part, so the estimate
// falls back to what was split, 1000 mJ: never below it, and never the
// provisional 1500 mJ that assumed the missing tokens. At 0.1 mJ per token
// the shortfall takes 20 mJ off the provisional figure instead.
func TestEstimateShortfallFallsBackToSplit(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	r.AddOutput(100)

	// The sampler's published figures for r after a settle at 300 ms:
	// the split and the provisional split through 300 ms (so that no
	// power is added after it), with the tokens they counted.
	publish := func(priceJ float64) {
		r.mj.Store(1000)
		r.through.Store(300e6)
		r.est.mj.Store(1500)
		r.est.thru.Store(300e6)
		r.est.tok.Store(pack2(300, 0))
		setPrices(g.l, prices{tokJ: priceJ})
	}

	publish(2)
	if got := g.l.Estimate(r, 300e6); got != 1000 {
		t.Fatalf("200 tokens short at 2 J each: estimate %d mJ, want the 1000 mJ already split", got)
	}

	publish(0.0001) // 200 tokens short at 0.1 mJ each: 20 mJ
	if got := g.l.Estimate(r, 300e6); got < 1479 || got > 1481 {
		t.Fatalf("200 tokens short at 0.1 mJ each: estimate %d mJ, want 1500 − 20 = 1480 ± 1", got)
	}
}

// TestEstimatePricesMiscountedTokensAsTheirSplitDid checks the price of
// the tokens a provisional split counted wrongly. A request was split
// 1000 mJ and provisionally 1500 mJ, which counted 300 output tokens
// through 300 ms at 1 mJ each; the recent energy per output token, from
// older final splits, is 2 J. Reporting 100 tokens, it made 200 fewer
// than counted: at the split's own 1 mJ they take 200 mJ off (1300 mJ),
// where the recent 2 J would take off all of the provisional part. A
// request counted at 100 tokens that reports 300 gains 200 mJ, not
// 400 J. Where the model priced none of its tokens (price 0), the recent
// price serves (see TestEstimateShortfallFallsBackToSplit).
func TestEstimatePricesMiscountedTokensAsTheirSplitDid(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	for _, c := range []struct {
		reported, counted float64
		want              uint64
	}{
		{100, 300, 1300},
		{300, 100, 1700},
	} {
		r := newAccount(0, nil)
		g.l.Add(r)
		r.AddOutput(uint64(c.reported))
		r.mj.Store(1000)
		r.through.Store(300e6)
		r.est.mj.Store(1500)
		r.est.thru.Store(300e6)
		r.est.tok.Store(pack2(c.counted, 1))
		setPrices(g.l, prices{tokJ: 2})
		if got := g.l.Estimate(r, 300e6); absDiff(got, c.want) > 1 {
			t.Errorf("%v tokens reported, %v counted at 1 mJ each: estimate %d mJ, want %d ± 1 (priced as the split priced them, not at the recent 2 J)", c.reported, c.counted, got, c.want)
		}
	}
}

// setPrices publishes pr as the newest interval's prices, as the sampler
// does after a settle.
func setPrices(l *Ledger, pr prices) {
	for i, v := range pr.vec() {
		l.est.prices[i].Store(math.Float64bits(v))
	}
}

// TestProvisionalPassPublishesItsTokenPrice follows the token price from
// the provisional split to Estimate. Two requests decode through a
// 100 ms interval of 20 J on a board whose model prices output tokens
// alone (1 J each), so all of the interval's energy is the tokens', and
// the price the pass publishes for each request is the interval's
// energy over its tokens, whatever the residual. A request that reports
// 10 tokens more than the pass counted for it gains 10 tokens at that
// price, not at the recent energy per output token (5 J here).
func TestProvisionalPassPublishesItsTokenPrice(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	d := &g.l.devs[0]
	dm := &g.l.model.devs[0]
	dm.usable, dm.ready = true, true
	dm.theta[fOutput] = 1 // J per output token
	mk := func(out uint64) *Account {
		r := newAccount(0, nil)
		r.st = sampled{known: 400e6, pfEnd: 0, step: 10e6}
		r.st.pts = append(r.st.inline[:0], point{t: 0}, point{t: 400e6, out: out})
		g.l.reqs.active = append(g.l.reqs.active, r)
		return r
	}
	a, b := mk(40), mk(120)
	iv := interval{T0: 0, T1: 100e6, EnergyMJ: 20_000}
	f, _ := g.l.splitFeatures(d, iv)
	tokens := f.x[fOutput]
	if tokens <= 0 {
		t.Fatalf("the interval holds %v output tokens; the test needs some", tokens)
	}
	want := 20_000 / tokens // mJ per token

	g.l.buf.prov = make([]provShare, 2)
	g.l.provisionalSplit(d, iv)
	g.l.est.provThru.Store(iv.T1)
	for i, r := range []*Account{a, b} {
		g.l.publishEstimate(r, i)
		counted, price := unpack2(r.est.tok.Load())
		if math.Abs(price-want) > want*1e-6 {
			t.Errorf("request %d: published price %v mJ per token, want the interval's %v (20 J over its %v tokens)", i, price, want, tokens)
		}
		if counted <= 0 {
			t.Errorf("request %d: %v tokens counted through the pass, want some", i, counted)
		}
	}

	setPrices(g.l, prices{tokJ: 5})
	counted, price := unpack2(a.est.tok.Load())
	a.AddOutput(uint64(math.Round(counted)) + 10)
	a.End(iv.T1)
	got := float64(g.l.Estimate(a, iv.T1))
	base := float64(a.est.mj.Load()) + price*(math.Round(counted)-counted)
	if w := base + 10*price; math.Abs(got-w) > 2 {
		t.Errorf("10 tokens beyond those counted: estimate %.0f mJ, want %.0f (its provisional share plus 10 at %.1f mJ)", got, w, price)
	}
}
