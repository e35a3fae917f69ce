package ledger

import (
	"time"

	"github.com/otelenergy/otelenergy/internal/idlepower"
)

// idlePower measures a device's static power on the intervals in which
// nothing ran: no request was active and no token was reported. While
// requests run, the static power and decode's busy power move together
// (something is always decoding), so a fit trades one for the other; the
// idle intervals tell them apart.
//
// The measurement is idlepower's, the one every caller shares; the
// ledger says which intervals are idle, keeps the time its intervals add
// up to, on which the sums forget, and asks for minIdleSeconds of idle
// time rather than idlepower's default: its intervals run from one
// counter step to the next, so no misplaced step weighs in them.
type idlePower struct {
	mean idlepower.Mean
	t    int64 // ns: the intervals' lengths summed
}

// Idle-power learning: the memory of the sums (the static power drifts
// slowly, with temperature, and a busy service sees few idle intervals),
// and the idle time the measure needs before it is used (ten to
// twenty-five counter steps).
const (
	idleForget     = 30 * time.Minute
	minIdleSeconds = 0.5
)

// add folds in an interval of dt ns with y J; idle says nothing ran in
// it. Every interval ages the sums, idle or not, so that the measure
// forgets over wall time.
func (p *idlePower) add(y float64, dt int64, idle bool) {
	p.mean.Horizon, p.mean.Min = idleForget, minIdleSeconds
	p.t += max(dt, 0)
	p.mean.Forget(p.t)
	if idle {
		p.mean.Add(float64(dt)/nsPerSecond, y*1000)
	}
}

// watts returns the static power measured, and false until
// minIdleSeconds of idle time have been seen.
func (p *idlePower) watts() (float64, bool) { return p.mean.Watts() }
