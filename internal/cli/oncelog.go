package cli

import (
	"log/slog"
	"sync"
	"time"
)

// maxDistinctErrors bounds the errors an [OnceLog] keeps counts for;
// beyond it new errors are counted together.
const maxDistinctErrors = 256

// SummaryEvery is how often an [OnceLog] logs the repeats it counted.
const SummaryEvery = time.Minute

// OnceLog logs each distinct error message once, at warn, and counts its
// repeats, which it logs as a summary every [SummaryEvery] and on Close.
// A binary installs it as the OpenTelemetry error handler (otel.SetErrorHandler),
// whose errors (a sampler's read errors, an exporter's failures) repeat
// at a sampling or export cadence: an unreachable Collector is one line,
// then a count a minute, not a line per export. Create one with
// [NewOnceLog]; its methods are safe for concurrent use.
type OnceLog struct {
	log *slog.Logger
	msg string

	mu       sync.Mutex
	repeats  map[string]uint64 // message -> repeats since the last summary
	overflow uint64
	stop     chan struct{}
	done     chan struct{}
	closed   sync.Once
}

// NewOnceLog returns an OnceLog that logs to log with message msg (the
// error goes in the "error" attribute), and starts its summaries; Close
// stops them.
func NewOnceLog(log *slog.Logger, msg string) *OnceLog {
	o := &OnceLog{log: log, msg: msg, repeats: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		t := time.NewTicker(SummaryEvery)
		defer t.Stop()
		for {
			select {
			case <-o.stop:
				return
			case <-t.C:
				o.summary()
			}
		}
	}()
	return o
}

// Handle implements otel.ErrorHandler.
func (o *OnceLog) Handle(err error) {
	if err == nil {
		return
	}
	s := err.Error()
	o.mu.Lock()
	n, seen := o.repeats[s]
	switch {
	case seen:
		o.repeats[s] = n + 1
	case len(o.repeats) >= maxDistinctErrors:
		o.overflow++
	default:
		o.repeats[s] = 0
	}
	o.mu.Unlock()
	if !seen {
		o.log.Warn(o.msg, slog.String("error", s))
	}
}

// summary logs the repeats counted since the previous summary.
func (o *OnceLog) summary() {
	o.mu.Lock()
	type rep struct {
		msg string
		n   uint64
	}
	var reps []rep
	for s, n := range o.repeats {
		if n > 0 {
			reps = append(reps, rep{s, n})
			o.repeats[s] = 0
		}
	}
	overflow := o.overflow
	o.overflow = 0
	o.mu.Unlock()
	for _, r := range reps {
		o.log.Warn(o.msg+" repeated", slog.String("error", r.msg), slog.Uint64("count", r.n))
	}
	if overflow > 0 {
		o.log.Warn(o.msg+" repeated", slog.String("error", "other errors"), slog.Uint64("count", overflow))
	}
}

// Close stops the summaries and logs the last one. Errors handled after
// Close are still logged once, and their repeats are not reported.
func (o *OnceLog) Close() {
	o.closed.Do(func() {
		close(o.stop)
		<-o.done
		o.summary()
	})
}
