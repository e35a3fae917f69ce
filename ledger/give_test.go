package ledger

import (
	"fmt"
	"math"
	"testing"
)

// TestGiveCumulativeFloor checks the split's rounding against the
// documented formula, computed by hand: with cumulative weights
// C₁ ≤ … ≤ Cₙ = W, part i gets ⌊E·Cᵢ/W⌋ − ⌊E·Cᵢ₋₁/W⌋ mJ, so the shares
// telescope to exactly E and no part gets a millijoule its weight does not
// reach.
func TestGiveCumulativeFloor(t *testing.T) {
	tests := []struct {
		e       uint64
		weights []float64
		want    []uint64
	}{
		// ⌊2·1/4⌋=0, ⌊2·2/4⌋=1, ⌊2·4/4⌋=2. Rounding would give 1, 0, 1.
		{e: 2, weights: []float64{1, 1, 2}, want: []uint64{0, 1, 1}},
		// ⌊1000/3⌋=333, ⌊2000/3⌋=666, 1000.
		{e: 1000, weights: []float64{1, 1, 1}, want: []uint64{333, 333, 334}},
		// ⌊7·0.5/3⌋=1, ⌊7·1/3⌋=2, ⌊7·3/3⌋=7. Rounding: 1, 1, 5.
		{e: 7, weights: []float64{0.5, 0.5, 2}, want: []uint64{1, 1, 5}},
		// ⌊5·1/10⌋=0, ⌊5·6/10⌋=3, 5. Rounding: 1, 2, 2.
		{e: 5, weights: []float64{1, 5, 4}, want: []uint64{0, 3, 2}},
		// A part of weight 0 gets nothing, wherever it stands.
		{e: 10, weights: []float64{0, 3, 0, 1}, want: []uint64{0, 7, 0, 3}},
		// One millijoule among four equal parts goes to the last.
		{e: 1, weights: []float64{1, 1, 1, 1}, want: []uint64{0, 0, 0, 1}},
	}
	for _, by := range []int{byCoverage, byWeight} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("by %d: %d mJ over %v", by, tt.e, tt.weights), func(t *testing.T) {
				parts := make([]part, len(tt.weights))
				var total float64
				for i, w := range tt.weights {
					if by == byWeight {
						parts[i].weight, parts[i].cov = w, 1 // cov must be ignored
					} else {
						parts[i].cov, parts[i].weight = w, 1
					}
					total += w
				}
				shares := make([]uint64, len(parts))
				if got := give(tt.e, parts, by, total, shares); got != tt.e {
					t.Fatalf("give returned %d mJ, want all %d", got, tt.e)
				}
				for i, got := range shares {
					if got != tt.want[i] {
						t.Errorf("part %d (weight %v) got %d mJ, want %d", i, tt.weights[i], got, tt.want[i])
					}
				}
			})
		}
	}
}

// TestGivePartialTotal gives by weights that add up to less than the total
// passed (the rest of the interval is nobody's): each part still gets
// ⌊E·Cᵢ/W⌋ − ⌊E·Cᵢ₋₁/W⌋, and what is not given is returned as such.
func TestGivePartialTotal(t *testing.T) {
	parts := []part{{cov: 1}, {cov: 2}}
	shares := make([]uint64, len(parts))
	// W = 10: ⌊100·1/10⌋ = 10, ⌊100·3/10⌋ = 30.
	if got := give(100, parts, byCoverage, 10, shares); got != 30 {
		t.Fatalf("given %d mJ, want 30", got)
	}
	if a, b := shares[0], shares[1]; a != 10 || b != 20 {
		t.Fatalf("parts got %d and %d mJ, want 10 and 20", a, b)
	}
}

// TestGiveRefusesBadTotals gives nothing when the total weight is zero,
// negative, NaN or infinite.
func TestGiveRefusesBadTotals(t *testing.T) {
	for _, total := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		parts := []part{{cov: 1}}
		shares := make([]uint64, 1)
		if got := give(100, parts, byCoverage, total, shares); got != 0 || shares[0] != 0 {
			t.Errorf("total %v: gave %d mJ (part %d), want nothing", total, got, shares[0])
		}
	}
}

// TestShareOutsideTheUnitInterval sets measured shares below 0, above 1
// and NaN: a negative share attributes nothing, a share above 1 the whole
// board and no more, and NaN (a share that could not be computed) the
// whole board, as an unmeasured split does. Each case conserves: what the
// request does not get goes to the other processes.
func TestShareOutsideTheUnitInterval(t *testing.T) {
	tests := []struct {
		frac float64
		want uint64 // of 1001 mJ
	}{
		{frac: -0.5, want: 0},
		{frac: math.Inf(-1), want: 0},
		{frac: -0.0, want: 0},
		{frac: 0.3, want: 300},
		{frac: 0.999, want: 999},
		{frac: 1, want: 1001},
		{frac: 1.0001, want: 1001},
		{frac: 7, want: 1001},
		{frac: math.Inf(1), want: 1001},
		{frac: math.NaN(), want: 1001},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.frac), func(t *testing.T) {
			g := newRig(t, Config{Horizon: 1e9})
			g.l.SetShare(0, tt.frac, true, false)
			if got := attributable(&g.l.devs[0], 1001); got != tt.want {
				t.Fatalf("attributable(1001) = %d, want %d", got, tt.want)
			}
			g.step(0, 0, nil)
			a := newAccount(0, nil)
			g.l.Add(a)
			g.step(100, 1001, nil)
			a.End(100)
			g.step(2e9, 0, nil)
			if !a.Final() {
				t.Fatal("request not final past the horizon")
			}
			if got := a.EnergyMJ(); got != tt.want {
				t.Errorf("request got %d mJ, want %d", got, tt.want)
			}
			if got, want := g.l.OtherProcesses(), 1001-tt.want; got != want {
				t.Errorf("other processes %d mJ, want %d", got, want)
			}
			if s := a.EnergyMJ() + g.l.Unattributed() + g.l.OtherProcesses(); s != g.l.SplitMJ() {
				t.Errorf("conservation: %d != %d", s, g.l.SplitMJ())
			}
		})
	}
}
