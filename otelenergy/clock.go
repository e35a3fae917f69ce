package otelenergy

import "time"

// Clock reads the Monitor's clock once and returns it on both of the
// scales the node agent needs: ring, the nanoseconds since the Monitor
// was built on which [Monitor.Ring]'s points are stamped (monotonic when
// the clock is time.Now), and wall, the same instant as a wall-clock time,
// the scale on which NVML stamps its utilization samples. A time stamped
// on the wall clock maps to the ring's scale as
// ring - (wall.UnixNano() - stamp) for as long as the wall clock does not
// step between the stamp and the call; a step before the stamp does not
// matter, unlike a fixed offset taken once.
//
// Clock is safe for concurrent use, takes no lock, and does not
// allocate. On a nil Monitor it returns zero values.
func (m *Monitor) Clock() (ring int64, wall time.Time) {
	if m == nil {
		return 0, time.Time{}
	}
	wall = m.cfg.now()
	return int64(wall.Sub(m.epoch)), wall
}
