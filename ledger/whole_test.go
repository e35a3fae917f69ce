package ledger

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestWholeRequestFit: with no request showing its first token, the
// prefill time and the decode step are learned from whole requests whose
// lives follow continuous batching (a prefill that grows with the prompt,
// then a step per output token that grows with the batch): a prompt is
// predicted within 5%, and so is the step at a batch size seen. Once a
// request shows its first token, its direct measure is used instead.
func TestWholeRequestFit(t *testing.T) {
	var p prefillTime
	pf := func(n float64) float64 { return 0.02 + 0.25*n/1000 }
	step := func(m float64) float64 { return 0.020 + 0.0002*m }
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		n, out, m := 500+rng.Float64()*7000, float64(5+rng.IntN(300)), 1+rng.Float64()*60
		p.addWhole(n, out, pf(n)+out*step(m)+0.005*(2*rng.Float64()-1), m)
		p.solve()
	}
	if !p.fromWhole() {
		t.Fatal("the whole-request fit is not used")
	}
	for _, n := range []float64{1000, 4000, 7000} {
		if got, ok := p.seconds(n); !ok || math.Abs(got-pf(n)) > 0.05*pf(n) {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f", n, got, ok, pf(n))
		}
	}
	for _, m := range []float64{5, 30} {
		if got, ok := p.stepSeconds(m); !ok || math.Abs(got-step(m)) > 0.05*step(m) {
			t.Errorf("batch of %.0f: step %.4f s (ok %v), want %.4f", m, got, ok, step(m))
		}
	}
	p.add(1000, 0.5)
	p.solve()
	if got, _ := p.seconds(1000); p.fromWhole() || math.Abs(got-0.5) > 1e-6 {
		t.Errorf("after a direct measure of 0.5 s: %.3f s, from whole %v", got, p.fromWhole())
	}
}

// TestWholeRequestFitRefusesRates: where each request decodes at a rate of
// its own, its life follows its rate and not its prompt; the fit finds a
// constant that no prompt explains, and no prefill time is taken from it.
// Where the lives show no prefill at all, the prefill time is none.
func TestWholeRequestFitRefusesRates(t *testing.T) {
	var p prefillTime
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		life := 1 + 7*rng.Float64()
		rate := 10 + 50*rng.Float64()
		p.addWhole(50+rng.Float64()*950, math.Round(life*rate), life, 16)
		p.solve()
	}
	if _, ok := p.seconds(500); ok {
		t.Errorf("a prefill time from lives that follow their own rates: %v", p.wholeTh)
	}
	var q prefillTime
	for range 200 {
		out, m := float64(5+rng.IntN(30)), 1+rng.Float64()*20
		q.addWhole(2000+rng.Float64()*5000, out, out*(0.02+0.0002*m), m)
		q.solve()
	}
	if got, ok := q.seconds(4000); !ok || got > 1e-3 {
		t.Errorf("lives with no prefill: a prefill of %.4f s (ok %v), want none", got, ok)
	}
}

// TestWholePrefillEnd: a life the fit explains exactly keeps the fit's
// prefill; what it does not explain goes mostly to the larger term, and
// the prefill stays within the life.
func TestWholePrefillEnd(t *testing.T) {
	const s = int64(1e9)
	if got := wholePrefillEnd(0, 2*s, 1.5, 0.5); got != 3*s/2 {
		t.Errorf("an explained life: prefill ends at %d, want %d", got, 3*s/2)
	}
	// 0.4 s unexplained, prefill 1 s and decode 0.5 s: (1, 0.25) of
	// variance share, so the prefill takes 0.32 s of it.
	if got := wholePrefillEnd(0, 19*s/10, 1, 0.5); math.Abs(float64(got)-1.32e9) > 1e3 {
		t.Errorf("a longer life: prefill ends at %d, want 1.32e9", got)
	}
	if got := wholePrefillEnd(s, s+s/10, 1, 0); got > s+s/10 || got < s+s/10-1e3 {
		t.Errorf("a life shorter than its prefill: ends at %d, want its end %d", got, s+s/10)
	}
	if got := wholePrefillEnd(s, 2*s, 0, 0); got != s {
		t.Errorf("nothing modelled: prefill ends at %d, want its start", got)
	}
}
