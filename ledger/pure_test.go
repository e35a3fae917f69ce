package ledger

import (
	"math"
	"reflect"
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

// TestSplitLeavesModelUnchanged: the split (the features, the weighing
// and the division) and the provisional split read the model and the
// requests and write neither: a copy of both taken before is equal to
// them after. The model is learned first, on requests in prefill and
// decoding, so that every term the weighing reads is set.
func TestSplitLeavesModelUnchanged(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 10_000 * ms})
	g.step(0, 0, nil)
	g.idle(20*ms, 3000*ms, 2000)
	var rs []*Account
	for i := range 6 {
		r := newAccount(3000*ms+int64(i)*50*ms, nil)
		r.AddInput(uint64(200 * (i + 1)))
		r.AddCached(uint64(50 * i))
		g.l.Add(r)
		rs = append(rs, r)
	}
	for t0 := 3020 * ms; t0 <= 6000*ms; t0 += 20 * ms {
		for i, r := range rs {
			if t0 > r.start+int64(100+50*i)*ms {
				r.AddOutput(1)
			}
		}
		g.step(t0, 6000, nil)
	}
	if !g.l.model.devs[0].usable {
		t.Fatal("no model learned")
	}
	before := snapshot(g.l)
	d := &g.l.devs[0]
	f, wg, shares, rest := g.l.divideInterval(d, interval{T0: 5800 * ms, T1: 5820 * ms, EnergyMJ: 6000}, 6000)
	if len(f.parts) != len(rs) || sumU(shares)+rest != 6000 || wg.by != byWeight {
		t.Fatalf("split %d parts, shares %v + rest %d, by %d: want all six weighed by the model", len(f.parts), shares, rest, wg.by)
	}
	if after := snapshot(g.l); !reflect.DeepEqual(before, after) {
		t.Fatalf("the split changed the model or the requests:\nbefore %+v\nafter  %+v", before, after)
	}
}

// stateCopy is what a split must not change: the model stage and the
// requests' timelines, copied.
type stateCopy struct {
	Model    model
	Devs     []devModel
	Timeline []sampled
	Points   [][]point
}

func snapshot(l *Ledger) stateCopy {
	c := stateCopy{Model: l.model, Devs: append([]devModel(nil), l.model.devs...)}
	c.Model.devs = nil
	for _, r := range l.reqs.active {
		s := r.st
		c.Points = append(c.Points, append([]point(nil), s.pts...))
		s.pts = nil
		c.Timeline = append(c.Timeline, s)
	}
	return c
}

// TestCachedTokensCostNoPrefill: prompt tokens served from the prefix
// cache are no prefill work. Two requests in prefill together for the
// same 100 ms with prompts of 1,000 tokens, of which one had 800 cached,
// share the modelled prefill energy by their uncached tokens: 1000 to
// 200.
func TestCachedTokensCostNoPrefill(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	d := &g.l.devs[0]
	d.ivs.split.Advance(0, ring.Point{}) // the split cursor has passed a point
	g.l.model.devs[0].usable, g.l.model.devs[0].ready = true, true
	g.l.model.devs[0].theta[fPrefillBusy] = 300
	mk := func(cached uint64) *Account {
		r := newAccount(0, nil)
		r.AddInput(1000)
		r.AddCached(cached)
		r.st = sampled{known: 400e6, pfEnd: 200e6, step: 40e6}
		u := r.uncached()
		r.st.pts = append(r.st.inline[:0], point{t: 0, in: u}, point{t: 240e6, out: 1, in: u}, point{t: 400e6, out: 5, in: u})
		g.l.reqs.active = append(g.l.reqs.active, r)
		return r
	}
	full, cached := mk(0), mk(800)
	g.l.split(d, interval{T0: 0, T1: 100e6, EnergyMJ: 30_000}, 400e6, true)
	if got, want := full.EnergyMJ(), uint64(30_000*1000/1200); absDiff(got, want) > 1 {
		t.Errorf("the uncached prompt got %d mJ, want %d", got, want)
	}
	if got, want := cached.EnergyMJ(), uint64(30_000*200/1200); absDiff(got, want) > 1 {
		t.Errorf("the mostly cached prompt got %d mJ, want %d", got, want)
	}
}

// TestObserveCountsUncachedInput: the sampler notes a request's input as
// the tokens its server prefilled, the reported input less the cached,
// also when the cached count comes after the prompt (a proxy that reads
// both from a final usage reports them one after the other).
func TestObserveCountsUncachedInput(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	r.AddInput(1000)
	g.l.Observe(10e6, 0, 0)
	if got := r.st.last().in; got != 1000 {
		t.Fatalf("input noted %d, want 1000", got)
	}
	r.AddCached(700)
	g.l.Observe(20e6, 0, 0)
	if got := r.st.last(); got.in != 300 {
		t.Fatalf("after 700 cached: noted %+v, want 300 uncached", got)
	}
}

// TestEstimateShortRequest: a request shorter than a counter period,
// which starts after the newest step and ends before the next, is
// estimated at End for its own work at the newest interval's prices: its
// share of the static power among those running, its prefill at one
// prefill's power while nothing else is in prefill, and its tokens.
func TestEstimateShortRequest(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	other := newAccount(1, nil)
	g.l.Add(other)
	g.step(1e8, 10_000, nil)
	g.step(2e8, 10_000, nil)
	// 100 W static, 300 W for a prefill alone, 0.5 J per output token;
	// the prefill time is 40 ms per thousand uncached tokens.
	setPrices(g.l, prices{staticW: 100, pfLoneW: 300, pfAddW: 100, tokJ: 0.5})
	g.l.est.pfCoef[1].Store(math.Float64bits(0.04))
	g.l.est.pfCoefOK.Store(true)
	r := newAccount(2.1e8, nil)
	g.l.Add(r)
	r.AddInput(1500)
	r.AddCached(500)
	r.AddOutput(10)
	g.l.End(r, 2.9e8)
	got := float64(g.l.Estimate(r, 2.9e8))
	// 80 ms: half the static power beside the other request (4 J), a
	// 40 ms prefill of 1,000 uncached tokens alone at 300 W (12 J), and
	// 10 tokens (5 J).
	if want := 4000.0 + 12_000 + 5000; math.Abs(got-want) > 0.02*want {
		t.Fatalf("estimate %.0f mJ, want %.0f", got, want)
	}
}

// TestKeptFeaturesAreTheSplits: the build learn keeps for the split of
// the same interval is the build the split would make. The vector does
// not depend on whether the shares are set, so learning from the kept
// build learns what a build without shares gives; and the split of the
// kept interval divides its energy exactly as a fresh build does.
func TestKeptFeaturesAreTheSplits(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 10_000 * ms})
	g.step(0, 0, nil)
	g.idle(20*ms, 3000*ms, 2000)
	var rs []*Account
	for i := range 80 { // beyond maxLagSearch: the busy path
		r := newAccount(3000*ms+int64(i)*7*ms, nil)
		r.AddInput(uint64(100 * (i%7 + 1)))
		g.l.Add(r)
		rs = append(rs, r)
	}
	for t0 := 3020 * ms; t0 <= 4000*ms; t0 += 20 * ms {
		for i, r := range rs {
			if t0 > r.start+int64(40+10*(i%5))*ms && i%3 != 0 {
				r.AddOutput(1)
			}
		}
		g.step(t0, 6000, nil)
	}
	l, d := g.l, &g.l.devs[0]
	// Prefill priced, so that the split reads each part's prefill share.
	l.model.devs[0].theta[fPrefill], l.model.devs[0].theta[fPrefillBusy] = 50, 100
	for _, usable := range []bool{false, true} {
		l.model.devs[0].usable, l.model.devs[0].ready = usable, usable
		for _, iv := range []interval{{T0: 3900 * ms, T1: 3920 * ms, EnergyMJ: 6000}, {T0: 3300 * ms, T1: 3313 * ms, EnergyMJ: 1234}} {
			lag := l.model.lag(0)
			q, m := &l.reqs, &l.model
			plain := buildFeatures(q.active, &q.unowned.st, m, iv.T0-lag, iv.T1-lag, m.shift, false, false, &l.buf.feat).x
			if x := l.keep(d, iv, lag); x != plain {
				t.Fatalf("usable %v, %v: kept vector %v, without shares %v", usable, iv, x, plain)
			}
			if n := len(l.buf.kept.f.parts); n < 10 {
				t.Fatalf("%v: %d requests active in it, want the busy rig's", iv, n)
			}
			_, _, kept, keptRest := l.divideInterval(d, iv, iv.EnergyMJ)
			kept = append([]uint64(nil), kept...)
			if l.buf.kept.ok {
				t.Fatal("the kept build was not used by the split")
			}
			_, _, fresh, freshRest := l.divideInterval(d, iv, iv.EnergyMJ)
			if !reflect.DeepEqual(kept, fresh) || keptRest != freshRest || sumU(kept)+keptRest != iv.EnergyMJ {
				t.Fatalf("usable %v, %v: kept split %v + %d, fresh %v + %d", usable, iv, kept, keptRest, fresh, freshRest)
			}
		}
	}
}
