package ledger

import (
	"math"
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

// TestPrefillSharesByInputRate: requests in prefill together share the
// modelled prefill energy by the input tokens each processes per second of
// its prefill, so a prompt ten times longer over the same time takes ten
// times the share, and one half as long in the same prefill time half.
func TestPrefillSharesByInputRate(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	d := &g.l.devs[0]
	d.ivs.split.Advance(0, ring.Point{}) // the split cursor has passed a point
	g.l.model.devs[0].usable, g.l.model.devs[0].ready = true, true
	g.l.model.devs[0].theta[fPrefillBusy] = 300 // W while anything is in prefill
	mk := func(in uint64) *Account {
		r := newAccount(0, nil)
		r.st = sampled{known: 400e6, pfEnd: 200e6, step: 40e6}
		r.st.pts = append(r.st.inline[:0], point{t: 0, in: in}, point{t: 240e6, out: 1, in: in}, point{t: 400e6, out: 5, in: in})
		g.l.reqs.active = append(g.l.reqs.active, r)
		return r
	}
	long, short := mk(1000), mk(100)
	// (0, 100 ms] holds only prefill: 300 W × 100 ms.
	g.l.split(d, interval{T0: 0, T1: 100e6, EnergyMJ: 30_000}, 400e6, true)
	if got, want := long.EnergyMJ(), uint64(30_000*10/11); absDiff(got, want) > 1 {
		t.Errorf("the long prompt got %d mJ, want %d", got, want)
	}
	if got, want := short.EnergyMJ(), uint64(30_000/11); absDiff(got, want) > 1 {
		t.Errorf("the short prompt got %d mJ, want %d", got, want)
	}
	if got := long.EnergyMJ() + short.EnergyMJ() + g.l.Unattributed(); got != 30_000 {
		t.Errorf("conservation: %d mJ of 30000", got)
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestPrefillEndsAStepBeforeTheFirstToken: a streaming request's prefill
// ends one decode step before its first token, the step timed by its next
// reports, and FirstToken reports the token itself.
func TestPrefillEndsAStepBeforeTheFirstToken(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	r := newAccount(0, nil)
	g.l.Add(r)
	r.AddInput(500)
	// Reads every 10 ms; the first token is produced at 305 ms, then one
	// every 30 ms. A report seen at a read is placed mid-interval.
	const first, step = 305e6, 30e6
	next := int64(first)
	for t0 := int64(0); t0 <= 600e6; t0 += 10e6 {
		for next <= t0 {
			r.AddOutput(1)
			next += step
		}
		g.l.Observe(t0, 0, 0)
	}
	s := &r.st
	if s.pfEnd < 0 {
		t.Fatal("no prefill end placed")
	}
	// Report times are known to within half a read interval, and the step
	// from three tokens' reports.
	if got, want := float64(s.pfEnd), float64(first-step); math.Abs(got-want) > 6e6 {
		t.Errorf("prefill ends at %.0f ms, want %.0f ms", got/1e6, want/1e6)
	}
	if ft, ok := r.FirstToken(); !ok || math.Abs(float64(ft)-first) > 6e6 {
		t.Errorf("FirstToken = %v, %v; want about %d ms", ft, ok, int64(first/1e6))
	}
	if got := float64(s.step); math.Abs(got-step) > 3e6 {
		t.Errorf("decode step %.1f ms, want %.0f ms", got/1e6, float64(step)/1e6)
	}
}
