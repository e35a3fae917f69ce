package proxy

import (
	"log/slog"
	"strings"

	"github.com/otelenergy/otelenergy/internal/cli"
)

// onceLog logs each distinct error once and counts its repeats: the
// proxy's OpenTelemetry error handler and net/http's error log.
type onceLog = cli.OnceLog

func newOnceLog(log *slog.Logger, msg string) *onceLog { return cli.NewOnceLog(log, msg) }

// errorLogWriter adapts net/http's error log to slog, through onceLog,
// so that a flood of bad connections is one line and a count.
type errorLogWriter struct{ o *onceLog }

func (w errorLogWriter) Write(p []byte) (int, error) {
	w.o.Handle(stringError(strings.TrimRight(string(p), "\n")))
	return len(p), nil
}

type stringError string

func (e stringError) Error() string { return string(e) }
