package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
)

// Readiness is what /readyz asks: whether the agent is ready, and how many
// passes it made. *agent.Agent implements it.
type Readiness interface {
	Ready() bool
	Passes() uint64
}

// Server serves the probes, [flags.HealthPath] and [flags.ReadyPath]. Create
// one with [Listen], which serves them on a listener of its own, or with
// [New], whose [Server.Handler] the caller serves. Its methods are safe for
// concurrent use.
type Server struct {
	ready    Readiness
	stopping atomic.Bool
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	err      error // Serve's error, set before done closes
}

// Handler returns the probes' handler over ready.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+flags.HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+flags.ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.stopping.Load():
			http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
		case !s.ready.Ready():
			http.Error(w, "not ready: no pass yet, or every GPU lost", http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ready: " + strconv.FormatUint(s.ready.Passes(), 10) + " passes\n"))
		}
	})
	return mux
}

// New returns a Server over ready that listens on nothing: the caller
// serves its [Server.Handler]; its Shutdown only turns /readyz to 503.
func New(ready Readiness) *Server {
	s := &Server{ready: ready, done: make(chan struct{})}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	return s
}

// Listen listens on addr with listen (net.Listen when nil) and serves the
// probes on a goroutine until [Server.Shutdown]. A Serve failure is logged
// to log and returned by Shutdown.
func Listen(addr string, ready Readiness, listen func(network, addr string) (net.Listener, error), log *slog.Logger) (*Server, error) {
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := New(ready)
	s.ln = ln
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
			log.Error("admin server failed", "err", err)
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on; "" for a Server from
// [New].
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stopping makes /readyz answer 503 from now on.
func (s *Server) Stopping() { s.stopping.Store(true) }

// Shutdown closes the listener, waits for the requests in progress within
// ctx, and returns the server's own failure, if it failed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Stopping()
	err := s.srv.Shutdown(ctx)
	if s.ln != nil {
		<-s.done
	}
	return errors.Join(err, s.err)
}
