package split

import (
	"math"
	"math/bits"
)

// Rounding is how a cumulative figure is rounded to an integer.
type Rounding uint8

const (
	// Down rounds toward zero: ⌊x⌋.
	Down Rounding = iota
	// HalfUp rounds to the nearest integer, halves up: ⌊x + ½⌋.
	HalfUp
)

// Scale returns R(a·num/den) with a 128-bit product, R as r says. It
// saturates at the largest uint64 when the quotient does not fit 64 bits.
// den must be non-zero.
func Scale(a, num, den uint64, r Rounding) uint64 {
	hi, lo := bits.Mul64(a, num)
	if r == HalfUp {
		var c uint64
		lo, c = bits.Add64(lo, den/2, 0)
		hi += c
	}
	if hi >= den {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, den)
	return q
}

// Cumulative splits R((Σw + rest)·num/den) among w and rest: with Cᵢ the
// sum of w[0..i], saturating at the largest uint64, it adds
// R(Cᵢ·num/den) − R(Cᵢ₋₁·num/den) to out[i] and returns rest's share,
// R((Cₙ + rest)·num/den) − R(Cₙ·num/den), so that, exactly,
//
//	Σ added + rest's share = Scale(Σw + rest, num, den, r).
//
// den must be non-zero.
func Cumulative(w []uint64, rest, num, den uint64, r Rounding, out []uint64) (restShare uint64) {
	return cumulative(w, 0, rest, num, den, r, out)
}

// cumulative is Cumulative with every weight shifted right by shift.
func cumulative(w []uint64, shift uint, rest, num, den uint64, r Rounding, out []uint64) uint64 {
	var cum, prev uint64
	for i, x := range w {
		cum = satAdd(cum, x>>shift)
		s := Scale(cum, num, den, r)
		out[i] += s - prev
		prev = s
	}
	return Scale(satAdd(cum, rest), num, den, r) - prev
}

// Among splits e among w in proportion to each weight out of
// max(total, Σw), rounded down cumulatively: part i gets
// ⌊e·Cᵢ/D⌋ − ⌊e·Cᵢ₋₁/D⌋, added to out[i], with D = max(total, Σw). It
// returns the rest, e less what it gave: the part of D that no weight
// covers, D − Σw. ok is false, and nothing is given, when D is zero.
// Weights whose sum overflows uint64 are scaled down together first
// (total with them), which keeps the shares proportional to within one
// part in 2^32.
func Among(e uint64, w []uint64, total uint64, out []uint64) (rest uint64, ok bool) {
	sum, shift := sumShifted(w)
	den := max(total>>shift, sum)
	if den == 0 {
		return e, false
	}
	// Cᵢ ≤ den, so e·Cᵢ/den ≤ e: no figure saturates.
	return cumulative(w, shift, den-sum, e, den, Down, out), true
}

// Floats splits e among n parts in proportion to weight(i) out of total,
// by cumulative floors: with Cᵢ = weight(0) + … + weight(i), summed in
// float64 in that order, part i gets ⌊e·min(1, Cᵢ/total)⌋ −
// ⌊e·min(1, Cᵢ₋₁/total)⌋, added to out[i]. So the shares telescope and it
// gives, and returns, exactly ⌊e·min(1, Cₙ/total)⌋. A bad total (zero,
// negative, NaN or infinite) gives nothing; whatever the weights, each
// cumulative figure is held within [the previous one, e], so no share is
// negative and at most e is given. weight is called once per part, in
// order, and must not retain anything.
func Floats(e uint64, total float64, n int, weight func(i int) float64, out []uint64) (given uint64) {
	if e == 0 || total <= 0 || math.IsNaN(total) || math.IsInf(total, 0) {
		return 0
	}
	var cum float64
	for i := 0; i < n; i++ {
		cum += weight(i)
		s := uint64(math.Floor(float64(e) * min(1, cum/total)))
		s = min(max(s, given), e)
		out[i] += s - given
		given = s
	}
	return given
}

// Evenly adds an equal share of e to each element of out, the remainder
// going one unit each to the first ones. An empty out gives nothing.
func Evenly(e uint64, out []uint64) {
	n := uint64(len(out))
	if n == 0 {
		return
	}
	q, rem := e/n, e%n
	for i := range out {
		out[i] += q
		if uint64(i) < rem {
			out[i]++
		}
	}
}

// sumShifted returns the sum of w, each shifted right by shift, with the
// smallest shift that keeps the sum within uint64.
func sumShifted(w []uint64) (sum uint64, shift uint) {
	for shift = 0; shift < 64; shift++ {
		var t uint64
		overflow := false
		for _, x := range w {
			var c uint64
			t, c = bits.Add64(t, x>>shift, 0)
			if c != 0 {
				overflow = true
				break
			}
		}
		if !overflow {
			return t, shift
		}
	}
	return 0, 64
}

func satAdd(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return math.MaxUint64
	}
	return s
}
