package simgpu_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// workload drives g on clk in 1 ms steps for d with a seeded stream of
// jobs: each waits for its prefill, produces tokens at its own rate and
// ends; gaps leave the boards idle at times. It returns every job and the
// readings of board 0, one per 17 ms.
func workload(t testing.TB, g *simgpu.GPU, clk *fakeClock, seed uint64, d time.Duration) ([]*simgpu.Job, []uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	type run struct {
		j        *simgpu.Job
		end      time.Time
		perToken time.Duration
		next     time.Time
	}
	var (
		all   []*simgpu.Job
		live  []*run
		reads []uint64
	)
	stop := clk.Now().Add(d)
	for step := 0; clk.Now().Before(stop); step++ {
		clk.Advance(time.Millisecond)
		now := clk.Now()
		// Arrivals come in bursts with quiet stretches between them.
		if (step/3000)%4 != 3 && rng.Float64() < 0.02 {
			j := g.Begin(rng.IntN(2000))
			all = append(all, j)
			live = append(live, &run{
				j:        j,
				end:      now.Add(time.Duration(200+rng.IntN(2000)) * time.Millisecond),
				perToken: time.Duration(10+rng.IntN(40)) * time.Millisecond,
				next:     j.PrefillEnd(),
			})
		}
		live = slices.DeleteFunc(live, func(r *run) bool {
			for !r.next.After(now) {
				r.j.Tokens(1 + rng.IntN(3))
				r.next = r.next.Add(r.perToken)
			}
			if !r.end.After(now) {
				r.j.End()
				return true
			}
			return false
		})
		if step%17 == 0 {
			reads = append(reads, read(t, g, 0))
		}
	}
	for _, r := range live {
		r.j.End()
	}
	return all, reads
}

// checkConservation checks Σ jobs' truth + unowned = Σ boards' energy.
func checkConservation(t testing.TB, g *simgpu.GPU, jobs []*simgpu.Job) {
	t.Helper()
	sum := g.UnownedEnergyMJ()
	for _, j := range jobs {
		sum += j.TrueEnergyMJ()
	}
	var boards float64
	n := len(g.Devices())
	for i := range n {
		boards += float64(g.TrueEnergyMJ(i))
	}
	// Each board's figure is floored to whole mJ.
	if diff := sum - boards; diff < -1e-6*boards || diff > 1e-6*boards+float64(n) {
		t.Fatalf("jobs + unowned = %.3f mJ, boards = %.0f mJ (diff %.3g)", sum, boards, diff)
	}
}

func TestConservation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  simgpu.Config
	}{
		{"defaults", simgpu.Config{}},
		{"hardware", simgpu.Config{Devices: 3, GainSpread: 0.05, Noise: 0.1, UpdateJitter: 5 * time.Millisecond,
			ReportLag: 30 * time.Millisecond, JoulesPerInputToken: 0.01, Seed: 7}},
		{"idealized", simgpu.Idealized(simgpu.Config{Devices: 2})},
		{"variants", simgpu.Config{Devices: 2, PrefillShare: simgpu.ShareByPowerFactor, Decode: simgpu.DecodePerToken,
			PrefillPowerSpread: 0.3, CounterWindow: 25 * time.Millisecond, Seed: 5}},
		{"windowed batch", simgpu.Config{CounterWindow: 10 * time.Millisecond, UpdatePeriod: 20 * time.Millisecond, Seed: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, clk := newGPU(t, tc.cfg)
			jobs, _ := workload(t, g, clk, 3, 20*time.Second)
			if len(jobs) < 100 {
				t.Fatalf("only %d jobs", len(jobs))
			}
			checkConservation(t, g, jobs)
			if g.UnownedEnergyMJ() <= 0 {
				t.Fatal("no idle stretch in the workload")
			}
			if n := g.ActiveJobs(); n != 0 {
				t.Fatalf("%d jobs still active after all ended", n)
			}
			// Truth is final after End.
			before := jobs[0].TrueEnergyMJ()
			clk.Advance(time.Second)
			if after := jobs[0].TrueEnergyMJ(); after != before {
				t.Fatalf("an ended job's truth moved from %v to %v", before, after)
			}
			checkConservation(t, g, jobs)
		})
	}
}

// The published counter is the floor of the board's truth at the step.
func TestCounterFollowsTruth(t *testing.T) {
	g, clk := newGPU(t, simgpu.Config{Devices: 2, GainSpread: 0.05, Phase: 100 * time.Millisecond, Seed: 2})
	jobs, _ := workload(t, g, clk, 4, 3*time.Second)
	_ = jobs
	at(clk, 3100) // a step instant: the read and the truth agree
	for i := range 2 {
		if got, want := read(t, g, i)-initial, g.TrueEnergyMJ(i); got != want {
			t.Fatalf("board %d: counter %d, truth %d", i, got, want)
		}
	}
}

func TestPrefill(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, Phase: 1})
		j := g.Begin(100)
		// 80 ms + 100 × 0.25 ms.
		if got, want := j.PrefillEnd().Sub(j.BeganAt()), 105*time.Millisecond; got != want {
			t.Fatalf("prefill lasts %v, want %v", got, want)
		}
		clk.Set(j.PrefillEnd())
		j.End()
		// (100 W idle + 300 W prefill) × 105 ms.
		if got, want := j.TrueEnergyMJ(), 42_000.0; math.Abs(got-want) > 1e-6 {
			t.Fatalf("truth %v mJ, want %v", got, want)
		}
		g2, _ := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1})
		j2 := g2.Begin(200)
		if got := j2.PrefillEnd().Sub(j2.BeganAt()); got == 2*105*time.Millisecond {
			t.Fatal("prefill length proportional to the prompt")
		}
	})
	t.Run("batched", func(t *testing.T) {
		g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, Devices: 2})
		a, b := g.Begin(0), g.Begin(0)
		at(clk, 80)
		a.End()
		b.End()
		// Each: half of 2 × 100 W idle, and 2 boards × 300 W / √2.
		want := (100.0 + 2*300/math.Sqrt2) * 80
		for _, j := range []*simgpu.Job{a, b} {
			if got := j.TrueEnergyMJ(); math.Abs(got-want) > 1e-6 {
				t.Fatalf("truth %v mJ, want %v", got, want)
			}
		}
	})
	t.Run("early tokens", func(t *testing.T) {
		g, clk := newGPU(t, simgpu.Config{PrefillSpread: -1, PrefillPowerSpread: -1, JoulesPerToken: 1, Decode: simgpu.DecodePerToken})
		j := g.Begin(0)
		at(clk, 30)
		j.Tokens(1)
		if got, want := j.PrefillEnd(), epoch.Add(30*time.Millisecond); !got.Equal(want) {
			t.Fatalf("PrefillEnd = %v, want %v", got, want)
		}
		at(clk, 80)
		j.End()
		// 400 W × 30 ms + 100 W × 50 ms + 1 J.
		if got, want := j.TrueEnergyMJ(), 12_000.0+5_000+1_000; math.Abs(got-want) > 1e-6 {
			t.Fatalf("truth %v mJ, want %v", got, want)
		}
	})
	t.Run("spread", func(t *testing.T) {
		// Same prompt, different jobs: different lengths and energies, and
		// prefill energy per prompt token varies with the prompt.
		g, clk := newGPU(t, simgpu.Config{Seed: 9})
		lengths := map[time.Duration]bool{}
		var perToken []float64
		for _, n := range []int{100, 100, 100, 1000, 1000, 4000} {
			j := g.Begin(n)
			clk.Set(j.PrefillEnd())
			j.End()
			d := j.PrefillEnd().Sub(j.BeganAt())
			lengths[d] = true
			idle := 100 * float64(d) / 1e6
			prefill := j.TrueEnergyMJ() - idle
			if prefill <= 0 {
				t.Fatalf("no prefill energy for %d tokens", n)
			}
			perToken = append(perToken, prefill/float64(n))
		}
		if len(lengths) < 6 {
			t.Fatalf("prefill lengths repeat: %v", lengths)
		}
		lo, hi := slices.Min(perToken), slices.Max(perToken)
		if hi < 2*lo {
			t.Fatalf("prefill mJ per prompt token nearly fixed: %v", perToken)
		}
	})
}

func TestIdealized(t *testing.T) {
	c := simgpu.Idealized(simgpu.Config{})
	if !c.NoPrefill || !c.TokensAtRead || c.Phase != 100*time.Millisecond || c.IdleWatts != 60 ||
		c.JoulesPerToken != 0.3 || math.Abs(c.JoulesPerInputToken-0.03) > 1e-15 {
		t.Fatalf("Idealized = %+v", c)
	}
	g, clk := newGPU(t, c)
	at(clk, 50)
	j := g.Begin(10) // 0.3 J now
	if !j.PrefillEnd().Equal(j.BeganAt()) {
		t.Fatal("an idealized job has a prefill")
	}
	at(clk, 220)
	j.Tokens(5) // 1.5 J, after the 200 ms step and before the read that sees it
	at(clk, 250)
	// The old simulator: 60 W × 200 ms + 5 × 0.3 J + 10 × 0.03 J.
	if got, want := read(t, g, 0), uint64(initial+12_000+1_500+300); got != want {
		t.Fatalf("read at 250 ms = %d, want %d", got, want)
	}
	at(clk, 260)
	j.Tokens(2)
	at(clk, 270)
	if got, want := read(t, g, 0), uint64(initial+13_800); got != want {
		t.Fatalf("read at 270 ms = %d, want %d (no step since)", got, want)
	}
	at(clk, 310)
	if got, want := read(t, g, 0), uint64(initial+18_000+2_100+300); got != want {
		t.Fatalf("read at 310 ms = %d, want %d", got, want)
	}
}

func TestDeterminism(t *testing.T) {
	run := func(seed uint64) ([]uint64, []float64) {
		g, clk := newGPU(t, simgpu.Config{Devices: 2, GainSpread: 0.05, Noise: 0.2, UpdateJitter: 10 * time.Millisecond, Seed: seed})
		jobs, reads := workload(t, g, clk, 1, 5*time.Second)
		var truth []float64
		for _, j := range jobs {
			truth = append(truth, j.TrueEnergyMJ())
		}
		return reads, truth
	}
	r1, t1 := run(42)
	r2, t2 := run(42)
	if !slices.Equal(r1, r2) || !slices.Equal(t1, t2) {
		t.Fatal("same seed, different runs")
	}
	r3, t3 := run(43)
	if slices.Equal(r1, r3) || slices.Equal(t1, t3) {
		t.Fatal("different seeds, same run")
	}
}

func TestGPUConcurrentSafe(t *testing.T) {
	var ns atomic.Int64
	now := func() time.Time { return epoch.Add(time.Duration(ns.Load())) }
	g, err := simgpu.New(simgpu.Config{Devices: 2, Now: now, Noise: 0.1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		jobs []*simgpu.Job
		done atomic.Bool
	)
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				j := g.Begin(i + w)
				_ = j.PrefillEnd()
				j.Tokens(3)
				_ = j.TrueEnergyMJ()
				j.End()
				mu.Lock()
				jobs = append(jobs, j)
				mu.Unlock()
			}
		})
	}
	var reader sync.WaitGroup
	reader.Go(func() {
		for !done.Load() {
			for i := range 2 {
				if _, err := g.ReadEnergy(i); err != nil {
					t.Error(err)
					return
				}
			}
			_ = g.UnownedEnergyMJ()
			ns.Add(int64(time.Millisecond))
		}
	})
	wg.Wait()
	done.Store(true)
	reader.Wait()
	checkConservation(t, g, jobs)
}
