package ledger

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTTFTQuadratic: prefill times that grow with the square of the
// prompt are learned as such from the requests that show them, placed
// within ±20 ms (about a read interval), and a prompt twice as long as
// any seen is predicted within 5%.
func TestTTFTQuadratic(t *testing.T) {
	var f ttft
	truth := func(n float64) float64 { k := n / 1000; return 0.08 + 0.25*k + 0.004*k*k }
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 500 + rng.Float64()*15_500
		f.add(n, truth(n)+0.02*(2*rng.Float64()-1))
	}
	for _, n := range []float64{1000, 8000, 32000} {
		got, ok := f.predict(n)
		if !ok || math.Abs(got-truth(n)) > 0.05*truth(n) {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f", n, got, ok, truth(n))
		}
	}
}

// TestTTFTWhole: with no request showing its first token, the prefill time
// is read from whole requests under continuous batching (length = prefill
// + a step per output token); where lengths do not follow that form
// (requests at rates of their own) nothing is predicted rather than a
// wrong time.
func TestTTFTWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var f ttft
	for range 200 {
		n := 2000 + rng.Float64()*5400
		out := 6 + rng.Float64()*24
		pf := (0.08 + 0.25*n/1000) * (1 + 0.3*(2*rng.Float64()-1))
		f.addWhole(n, out, pf+0.025*out)
	}
	for _, n := range []float64{2000, 7000} {
		want := 0.08 + 0.25*n/1000
		got, ok := f.predict(n)
		if !ok || math.Abs(got-want) > 0.15*want {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f within 15%%", n, got, ok, want)
		}
	}
	if s, ok := f.stepSeconds(); !ok || math.Abs(s-0.025) > 0.005 {
		t.Errorf("step %.4f s (ok %v), want 0.025", s, ok)
	}
	var g ttft
	for range 200 {
		n := 50 + rng.Float64()*950
		rate := 10 + rng.Float64()*50
		dur := 1 + rng.Float64()*7
		g.addWhole(n, rate*dur, 0.08+0.25*n/1000+dur)
	}
	if got, ok := g.predict(500); ok {
		t.Errorf("lengths that follow per-request rates: predicted %.3f s, want no prediction", got)
	}
}
