package cputime

import (
	"math"
	"math/big"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name              string
		e, busy, total    uint64
		ticks             []uint64
		want              []uint64
		idle, unattribute uint64
	}{
		// 4 CPUs over 1 s at 100 Hz: 400 ticks, 300 busy; 1000 mJ.
		// Idle 250; active 750 over 300 busy ticks: 2.5 mJ a tick.
		{"shares of busy time", 1000, 300, 400, []uint64{120, 60}, []uint64{300, 150}, 250, 300},
		{"no process", 1000, 300, 400, nil, nil, 250, 750},
		{"all idle", 1000, 0, 400, []uint64{0}, []uint64{0}, 1000, 0},
		{"no CPU time read", 1000, 0, 0, []uint64{10}, []uint64{0}, 0, 1000},
		// The processes' ticks add up past the node's busy ticks: they
		// share the active part by their own ticks.
		{"processes past busy", 900, 100, 100, []uint64{100, 50}, []uint64{600, 300}, 0, 0},
		// 10 mJ over 3 equal processes: the cumulative floors give the
		// remainder to a process, not to the unattributed energy.
		{"remainder given", 10, 3, 3, []uint64{1, 1, 1}, []uint64{3, 3, 4}, 0, 0},
		{"busy above total", 100, 500, 400, []uint64{400}, []uint64{100}, 0, 0},
		{"no overflow", math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64, []uint64{math.MaxUint64 - 1},
			[]uint64{math.MaxUint64 - 1}, 1, 0},
		// The Monitor's host share sets no idle part apart: total = busy.
		{"no idle part", 1000, 400, 400, []uint64{100}, []uint64{250}, 0, 750},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.ticks))
			idle, un := Split(tt.e, tt.busy, tt.total, tt.ticks, out)
			if idle != tt.idle || un != tt.unattribute {
				t.Errorf("idle, unattributed = %d, %d; want %d, %d", idle, un, tt.idle, tt.unattribute)
			}
			for i := range out {
				if out[i] != tt.want[i] {
					t.Errorf("out = %v, want %v", out, tt.want)
					break
				}
			}
		})
	}
}

// FuzzSplit checks Split against exact rationals: the idle part is the
// floor of its rational share, each tree's part within one mJ of its
// exact share of the active rest, and the parts add up to e. (Package
// split checks the cumulative floors themselves.)
func FuzzSplit(f *testing.F) {
	f.Add(uint64(1000), uint64(300), uint64(400), uint32(120), uint32(60), uint32(0))
	f.Add(uint64(math.MaxUint64), uint64(1), uint64(2), uint32(math.MaxUint32), uint32(1), uint32(7))
	f.Fuzz(func(t *testing.T, e, busy, total uint64, t0, t1, t2 uint32) {
		ticks := []uint64{uint64(t0), uint64(t1), uint64(t2)}
		out := make([]uint64, 3)
		idle, un := Split(e, busy, total, ticks, out)
		sum := new(big.Int).SetUint64(idle)
		sum.Add(sum, new(big.Int).SetUint64(un))
		for _, o := range out {
			sum.Add(sum, new(big.Int).SetUint64(o))
		}
		if sum.Cmp(new(big.Int).SetUint64(e)) != 0 {
			t.Fatalf("parts add to %v, want %d", sum, e)
		}
		if total == 0 {
			if un != e {
				t.Fatalf("with no CPU time, unattributed %d of %d", un, e)
			}
			return
		}
		b := min(busy, total)
		E := new(big.Int).SetUint64(e)
		wantIdle := new(big.Int).Quo(new(big.Int).Mul(E, new(big.Int).SetUint64(total-b)), new(big.Int).SetUint64(total)).Uint64()
		if idle != wantIdle {
			t.Fatalf("idle %d, want %d", idle, wantIdle)
		}
		den := max(b, uint64(t0)+uint64(t1)+uint64(t2))
		for i, tk := range ticks {
			if den == 0 {
				if out[i] != 0 {
					t.Fatalf("out[%d] = %d with no busy time", i, out[i])
				}
				continue
			}
			exact := new(big.Rat).SetFrac(new(big.Int).Mul(new(big.Int).SetUint64(e-idle), new(big.Int).SetUint64(tk)), new(big.Int).SetUint64(den))
			diff := new(big.Rat).Sub(new(big.Rat).SetUint64(out[i]), exact)
			if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("out[%d] = %d, exact %s", i, out[i], exact.FloatString(3))
			}
		}
	})
}

// TestShareCarries pins the carried fraction: windows whose exact share
// is half a millijoule each give one millijoule every second window, so
// the total never falls a whole millijoule behind the exact sum nor runs
// ahead of it.
func TestShareCarries(t *testing.T) {
	var s Share
	for w := 1; w <= 8; w++ {
		got := s.Add(1, 1, 2) // 0.5 mJ
		if want := uint64(w / 2); got != want || s.MJ() != want {
			t.Fatalf("window %d: %d mJ, want %d", w, got, want)
		}
	}
	// Thirds: 1/3 + 1/3 + 1/3 make one millijoule at the third window,
	// within float rounding of the exact 1.
	var th Share
	for w := 1; w <= 9; w++ {
		th.Add(1, 1, 3)
	}
	if th.MJ() < 2 || th.MJ() > 3 {
		t.Fatalf("nine thirds gave %d mJ, want 3 (or 2 when the float sum falls just short)", th.MJ())
	}
	if got := s.Add(1000, 5, 0); got != 4 {
		t.Fatalf("a window of no node time added: %d", got)
	}
	if got := s.Add(100, 9, 3); got != 104 {
		t.Fatalf("a tree above the node: %d, want the whole 100 added", got)
	}
}

// FuzzShare checks the carried total against the exact sum of the
// windows' rational shares: never above it, and less than one millijoule
// (plus float rounding over the windows) below it.
func FuzzShare(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s Share
		exact := new(big.Rat)
		n := 0
		for i := 0; i+2 < len(raw); i += 3 {
			delta, tree, node := uint64(raw[i])<<8, uint64(raw[i+1]), uint64(raw[i+2])
			s.Add(delta, tree, node)
			if node > 0 {
				exact.Add(exact, new(big.Rat).SetFrac(new(big.Int).SetUint64(delta*min(tree, node)), new(big.Int).SetUint64(node)))
			}
			n++
		}
		got := new(big.Rat).SetUint64(s.MJ())
		slack := new(big.Rat).SetFrac64(int64(n)+1, 1<<30)
		if hi := new(big.Rat).Add(exact, slack); got.Cmp(hi) > 0 {
			t.Fatalf("%d mJ runs ahead of the exact %s", s.MJ(), exact.FloatString(6))
		}
		if lo := new(big.Rat).Sub(exact, new(big.Rat).Add(big.NewRat(1, 1), slack)); got.Cmp(lo) <= 0 {
			t.Fatalf("%d mJ falls a millijoule behind the exact %s", s.MJ(), exact.FloatString(6))
		}
	})
}
