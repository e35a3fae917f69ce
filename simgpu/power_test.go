package simgpu_test

import (
	"math"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// watts returns board 0's mean power over the next d, read from its truth.
func watts(g *simgpu.GPU, clk *fakeClock, d time.Duration) float64 {
	e0 := g.TrueEnergyMJ(0)
	clk.Advance(d)
	return float64(g.TrueEnergyMJ(0)-e0) / float64(d.Milliseconds())
}

// TestH100PowerState replays the public H100 run's power readings on the
// H100 profile: idle, the step at the first request, the ramp to the
// plateau within 2 s, a plateau that moves little with the batch, and the
// drop after the last request with its decay.
func TestH100PowerState(t *testing.T) {
	c := simgpu.H100()
	c.PrefillSpread, c.PrefillPowerSpread = -1, -1
	g, clk := newGPU(t, c)
	if w := watts(g, clk, 10*time.Second); math.Abs(w-122.7) > 0.05 {
		t.Fatalf("idle %.2f W, want 122.7", w)
	}
	j := g.Begin(4)
	clk.Set(j.PrefillEnd())
	// The first 250 ms of decode, as nvidia-smi's first reading shows it.
	if w := watts(g, clk, 250*time.Millisecond); w < 195 || w > 240 {
		t.Fatalf("first 250 ms of one request: %.1f W, want about 204–207", w)
	}
	clk.Advance(1500 * time.Millisecond)
	if w := watts(g, clk, 250*time.Millisecond); w < 375 || w > 405 {
		t.Fatalf("2 s in: %.1f W, want 380–400", w)
	}
	var more []*simgpu.Job
	for range 29 {
		more = append(more, g.Begin(4))
	}
	clk.Advance(100 * time.Millisecond) // past their prefills
	if w := watts(g, clk, time.Second); w < 390 || w > 465 {
		t.Fatalf("30 decoding: %.1f W, want within the plateau's 390–465", w)
	}
	j.End()
	for _, m := range more {
		m.End()
	}
	if w := watts(g, clk, 250*time.Millisecond); w < 260 || w > 300 {
		t.Fatalf("the 250 ms after the last request: %.1f W, want about 290", w)
	}
	clk.Advance(10 * time.Second)
	if w := watts(g, clk, time.Second); math.Abs(w-122.7) > 0.1 {
		t.Fatalf("10 s after: %.2f W, want back at idle", w)
	}
	jobs := append(more, j)
	checkConservation(t, g, jobs)
	// The tail is nobody's: the unowned energy holds the idle time and
	// the tail above it.
	if u := g.UnownedEnergyMJ(); u < 122.7*21_000+100_000 {
		t.Fatalf("unowned %.0f mJ: less than 21 s of idle and the tail", u)
	}
}

// TestProfilesConserve runs every profile through the seeded workload:
// the jobs' truths and the unowned energy add up to the boards'.
func TestProfilesConserve(t *testing.T) {
	for name, c := range map[string]simgpu.Config{
		"H100": simgpu.H100(), "A100": simgpu.A100(), "H200": simgpu.H200(), "MI300X": simgpu.MI300X(),
	} {
		t.Run(name, func(t *testing.T) {
			c.Devices, c.Seed = 2, 3
			g, clk := newGPU(t, c)
			jobs, _ := workload(t, g, clk, 5, 20*time.Second)
			checkConservation(t, g, jobs)
		})
	}
}

// TestRampScalesTheJobsShares: under a ramp, each job's truth is its
// share of the power as drawn, so two equal jobs side by side get equal
// truths, and their sum with the unowned energy is the board's.
func TestRampScalesTheJobsShares(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{NoPrefill: true, RampTime: 500 * time.Millisecond, RampFloor: 0.2,
		TailWatts: 50, TailTime: 200 * time.Millisecond, Phase: 1})
	a, b := g.Begin(0), g.Begin(0)
	clk.Advance(time.Second)
	a.End()
	b.End()
	clk.Advance(2 * time.Second)
	if math.Abs(a.TrueEnergyMJ()-b.TrueEnergyMJ()) > 1e-6 {
		t.Fatalf("equal jobs: %v and %v mJ", a.TrueEnergyMJ(), b.TrueEnergyMJ())
	}
	// 1 s of 100 W idle, and 386 W at a batch of two (log-linear between
	// batch 1 at 200 W and 8 at 386 W) scaled by 0.2 + 0.8·(1 − τ/1s·(1 − e^(−2))).
	work := simgpu.DefaultDecodeCurve[0].Watts + (simgpu.DefaultDecodeCurve[1].Watts-simgpu.DefaultDecodeCurve[0].Watts)/3
	f := 0.2 + 0.8*(1-0.5*(1-math.Exp(-2)))
	if got, want := a.TrueEnergyMJ()+b.TrueEnergyMJ(), 100*1000+work*f*1000; math.Abs(got-want) > 1e-3 {
		t.Fatalf("jobs' truth %.3f mJ, want %.3f", got, want)
	}
	// The tail: 50 W at the level reached, decaying with 200 ms.
	level := 1 - math.Exp(-2)
	if got, want := g.UnownedEnergyMJ(), 100*2000+50*level*200*(1-math.Exp(-10)); math.Abs(got-want) > 1e-3 {
		t.Fatalf("unowned %.3f mJ, want %.3f", got, want)
	}
	checkConservation(t, g, []*simgpu.Job{a, b})
}

// TestCachedTokensCostNoPrefill: a prompt served from the prefix cache
// prefills only its uncached tokens, and weighs only them among
// concurrent prefills.
func TestCachedTokensCostNoPrefill(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, Phase: 1})
	full, cached := g.Begin(1000), g.BeginCached(1000, 800)
	if got, want := full.PrefillEnd().Sub(full.BeganAt()), 330*time.Millisecond; got != want {
		t.Fatalf("uncached prefill %v, want %v", got, want)
	}
	if got, want := cached.PrefillEnd().Sub(cached.BeganAt()), 130*time.Millisecond; got != want {
		t.Fatalf("prefill with 800 of 1000 tokens cached %v, want %v (80 ms + 200 × 0.25 ms)", got, want)
	}
	if cached.CachedTokens() != 800 || cached.InputTokens() != 1000 {
		t.Fatalf("cached %d of %d tokens", cached.CachedTokens(), cached.InputTokens())
	}
	at(clk, 130)
	// While both prefill, they share 300·√2 W by uncached tokens per
	// second: 1000/330 ms against 200/130 ms.
	rf, rc := 1000.0/330, 200.0/130
	pf := 300 * math.Sqrt2 * 130
	if got, want := cached.TrueEnergyMJ(), 100*130/2+pf*rc/(rf+rc); math.Abs(got-want) > 1e-6 {
		t.Fatalf("cached job's truth %v mJ, want %v", got, want)
	}
	full.End()
	cached.End()
}
