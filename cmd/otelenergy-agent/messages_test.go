package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
)

// TestMissingTokenFile: a -carbon-token-file that cannot be read is a bad
// argument like any other, exit status 2 and one line naming it, before
// anything starts or exports.
func TestMissingTokenFile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "nope")
	args := []string{"-simulate", "-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-token-file", missing}
	if got := run(context.Background(), args, env(nil), &stdout, &stderr, app.Deps{}); got != 2 {
		t.Fatalf("status %d, want 2; stderr:\n%s", got, stderr.String())
	}
	s := strings.TrimSpace(stderr.String())
	if strings.Contains(s, "\n") || !strings.Contains(s, "-carbon-token-file") || !strings.Contains(s, missing) {
		t.Fatalf("stderr %q: want one line naming -carbon-token-file and the file", s)
	}
}

// TestRepeatedErrorLoggedOnce runs the agent against an OTLP endpoint
// nothing listens on, and hands its error handler the same background
// error three times while it runs: each error is logged once, and its
// repeats are counted in one line at exit, as the proxy does.
func TestRepeatedErrorLoggedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_METRIC_EXPORT_INTERVAL": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "50"}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	var stderr lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-simulate", "-simulate-devices", "1", "-admin-listen", ""}, env(vars), io.Discard, &stderr, app.Deps{})
	}()
	// The handler is installed before the services start.
	for !strings.Contains(stderr.String(), "exporting metrics") {
		select {
		case got := <-done:
			t.Fatalf("the agent exited (%d) before it started:\n%s", got, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	boom := errors.New("read GPU 0: ERROR_UNKNOWN")
	for range 3 {
		otel.Handle(boom)
	}
	cancel()
	if got := <-done; got != 0 {
		t.Fatalf("status %d, want 0; stderr:\n%s", got, stderr.String())
	}
	s := stderr.String()
	if n := strings.Count(s, `msg="background error" error="read GPU 0: ERROR_UNKNOWN"`); n != 1 {
		t.Errorf("the error logged %d times, want once:\n%s", n, s)
	}
	if !strings.Contains(s, `msg="background error repeated" error="read GPU 0: ERROR_UNKNOWN" count=2`) {
		t.Errorf("no count of its 2 repeats:\n%s", s)
	}
	// The exports' failures, however many there were, are one line each.
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, `msg="background error" error=`) && strings.Contains(l, addr) && strings.Count(s, l) > 1 {
			t.Errorf("logged more than once: %s", l)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
