package ledger

import "slices"

// This file is the exact time split every stage shares: at every instant
// of an interval, the time is shared among the requests whose span holds
// it. It is pure: it reads the parts' spans and writes only their shares.

// Span kinds for coverage.
const (
	spanActive  = iota // the request's active span; shares in cov
	spanPrefill        // its prefill, weighted by rho; shares in pfShare
	spanDecode         // its decode; shares in decShare
	// spanTime is spanActive for the time rings, swept exactly however
	// many spans start or end in the interval: their windows are long
	// (250 ms to 2 s, and longer after a stall), so they hold far more
	// short requests than a counter step, and their rule is the exact
	// one. The sweep is O(n log n) in the active requests, once a window.
	spanTime
)

// coverage sets each part's share of the interval's time, in ns, for the
// spans of kind (with shares; without, it only measures), and returns the
// time covered: at every instant the time is shared among the requests
// whose span holds it, in proportion to their weights (rho for prefill,
// equal otherwise), and time with none is nobody's. It is exact however
// many spans start or end inside the interval: a sweep over their edges,
// O(k log k) for k such spans, accumulates the time per unit of weight,
// and each span's share is its weight times that accumulated over it. So
// a burst of requests ending together gives the last of them the growing
// share that is theirs, and the time after the last one ended to nobody.
func coverage(parts []part, a, b int64, kind int, shares bool, sweep *[]uint64) float64 {
	if len(parts) == 0 {
		return 0
	}
	c := cover{parts: parts, a: a, b: b, kind: kind, shares: shares}
	c.collect(sweep)
	dt := float64(b - a)
	switch {
	case c.full == 0 && c.hullHi <= c.hullLo:
		return 0
	case !shares && c.full > 0:
		return dt
	case c.hullHi <= c.hullLo:
		for i := range parts {
			if lo, hi := c.span(&parts[i]); lo == a && hi == b {
				*c.out(&parts[i]) = dt * c.weight(&parts[i]) / c.fullW
			}
		}
		return dt
	case !c.exact:
		return c.proportional()
	}
	return c.sweep(*sweep)
}

// cover is one coverage computation: the parts, the interval (a, b], the
// kind of span, and what collect gathered of the spans.
type cover struct {
	parts  []part
	a, b   int64
	kind   int
	shares bool
	// full counts the spans that cover the whole interval, fullW sums
	// their weights; the others lie within [hullLo, hullHi], sumLen and
	// sumWLen sum their lengths, unweighted and weighted; exact says
	// their edges are in the sweep.
	full                   int
	fullW, sumLen, sumWLen float64
	hullLo, hullHi         int64
	exact                  bool
}

func (c *cover) span(p *part) (int64, int64) {
	switch c.kind {
	case spanPrefill:
		return p.pfLo, p.pfHi
	case spanDecode:
		return p.dLo, p.hi
	}
	return p.lo, p.hi
}

func (c *cover) out(p *part) *float64 {
	switch c.kind {
	case spanPrefill:
		return &p.pfShare
	case spanDecode:
		return &p.decShare
	}
	return &p.cov
}

func (c *cover) weight(p *part) float64 {
	if c.kind == spanPrefill && p.rho > 0 {
		return p.rho
	}
	return 1
}

// collect clears the shares and gathers the spans: those that cover the
// whole interval, and the edges of the others into sweep, while there
// are at most maxExactPartial of them (any number for spanTime).
func (c *cover) collect(sweep *[]uint64) {
	a, b := c.a, c.b
	ev := (*sweep)[:0]
	c.exact = b-a < 1<<edgeTBits && len(c.parts) < 1<<edgeIBits
	c.hullLo, c.hullHi = b, a
	for i := range c.parts {
		p := &c.parts[i]
		if c.shares {
			*c.out(p) = 0
		}
		lo, hi := c.span(p)
		switch {
		case hi <= lo:
		case lo == a && hi == b:
			c.full++
			c.fullW += c.weight(p)
		default:
			c.hullLo, c.hullHi = min(c.hullLo, lo), max(c.hullHi, hi)
			c.sumLen += float64(hi - lo)
			c.sumWLen += c.weight(p) * float64(hi-lo)
			if c.exact && (len(ev) < 2*maxExactPartial || c.kind == spanTime) {
				ev = append(ev, edgeKey(a, lo, i, true), edgeKey(a, hi, i, false))
			} else {
				c.exact = false
			}
		}
	}
	*sweep = ev
}

// proportional splits the time when too many spans start or end inside
// the interval to sweep them at every split: by weighted span time,
// scaled so that the total never exceeds the time the spans can cover.
func (c *cover) proportional() float64 {
	dt := float64(c.b - c.a)
	covered := dt
	if c.full == 0 {
		covered = min(dt, c.sumLen, float64(c.hullHi-c.hullLo))
	}
	if c.shares {
		for i := range c.parts {
			p := &c.parts[i]
			lo, hi := c.span(p)
			*c.out(p) = c.weight(p) * float64(max(0, hi-lo)) * covered / (c.sumWLen + c.fullW*dt)
		}
	}
	return covered
}

// sweep walks the sorted edges ev: perW is the time per unit of weight so
// far, and a span's share is its weight times perW's growth over it.
func (c *cover) sweep(ev []uint64) float64 {
	slices.Sort(ev)
	var perW, covered float64
	w, open := c.fullW, 0
	prev := c.a
	for _, k := range ev {
		t, i, start := edgeOf(c.a, k)
		if seg := float64(t - prev); seg > 0 && (c.full > 0 || open > 0) {
			covered += seg
			perW += seg / w
		}
		prev = t
		p := &c.parts[i]
		pw := c.weight(p)
		if start {
			w += pw
			open++
			if c.shares {
				*c.out(p) -= pw * perW
			}
			continue
		}
		open--
		if w -= pw; open == 0 {
			w = c.fullW // no drift from the adds and subtracts
		}
		if c.shares {
			*c.out(p) += pw * perW
		}
	}
	if c.full > 0 {
		seg := float64(c.b - prev)
		covered += seg
		perW += seg / w
	}
	if c.shares {
		for i := range c.parts {
			p := &c.parts[i]
			if lo, hi := c.span(p); lo == c.a && hi == c.b {
				*c.out(p) = perW * c.weight(p)
			} else if *c.out(p) < 0 {
				*c.out(p) = 0 // rounding
			}
		}
	}
	return covered
}

// The sweep sorts the edges of the spans inside an interval as one word
// each: the time since the interval's start (edgeTBits), the span's index
// (edgeIBits) and whether it starts there (the low bit). maxExactPartial
// bounds the spans swept in one interval; beyond, the split is
// proportional to span time (see coverage).
const (
	edgeTBits       = 40 // 18 minutes in ns
	edgeIBits       = 23
	maxExactPartial = 512
)

func edgeKey(a, t int64, i int, start bool) uint64 {
	k := uint64(t-a)<<(edgeIBits+1) | uint64(i)<<1
	if start {
		k |= 1
	}
	return k
}

func edgeOf(a int64, k uint64) (t int64, i int, start bool) {
	return a + int64(k>>(edgeIBits+1)), int(k>>1) & (1<<edgeIBits - 1), k&1 == 1
}
