package simgpu_test

import (
	"math"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// Concurrent prefills share prefill power by prompt tokens per second of
// prefill under the default, and by power factor under the variant.
func TestPrefillShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share simgpu.PrefillShare
	}{{"token rate", simgpu.ShareByTokenRate}, {"power factor", simgpu.ShareByPowerFactor}} {
		t.Run(tc.name, func(t *testing.T) {
			g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, PrefillShare: tc.share,
				PrefillBase: time.Nanosecond, Decode: simgpu.DecodePerToken})
			// 100 and 400 prompt tokens: 25 ms and 100 ms of prefill, the
			// same token rate, so only the 25 ms overlap differs.
			a, b := g.Begin(100), g.Begin(400)
			clk.Set(b.PrefillEnd())
			a.End()
			b.End()
			both := 2 * 300 / math.Sqrt2 // W while both prefill
			// Idle: 100 W shared by two jobs for 100 ms.
			idle := 100.0 * 100 / 2
			wantA := idle + both/2*25
			wantB := idle + both/2*25 + 300*75
			if got := a.TrueEnergyMJ(); math.Abs(got-wantA) > 1e-3 {
				t.Errorf("a: %v mJ, want %v", got, wantA)
			}
			if got := b.TrueEnergyMJ(); math.Abs(got-wantB) > 1e-3 {
				t.Errorf("b: %v mJ, want %v", got, wantB)
			}
		})
	}
	t.Run("unequal rates", func(t *testing.T) {
		// Prompts of 1000 and 100 tokens with the same 80 ms base: the
		// longer prompt processes more tokens per second and takes the
		// larger share while both prefill.
		g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, Decode: simgpu.DecodePerToken})
		_, b := g.Begin(1000), g.Begin(100)
		clk.Set(b.PrefillEnd()) // 105 ms; the other's prefill lasts 330 ms
		b.End()
		ra, rb := 1000/330.0, 100/105.0
		wantB := 100.0*105/2 + 2*300/math.Sqrt2*rb/(ra+rb)*105
		if got := b.TrueEnergyMJ(); math.Abs(got-wantB) > 1e-3 {
			t.Fatalf("b: %v mJ, want %v", got, wantB)
		}
		g2, clk2 := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, Decode: simgpu.DecodePerToken,
			PrefillShare: simgpu.ShareByPowerFactor})
		_, b2 := g2.Begin(1000), g2.Begin(100)
		clk2.Set(b2.PrefillEnd())
		b2.End()
		if got, eq := b2.TrueEnergyMJ(), 100.0*105/2+300/math.Sqrt2*105; math.Abs(got-eq) > 1e-3 {
			t.Fatalf("power-factor share: b %v mJ, want %v", got, eq)
		}
	})
}

// Decode power follows the batch curve and is shared by token rate.
func TestDecodeBatch(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{NoPrefill: true, JoulesPerToken: 1e-9, Phase: 1})
	var jobs []*simgpu.Job
	for i := range 8 {
		j := g.Begin(0)
		j.SetDecodeRate(float64(10 * (i + 1)))
		jobs = append(jobs, j)
	}
	at(clk, 100)
	// 8 decoding: 386 W above 100 W idle, for 100 ms.
	if got, want := g.TrueEnergyMJ(0), uint64((100+386)*100); got != want {
		t.Fatalf("board %d mJ, want %d", got, want)
	}
	for i, j := range jobs {
		want := 100.0*100/8 + 386*100*float64(i+1)/36
		if got := j.TrueEnergyMJ(); math.Abs(got-want) > 1e-3 {
			t.Fatalf("job %d: %v mJ, want %v", i, got, want)
		}
	}
	for _, j := range jobs[:4] {
		j.End()
	}
	at(clk, 200)
	// 4 decoding: linear in log2(batch) between 1 (200 W) and 8 (386 W).
	want := uint64((100+386)*100 + (100+200+186*2.0/3)*100)
	if got := g.TrueEnergyMJ(0); got != want && got != want-1 {
		t.Fatalf("board %d mJ, want %d", got, want)
	}
	// Energy per token falls with the batch along the default curve.
	prev := math.Inf(1)
	for _, n := range []int{1, 8, 64, 512} {
		g, clk := newGPU(t, simgpu.Config{NoPrefill: true, IdleWatts: 1e-9})
		for range n {
			g.Begin(0)
		}
		at(clk, 1000)
		// 40 tokens/s each (the default 25 ms step).
		perToken := float64(g.TrueEnergyMJ(0)) / 1000 / (40 * float64(n))
		if perToken >= prev {
			t.Fatalf("J/token %v at batch %d, not below %v", perToken, n, prev)
		}
		prev = perToken
	}
}

func TestFirstTokenAt(t *testing.T) {
	g, _ := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1})
	j := g.Begin(100)
	if got, want := j.FirstTokenAt().Sub(j.PrefillEnd()), simgpu.DefaultDecodeStep; got != want {
		t.Fatalf("first token %v after the prefill, want %v", got, want)
	}
	j.SetDecodeRate(50)
	if got, want := j.FirstTokenAt().Sub(j.PrefillEnd()), 20*time.Millisecond; got != want {
		t.Fatalf("first token %v after the prefill at 50 tokens/s, want %v", got, want)
	}
}

// A windowed counter integrates only the window before each step, scaled
// to the period: exact under constant power, blind to what falls outside.
func TestCounterWindow(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 100 * time.Millisecond, CounterWindow: 25 * time.Millisecond,
		NoPrefill: true, Decode: simgpu.DecodePerToken, JoulesPerToken: 1})
	at(clk, 100)
	if got, want := read(t, g, 0), uint64(initial+10_000); got != want {
		t.Fatalf("constant power: read %d, want %d", got, want)
	}
	j := g.Begin(0)
	at(clk, 150)
	j.Tokens(1) // outside the window [175, 200)
	at(clk, 180)
	j.Tokens(2) // inside: 2 J × 4
	at(clk, 200)
	if got, want := read(t, g, 0), uint64(initial+20_000+8_000); got != want {
		t.Fatalf("read %d, want %d", got, want)
	}
	if got, want := g.TrueEnergyMJ(0), uint64(20_000+3_000); got != want {
		t.Fatalf("truth %d, want %d", got, want)
	}
}

// TestPrefillQuadratic checks that the nominal prefill length takes the
// quadratic term: with no spread, 80 ms + 0.25 ms × n + 4 ms × (n/1000)².
func TestPrefillQuadratic(t *testing.T) {
	g, _ := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPerSquaredKTokens: 4 * time.Millisecond})
	for _, n := range []int{0, 1000, 8000, 32000} {
		j := g.Begin(n)
		k := float64(n) / 1000
		want := 80*time.Millisecond + time.Duration(n)*250*time.Microsecond + time.Duration(4*k*k*float64(time.Millisecond))
		if got := j.PrefillEnd().Sub(j.BeganAt()); got != want {
			t.Errorf("prompt of %d: prefill %v, want %v", n, got, want)
		}
		j.End()
	}
}
