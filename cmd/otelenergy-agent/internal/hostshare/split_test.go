package hostshare_test

import (
	"math"
	"math/big"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
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
		// Rounding down: 10 mJ over 3 equal processes.
		{"remainder unattributed", 10, 3, 3, []uint64{1, 1, 1}, []uint64{3, 3, 3}, 0, 1},
		{"busy above total", 100, 500, 400, []uint64{400}, []uint64{100}, 0, 0},
		{"no overflow", math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64, []uint64{math.MaxUint64 - 1},
			[]uint64{math.MaxUint64 - 1}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.ticks))
			idle, un := hostshare.Split(tt.e, tt.busy, tt.total, tt.ticks, out)
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

// FuzzSplit checks Split against exact rationals: each part is the floor
// of its rational share, and the parts add up to e.
func FuzzSplit(f *testing.F) {
	f.Add(uint64(1000), uint64(300), uint64(400), uint32(120), uint32(60), uint32(0))
	f.Add(uint64(math.MaxUint64), uint64(1), uint64(2), uint32(math.MaxUint32), uint32(1), uint32(7))
	f.Fuzz(func(t *testing.T, e, busy, total uint64, t0, t1, t2 uint32) {
		ticks := []uint64{uint64(t0), uint64(t1), uint64(t2)}
		out := make([]uint64, 3)
		idle, un := hostshare.Split(e, busy, total, ticks, out)
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
		floor := func(num, den *big.Int) uint64 { return new(big.Int).Quo(num, den).Uint64() }
		E := new(big.Int).SetUint64(e)
		wantIdle := floor(new(big.Int).Mul(E, new(big.Int).SetUint64(total-b)), new(big.Int).SetUint64(total))
		if idle != wantIdle {
			t.Fatalf("idle %d, want %d", idle, wantIdle)
		}
		active := new(big.Int).SetUint64(e - wantIdle)
		den := max(b, uint64(t0)+uint64(t1)+uint64(t2))
		for i, tk := range ticks {
			want := uint64(0)
			if den > 0 {
				want = floor(new(big.Int).Mul(active, new(big.Int).SetUint64(tk)), new(big.Int).SetUint64(den))
			}
			if out[i] != want {
				t.Fatalf("out[%d] = %d, want %d", i, out[i], want)
			}
		}
	})
}
