package otelenergy

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/simgpu"
)

// A burst of requests that start together and end within a short window of
// each other, on an idle board (the requests run no jobs on the simulated
// GPU, as otelenergy-proxy -simulate does): the static power the last of
// them get grows as the others end, so End's estimate must price the time
// after its last provisional split with the share a request gets among
// the requests still running, not with the share it got before.

// burstFigures is End's estimate against the final figure over a burst.
type burstFigures struct {
	n                     int
	meanAbsPct, signedPct float64
	lowFrac               float64 // fraction of estimates below the final figure
	// The final figure's and the estimate's signed error against the
	// ground truth, in %: the idle power shared equally among the
	// requests running at every instant.
	finalTruthPct, estTruthPct float64
}

// runBurst runs a warm-up burst, a 10 s idle gap, then the measured burst
// of n requests that start together and last about length each, their ends
// spread uniformly over spread; each streams tokens at tokRate. It
// returns the measured burst's End estimates against their final figures.
func runBurst(tb testing.TB, n int, length, spread time.Duration, tokRate float64, seed uint64) burstFigures {
	tb.Helper()
	clock := fakeclock.New(fakeclock.Epoch())
	t0 := clock.Now()
	gpu, err := simgpu.New(simgpu.Config{Seed: seed, Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	mon, err := NewMonitor(gpu, WithClock(clock.Now), WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		tb.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	rng := rand.New(rand.NewPCG(seed, 0xb0757))
	interval := DefaultInterval.Milliseconds()
	type burstReq struct {
		req        *Request
		end        int64 // ms
		next, step float64
		estimate   uint64
		measured   bool
	}
	var live, done []*burstReq
	start := func(ms int64, measured bool) {
		for range n {
			r := &burstReq{
				req:      mon.StartRequest(context.Background()),
				end:      ms + length.Milliseconds() + rng.Int64N(spread.Milliseconds()+1),
				step:     1000 / tokRate,
				measured: measured,
			}
			r.next = float64(ms) + 20 + rng.Float64()*r.step // a short prefill
			live = append(live, r)
		}
	}
	const warm, gap = 1000, 10_000
	measuredAt := int64(warm) + length.Milliseconds() + spread.Milliseconds() + gap
	horizon := int64(ledgerHorizonMS) + 2000
	stop := measuredAt + length.Milliseconds() + spread.Milliseconds() + horizon
	for ms := int64(0); ms <= stop; ms++ {
		clock.Set(t0.Add(time.Duration(ms) * time.Millisecond))
		switch ms {
		case warm:
			start(ms, false)
		case measuredAt:
			start(ms, true)
		}
		kept := live[:0]
		for _, r := range live {
			k := 0
			for r.next <= float64(ms) && ms < r.end {
				k++
				r.next += r.step
			}
			if k > 0 {
				mon.AddTokens(r.req, k)
			}
			if ms >= r.end {
				r.estimate = r.req.End().EnergyMJ
				done = append(done, r)
				continue
			}
			kept = append(kept, r)
		}
		live = kept
		if ms%interval == 0 {
			mon.Sample()
		}
	}
	// The ground truth: the measured requests all start at measuredAt, so
	// between consecutive ends the idle power is shared by those left.
	var ends []int64
	for _, r := range done {
		if r.measured {
			ends = append(ends, r.end)
		}
	}
	slices.Sort(ends)
	truthAt := map[int64]float64{}
	var acc float64
	prev := measuredAt
	for k, e := range ends {
		acc += float64(e-prev) * simgpu.DefaultIdleWatts / float64(len(ends)-k) // ms·W = mJ
		prev = e
		truthAt[e] = acc
	}
	var f burstFigures
	var low int
	for _, r := range done {
		if !r.measured {
			continue
		}
		st := r.req.st
		if !st.Final() {
			tb.Fatalf("request ending at %d ms not final at %d ms", r.end, stop)
		}
		final := float64(st.EnergyMJ())
		if final <= 0 {
			tb.Fatalf("request ending at %d ms got no energy", r.end)
		}
		e := (float64(r.estimate) - final) / final * 100
		if os.Getenv("OTELENERGY_BURST_DEBUG") != "" {
			tb.Logf("end %d ms: estimate %d final %.0f (%+.1f%%) truth %.0f", r.end-measuredAt, r.estimate, final, e, truthAt[r.end])
		}
		truth := truthAt[r.end]
		f.finalTruthPct += (final - truth) / truth * 100
		f.estTruthPct += (float64(r.estimate) - truth) / truth * 100
		f.n++
		f.meanAbsPct += math.Abs(e)
		f.signedPct += e
		if e < 0 {
			low++
		}
	}
	if f.n == 0 {
		tb.Fatal("no measured request")
	}
	f.meanAbsPct /= float64(f.n)
	f.signedPct /= float64(f.n)
	f.lowFrac = float64(low) / float64(f.n)
	f.finalTruthPct /= float64(f.n)
	f.estTruthPct /= float64(f.n)
	return f
}

// TestEstimateBurstEnd holds End's estimate to the final figure when many
// requests end at about the same time: neither biased (the mean signed
// error) nor far off (the mean absolute error); and the final figure to
// the ground truth, which the split of an interval in which many requests
// end must give the last of them (and not the idle time after them). Each
// bound is the figure measured, pooled over seeds, with a margin.
func TestEstimateBurstEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates half a minute of serving per seed")
	}
	for _, c := range []struct {
		name              string
		length, spread    time.Duration
		maxAbs, maxSigned float64
	}{
		{"2s-ends-in-100ms", 2 * time.Second, 100 * time.Millisecond, 0.6, 0.5},
		{"300ms-ends-in-100ms", 300 * time.Millisecond, 100 * time.Millisecond, 2, 1.5},
		{"2s-ends-in-10ms", 2 * time.Second, 10 * time.Millisecond, 0.5, 0.5},
		{"300ms-ends-in-10ms", 300 * time.Millisecond, 10 * time.Millisecond, 1.5, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f burstFigures
			seeds := []uint64{1, 2, 3}
			if os.Getenv("OTELENERGY_BURST_DEBUG") != "" {
				seeds = seeds[:1]
			}
			for _, s := range seeds {
				g := runBurst(t, 100, c.length, c.spread, 100, s)
				t.Logf("seed %d: n=%d estimate vs final: mean abs %.2f%%, signed %+.2f%%, %.0f%% low; vs truth: final %+.2f%%, estimate %+.2f%%",
					s, g.n, g.meanAbsPct, g.signedPct, 100*g.lowFrac, g.finalTruthPct, g.estTruthPct)
				f.n += g.n
				f.meanAbsPct += g.meanAbsPct / float64(len(seeds))
				f.signedPct += g.signedPct / float64(len(seeds))
				f.lowFrac += g.lowFrac / float64(len(seeds))
				f.finalTruthPct += g.finalTruthPct / float64(len(seeds))
				f.estTruthPct += g.estTruthPct / float64(len(seeds))
			}
			t.Logf("pooled: n=%d estimate vs final: mean abs %.2f%%, signed %+.2f%%, %.0f%% low; vs truth: final %+.2f%%, estimate %+.2f%%",
				f.n, f.meanAbsPct, f.signedPct, 100*f.lowFrac, f.finalTruthPct, f.estTruthPct)
			if math.Abs(f.finalTruthPct) > 0.5 {
				t.Errorf("final figure vs the ground truth: signed %+.2f%%, bound ±0.5%%", f.finalTruthPct)
			}
			if f.meanAbsPct > c.maxAbs || math.Abs(f.signedPct) > c.maxSigned {
				t.Errorf("estimate vs final: mean abs %.2f%% signed %+.2f%%, bounds %.1f%% and ±%.1f%%", f.meanAbsPct, f.signedPct, c.maxAbs, c.maxSigned)
			}
		})
	}
}
