package ring

// Interval is the span (T0, T1] between two consecutive points of a
// ring, on the ring's clock, and the energy metered in it: the unit of
// work of every reader that splits a ring's energy (the ledger among
// requests, the node agent among processes).
type Interval struct {
	// T0 and T1 bound the interval, in nanoseconds on the ring's
	// monotonic scale. T1 < T0 counts as an interval of length zero.
	T0, T1 int64
	// EnergyMJ is the energy metered over the interval.
	EnergyMJ uint64
}

// Cursor walks a ring's points and yields the intervals between
// consecutive ones, each once, in order, so that the intervals it yields
// tile the time from its first point on and their energies sum to the
// ring's energy since then (a total that went backwards adds none):
// nothing is yielded twice or skipped, even when the ring laps the
// cursor, which then resumes at the ring's oldest point and yields the
// energy in between as one interval.
//
// The zero Cursor starts at the ring's oldest point, which only starts
// the first interval. A Cursor made by [FromZero] counts the ring's
// energy from zero instead: its first point yields an interval of no
// length holding that point's whole energy, for a reader whose figures
// must add up to the ring's total.
//
// A Cursor belongs to one reader; it is not safe for concurrent use.
type Cursor struct {
	next   uint64 // logical index of the next point
	primed bool   // a point was passed: prevT and prevE hold
	zero   bool   // not primed yet, and counting from zero
	prevT  int64
	prevE  uint64
}

// FromZero returns a Cursor whose first point yields its whole energy,
// counted from zero, as an interval of no length at it.
func FromZero() Cursor { return Cursor{zero: true} }

// Peek returns the point the cursor reaches next and its logical index,
// and false when none is pushed yet. It does not move the cursor.
func (c *Cursor) Peek(v View) (uint64, Point, bool) {
	j := c.next
	if old := v.Oldest(); j < old {
		j = old
	}
	p, ok := v.At(j)
	return j, p, ok
}

// Advance moves the cursor to point p, of logical index j (as Peek
// returned them), and returns the interval that ends there; false for a
// zero Cursor's first point, which only starts the first interval.
func (c *Cursor) Advance(j uint64, p Point) (Interval, bool) {
	if !c.primed && c.zero {
		c.primed, c.prevT = true, p.T
	}
	iv, ok := Interval{T0: c.prevT, T1: p.T, EnergyMJ: satSub(p.EnergyMJ, c.prevE)}, c.primed
	c.primed, c.prevT, c.prevE, c.next = true, p.T, p.EnergyMJ, j+1
	return iv, ok
}

// Next returns the next interval, and false when the ring holds no point
// past the cursor. A zero Cursor's first point yields nothing of its own:
// Next moves past it and returns the interval after it, if any.
func (c *Cursor) Next(v View) (Interval, bool) {
	for {
		j, p, ok := c.Peek(v)
		if !ok {
			return Interval{}, false
		}
		if iv, ok := c.Advance(j, p); ok {
			return iv, true
		}
	}
}

// Primed reports whether the cursor has passed a point.
func (c *Cursor) Primed() bool { return c.primed }

// Last returns the time and the total energy of the point the cursor
// passed last; zeros before the first.
func (c *Cursor) Last() (t int64, energyMJ uint64) { return c.prevT, c.prevE }

// Index returns the logical index of the point the cursor reaches next
// (see [Ring.At]).
func (c *Cursor) Index() uint64 { return c.next }

// OnSplit is the one hook of every stage that holds an interval, splits
// its energy among parts and hands the split on (the ledger among
// requests, the node agent among processes), so that a package that
// converts energy, such as carbon, hooks into either the same way. It is
// called once for each interval as it is finally split, on the
// splitting stage's goroutine: dev is the device's index and (a, b] the
// interval on the ring's clock; parts[i] got sharesMJ[i] of its energy
// and was active for coverNS[i] of its time (the rest of b − a was no
// part's); restMJ is the energy no part got, so that Σ sharesMJ + restMJ
// is the interval's energy. The slices are the stage's scratch, valid
// only during the call and not to be modified.
type OnSplit[P any] func(dev int, a, b int64, parts []P, sharesMJ []uint64, restMJ uint64, coverNS []uint64)
