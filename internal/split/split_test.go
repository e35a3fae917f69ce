package split_test

import (
	"math"
	"math/big"
	"testing"

	"github.com/otelenergy/otelenergy/internal/split"
)

func sum(xs []uint64) uint64 {
	var t uint64
	for _, x := range xs {
		t += x
	}
	return t
}

func big64(x uint64) *big.Int { return new(big.Int).SetUint64(x) }

// round is R(n/d) on exact integers.
func round(n, d *big.Int, r split.Rounding) *big.Int {
	if r == split.HalfUp {
		n = new(big.Int).Add(new(big.Int).Mul(n, big.NewInt(2)), d)
		d = new(big.Int).Mul(d, big.NewInt(2))
	}
	return new(big.Int).Quo(n, d)
}

// scaled is R(c·num/den) on exact integers, saturated as Scale is.
func scaled(c *big.Int, num, den uint64, r split.Rounding) *big.Int {
	q := round(new(big.Int).Mul(c, big64(num)), big64(den), r)
	if !q.IsUint64() {
		return big64(math.MaxUint64)
	}
	return q
}

func TestScale(t *testing.T) {
	for _, tt := range []struct {
		name        string
		a, num, den uint64
		r           split.Rounding
		want        uint64
	}{
		{"exact", 10, 3, 5, split.Down, 6},
		{"down", 10, 1, 3, split.Down, 3},
		{"half up, below", 10, 1, 3, split.HalfUp, 3},
		{"half up, a half", 3, 1, 2, split.HalfUp, 2},
		{"down, a half", 3, 1, 2, split.Down, 1},
		{"128-bit product", math.MaxUint64, math.MaxUint64, math.MaxUint64, split.Down, math.MaxUint64},
		{"saturates", math.MaxUint64, 2, 1, split.Down, math.MaxUint64},
		{"saturates half up", math.MaxUint64, 1, 1, split.HalfUp, math.MaxUint64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := split.Scale(tt.a, tt.num, tt.den, tt.r); got != tt.want {
				t.Fatalf("Scale(%d, %d, %d) = %d, want %d", tt.a, tt.num, tt.den, got, tt.want)
			}
		})
	}
}

func TestCumulative(t *testing.T) {
	for _, tt := range []struct {
		name           string
		w              []uint64
		rest, num, den uint64
		r              split.Rounding
		want           []uint64
		restShare      uint64
	}{
		// Thirds of 10 telescope: 3, 3, 4 (rounding each alone gives 3,
		// 3, 3 and loses one).
		{"thirds telescope", []uint64{1, 1, 1}, 0, 10, 3, split.Down, []uint64{3, 3, 4}, 0},
		{"half up", []uint64{1, 1, 1}, 0, 10, 3, split.HalfUp, []uint64{3, 4, 3}, 0},
		{"rest", []uint64{250, 250}, 500, 1, 1, split.Down, []uint64{250, 250}, 500},
		{"conversion with a rest", []uint64{1, 2}, 1, 7, 2, split.HalfUp, []uint64{4, 7}, 3}, // 3.5, 10.5, 14
		{"no weights", nil, 9, 1, 3, split.Down, nil, 3},
		{"zero weights", []uint64{0, 0}, 0, 5, 1, split.Down, []uint64{0, 0}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.w))
			rs := split.Cumulative(tt.w, tt.rest, tt.num, tt.den, tt.r, out)
			for i := range out {
				if out[i] != tt.want[i] {
					t.Fatalf("out = %v, want %v", out, tt.want)
				}
			}
			if rs != tt.restShare {
				t.Fatalf("rest's share = %d, want %d", rs, tt.restShare)
			}
		})
	}
}

func TestCumulativeAdds(t *testing.T) {
	out := []uint64{7, 9}
	split.Cumulative([]uint64{1, 3}, 0, 1000, 4, split.Down, out)
	if out[0] != 7+250 || out[1] != 9+750 {
		t.Fatalf("out = %v, want [257 759]", out)
	}
}

func TestCumulativePanicsOnShortOut(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Cumulative with out shorter than w did not panic")
		}
	}()
	split.Cumulative([]uint64{1, 2}, 0, 1, 1, split.Down, make([]uint64, 1, 2))
}

func TestAmong(t *testing.T) {
	for _, tt := range []struct {
		name  string
		e     uint64
		w     []uint64
		total uint64
		want  []uint64
		rest  uint64
		ok    bool
	}{
		{"3:1", 60000, []uint64{75, 25}, 0, []uint64{45000, 15000}, 0, true},
		{"thirds telescope", 60000, []uint64{1, 1, 1}, 0, []uint64{20000, 20000, 20000}, 0, true},
		{"one weight zero", 60000, []uint64{0, 40}, 0, []uint64{0, 60000}, 0, true},
		{"no weight", 60000, []uint64{0, 0}, 0, []uint64{0, 0}, 60000, false},
		{"no part", 60000, nil, 0, nil, 60000, false},
		// 750 mJ over 300 busy ticks, two processes of 120 and 60.
		{"out of a larger total", 750, []uint64{120, 60}, 300, []uint64{300, 150}, 300, true},
		// The weights add up past the total: they share e by themselves.
		{"weights past the total", 900, []uint64{100, 50}, 100, []uint64{600, 300}, 0, true},
		// 10 mJ over 3 equal weights: the remainder goes to a part.
		{"remainder given", 10, []uint64{1, 1, 1}, 3, []uint64{3, 3, 4}, 0, true},
		{"rest and remainder", 10, []uint64{1, 1}, 3, []uint64{3, 3}, 4, true},
		{"total alone", 10, []uint64{0}, 3, []uint64{0}, 10, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]uint64, len(tt.w))
			rest, ok := split.Among(tt.e, tt.w, tt.total, out)
			for i := range out {
				if out[i] != tt.want[i] {
					t.Fatalf("out = %v, want %v", out, tt.want)
				}
			}
			if rest != tt.rest || ok != tt.ok {
				t.Fatalf("rest, ok = %d, %v; want %d, %v", rest, ok, tt.rest, tt.ok)
			}
			if sum(out)+rest != tt.e {
				t.Fatalf("conservation: %d + %d != %d", sum(out), rest, tt.e)
			}
		})
	}
}

// TestAmongLarge: weights that overflow uint64 together are scaled by one
// bit, and the shares are then exact for the scaled weights.
func TestAmongLarge(t *testing.T) {
	e := uint64(math.MaxUint64 - 3)
	w := []uint64{math.MaxUint64 - 1, math.MaxUint64 / 2, 5}
	out := make([]uint64, 3)
	rest, ok := split.Among(e, w, 0, out)
	if !ok || rest != 0 || sum(out) != e {
		t.Fatalf("rest %d ok %v, shares sum to %d; want 0, true, %d", rest, ok, sum(out), e)
	}
	for i, want := range amongRef(e, []uint64{w[0] >> 1, w[1] >> 1, w[2] >> 1}, 0) {
		if out[i] != want {
			t.Fatalf("share %d = %d, want %d", i, out[i], want)
		}
	}
}

// amongRef is Among on exact integers.
func amongRef(e uint64, w []uint64, total uint64) []uint64 {
	tot := new(big.Int)
	for _, x := range w {
		tot.Add(tot, big64(x))
	}
	if tot.Cmp(big64(total)) < 0 {
		tot = big64(total)
	}
	out := make([]uint64, len(w))
	if tot.Sign() == 0 {
		return out
	}
	cum, prev := new(big.Int), new(big.Int)
	for i, x := range w {
		cum.Add(cum, big64(x))
		s := new(big.Int).Quo(new(big.Int).Mul(big64(e), cum), tot)
		out[i] = new(big.Int).Sub(s, prev).Uint64()
		prev = s
	}
	return out
}

// FuzzAmong checks Among against exact rationals: each share is the
// difference of two exact cumulative floors, and the parts add up to e.
func FuzzAmong(f *testing.F) {
	f.Add(uint64(750), uint64(300), uint32(120), uint32(60), uint32(0))
	f.Add(uint64(math.MaxUint64), uint64(1), uint32(math.MaxUint32), uint32(1), uint32(7))
	f.Add(uint64(10), uint64(0), uint32(0), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, e, total uint64, w0, w1, w2 uint32) {
		w := []uint64{uint64(w0), uint64(w1), uint64(w2)}
		out := make([]uint64, 3)
		rest, ok := split.Among(e, w, total, out)
		if ok != (total > 0 || w0|w1|w2 != 0) {
			t.Fatalf("ok = %v for total %d and weights %v", ok, total, w)
		}
		for i, want := range amongRef(e, w, total) {
			if out[i] != want {
				t.Fatalf("share %d = %d, want %d (e %d, total %d, w %v)", i, out[i], want, e, total, w)
			}
		}
		got := new(big.Int).SetUint64(rest)
		for _, o := range out {
			got.Add(got, big64(o))
		}
		if got.Cmp(big64(e)) != 0 {
			t.Fatalf("parts add up to %v, want %d", got, e)
		}
	})
}

// FuzzCumulative checks Cumulative against exact rationals for both
// roundings: each share is the difference of two exact cumulative
// roundings, and the parts add up to the whole rounded once.
func FuzzCumulative(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint64(70), uint64(436_000_000_000), uint64(3_600_000_000_000), false)
	f.Add([]byte{255, 255, 255, 255}, uint64(0), uint64(1), uint64(1), true)
	f.Add([]byte{}, uint64(1<<40), uint64(12_500_000), uint64(3_600_000_000_000), true)
	f.Fuzz(func(t *testing.T, raw []byte, rest, num, den uint64, halfUp bool) {
		if den == 0 {
			den = 1
		}
		r := split.Down
		if halfUp {
			r = split.HalfUp
		}
		var w []uint64
		for i := 0; i+3 < len(raw) && len(w) < 64; i += 4 {
			w = append(w, uint64(raw[i])|uint64(raw[i+1])<<8|uint64(raw[i+2])<<16|uint64(raw[i+3])<<56)
		}
		out := make([]uint64, len(w))
		rs := split.Cumulative(w, rest, num, den, r, out)
		cum := new(big.Int)
		prev := new(big.Int)
		max := big64(math.MaxUint64)
		for i, x := range w {
			cum.Add(cum, big64(x))
			if cum.Cmp(max) > 0 {
				cum.Set(max)
			}
			s := scaled(cum, num, den, r)
			if want := new(big.Int).Sub(s, prev); !want.IsUint64() || want.Uint64() != out[i] {
				t.Fatalf("share %d = %d, want %v", i, out[i], want)
			}
			prev = s
		}
		all := new(big.Int).Add(cum, big64(rest))
		if all.Cmp(max) > 0 {
			all.Set(max)
		}
		whole := scaled(all, num, den, r)
		if want := new(big.Int).Sub(whole, prev); want.Uint64() != rs {
			t.Fatalf("rest's share = %d, want %v", rs, want)
		}
		got := big64(rs)
		for _, o := range out {
			got.Add(got, big64(o))
		}
		if got.Cmp(whole) != 0 || whole.Uint64() != split.Scale(all.Uint64(), num, den, r) {
			t.Fatalf("parts add up to %v, want %v", got, whole)
		}
	})
}

func TestEvenly(t *testing.T) {
	out := make([]uint64, 7)
	split.Evenly(60000, out)
	want := []uint64{8572, 8572, 8572, 8571, 8571, 8571, 8571}
	for i := range out {
		if out[i] != want[i] {
			t.Fatalf("out = %v, want %v", out, want)
		}
	}
	split.Evenly(5, nil) // no part: nothing to give, no panic
}
