package agent

import (
	"context"
	"time"
)

// NewTicker is a ticker's channel and its stop, as [time.NewTicker] gives
// them; Run takes one so that tests drive the loop on a fake clock.
type NewTicker func(d time.Duration) (c <-chan time.Time, stop func())

// RealTicker is [time.NewTicker] as a [NewTicker].
func RealTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Run makes a pass at once and then one per tick of a ticker of interval
// from newTicker (time.NewTicker when nil), until ctx is done. It makes no
// final pass: the caller makes it, where its shutdown order puts it.
func (a *Agent) Run(ctx context.Context, interval time.Duration, newTicker NewTicker) {
	if newTicker == nil {
		newTicker = RealTicker
	}
	c, stop := newTicker(interval)
	defer stop()
	a.Pass()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
			a.Pass()
		}
	}
}
