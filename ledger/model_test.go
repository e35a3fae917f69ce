package ledger

import (
	"math"
	"math/rand/v2"
	"testing"
)

// slotRate is a made-up activity: every millisecond slot has its own
// output rate, drawn from a hash of the slot, so that intervals seen at
// different lags have different features.
func slotRate(slot int64, salt uint64) float64 {
	h := uint64(slot)*0x9e3779b97f4a7c15 + salt
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return float64(h%1000) / 10 // tokens per ms, 0 to 100
}

// slotOutput returns the tokens of (a, b], ns, with salt choosing the
// activity.
func slotOutput(a, b int64, salt uint64) float64 {
	var sum float64
	for s := a / 1e6; s < b/1e6; s++ {
		sum += slotRate(s, salt)
	}
	return sum
}

// slotFeatures returns the features of (a, b] at every candidate lag and,
// as the alternative placement, the same activity (right) or another
// (wrong): what the model stage is handed for one interval.
func slotFeatures(a, b int64, altSalt uint64, salt uint64) (xs [len(lags)][nFeat]float64, alt [nFeat]float64) {
	for c, lag := range lags {
		xs[c][fStatic] = float64(b-a) / nsPerSecond
		xs[c][fOutput] = slotOutput(a-lag, b-lag, salt)
	}
	alt[fStatic] = float64(b-a) / nsPerSecond
	alt[fOutput] = slotOutput(a, b, altSalt)
	return xs, alt
}

// TestModelFindsLag checks the model stage alone: fed intervals whose
// energy is 80 W of static power plus 2 mJ per output token of the
// activity 30 ms before each interval, it chooses the 30 ms lag and
// learns both coefficients, and keeps the placement of the prefill's end.
func TestModelFindsLag(t *testing.T) {
	const staticW, tokJ, lag = 80.0, 0.002, int64(30e6)
	m := newModel(1, 0, false)
	for k := range int64(3000) {
		a, b := k*50e6, (k+1)*50e6
		xs, alt := slotFeatures(a, b, 2, 1)
		y := staticW*float64(b-a)/nsPerSecond + tokJ*slotOutput(a-lag, b-lag, 1)
		m.learn(0, &xs, &alt, y, b-a, false, true)
		m.solve(0)
		m.maybeFlip(func(int) bool { return false })
	}
	d := &m.devs[0]
	if got := m.lag(0); got != lag {
		t.Fatalf("chose the %d ns lag, want %d", got, lag)
	}
	if !d.usable {
		t.Fatal("the chosen model is not usable")
	}
	if got := d.theta[fStatic]; math.Abs(got-staticW) > 0.01*staticW {
		t.Errorf("static power %v W, want %v", got, staticW)
	}
	if got := d.theta[fOutput]; math.Abs(got-tokJ) > 0.01*tokJ {
		t.Errorf("energy per token %v J, want %v", got, tokJ)
	}
	if th := m.coefs(); th != d.theta {
		t.Errorf("coefs %v, want the chosen model's %v", th, d.theta)
	}
	if m.shift != 0 {
		t.Errorf("shift %v with the other placement explaining nothing, want 0", m.shift)
	}
}

// TestModelFlips checks the choice of where a prefill ends: when the
// features explain the energy only under the other placement, the
// alternative wins, maybeFlip moves the placement once, and the chosen
// model is then the one that learned under it. A lost device does not
// hold the flip back.
func TestModelFlips(t *testing.T) {
	const staticW, tokJ = 50.0, 0.003
	m := newModel(2, 0, false)
	lost := func(i int) bool { return i == 1 }
	flips := 0
	for k := range int64(2000) {
		a, b := k*50e6, (k+1)*50e6
		// Under the current placement the features are another
		// activity's; under the other, this one's. After the flip the two
		// swap roles, as the ledger's builder would.
		cur, other := uint64(2), uint64(1)
		if m.shift == 1 {
			cur, other = 1, 2
		}
		xs, alt := slotFeatures(a, b, other, cur)
		for c := range lags {
			xs[c][fOutput] = slotOutput(a, b, cur)
		}
		y := staticW*float64(b-a)/nsPerSecond + tokJ*slotOutput(a, b, 1)
		m.learn(0, &xs, &alt, y, b-a, false, true)
		m.solve(0)
		before := m.shift
		m.maybeFlip(lost)
		if m.shift != before {
			flips++
		}
	}
	if m.shift != 1 || flips != 1 {
		t.Fatalf("shift %v after %d flips, want 1 after one", m.shift, flips)
	}
	if got := m.devs[0].theta[fOutput]; math.Abs(got-tokJ) > 0.01*tokJ {
		t.Errorf("energy per token after the flip %v J, want %v", got, tokJ)
	}
}

// TestPrefillTimeQuadratic: prefill times that grow with the square of
// the prompt are learned as such from the requests that show them, placed
// within ±20 ms (about a read interval), and a prompt twice as long as
// any seen is predicted within 5%.
func TestPrefillTimeQuadratic(t *testing.T) {
	var p prefillTime
	truth := func(n float64) float64 { k := n / 1000; return 0.08 + 0.25*k + 0.004*k*k }
	rng := rand.New(rand.NewPCG(1, 2))
	if _, ok := p.seconds(1000); ok {
		t.Fatal("a prefill time before any request showed one")
	}
	for range 200 {
		n := 500 + rng.Float64()*15_500
		p.add(n, truth(n)+0.02*(2*rng.Float64()-1))
	}
	p.solve()
	for _, n := range []float64{1000, 8000, 32000} {
		got, ok := p.seconds(n)
		if !ok || math.Abs(got-truth(n)) > 0.05*truth(n) {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f", n, got, ok, truth(n))
		}
	}
}

// TestIdlePower: the static power is measured on idle intervals once half
// a second of them is seen, whatever ran between them.
func TestIdlePower(t *testing.T) {
	var p idlePower
	for range 20 { // 0.4 s of idle at 100 W
		p.add(2, 20e6, true)
	}
	if _, ok := p.watts(); ok {
		t.Fatal("measured after 0.4 s of idle")
	}
	for range 100 { // busy at 400 W
		p.add(8, 20e6, false)
	}
	for range 10 {
		p.add(2, 20e6, true)
	}
	if w, ok := p.watts(); !ok || math.Abs(w-100) > 1e-9 {
		t.Fatalf("idle power %v (%v), want 100 W", w, ok)
	}
}

// TestBatchRateFromFirstRequests: the batch's output rate, at which a
// silent request is taken to produce tokens, is the first requests' rate
// as soon as they report it, not that rate averaged with a zero nobody
// reported. Requests that report once, at their end, update it once each.
func TestBatchRateFromFirstRequests(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 10_000 * ms})
	g.step(0, 0, nil)
	var rs []*Account
	for i := range 5 {
		r := newAccount(int64(i+1)*100*ms, nil)
		r.AddInput(100)
		g.l.Add(r)
		rs = append(rs, r)
	}
	for t0 := 20 * ms; t0 <= 3000*ms; t0 += 20 * ms {
		for i, r := range rs {
			// Each decodes at 40 tokens a second for 2 s and reports
			// its 80 tokens once, at its end.
			if end := int64(i+1)*100*ms + 2000*ms; t0 == end {
				r.AddOutput(80)
				r.End(t0)
			}
		}
		g.step(t0, 200, nil)
	}
	// The prefill takes a little of each request's 2 s.
	if got := g.l.model.batch.rate() * 1e9; got < 38 || got > 46 {
		t.Errorf("batch rate %.1f tokens/s, want about 40", got)
	}
}

// TestSilentFinalSplitBeforeModel: before the model is learned, a request
// still silent at the horizon takes its share of the intervals split then,
// not nothing, and the energy is conserved at every step. The counter
// steps every 100 ms, so that the model has seen too few steps by 1.4 s.
func TestSilentFinalSplitBeforeModel(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 500 * ms})
	g.step(0, 0, nil)
	a, b := newAccount(1*ms, nil), newAccount(1*ms, nil)
	g.l.Add(a)
	g.l.Add(b)
	for t0 := 100 * ms; t0 <= 3000*ms; t0 += 100 * ms {
		if t0 == 1000*ms {
			a.AddInput(100)
			a.AddOutput(40)
			a.End(t0)
		}
		if t0 == 2800*ms {
			b.AddInput(100)
			b.AddOutput(90)
			b.End(t0)
		}
		g.step(t0, 10000, nil)
		if s := a.EnergyMJ() + b.EnergyMJ() + g.l.Unattributed() + g.l.OtherProcesses(); s != g.l.SplitMJ() {
			t.Fatalf("at %d ms: conservation %d vs %d", t0/ms, s, g.l.SplitMJ())
		}
		if t0 == 1400*ms {
			if g.l.model.devs[0].ready {
				t.Fatal("the model was learned: the test is about before it")
			}
			// (0, 1000] ms is split at the horizon with b silent: both
			// ran all of it and share it evenly.
			if a.EnergyMJ() == 0 || b.EnergyMJ() < a.EnergyMJ()*9/10 {
				t.Errorf("at 1400 ms: a %d mJ, b (silent) %d mJ, want about even", a.EnergyMJ(), b.EnergyMJ())
			}
		}
	}
}

// TestEstimateSilentBeforeModel checks End's estimate for a request that
// reports nothing until its end, before the model is learned, beside one
// that did the same and has ended: the two have drawn alike all along
// (the board is told nothing else), so the one still silent is estimated
// about half of what the board metered.
func TestEstimateSilentBeforeModel(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	ended, silent := newAccount(1e6, nil), newAccount(1e6, nil)
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
	if g.l.model.devs[0].usable {
		t.Fatal("the model is learned: the case is before it")
	}
	half := float64((steps+1)*stepMJ) / 2
	if got := float64(g.l.Estimate(silent, end+5e7)); math.Abs(got-half) > 0.1*half {
		t.Errorf("silent request: estimate %.0f mJ, want about %.0f (half of the board's)", got, half)
	}
}

// TestExpectedPrefillEndFollowsThePlacement: the prefill time is learned
// to one decode step before the first token, and under the other
// placement every placed prefill ends a step later; a request that has
// shown no timing yet must be expected to end its prefill where the
// placed ones do, in the split (expectedPrefillEnd) and in End's estimate
// (estPrefillEnd, from what the sampler published).
func TestExpectedPrefillEndFollowsThePlacement(t *testing.T) {
	g, r := adoptedAtZero(t, 500)
	m := &g.l.model
	for range 8 {
		m.prefill.add(500, 0.020) // 20 ms for 500 tokens
	}
	m.prefill.solve()
	m.batch.step = 8e6 // 8 ms a token
	for _, c := range []struct {
		shift float64
		want  int64
	}{{0, 20e6}, {1, 28e6}} {
		m.shift = c.shift
		if got := m.expectedPrefillEnd(0, 500, -1); math.Abs(float64(got-c.want)) > 1e3 {
			t.Errorf("shift %v: expected prefill end %.3f ms, want %.0f ms", c.shift, float64(got)/1e6, float64(c.want)/1e6)
		}
		g.l.publish()
		if got := g.l.estPrefillEnd(r, 100e6); math.Abs(float64(got-c.want)) > 1e3 {
			t.Errorf("shift %v: End's expected prefill end %.3f ms, want %.0f ms", c.shift, float64(got)/1e6, float64(c.want)/1e6)
		}
	}
}

// TestEstimatesUseTheModelBeforeSplitsDo: once the model has learned more
// busy intervals than it has terms, and more requests than that have been
// seen to their end, its coefficients price the provisional split behind
// End's estimate; the final splits keep the by-tokens weighing until it
// has learned minIntervals busy intervals. Here the board prices output
// tokens only, so a prompt of 1,000 tokens weighs nothing under the model
// and fallbackInput·1000/10 times a 10-token output by tokens.
func TestEstimatesUseTheModelBeforeSplitsDo(t *testing.T) {
	const staticW, tokJ, dt = 80.0, 0.01, int64(50e6)
	m := newModel(1, staticW, true)
	d := &m.devs[0]
	row := func(k int64) {
		var xs [len(lags)][nFeat]float64
		var alt [nFeat]float64
		out := float64(5 + k%7)
		for c := range lags {
			xs[c][fStatic], xs[c][fOutput] = float64(dt)/nsPerSecond, out
		}
		alt = xs[0]
		m.learn(0, &xs, &alt, staticW*float64(dt)/nsPerSecond+tokJ*out, dt, false, true)
		m.solve(0)
	}
	weights := func(provisional bool) (prompt, output float64) {
		f := featureSet{parts: []part{{out: 10, cov: float64(dt)}, {in: 1000, cov: float64(dt)}}}
		f.x[fStatic], f.x[fOutput], f.x[fInput] = float64(dt)/nsPerSecond, 10, 1000
		weigh(&f, d, 5000, float64(dt), provisional)
		return f.parts[1].weight, f.parts[0].weight
	}
	var k int64
	for ; k < nFeat+2; k++ {
		row(k)
	}
	if d.usable {
		t.Fatal("usable before any request was seen to its end")
	}
	m.ended = nFeat + 1
	m.solve(0)
	if !d.usable || d.ready {
		t.Fatalf("usable %v, ready %v after %.1f busy intervals and %d ended requests, want usable and not ready", d.usable, d.ready, d.busy, m.ended)
	}
	if got := d.theta[fOutput]; math.Abs(got-tokJ) > 0.01*tokJ {
		t.Errorf("energy per token %v J, want %v", got, tokJ)
	}
	if p, o := weights(true); p >= o/100 {
		t.Errorf("provisional: the prompt weighs %v J beside the output's %v, want about nothing (the model's)", p, o)
	}
	if p, o := weights(false); math.Abs(p-fallbackInput*1000/10*o) > 1e-9*o {
		t.Errorf("final: the prompt weighs %v beside the output's %v, want %v times (by tokens)", p, o, fallbackInput*1000/10)
	}
	for ; d.busy < minIntervals; k++ {
		row(k)
	}
	if !d.ready {
		t.Fatalf("not ready after %.1f busy intervals", d.busy)
	}
	if p, o := weights(false); p >= o/100 {
		t.Errorf("final, ready: the prompt weighs %v J beside the output's %v, want about nothing", p, o)
	}
}
