package otelenergy

import (
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/ring"
)

// tap is a Monitor's [source.Rings], handed to a [source.Tapped] source:
// the node agent's view of the Monitor, kept off its public API.
type tap struct{ m *Monitor }

var _ source.Rings = tap{}

func (t tap) Devices() []Device                   { return t.m.Devices() }
func (t tap) Ring(i int) (ring.View, error)       { return t.m.view(i) }
func (t tap) Clock() (ring int64, wall time.Time) { return t.m.clock() }

// clock reads the Monitor's clock once and returns it on both of the
// scales of [source.Rings].Clock. On a nil Monitor it returns zero values.
func (m *Monitor) clock() (ring int64, wall time.Time) {
	if m == nil {
		return 0, time.Time{}
	}
	wall = m.cfg.now()
	return int64(wall.Sub(m.epoch)), wall
}
