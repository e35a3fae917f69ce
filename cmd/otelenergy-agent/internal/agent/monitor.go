package agent

import (
	"context"
	"errors"
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// ClockedRings is what [NewMonitor] returns beside the Monitor: [Rings]
// with the Monitor's clock on both scales (see [Config.Now]).
type ClockedRings interface {
	Rings
	Clock() (ring int64, wall time.Time)
}

// NewMonitor builds the library's Monitor over src, with opts, and
// returns it with its rings and clock for [Config.Rings]: otelenergy does
// not export them, and hands them to a source that asks (package
// source's Tapped), which src is wrapped in here.
func NewMonitor(src otelenergy.Source, opts ...otelenergy.Option) (*otelenergy.Monitor, ClockedRings, error) {
	t := &tapped{Source: src}
	mon, err := otelenergy.NewMonitor(t, opts...)
	if err != nil {
		return nil, nil, err
	}
	if t.rings == nil {
		mon.Shutdown(context.Background()) // unreachable: NewMonitor taps every source that asks
		return nil, nil, errors.New("agent: the Monitor handed no rings")
	}
	return mon, t.rings, nil
}

// tapped wraps the agent's source so that the Monitor hands over its
// rings; the Monitor meters the source itself (Inner), so its optional
// interfaces need no forwarding.
type tapped struct {
	otelenergy.Source
	rings source.Rings
}

func (t *tapped) Inner() source.Source { return t.Source }
func (t *tapped) Tap(r source.Rings)   { t.rings = r }
