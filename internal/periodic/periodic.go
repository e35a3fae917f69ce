// Package periodic runs a function at a fixed interval on a goroutine of
// its own until it is stopped: the process listings of the sources that
// split a board among processes (NVML, AMD SMI, RAPL's CPU time) run on
// one each.
//
// # Guarantees
//
//   - At most one call of the function runs at a time, and none starts
//     after [Loop.Stop] has returned.
//   - [Loop.Stop] waits for a call in progress, so a source can close what
//     the function reads once it returns.
package periodic

import (
	"sync"
	"time"
)

// Loop is a running periodic call, made by [Start]. A nil *Loop is a loop
// that never ran: its Stop returns at once. A Loop must not be copied.
type Loop struct {
	stop, done chan struct{}
	once       sync.Once
}

// Start calls f every interval, the first time one interval from now,
// until [Loop.Stop]. A non-positive interval starts nothing and returns
// nil.
func Start(interval time.Duration, f func()) *Loop {
	if interval <= 0 {
		return nil
	}
	l := &Loop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return l
}

// Stop ends the loop and waits for a call of f in progress to return. It
// is safe to call more than once, from several goroutines at once.
func (l *Loop) Stop() {
	if l == nil {
		return
	}
	l.once.Do(func() { close(l.stop) })
	<-l.done
}
