package ledger

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDivide checks the split stage alone against shares worked out by
// hand: the static part by coverage out of the interval's time, the rest
// by weight or by coverage out of the total, each by cumulative flooring.
func TestDivide(t *testing.T) {
	tests := []struct {
		name  string
		attr  uint64
		w     weighing
		cov   []float64
		wt    []float64
		want  []uint64
		wantR uint64
	}{
		{
			// Static 300 by coverage 1:1 of 2 ns: 150, 150. Dynamic 700 by
			// weight 1:3: ⌊700/4⌋ = 175, then 700.
			name: "static by time, dynamic by weight",
			attr: 1000, w: weighing{static: 300, dt: 2, by: byWeight, total: 4},
			cov: []float64{1, 1}, wt: []float64{1, 3},
			want: []uint64{325, 675},
		},
		{
			// Half the interval has no request: half the static part is
			// nobody's. The weights cover the whole dynamic part.
			name: "idle time is the rest",
			attr: 1000, w: weighing{static: 400, dt: 10, by: byWeight, total: 2},
			cov: []float64{3, 2}, wt: []float64{1, 1},
			want: []uint64{120 + 300, 80 + 300}, wantR: 200,
		},
		{
			// Three equal weights of 100: ⌊100/3⌋ = 33, ⌊200/3⌋ = 66, 100.
			// The odd millijoule goes to the last part, never to none.
			name: "ties",
			attr: 100, w: weighing{dt: 1, by: byWeight, total: 3},
			cov: []float64{1, 1, 1}, wt: []float64{1, 1, 1},
			want: []uint64{33, 33, 34},
		},
		{
			// A part that weighs nothing gets only its static share.
			name: "zero weight",
			attr: 100, w: weighing{static: 40, dt: 2, by: byWeight, total: 5},
			cov: []float64{1, 1}, wt: []float64{0, 5},
			want: []uint64{20, 80},
		},
		{
			// The static part is capped at the energy: nothing is left
			// for the dynamic pool, and nothing is given twice.
			name: "static beyond the energy",
			attr: 50, w: weighing{static: 80, dt: 2, by: byWeight, total: 1},
			cov: []float64{1, 1}, wt: []float64{1, 0},
			want: []uint64{25, 25},
		},
		{
			// Nothing weighs anything: a NaN total gives the dynamic part
			// to nobody rather than to one part.
			name: "NaN total",
			attr: 100, w: weighing{static: 20, dt: 1, by: byWeight, total: math.NaN()},
			cov: []float64{0.5, 0.5}, wt: []float64{1, 1},
			want: []uint64{10, 10}, wantR: 80,
		},
		{
			name:  "no parts",
			attr:  77,
			w:     weighing{static: 7, dt: 1, by: byWeight, total: 1},
			wantR: 77,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := make([]part, len(tt.cov))
			for i := range parts {
				parts[i].cov, parts[i].weight = tt.cov[i], tt.wt[i]
			}
			shares := make([]uint64, len(parts))
			for i := range shares {
				shares[i] = 12345 // divide sets them, it does not add
			}
			rest := divide(tt.attr, tt.w, parts, shares)
			if !slices.Equal(shares, tt.want) && len(parts) > 0 {
				t.Errorf("shares %v, want %v", shares, tt.want)
			}
			if rest != tt.wantR {
				t.Errorf("rest %d, want %d", rest, tt.wantR)
			}
			if sum := sumU(shares) + rest; sum != tt.attr {
				t.Errorf("Σ shares + rest = %d, want %d", sum, tt.attr)
			}
		})
	}
}

// TestWeighingFallBack checks the coverage fallback: a weighing whose
// dynamic total is not positive splits its dynamic part by the parts'
// coverage, as the static part is; a positive or NaN total is kept.
func TestWeighingFallBack(t *testing.T) {
	parts := []part{{cov: 1, weight: 0}, {cov: 3, weight: 0}}
	for _, total := range []float64{0, -2} {
		w := weighing{dt: 8, by: byWeight, total: total}
		w.fallBack(parts)
		if w.by != byCoverage || w.total != 4 {
			t.Fatalf("total %v: fell back to by %d of %v, want by coverage of 4", total, w.by, w.total)
		}
		shares := make([]uint64, 2)
		if rest := divide(800, w, parts, shares); rest != 0 || shares[0] != 200 || shares[1] != 600 {
			t.Errorf("total %v: shares %v rest %d, want [200 600] and 0", total, shares, rest)
		}
	}
	for _, total := range []float64{3, math.NaN()} {
		w := weighing{dt: 8, by: byWeight, total: total}
		w.fallBack(parts)
		if w.by != byWeight || !(w.total == total || math.IsNaN(total) && math.IsNaN(w.total)) {
			t.Errorf("total %v: changed to by %d of %v", total, w.by, w.total)
		}
	}
	// Without parts the fallback total is 0: the dynamic part is nobody's.
	w := weighing{dt: 1, by: byWeight}
	w.fallBack(nil)
	if rest := divide(10, w, nil, nil); rest != 10 {
		t.Errorf("no parts: rest %d, want 10", rest)
	}
}

// TestDivideConservesRandom runs divide on random weighings, well-formed
// and not: it always conserves, and on well-formed ones every share is
// within two millijoules of its exact figure (see checkDivide).
func TestDivideConservesRandom(t *testing.T) {
	for seed := range uint64(2000) {
		checkDivide(t, seed, uint8(seed), uint64(seed)*7919)
	}
}

// FuzzSplitConserves checks divide, the split stage, against a simple
// reference in exact rational arithmetic (see checkDivide).
func FuzzSplitConserves(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint64(1000))
	f.Add(uint64(7), uint8(64), uint64(1)<<40)
	f.Add(uint64(9), uint8(0), uint64(0))
	f.Fuzz(checkDivide)
}

// checkDivide builds a random weighing of up to 64 parts from seed, with
// ties, zero weights, coverage that leaves time idle, totals below and
// above the weights' sum and, one time in eight, a bad figure (negative,
// NaN or infinite), and splits attr with it. It checks that Σ shares +
// rest = attr exactly; and, when every figure is finite and non-negative,
// each share against the reference: the floor of attr·Cᵢ/W in exact
// rationals for cumulative weights Cᵢ, differenced. The float figure may
// fall on the other side of an integer at each of two cumulative sums,
// so a share may be off by two millijoules, never more.
func checkDivide(t *testing.T, seed uint64, n uint8, attr uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xd1))
	attr %= 1 << 40 // a year of a kilowatt, in mJ
	parts := make([]part, int(n%65))
	pick := func() float64 {
		switch rng.IntN(8) {
		case 0:
			return 0
		case 1:
			return 1 // ties
		default:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(12)-3))
		}
	}
	bad := rng.IntN(8) == 0
	for i := range parts {
		parts[i].cov, parts[i].weight = pick(), pick()
	}
	var sumCov, sumW float64
	for i := range parts {
		sumCov += parts[i].cov
		sumW += parts[i].weight
	}
	w := weighing{
		static: rng.Uint64N(attr + 2),                      // at times more than attr
		dt:     sumCov * (0.5 + rng.Float64()),             // idle time, or too little
		total:  sumW * []float64{1, 0.7, 1.3}[rng.IntN(3)], // partial or excess
		by:     rng.IntN(2),
	}
	if w.by == byCoverage {
		w.total = sumCov * (0.5 + rng.Float64())
	}
	if bad {
		v := []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)}[rng.IntN(4)]
		switch rng.IntN(4) {
		case 0:
			w.total = v
		case 1:
			w.dt = v
		default:
			if len(parts) > 0 {
				p := &parts[rng.IntN(len(parts))]
				p.cov, p.weight = v, v
			}
		}
	}
	w.fallBack(parts)
	shares := make([]uint64, len(parts))
	rest := divide(attr, w, parts, shares)
	if sum := sumU(shares) + rest; sum != attr {
		t.Fatalf("Σ shares + rest = %d, want %d (weighing %+v, %d parts)", sum, attr, w, len(parts))
	}
	if bad {
		return
	}
	want := make([]*big.Int, len(parts))
	for i := range want {
		want[i] = new(big.Int)
	}
	static := min(w.static, attr)
	refGive(want, static, parts, byCoverage, w.dt)
	refGive(want, attr-static, parts, w.by, w.total)
	for i, s := range shares {
		if d := new(big.Int).Sub(new(big.Int).SetUint64(s), want[i]); d.CmpAbs(big.NewInt(2)) > 0 {
			t.Fatalf("part %d got %d mJ, reference %v (weighing %+v)", i, s, want[i], w)
		}
	}
}

// refGive adds to want[i] part i's share of e by the reference rule, in
// exact rationals: ⌊e·min(1, Cᵢ/total)⌋ − ⌊e·min(1, Cᵢ₋₁/total)⌋.
func refGive(want []*big.Int, e uint64, parts []part, by int, total float64) {
	if e == 0 || total <= 0 {
		return
	}
	tot := new(big.Rat).SetFloat64(total)
	one := big.NewRat(1, 1)
	cum := new(big.Rat)
	prev := new(big.Int)
	for i := range parts {
		w := parts[i].cov
		if by == byWeight {
			w = parts[i].weight
		}
		cum.Add(cum, new(big.Rat).SetFloat64(w))
		f := new(big.Rat).Quo(cum, tot)
		if f.Cmp(one) > 0 {
			f.Set(one)
		}
		f.Mul(f, new(big.Rat).SetInt(new(big.Int).SetUint64(e)))
		s := new(big.Int).Quo(f.Num(), f.Denom()) // floor: both positive
		want[i].Add(want[i], new(big.Int).Sub(s, prev))
		prev = s
	}
}

func sumU(xs []uint64) uint64 {
	var s uint64
	for _, x := range xs {
		s += x
	}
	return s
}
