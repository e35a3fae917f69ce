package split_test

import (
	"math"
	"testing"

	"github.com/otelenergy/otelenergy/internal/split"
)

// part and ledgerGive are the ledger's split arithmetic written out as a
// plain loop over its parts' cov or weight, independently of Floats: the
// reference that Floats must match bit for bit, so that the ledger's give,
// one call into Floats, gives exactly these shares.
type part struct{ cov, weight float64 }

const (
	byCoverage = iota
	byWeight
)

func ledgerGive(e uint64, parts []part, by int, total float64, got []uint64) uint64 {
	if e == 0 || total <= 0 || math.IsNaN(total) || math.IsInf(total, 0) {
		return 0
	}
	var cum float64
	var given uint64
	for i := range parts {
		w := parts[i].cov
		if by == byWeight {
			w = parts[i].weight
		}
		cum += w
		s := uint64(math.Floor(float64(e) * min(1, cum/total)))
		s = min(max(s, given), e)
		got[i] += s - given
		given = s
	}
	return given
}

// giveByFloats is the ledger's give as one call into Floats.
func giveByFloats(e uint64, parts []part, by int, total float64, got []uint64) uint64 {
	return split.Floats(e, total, len(parts), func(i int) float64 {
		if by == byWeight {
			return parts[i].weight
		}
		return parts[i].cov
	}, got)
}

func TestFloats(t *testing.T) {
	for _, tt := range []struct {
		name  string
		e     uint64
		w     []float64
		total float64
		want  []uint64
		given uint64
	}{
		{"thirds telescope", 10, []float64{1, 1, 1}, 3, []uint64{3, 3, 4}, 10},
		{"out of a larger total", 1000, []float64{25, 25}, 100, []uint64{250, 250}, 500},
		{"capped at e", 100, []float64{60, 60}, 100, []uint64{60, 40}, 100},
		{"negative weight held", 100, []float64{50, -30, 50}, 100, []uint64{50, 0, 20}, 70},
		{"zero total", 100, []float64{1}, 0, []uint64{0}, 0},
		{"NaN total", 100, []float64{1}, math.NaN(), []uint64{0}, 0},
		{"infinite total", 100, []float64{1}, math.Inf(1), []uint64{0}, 0},
		{"nothing to give", 0, []float64{1}, 1, []uint64{0}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.w))
			given := split.Floats(tt.e, tt.total, len(tt.w), func(i int) float64 { return tt.w[i] }, out)
			for i := range out {
				if out[i] != tt.want[i] {
					t.Fatalf("out = %v, want %v", out, tt.want)
				}
			}
			if given != tt.given || sum(out) != given {
				t.Fatalf("given %d (Σ out %d), want %d", given, sum(out), tt.given)
			}
		})
	}
}

// FuzzFloatsLedgerArithmetic pins the ledger's arithmetic: for any parts,
// pool and total, Floats called as the ledger's give would call it gives
// exactly what the ledger's own give gives, share by share, and both
// conserve: Σ shares = the returned figure ≤ e.
func FuzzFloatsLedgerArithmetic(f *testing.F) {
	f.Add(uint64(25_000), 1e8, 3e7, 0.4, 5e7, 1.5, 2e7, 0.1, true)
	f.Add(uint64(math.MaxUint64), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, false)
	f.Add(uint64(7), 0.0, 1.0, -1.0, math.NaN(), math.Inf(1), 2.0, 3.0, true)
	f.Add(uint64(1<<53+1), 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, false)
	f.Fuzz(func(t *testing.T, e uint64, total, c0, w0, c1, w1, c2, w2 float64, byW bool) {
		parts := []part{{c0, w0}, {c1, w1}, {c2, w2}}
		by := byCoverage
		if byW {
			by = byWeight
		}
		want := []uint64{3, 1, 4} // shares are added to what is there
		got := []uint64{3, 1, 4}
		wg := ledgerGive(e, parts, by, total, want)
		gg := giveByFloats(e, parts, by, total, got)
		if wg != gg {
			t.Fatalf("given %d, the ledger's give %d", gg, wg)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("shares %v, the ledger's give %v", got, want)
			}
		}
		if s := sum(got) - 8; s != gg || gg > e {
			t.Fatalf("Σ shares %d, given %d, e %d", s, gg, e)
		}
	})
}

// TestFloatsAllocatesNothing: the ledger calls Floats on the sampler's
// path for every interval, with a closure over its parts.
func TestFloatsAllocatesNothing(t *testing.T) {
	parts := []part{{1, 2}, {3, 4}, {5, 6}}
	out := make([]uint64, len(parts))
	by := byWeight
	if n := testing.AllocsPerRun(100, func() { giveByFloats(1000, parts, by, 20, out) }); n != 0 {
		t.Fatalf("%.0f allocations per split, want 0", n)
	}
}
