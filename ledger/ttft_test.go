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
		f.addWhole(n, out, pf+0.025*out, 1+rng.Float64()*200)
	}
	for _, n := range []float64{2000, 7000} {
		want := 0.08 + 0.25*n/1000
		got, ok := f.predict(n)
		if !ok || math.Abs(got-want) > 0.15*want {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f within 15%%", n, got, ok, want)
		}
	}
	if s, ok := f.stepSeconds(100); !ok || math.Abs(s-0.025) > 0.005 {
		t.Errorf("step %.4f s (ok %v), want 0.025", s, ok)
	}
	var g ttft
	for range 200 {
		n := 50 + rng.Float64()*950
		rate := 10 + rng.Float64()*50
		dur := 1 + rng.Float64()*7
		g.addWhole(n, rate*dur, 0.08+0.25*n/1000+dur, 1+rng.Float64()*200)
	}
	if got, ok := g.predict(500); ok {
		t.Errorf("lengths that follow per-request rates: predicted %.3f s, want no prediction", got)
	}
}

// TestTTFTWholeBatch: under continuous batching each decode step runs
// every sequence in the batch, so the step grows with the batch. Whole
// requests that lived through batches from 20 to 250 still give their
// prefill time, and the step at a given batch, as the step's own
// dependence on the batch is learned instead of left to the prefill terms.
func TestTTFTWholeBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var f ttft
	step := func(batch float64) float64 { return 0.02 + 0.0002*batch }
	for range 400 {
		n := 200 + rng.Float64()*3800
		out := 50 + rng.Float64()*550
		batch := 20 + rng.Float64()*230
		pf := (0.08 + 0.25*n/1000) * (1 + 0.3*(2*rng.Float64()-1))
		f.addWhole(n, out, pf+step(batch)*out, batch)
	}
	for _, n := range []float64{500, 3000} {
		want := 0.08 + 0.25*n/1000
		got, ok := f.predict(n)
		// The forgetting keeps about 50 requests, each off by up to 30%
		// of its prefill: the fit is as close as that allows.
		if !ok || math.Abs(got-want) > max(0.1, 0.25*want) {
			t.Errorf("prompt of %.0f: predicted %.3f s (ok %v), want %.3f within 0.1 s or 25%%", n, got, ok, want)
		}
	}
	for _, batch := range []float64{30, 200} {
		if s, ok := f.stepSeconds(batch); !ok || math.Abs(s-step(batch)) > 0.05*step(batch) {
			t.Errorf("step at a batch of %.0f: %.4f s (ok %v), want %.4f within 5%%", batch, s, ok, step(batch))
		}
	}
}

// TestEndOnlyPrefillByStep: under continuous batching, a request that
// reports its few output tokens once, at its end, has its prefill placed
// by its own end less a batch step per token, not by the prefill time
// typical of its prompt: a prefill 30% longer than typical is placed
// within two steps of where it ended.
func TestEndOnlyPrefillByStep(t *testing.T) {
	const (
		ms   = int64(1e6)
		step = 25 * ms
	)
	g := newRig(t, Config{Horizon: 2000 * ms})
	g.step(0, 0, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	type job struct {
		r      *Account
		pfEnd  int64
		tokens int
	}
	var jobs []*job
	start := func(t0 int64, prompt int, factor float64, tokens int) *job {
		pf := int64((80 + 0.25*float64(prompt)) * factor * float64(ms))
		j := &job{r: NewAccount(t0, nil), pfEnd: t0 + pf, tokens: tokens}
		j.r.AddInput(uint64(prompt))
		g.l.Add(j.r)
		jobs = append(jobs, j)
		return j
	}
	var probe *job
	for t0 := 10 * ms; t0 <= 60_000*ms; t0 += 10 * ms {
		if t0 < 50_000*ms && (t0-10*ms)%(1000*ms) == 0 {
			start(t0, 2000+rng.IntN(5000), 0.7+0.6*rng.Float64(), 5+rng.IntN(25))
		}
		if t0 == 52_000*ms {
			probe = start(t0, 4000, 1.3, 12)
		}
		for _, j := range jobs {
			if _, ended := j.r.Ended(); ended || t0 < j.pfEnd {
				continue
			}
			// One token per step after the prefill, all reported at the end.
			if n := int((t0 - j.pfEnd) / step); n >= j.tokens {
				j.r.AddOutput(uint64(j.tokens))
				j.r.End(t0)
			}
		}
		g.step(t0, 3000, nil)
	}
	if probe == nil || !probe.r.Final() {
		t.Fatal("the probe is not final")
	}
	first, ok := probe.r.FirstToken()
	want := probe.pfEnd + step // its first token, a step after its prefill
	if d := first - want; !ok || d < -2*step || d > 2*step {
		t.Errorf("first token placed at %d ms, want %d ms within two steps (ok %v)", first/ms, want/ms, ok)
	}
}

// TestBatchRateFromFirstRequests: the batch's output rate, at which a
// silent request is taken to produce tokens, is the first requests' rate
// as soon as they report it, not that rate averaged with a zero nobody
// reported. Requests that report once, at their end, update it once each:
// after five of them it was a quarter of their rate.
func TestBatchRateFromFirstRequests(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 10_000 * ms})
	g.step(0, 0, nil)
	var rs []*Account
	for i := range 5 {
		r := NewAccount(int64(i+1)*100*ms, nil)
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
	if got := g.l.rate * 1e9; got < 38 || got > 46 {
		t.Errorf("batch rate %.1f tokens/s, want about 40", got)
	}
}

// TestBatchAtSpan: a request's mean batch is read over the span its
// integral covers, up to the latest read, whatever instant its report is
// placed at: a request alone on the device, which ended between two reads
// 100 ms apart, ran in a batch of one.
func TestBatchAtSpan(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 10_000 * ms})
	g.step(0, 0, nil)
	r := NewAccount(10*ms, nil)
	r.AddInput(100)
	g.l.Add(r)
	r.AddOutput(3)
	r.End(40 * ms)
	g.step(100*ms, 100, nil)
	if b := g.l.batchAt(r); math.Abs(b-1) > 0.01 {
		t.Errorf("a request alone on the device: batch %.3f, want 1", b)
	}
}

// TestSilentFinalSplitBeforeModel: before the model is learned, a request
// still silent at the horizon takes its share of the intervals split then
// (the mean weight per ns of those that reported), not nothing, and the
// energy is conserved at every step.
func TestSilentFinalSplitBeforeModel(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 500 * ms})
	g.step(0, 0, nil)
	a, b := NewAccount(1*ms, nil), NewAccount(1*ms, nil)
	g.l.Add(a)
	g.l.Add(b)
	for t0 := 20 * ms; t0 <= 3000*ms; t0 += 20 * ms {
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
		g.step(t0, 2000, nil)
		if s := a.EnergyMJ() + b.EnergyMJ() + g.l.Unattributed() + g.l.OtherProcesses(); s != g.l.SplitMJ() {
			t.Fatalf("at %d ms: conservation %d vs %d", t0/ms, s, g.l.SplitMJ())
		}
		if t0 == 1400*ms {
			if g.l.fit.devs[0].m.usable {
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
