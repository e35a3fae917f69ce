package ledger

import "math"

// idlePower measures a device's static power on the intervals in which
// nothing ran: no request was active and no token was reported. While
// requests run, the static power and decode's busy power move together
// (something is always decoding), so a fit trades one for the other; the
// idle intervals tell them apart.
//
// It is a unit of its own with a narrow API (add an interval, read the
// power) so that it can be swapped for the repository's shared one.
type idlePower struct {
	joules, seconds float64 // summed with forgetting
}

// Idle-power learning: the memory of the sums, and how much idle time
// within it the measure needs before it is used.
const (
	idleForget     = 1800e9 // ns: the static power drifts slowly (temperature)
	minIdleSeconds = 0.5    // ten to twenty-five counter steps
)

// add folds in an interval of dt ns with y J; idle says nothing ran in
// it. Every interval ages the sums, idle or not, so that the measure
// forgets over wall time.
func (p *idlePower) add(y float64, dt int64, idle bool) {
	f := math.Exp(-float64(dt) / idleForget)
	p.joules, p.seconds = f*p.joules, f*p.seconds
	if idle {
		p.joules += y
		p.seconds += float64(dt) / nsPerSecond
	}
}

// watts returns the static power measured, and false until enough idle
// time has been seen.
func (p *idlePower) watts() (float64, bool) {
	if p.seconds < minIdleSeconds {
		return 0, false
	}
	return p.joules / p.seconds, true
}
