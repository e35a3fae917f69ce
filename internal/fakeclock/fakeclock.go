// Package fakeclock is the one manual clock of the module's tests: a
// Monitor, a simulated GPU, a poller or a doctor reads it where it would
// read the wall clock, and the test moves it, so that no test depends on
// how fast the machine runs.
//
// A Clock is safe for concurrent use and lock-free: a sampler goroutine
// may read it while the test advances it.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Epoch returns where the module's test clocks usually start: a fixed
// instant, far from any real clock, so that nothing in a test can mistake
// it for now.
func Epoch() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }

// Clock is a clock that moves only when told. Create one with [New].
type Clock struct {
	base time.Time
	ns   atomic.Int64 // since base
}

// New returns a Clock that reads t until moved.
func New(t time.Time) *Clock { return &Clock{base: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.base.Add(time.Duration(c.ns.Load())) }

// Advance moves the clock d ahead (back, for a negative d).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Sleep is Advance, for code that sleeps on the clock it reads.
func (c *Clock) Sleep(d time.Duration) { c.Advance(d) }

// Set moves the clock to t, backwards too.
func (c *Clock) Set(t time.Time) { c.ns.Store(int64(t.Sub(c.base))) }

// Nanos returns the time since the clock's start, in ns: a monotonic
// reading for code that takes its clock as func() int64.
func (c *Clock) Nanos() int64 { return c.ns.Load() }

// Stepping returns a monotonic reading (as Nanos) that first moves the
// clock d ahead, for code that must see time pass at every reading.
func (c *Clock) Stepping(d time.Duration) func() int64 {
	return func() int64 { return c.ns.Add(int64(d)) }
}
