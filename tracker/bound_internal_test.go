package tracker

import (
	"math"
	"math/big"
	"testing"
)

// TestMillijoulesExact checks the fixed-point bound against rational
// arithmetic at the edges of its shifts and its saturation.
func TestMillijoulesExact(t *testing.T) {
	watts := []float64{
		math.SmallestNonzeroFloat64, 1e-300, 1e-5, 0.1, 1, 700, 1000,
		1 << 52, 5e15, 1 << 53, 1e25, 1 << 116, 1e35, 1e300, math.MaxFloat64,
	}
	nss := []uint64{0, 1, 999_999, 1_000_000, 17_000_000, 1e9, 1 << 40, 1 << 63, math.MaxUint64}
	for _, w := range watts {
		tr := New(Limits{MaxWatts: w})
		for _, ns := range nss {
			got := millijoules(tr.wm, tr.we, ns)
			r := new(big.Rat).SetFloat64(w)
			r.Mul(r, new(big.Rat).SetInt(new(big.Int).SetUint64(ns)))
			r.Quo(r, big.NewRat(1_000_000, 1))
			want := new(big.Int).Quo(r.Num(), r.Denom())
			if !want.IsUint64() {
				want.SetUint64(math.MaxUint64)
			}
			if got != want.Uint64() {
				t.Errorf("millijoules(%g W, %d ns) = %d, want %s", w, ns, got, want)
			}
		}
	}
}
