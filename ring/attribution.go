package ring

import "math"

// JoulesPerToken returns deltaMJ/1000/tokens: the energy per token over a
// window that metered deltaMJ millijoules and produced tokens tokens. It
// returns false when either is zero, so the result is never 0, NaN or ±Inf.
func JoulesPerToken(deltaMJ, tokens uint64) (float64, bool) {
	if deltaMJ == 0 || tokens == 0 {
		return 0, false
	}
	return float64(deltaMJ) / 1000 / float64(tokens), true
}

// Window is the part of the series between two edge points.
type Window struct {
	// Start and End are the points at or before the window's edges.
	Start, End Point
	// Samples is the number of points pushed after Start up to and including
	// End: the counter samples inside the window.
	Samples int
}

// EnergyMJ returns the energy metered over the window. It is zero if the
// cumulative energy did not advance.
func (w Window) EnergyMJ() uint64 { return satSub(w.End.EnergyMJ, w.Start.EnergyMJ) }

// Tokens returns the tokens produced over the window.
func (w Window) Tokens() uint64 { return satSub(w.End.Tokens, w.Start.Tokens) }

// Seconds returns the time between the window's edge points.
func (w Window) Seconds() float64 { return float64(w.End.T-w.Start.T) / 1e9 }

// JoulesPerToken returns the window's energy per token, as [JoulesPerToken].
func (w Window) JoulesPerToken() (float64, bool) {
	return JoulesPerToken(w.EnergyMJ(), w.Tokens())
}

// Watts returns the window's mean power. It returns false when the edge
// points are at the same time.
func (w Window) Watts() (float64, bool) {
	s := w.Seconds()
	if s <= 0 {
		return 0, false
	}
	v := float64(w.EnergyMJ()) / 1000 / s
	return v, !math.IsInf(v, 0)
}

// Window returns the window [start, end], each edge taken at the newest
// point at or before it, as [Ring.AtOrBefore]. It returns false when the ring
// is empty or end is before start.
func (r *Ring) Window(start, end int64) (Window, bool) {
	if end < start {
		return Window{}, false
	}
	i0, p0, ok := r.atOrBefore(start, r.written.Load())
	if !ok {
		return Window{}, false
	}
	i1, p1, ok := r.atOrBefore(end, r.written.Load())
	if !ok {
		return Window{}, false
	}
	if i1 < i0 {
		// The start edge's oldest point was overwritten between the two
		// lookups; the end lookup is the newer view of the same data.
		i0, p0 = i1, p1
	}
	return Window{Start: p0, End: p1, Samples: int(i1 - i0)}, true
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
