package source

import (
	"time"

	"github.com/otelenergy/otelenergy/ring"
)

// Rings is what the node agent reads of a Monitor: the metered devices,
// each one's counter steps as a read-only ring, and the Monitor's clock.
// Package otelenergy hands it to a [Tapped] source's Tap; it is no part
// of otelenergy's public API.
type Rings interface {
	// Devices returns the metered devices, as Monitor.Devices.
	Devices() []Device
	// Ring returns a read-only view of device i's counter steps: each
	// point is a step at its estimated instant, with the device's
	// cumulative energy and the output token total of the sample that
	// found the step. It fails with ErrInvalidDevice for an index out of
	// range.
	Ring(i int) (ring.View, error)
	// Clock reads the Monitor's clock once and returns it on both of the
	// scales the agent needs: ring, the nanoseconds since the Monitor was
	// built on which the rings' points are stamped (monotonic when the
	// clock is time.Now), and wall, the same instant on the wall clock,
	// the scale on which NVML stamps its utilization samples. It is safe
	// for concurrent use, takes no lock and does not allocate.
	Clock() (ring int64, wall time.Time)
}

// Tapped is a Source that wraps another to receive the Monitor's [Rings]:
// NewMonitor meters Inner(), with every optional interface Inner has (so
// the wrapper need not forward them), and calls Tap once, before it
// returns, with the new Monitor's rings. This is how the node agent reads
// a Monitor's steps without otelenergy exporting them.
type Tapped interface {
	Source
	Inner() Source
	Tap(Rings)
}
