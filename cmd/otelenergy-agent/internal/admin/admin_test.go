package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/admin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeReady struct{ ready atomic.Bool }

func (f *fakeReady) Ready() bool    { return f.ready.Load() }
func (f *fakeReady) Passes() uint64 { return 3 }

func get(h http.Handler, path string) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// TestReadiness walks /readyz through not ready, ready and shutting down:
// it turns 503 as soon as shutdown starts, while /healthz stays 200.
func TestReadiness(t *testing.T) {
	r := &fakeReady{}
	s := admin.New(r)
	h := s.Handler()
	if c := get(h, "/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready = %d, want 503", c)
	}
	r.ready.Store(true)
	if c := get(h, "/readyz"); c != http.StatusOK {
		t.Errorf("/readyz when ready = %d, want 200", c)
	}
	s.Stopping()
	if c := get(h, "/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while shutting down = %d, want 503", c)
	}
	if c := get(h, "/healthz"); c != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", c)
	}
}

// TestListenServesThenShutsDown serves on loopback, flips readiness, then
// shuts down; the goroutine ends (goleak) and the port is closed.
func TestListenServesThenShutsDown(t *testing.T) {
	r := &fakeReady{}
	r.ready.Store(true)
	s, err := admin.Listen("127.0.0.1:0", r, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	status := func() int {
		resp, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := status(); c != http.StatusOK {
		t.Fatalf("/readyz = %d", c)
	}
	s.Stopping()
	if c := status(); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after Stopping = %d, want 503 while still listening", c)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", s.Addr()); err == nil {
		t.Fatal("still listening after Shutdown")
	}
}

// TestReadinessConcurrentSafe probes while shutdown starts, for the race
// detector: every answer is 200 or 503, and 503 once Stopping returned.
func TestReadinessConcurrentSafe(t *testing.T) {
	r := &fakeReady{}
	r.ready.Store(true)
	s := admin.New(r)
	h := s.Handler()
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			after := stopped.Load()
			c := get(h, "/readyz")
			if c != http.StatusOK && c != http.StatusServiceUnavailable || after && c != http.StatusServiceUnavailable {
				t.Errorf("/readyz = %d (stopped before: %v)", c, after)
				return
			}
		}
	}()
	s.Stopping()
	stopped.Store(true)
	<-done
}

// TestNewListensOnNothing checks a Server from New: no address, and a
// Shutdown that only turns /readyz to 503.
func TestNewListensOnNothing(t *testing.T) {
	r := &fakeReady{}
	r.ready.Store(true)
	s := admin.New(r)
	if a := s.Addr(); a != "" {
		t.Fatalf("Addr = %q", a)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := get(s.Handler(), "/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after Shutdown = %d, want 503", c)
	}
}
