package ledger

import (
	"math"
	"testing"
)

// TestEstimateRepricesLatePrompt checks the prefill part of End's
// estimate for a request whose prompt was reported only at its end, so
// that the sampler weighed its prefill as a prompt of the recent length.
// The split shares a prefill pool of power P by input-token rate: a
// request of n tokens prefilling for T s beside others of total rate R
// gets P·T·ρ/(ρ+R), ρ = n/T. The truth of each case is that share for
// its prompt against the share it was given, P·T̂·ρ̂/(ρ̂+R): the
// estimate must change by the published prefill part times their ratio
// less one. Alone (R = 0) that is the prefill times' ratio, in a crowd
// (R ≫ ρ) the prompts', and a prefill its own first token placed keeps
// its length.
func TestEstimateRepricesLatePrompt(t *testing.T) {
	// The prefill time learned: 80 ms + 0.25 ms per token.
	const a, b = 0.08, 0.25
	T := func(n float64) float64 { return a + b*n/1000 }
	share := func(n, dur, others float64) float64 { rho := n / dur; return dur * rho / (rho + others) }
	const pfMJ, inHat = 1000.0, 500.0
	tHat := T(inHat)
	for _, c := range []struct {
		name     string
		in       float64
		others   float64 // the other prefills' input-token rate, tokens/s
		observed bool    // its first token placed its prefill: T is tHat
	}{
		{"alone-longer", 2000, 0, false},
		{"alone-shorter", 100, 0, false},
		{"crowd-longer", 2000, 1e6, false},
		{"crowd-shorter", 100, 1e6, false},
		{"beside-one", 2000, inHat / tHat, false},
		{"alone-placed", 2000, 0, true},
		{"beside-one-placed", 2000, inHat / tHat, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, Config{Horizon: 1e12})
			g.step(0, 0, nil)
			r := NewAccount(0, nil)
			g.l.Add(r)
			g.step(1e8, 0, nil)
			g.l.pfCoef[0].Store(math.Float64bits(a))
			g.l.pfCoef[1].Store(math.Float64bits(b))
			g.l.pfCoef[2].Store(math.Float64bits(0))
			g.l.pfCoefOK.Store(true)
			// What the sampler publishes: its provisional share, all of it
			// prefill (an estimate never goes below the part already
			// split, which only grows), the prompt it stood for, the
			// prefill's length and the request's mean share of the pool
			// over it.
			f := share(inHat, tHat, c.others) / tHat
			th := tHat
			if c.observed {
				th = -tHat
			}
			r.estMJ.Store(uint64(pfMJ))
			r.through.Store(1e18) // nothing to carry past the newest step
			r.pfIn.Store(packPair(pfMJ, inHat))
			r.pfTF.Store(packPair(th, f))
			base := float64(g.l.Estimate(r, 2e8))
			r.AddInput(uint64(c.in))
			got := float64(g.l.Estimate(r, 2e8))
			dur := T(c.in)
			if c.observed {
				dur = tHat
			}
			want := pfMJ * share(c.in, dur, c.others) / share(inHat, tHat, c.others)
			want = min(want, pfMJ*maxPromptRatio)
			if math.Abs(got-want) > 0.01*want+1 {
				t.Fatalf("estimate with a %v-token prompt %.0f mJ (%.0f before it was reported), want %.0f", c.in, got, base, want)
			}
		})
	}
}

// TestSamplerNotesAssumedPrompt checks what the sampler publishes for
// the estimate to reprice: a request that has not reported its prompt
// was weighed as some prompt, one that reported it was not.
func TestSamplerNotesAssumedPrompt(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	known, silent := NewAccount(1e6, nil), NewAccount(1e6, nil)
	known.AddInput(800)
	g.l.Add(known)
	g.l.Add(silent)
	for i := int64(1); i <= 20; i++ {
		g.step(i*5e7, 5000, nil)
	}
	if _, inHat := unpackPair(silent.pfIn.Load()); inHat <= 0 {
		t.Fatalf("a request without its prompt: no prompt noted for it (%v)", inHat)
	}
	if _, inHat := unpackPair(known.pfIn.Load()); inHat != 0 {
		t.Fatalf("a request that reported its prompt: %v tokens noted as assumed", inHat)
	}
}

// TestEstimateSilentBeforeModel checks End's estimate for a request that
// reports nothing until its end, before the model is learned, beside one
// that did the same and has ended: the two have drawn alike all along
// (the board is told nothing else), so the one still silent is estimated
// about half of what the board metered. By tokens alone it took none of
// it: the ended request's tokens, spread back over its run, weighed the
// whole board's energy, and its own nothing.
func TestEstimateSilentBeforeModel(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	ended, silent := NewAccount(1e6, nil), NewAccount(1e6, nil)
	g.l.Add(ended)
	g.l.Add(silent)
	const steps, stepMJ = 40, 5000
	for i := int64(1); i <= steps; i++ {
		g.step(i*5e7, stepMJ, nil)
	}
	end := int64(steps * 5e7)
	ended.AddInput(500)
	ended.AddOutput(100)
	g.l.End(ended, end)
	g.step(end+5e7, stepMJ, nil)
	if g.l.fit.devs[0].m.usable {
		t.Fatal("the model is learned: the case is before it")
	}
	half := float64((steps+1)*stepMJ) / 2
	if got := float64(g.l.Estimate(silent, end+5e7)); math.Abs(got-half) > 0.1*half {
		t.Errorf("silent request: estimate %.0f mJ, want about %.0f (half of the board's)", got, half)
	}
}

// TestEstimateEndOnlyTokensBoundedByPower checks the price of the tokens
// a request reports only at its end, beyond those its estimate
// extrapolated: decoding faster than taken does not make the board draw
// more, so they cost at most its power over the time they came in. The
// sampler's figures for it are published by hand: its provisional share
// 2000 mJ through the newest step, its power 50 W, and 10 J per token
// from a provisional split that extrapolated few tokens. It then reports
// 100 tokens in the 1 s since it was taken to decode: at the published
// price that is 1000 J, far more than the 50 J its power gives in that
// second. A request that reported tokens before (streaming) keeps the
// price its own tokens gave it.
func TestEstimateEndOnlyTokensBoundedByPower(t *testing.T) {
	for _, c := range []struct {
		name string
		seen uint64
		want float64 // mJ added for the tokens
	}{
		{"end-only", 0, 50 * 1000},
		{"streaming", 10, 90 * 10 * 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, Config{Horizon: 1e12})
			g.step(0, 0, nil)
			r := NewAccount(0, nil)
			g.l.Add(r)
			const from, end = int64(1e9), int64(2e9)
			r.AddOutput(c.seen)
			r.estMJ.Store(2000)
			r.through.Store(end) // nothing to carry past the newest step
			r.seenRate.Store(packSeenRate(c.seen, 0))
			r.extFrom.Store(from)
			r.powPrice.Store(packPair(50, 10))
			base := float64(g.l.Estimate(r, end))
			r.AddOutput(100 - c.seen)
			got := float64(g.l.Estimate(r, end)) - base
			if math.Abs(got-c.want) > 0.01*c.want {
				t.Fatalf("100 tokens, %d seen before: %.0f mJ added, want %.0f", c.seen, got, c.want)
			}
		})
	}
}
