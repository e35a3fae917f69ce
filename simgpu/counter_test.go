package simgpu_test

import (
	"math"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

const initial = simgpu.DefaultInitialCounter

// lastStepMS returns the latest step instant at or before t on a board with
// the given phase and a 100 ms period, and whether one exists after 0.
func lastStepMS(t, phase float64) (float64, bool) {
	k := math.Floor((t - phase) / 100)
	tau := phase + 100*k
	return tau, tau > 0
}

func TestStaircase(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 30 * time.Millisecond})
	prev, prevT := read(t, g, 0), 0.0
	if prev != initial {
		t.Fatalf("first read %d, want %d", prev, initial)
	}
	changes := 0
	for ms := 17.0; ms <= 2000; ms += 17 {
		at(clk, ms)
		got := read(t, g, 0)
		want := uint64(initial)
		tau, ok := lastStepMS(ms, 30)
		if ok {
			want += uint64(100 * tau) // 100 W × τ ms = 100·τ mJ
		}
		if got != want {
			t.Fatalf("read at %v ms = %d, want %d", ms, got, want)
		}
		if got != prev {
			changes++
			// The read that sees a step is the first at or after it.
			if !(prevT < tau && tau <= ms) {
				t.Fatalf("value changed at %v ms, previous read %v ms, step %v ms", ms, prevT, tau)
			}
		}
		prev, prevT = got, ms
	}
	if changes < 19 {
		t.Fatalf("saw %d steps in 2 s", changes)
	}
}

func TestStepInstants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter time.Duration
	}{
		{"random phase", 0},
		{"jitter", 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, clk := newGPU(t, simgpu.Config{Devices: 4, Seed: 11, UpdateJitter: tc.jitter})
			period := g.UpdatePeriod()
			phases := map[time.Duration]bool{}
			for i := range 4 {
				p := g.Phase(i)
				if p < 0 || p >= period {
					t.Fatalf("Phase(%d) = %v", i, p)
				}
				phases[p] = true
			}
			if len(phases) < 4 {
				t.Fatalf("phases %v not drawn per board", phases)
			}
			prev := make([]uint64, 4)
			for i := range prev {
				prev[i] = read(t, g, i)
			}
			jittered := false
			for ms := 1; ms <= 1000; ms++ {
				at(clk, float64(ms))
				now := clk.Now()
				for i := range 4 {
					// The step with an instant in (now-1ms, now], if any.
					stepped := false
					for k := int64(-1); k <= 11; k++ {
						tau := g.StepInstant(i, k)
						nominal := g.Start().Add(g.Phase(i) + time.Duration(k)*period)
						if d := tau.Sub(nominal); d < -tc.jitter || d > tc.jitter {
							t.Fatalf("step %d of board %d off by %v", k, i, d)
						} else if d != 0 {
							jittered = true
						}
						if tau.After(g.Start()) && tau.After(now.Add(-time.Millisecond)) && !tau.After(now) {
							stepped = true
						}
					}
					got := read(t, g, i)
					if (got != prev[i]) != stepped {
						t.Fatalf("board %d at %d ms: value %d → %d, step due %v", i, ms, prev[i], got, stepped)
					}
					prev[i] = got
				}
			}
			if jittered != (tc.jitter > 0) {
				t.Fatalf("jittered = %v", jittered)
			}
		})
	}
}

func TestReportLag(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 30 * time.Millisecond, ReportLag: 150 * time.Millisecond})
	for ms := 1.0; ms <= 1000; ms += 7 {
		at(clk, ms)
		want := uint64(initial)
		if tau, ok := lastStepMS(ms, 30); ok && tau > 150 {
			want += uint64(100 * (tau - 150))
		}
		if got := read(t, g, 0); got != want {
			t.Fatalf("read at %v ms = %d, want %d", ms, got, want)
		}
	}
}

func TestGain(t *testing.T) {
	t.Run("fixed", func(t *testing.T) {
		g, clk := newGPU(t, simgpu.Config{Phase: 30 * time.Millisecond, Gain: 1.25})
		for ms := 5.0; ms <= 1000; ms += 13 {
			at(clk, ms)
			want := uint64(initial)
			if tau, ok := lastStepMS(ms, 30); ok {
				want += uint64(1.25 * 100 * tau)
			}
			if got := read(t, g, 0); got != want {
				t.Fatalf("read at %v ms = %d, want %d", ms, got, want)
			}
			if got, want := g.TrueEnergyMJ(0), uint64(1.25*100*ms); got != want {
				t.Fatalf("TrueEnergyMJ at %v ms = %d, want %d", ms, got, want)
			}
		}
	})
	t.Run("spread", func(t *testing.T) {
		g, clk := newGPU(t, simgpu.Config{Devices: 8, GainSpread: 0.05, Seed: 5})
		at(clk, 10_000)
		seen := map[float64]bool{}
		for i := range 8 {
			gain := g.Gain(i)
			if gain < 0.95 || gain >= 1.05 {
				t.Fatalf("Gain(%d) = %v", i, gain)
			}
			seen[gain] = true
			want := gain * 100 * 10_000
			if got := float64(g.TrueEnergyMJ(i)); math.Abs(got-want) > 1 {
				t.Fatalf("TrueEnergyMJ(%d) = %v, want %v", i, got, want)
			}
		}
		if len(seen) < 8 {
			t.Fatalf("gains not drawn per board: %v", seen)
		}
	})
}

// A token produced at a step's sample instant belongs to the next step;
// one produced before it, to this step.
func TestTokensAtStepInstant(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 100 * time.Millisecond, NoPrefill: true, Decode: simgpu.DecodePerToken})
	j := g.Begin(0)
	at(clk, 50)
	j.Tokens(10) // 1.5 J
	at(clk, 100)
	j.Tokens(20) // 3 J, at the step
	if got, want := read(t, g, 0), uint64(initial+10_000+1_500); got != want {
		t.Fatalf("read at the step = %d, want %d", got, want)
	}
	at(clk, 200)
	if got, want := read(t, g, 0), uint64(initial+20_000+4_500); got != want {
		t.Fatalf("read at the next step = %d, want %d", got, want)
	}
}

// A jump far past many steps costs no more than the lag's worth of them,
// and lands on the right value.
func TestLongJump(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 1, UpdatePeriod: time.Millisecond, ReportLag: time.Second})
	clk.Advance(time.Hour + time.Millisecond/2)
	start := time.Now()
	got := read(t, g, 0)
	if d := time.Since(start); d > time.Second {
		t.Errorf("a one-hour jump took %v", d)
	}
	// The latest step is at 1 h + 1 ns; it reports the energy up to 1 s
	// before it.
	want := uint64(initial) + uint64(100*((time.Hour-time.Second).Seconds()*1000+1e-6))
	if got != want {
		t.Fatalf("read after a jump = %d, want %d", got, want)
	}
}

func TestClockBackwards(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Phase: 100 * time.Millisecond, NoPrefill: true, Decode: simgpu.DecodePerToken})
	at(clk, 250)
	before := read(t, g, 0)
	at(clk, 120)
	if got := read(t, g, 0); got != before {
		t.Fatalf("read after the clock went back = %d, want %d", got, before)
	}
	j := g.Begin(0)
	if got, want := j.BeganAt(), epoch.Add(250*time.Millisecond); !got.Equal(want) {
		t.Fatalf("BeganAt = %v, want %v", got, want)
	}
	if got := g.TrueEnergyMJ(0); got != 25_000 {
		t.Fatalf("TrueEnergyMJ = %d, want 25000", got)
	}
	at(clk, 300)
	if got := g.TrueEnergyMJ(0); got != 30_000 {
		t.Fatalf("TrueEnergyMJ = %d, want 30000", got)
	}
}
