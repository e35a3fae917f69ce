package ledger

import (
	"math/rand/v2"
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

// TestIntervalsStep walks the intervals stage through a table of steps on
// a ring of three visible points: learning waits for minKnown or the
// horizon, splitting never passes learning and waits while told to, an
// interval longer than maxLen is passed over by learning but still split,
// and a ring that laps the cursors yields the energy in between as one
// interval.
func TestIntervalsStep(t *testing.T) {
	r, err := ring.New(4)
	if err != nil {
		t.Fatal(err)
	}
	v := intervals{ring: r}
	push := func(tm int64, e uint64) {
		if err := r.Push(ring.Point{T: tm, EnergyMJ: e}); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		iv    interval
		flag  bool // teach or split
		moved bool
	}
	learn := func(minKnown, now int64) got {
		iv, teach, ok := v.nextLearn(minKnown, now, 1000, 500)
		return got{iv, teach, ok}
	}
	split := func(wait bool, now int64) got {
		iv, s, ok := v.nextSplit(wait, now, 1000)
		return got{iv, s, ok}
	}
	none := got{}
	steps := []struct {
		name string
		do   func() got
		want got
	}{
		{"nothing pushed", func() got { return learn(0, 0) }, none},
		{"first point starts the walk", func() got { push(100, 10); return learn(0, 0) }, got{interval{T0: 0, T1: 100, EnergyMJ: 10}, false, true}},
		{"split cannot pass learning", func() got { push(200, 30); return split(false, 0) }, got{interval{T0: 0, T1: 100, EnergyMJ: 10}, false, true}},
		{"nothing learned past 100", func() got { return split(false, 0) }, none},
		{"reports not past 200: wait", func() got { return learn(150, 300) }, none},
		{"reported past 200", func() got { return learn(200, 300) }, got{interval{T0: 100, T1: 200, EnergyMJ: 20}, true, true}},
		{"a young model waits", func() got { return split(true, 300) }, none},
		{"up to the horizon", func() got { return split(true, 1201) }, got{interval{T0: 100, T1: 200, EnergyMJ: 20}, true, true}},
		{"a stall is not taught", func() got { push(900, 100); return learn(900, 900) }, got{interval{T0: 200, T1: 900, EnergyMJ: 70}, false, true}},
		{"but it is split", func() got { return split(false, 900) }, got{interval{T0: 200, T1: 900, EnergyMJ: 70}, true, true}},
		{"the ring laps the cursors", func() got {
			for k := range int64(5) {
				push(1000+100*k, 200+uint64(k)*10)
			}
			return learn(1<<40, 2000)
		}, got{interval{T0: 900, T1: 1200, EnergyMJ: 120}, true, true}},
		{"and splitting", func() got { return split(false, 2000) }, got{interval{T0: 900, T1: 1200, EnergyMJ: 120}, true, true}},
	}
	for _, st := range steps {
		if g := st.do(); g != st.want {
			t.Fatalf("%s: got %+v, want %+v", st.name, g, st.want)
		}
	}
	if through, stalled := v.splitThrough(0, 2000, 1000); through != 1200 || stalled {
		t.Errorf("split through %d (stalled %v), want 1200 and not stalled: points are pending", through, stalled)
	}
	for {
		if _, _, ok := v.nextLearn(1<<40, 2000, 1000, 500); !ok {
			break
		}
	}
	for {
		if _, _, ok := v.nextSplit(false, 2000, 1000); !ok {
			break
		}
	}
	if through, stalled := v.splitThrough(0, 2401, 1000); through != 1400 || !stalled {
		t.Errorf("split through %d (stalled %v), want 1400 and stalled past the horizon", through, stalled)
	}
}

// FuzzIntervalsTile pushes random points into a small ring, which laps
// the cursors, and drains the stage at random readiness: the intervals
// each cursor yields tile the time from its first point on, their
// energies sum to the ring's energy since it, the split cursor passes the
// learning one only where the ring lapped both, and the pending intervals the provisional
// split would see hold exactly the energy not split yet.
func FuzzIntervalsTile(f *testing.F) {
	f.Add(uint64(1), uint16(100))
	f.Add(uint64(2), uint16(1000))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		rng := rand.New(rand.NewPCG(seed, 0x1f))
		r, err := ring.New(8)
		if err != nil {
			t.Fatal(err)
		}
		v := intervals{ring: r}
		var tm int64
		var e uint64
		type walk struct {
			started      bool
			firstT, endT int64
			firstE, sumE uint64
		}
		var lw, sw walk
		energyAt := map[int64]uint64{} // every point pushed, by its time
		note := func(w *walk, iv interval, first bool) {
			if first {
				// The first point yields the interval ending there, from 0.
				w.started, w.firstT, w.endT, w.firstE = true, iv.T1, iv.T1, iv.EnergyMJ
				return
			}
			if iv.T0 != w.endT {
				t.Fatalf("interval (%d, %d] does not follow the previous one, ending at %d", iv.T0, iv.T1, w.endT)
			}
			w.endT = iv.T1
			w.sumE += iv.EnergyMJ
		}
		for range int(steps%2000) + 1 {
			switch rng.IntN(4) {
			case 0, 1:
				tm += 1 + rng.Int64N(50)
				e += rng.Uint64N(1000)
				if err := r.Push(ring.Point{T: tm, EnergyMJ: e}); err != nil {
					t.Fatal(err)
				}
				energyAt[tm] = e
			case 2:
				minKnown, now := tm-rng.Int64N(200), tm+rng.Int64N(100)
				for {
					iv, _, ok := v.nextLearn(minKnown, now, 100, 1<<40)
					if !ok {
						break
					}
					note(&lw, iv, !lw.started)
				}
			default:
				wait := rng.IntN(2) == 0
				for {
					lapped := v.split.Index() < r.Oldest()
					iv, split, ok := v.nextSplit(wait, tm+rng.Int64N(200), 100)
					if !ok {
						break
					}
					if split != sw.started {
						t.Fatalf("split %v on a walk started %v", split, sw.started)
					}
					note(&sw, iv, !sw.started)
					// Splitting passes learning only where the ring lapped
					// it: the points in between are gone, it resumes at the
					// ring's oldest point, and learning will too.
					if sw.endT > lw.endT && !lapped {
						t.Fatalf("split through %d, past learning's %d", sw.endT, lw.endT)
					}
				}
			}
			for _, w := range []walk{lw, sw} {
				// Energies are pushed non-decreasing: the intervals hold
				// all of it between the walk's first and last points.
				if w.started && w.firstE+w.sumE != energyAt[w.endT] {
					t.Fatalf("intervals hold %d mJ since the first point's %d, the ring %d at %d", w.sumE, w.firstE, energyAt[w.endT], w.endT)
				}
			}
			if sw.started {
				var pend uint64
				end := v.pending(1+rng.IntN(4), func(iv interval) { pend += iv.EnergyMJ })
				if end != tm || pend != e-(sw.firstE+sw.sumE) {
					t.Fatalf("pending through %d with %d mJ, want %d with %d", end, pend, tm, e-(sw.firstE+sw.sumE))
				}
			}
		}
	})
}
