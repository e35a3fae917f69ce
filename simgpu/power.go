package simgpu

import "math"

// piece is the power of every board over one span of constant activity
// (the same jobs, each in the same phase), before the boards' gains. The
// board draws base at every instant, plus work scaled by its power state:
// floor + (1 − floor) × level, where the level moves exponentially with
// time constant tau, towards 1 while rise (jobs are active) and towards 0
// otherwise. Without a ramp (floor 1) the level does not matter and the
// power is constant.
type piece struct {
	base, work float64 // W
	floor      float64
	l0         float64 // the level at the piece's start
	tau        float64 // ns; 0 moves the level to its target at once
	rise       bool
}

// newPiece returns the piece that starts at level l0 with the active
// jobs drawing work W above idle (busy), or, with none active, the tail.
func (g *GPU) newPiece(work float64, busy bool, l0 float64) piece {
	c := &g.cfg
	p := piece{base: c.IdleWatts, l0: l0, rise: busy}
	if busy {
		p.work, p.floor, p.tau = work, 1, float64(c.RampTime)
		if c.RampTime > 0 {
			p.floor = c.RampFloor
		}
		return p
	}
	p.work, p.tau = c.TailWatts, float64(c.TailTime)
	return p
}

// mj returns the energy of the first d ns of the piece, in mJ.
func (p piece) mj(d int64) float64 {
	if p.floor == 1 {
		return (p.base + p.work) * float64(d) / 1e6
	}
	return (p.base*float64(d) + p.work*p.workNS(d)) / 1e6
}

// workNS returns how many ns of work at full power the first d ns of the
// piece hold: ∫ floor + (1 − floor)·level.
func (p piece) workNS(d int64) float64 {
	x := float64(d)
	if p.floor == 1 {
		return x
	}
	return p.floor*x + (1-p.floor)*p.levelIntegral(x)
}

// levelIntegral returns ∫ level over the first x ns.
func (p piece) levelIntegral(x float64) float64 {
	switch {
	case p.tau == 0 && p.rise:
		return x
	case p.tau == 0:
		return 0
	case p.rise:
		return x - (1-p.l0)*p.tau*-math.Expm1(-x/p.tau)
	default:
		return p.l0 * p.tau * -math.Expm1(-x/p.tau)
	}
}

// levelAt returns the level d ns into the piece.
func (p piece) levelAt(d int64) float64 {
	switch {
	case p.tau == 0 && p.rise:
		return 1
	case p.tau == 0:
		return 0
	case p.rise:
		return 1 - (1-p.l0)*math.Exp(-float64(d)/p.tau)
	default:
		return p.l0 * math.Exp(-float64(d)/p.tau)
	}
}
