package proxy

import (
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxDistinctErrors bounds the errors [onceLog] keeps counts for; beyond
// it new errors are counted together.
const maxDistinctErrors = 256

// onceLog logs each distinct error message once and counts its repeats,
// which it logs as a summary every summaryEvery and on Close. It is the
// OpenTelemetry error handler (the sampler's read errors, exporters'
// failures), whose errors repeat at a sampling or export cadence.
type onceLog struct {
	log *slog.Logger
	msg string

	mu       sync.Mutex
	repeats  map[string]uint64 // message -> repeats since the last summary
	overflow uint64
	stop     chan struct{}
	done     chan struct{}
}

const summaryEvery = time.Minute

func newOnceLog(log *slog.Logger, msg string) *onceLog {
	o := &onceLog{log: log, msg: msg, repeats: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		t := time.NewTicker(summaryEvery)
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
func (o *onceLog) Handle(err error) {
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
func (o *onceLog) summary() {
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

// Close stops the summaries and logs the last one.
func (o *onceLog) Close() {
	close(o.stop)
	<-o.done
	o.summary()
}

// errorLogWriter adapts net/http's error log to slog, through onceLog,
// so that a flood of bad connections is one line and a count.
type errorLogWriter struct{ o *onceLog }

func (w errorLogWriter) Write(p []byte) (int, error) {
	w.o.Handle(stringError(strings.TrimRight(string(p), "\n")))
	return len(p), nil
}

type stringError string

func (e stringError) Error() string { return string(e) }
