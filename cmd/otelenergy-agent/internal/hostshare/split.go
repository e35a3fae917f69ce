package hostshare

import "math/bits"

// Split divides e millijoules of one domain over one interval in which the
// node's CPUs were busy busy ticks of total, and each tracked process
// ticks[i]. It writes process i's part to out[i] (len(out) ≥ len(ticks))
// and returns the idle and unattributed parts; Σ out[:len(ticks)] + idle +
// unattributed = e exactly (see the package doc).
//
// With total 0 (no CPU time elapsed or unreadable), everything is
// unattributed. A busy above total counts as total. When the processes'
// ticks add up past busy (their counts and the node's are sampled
// apart), they share the active part by their ticks alone.
func Split(e, busy, total uint64, ticks, out []uint64) (idle, unattributed uint64) {
	clear(out[:len(ticks)])
	if total == 0 {
		return 0, e
	}
	busy = min(busy, total)
	idle = mulDiv(e, total-busy, total)
	active := e - idle
	den := busy
	var sum uint64
	for _, t := range ticks {
		var c uint64
		sum, c = bits.Add64(sum, t, 0)
		if c != 0 {
			return idle, active // no real interval has 2^64 ticks
		}
	}
	den = max(den, sum)
	if den == 0 {
		return idle, active
	}
	given := uint64(0)
	for i, t := range ticks {
		out[i] = mulDiv(active, t, den)
		given += out[i]
	}
	return idle, active - given
}

// mulDiv returns ⌊a × b / c⌋ for b ≤ c, c > 0, exactly: the product is
// taken on 128 bits, and b ≤ c keeps the quotient within 64.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}
