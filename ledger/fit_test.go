package ledger

import (
	"math"
	"testing"
)

// slotSource is a featureSource over a made-up activity: every
// millisecond slot has its own output rate, drawn from a hash of the slot,
// so that intervals seen at different lags have different features. With
// flipTo ≥ 0 the features are the activity's only under that placement
// of the prefill's end, and another slot's hash under the other.
type slotSource struct {
	flipTo float64 // -1: the placement does not matter
}

func slotRate(slot int64, salt uint64) float64 {
	h := uint64(slot)*0x9e3779b97f4a7c15 + salt
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return float64(h%1000) / 10 // tokens per ms, 0 to 100
}

// output returns the tokens of (a, b], ns, with salt choosing the
// activity.
func (slotSource) output(a, b int64, salt uint64) float64 {
	var sum float64
	for s := a / 1e6; s < b/1e6; s++ {
		sum += slotRate(s, salt)
	}
	return sum
}

func (src slotSource) learnFeatures(a, b int64, shift, _ float64) (x [nFeat]float64, guessed bool) {
	salt := uint64(1)
	if src.flipTo >= 0 && shift != src.flipTo {
		salt = 2 // the wrong placement: features that explain nothing
	}
	x[fStatic] = float64(b-a) / nsPerSecond
	x[fOutput] = src.output(a, b, salt)
	return x, false
}

// TestFitFindsLag checks the model stage alone: fed intervals whose
// energy is 80 W of static power plus 2 mJ per output token of the
// activity 30 ms before each interval, it chooses the 30 ms lag and
// learns both coefficients.
func TestFitFindsLag(t *testing.T) {
	const staticW, tokJ, lag = 80.0, 0.002, int64(30e6)
	f := newFit(1, Config{})
	src := slotSource{flipTo: -1}
	for k := range int64(3000) {
		a, b := k*50e6, (k+1)*50e6
		y := staticW*float64(b-a)/nsPerSecond + tokJ*src.output(a-lag, b-lag, 1)
		f.learn(0, a, b, y, 1, false, src)
		f.devs[0].chooseLag(1)
	}
	d := &f.devs[0]
	if d.lag != lag || lags[d.best] != lag {
		t.Fatalf("chose the %d ns lag, want %d", d.lag, lag)
	}
	if !d.m.usable {
		t.Fatal("the chosen model is not usable")
	}
	if got := d.m.theta[fStatic]; math.Abs(got-staticW) > 0.01*staticW {
		t.Errorf("static power %v W, want %v", got, staticW)
	}
	if got := d.m.theta[fOutput]; math.Abs(got-tokJ) > 0.01*tokJ {
		t.Errorf("energy per token %v J, want %v", got, tokJ)
	}
	th, w := f.coefs()
	if th != d.m.theta {
		t.Errorf("coefs %v, want the chosen model's %v", th, d.m.theta)
	}
	if w <= staticW {
		t.Errorf("recent power %v W, want above the static %v W", w, staticW)
	}
	if f.shift != 0 {
		t.Errorf("shift %v with nothing to tell the placements apart, want 0", f.shift)
	}
}

// TestFitFlips checks the model stage's choice of where a prefill ends:
// when the features explain the energy only under the other placement,
// the alternative model wins, maybeFlip moves the placement and the
// chosen model is then the one that learned under it. A lost device does
// not hold the flip back, nor take part in it.
func TestFitFlips(t *testing.T) {
	const staticW, tokJ = 50.0, 0.003
	f := newFit(2, Config{})
	src := slotSource{flipTo: 1}
	lost := func(i int) bool { return i == 1 }
	flips := 0
	for k := range int64(2000) {
		a, b := k*50e6, (k+1)*50e6
		y := staticW*float64(b-a)/nsPerSecond + tokJ*src.output(a, b, 1)
		f.learn(0, a, b, y, 1, false, src)
		f.devs[0].chooseLag(1)
		before := f.shift
		f.maybeFlip(lost)
		if f.shift != before {
			flips++
		}
	}
	if f.shift != 1 || flips != 1 {
		t.Fatalf("shift %v after %d flips, want 1 after one", f.shift, flips)
	}
	if got := f.devs[0].m.theta[fOutput]; math.Abs(got-tokJ) > 0.01*tokJ {
		t.Errorf("energy per token after the flip %v J, want %v", got, tokJ)
	}
	// Unflipped, every lag's model misses the energy: the flip is what
	// made the chosen model explain it.
	g := newFit(1, Config{})
	for k := range int64(2000) {
		a, b := k*50e6, (k+1)*50e6
		y := staticW*float64(b-a)/nsPerSecond + tokJ*src.output(a, b, 1)
		g.learn(0, a, b, y, 1, false, src)
		g.devs[0].chooseLag(1)
	}
	if got := g.devs[0].m.theta[fOutput]; math.Abs(got-tokJ) < 0.1*tokJ {
		t.Errorf("without the flip the energy per token is %v J, as good as with it", got)
	}
}

// TestChooseLagCountsIntervals: intervals held back (by a long prefill
// that reports nothing) and learned together are solved over before the
// splits that follow use the model: the chosen lag's cadence counts
// intervals, not the calls that brought them.
func TestChooseLagCountsIntervals(t *testing.T) {
	const staticW = 80.0
	f := newFit(1, Config{})
	src := slotSource{flipTo: -1}
	learn := func(from, n int64, tokJ float64) {
		for k := from; k < from+n; k++ {
			a, b := k*50e6, (k+1)*50e6
			f.learn(0, a, b, staticW*float64(b-a)/nsPerSecond+tokJ*src.output(a, b, 1), 1, false, src)
		}
	}
	for k := range int64(102) {
		learn(k, 1, 0.002)
		f.devs[0].chooseLag(1)
	}
	// 400 intervals at twice the token energy, brought by one call.
	learn(102, 400, 0.004)
	f.devs[0].chooseLag(400)
	if got := f.devs[0].m.theta[fOutput]; got < 0.003 {
		t.Errorf("token energy %.4f J after 400 intervals at 0.004: the model was not solved over them", got)
	}
}
