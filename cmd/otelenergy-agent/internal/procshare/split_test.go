package procshare_test

import (
	"math"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

const ms = int64(1e6) // ns

func total(xs []uint64) uint64 {
	var t uint64
	for _, x := range xs {
		t += x
	}
	return t
}

func TestStaticMJ(t *testing.T) {
	tests := []struct {
		name   string
		iv     procshare.Interval
		watts  float64
		wantMJ uint64
	}{
		{"100 W over 100 ms of 25 J", procshare.Interval{T0: 0, T1: 100 * ms, EnergyMJ: 25000}, 100, 10000},
		{"capped at the interval's energy", procshare.Interval{T0: 0, T1: 100 * ms, EnergyMJ: 4000}, 100, 4000},
		{"floor of a fraction", procshare.Interval{T0: 0, T1: 33 * ms, EnergyMJ: 99999}, 70.5, 2326}, // 70.5 × 0.033 = 2.3265 J
		{"zero length", procshare.Interval{T0: 5, T1: 5, EnergyMJ: 700}, 100, 0},
		{"backwards", procshare.Interval{T0: 10, T1: 5, EnergyMJ: 700}, 100, 0},
		{"negative power", procshare.Interval{T0: 0, T1: ms, EnergyMJ: 700}, -1, 0},
		{"NaN power", procshare.Interval{T0: 0, T1: ms, EnergyMJ: 700}, math.NaN(), 0},
		{"infinite power", procshare.Interval{T0: 0, T1: ms, EnergyMJ: 700}, math.Inf(1), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := procshare.StaticMJ(tt.iv, tt.watts); got != tt.wantMJ {
				t.Fatalf("StaticMJ = %d, want %d", got, tt.wantMJ)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	// Two 100 ms intervals of 30 J and 50 J at 100 W static: 10 J + 10 J
	// idle, 60 J active.
	ivs := []procshare.Interval{{T0: 0, T1: 100 * ms, EnergyMJ: 30000}, {T0: 100 * ms, T1: 200 * ms, EnergyMJ: 50000}}
	tests := []struct {
		name     string
		mode     procshare.Mode
		weights  []uint64
		wantOut  []uint64
		wantUnat uint64
		shared   bool
	}{
		{"measured 3:1", procshare.Measured, []uint64{75, 25}, []uint64{45000, 15000}, 0, false},
		{"measured thirds telescope", procshare.Measured, []uint64{1, 1, 1}, []uint64{20000, 20000, 20000}, 0, false},
		{"measured, one idle process", procshare.Measured, []uint64{0, 40}, []uint64{0, 60000}, 0, false},
		{"NOT_FOUND: no samples", procshare.Measured, []uint64{0, 0}, []uint64{0, 0}, 60000, false},
		{"no process", procshare.Measured, nil, nil, 60000, false},
		{"MIG: even and shared", procshare.Unmeasured, []uint64{0, 0, 0, 0, 0, 0, 0}, []uint64{8572, 8572, 8572, 8571, 8571, 8571, 8571}, 0, true},
		{"MIG with no process", procshare.Unmeasured, nil, nil, 60000, false},
		{"MIG by slices: 1g and 3g", procshare.Unmeasured, []uint64{1, 3}, []uint64{15000, 45000}, 0, true},
		{"failed listing", procshare.Unknown, []uint64{50, 50}, []uint64{0, 0}, 60000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.weights))
			r := procshare.Window(ivs, 100, tt.mode, tt.weights, out)
			if r.IdleMJ != 20000 || r.ActiveMJ != 60000 {
				t.Fatalf("idle %d active %d, want 20000 and 60000", r.IdleMJ, r.ActiveMJ)
			}
			for i := range out {
				if out[i] != tt.wantOut[i] {
					t.Fatalf("out = %v, want %v", out, tt.wantOut)
				}
			}
			if r.UnattributedMJ != tt.wantUnat || r.Shared != tt.shared {
				t.Fatalf("unattributed %d shared %v, want %d %v", r.UnattributedMJ, r.Shared, tt.wantUnat, tt.shared)
			}
			if got := total(out) + r.IdleMJ + r.UnattributedMJ; got != 80000 {
				t.Fatalf("conservation: %d, want 80000", got)
			}
		})
	}
}

func TestWindowAccumulates(t *testing.T) {
	out := []uint64{7, 9}
	procshare.Window([]procshare.Interval{{T0: 0, T1: ms, EnergyMJ: 1000}}, 0, procshare.Measured, []uint64{1, 3}, out)
	if out[0] != 7+250 || out[1] != 9+750 {
		t.Fatalf("out = %v, want [257 759]", out)
	}
}

func FuzzWindow(f *testing.F) {
	f.Add(uint64(30000), uint64(50000), int64(100), 100.0, uint8(0), uint64(75), uint64(25), uint64(0))
	f.Add(uint64(1), uint64(0), int64(0), 0.0, uint8(1), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(math.MaxUint32), uint64(7), int64(1000), 1e9, uint8(2), uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(3))
	f.Fuzz(func(t *testing.T, e0, e1 uint64, dtMs int64, watts float64, mode uint8, w0, w1, w2 uint64) {
		e0, e1 = e0>>2, e1>>2 // their sum must fit
		ivs := []procshare.Interval{{T0: 0, T1: dtMs * ms, EnergyMJ: e0}, {T0: dtMs * ms, T1: 2 * dtMs * ms, EnergyMJ: e1}}
		weights := []uint64{w0, w1, w2}
		out := make([]uint64, 3)
		r := procshare.Window(ivs, watts, procshare.Mode(mode%3), weights, out)
		if got := total(out) + r.IdleMJ + r.UnattributedMJ; got != e0+e1 {
			t.Fatalf("conservation: %d, want %d (%+v %v)", got, e0+e1, r, out)
		}
		if r.IdleMJ+r.ActiveMJ != e0+e1 {
			t.Fatalf("idle %d + active %d != %d", r.IdleMJ, r.ActiveMJ, e0+e1)
		}
	})
}
