package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
)

// adminHandler serves /healthz (the process answers) and /readyz (the
// first energy sample was taken, the backend answers, and the proxy is not
// draining).
func (p *runner) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+flags.HealthPath, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+flags.ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		var why string
		switch {
		case p.draining.Load():
			why = "draining"
		case !p.backend.OK():
			why = "the backend does not answer on " + p.cfg.Backend.String() + p.cfg.BackendHealth
		case !p.started.Load():
			why = "no energy sample yet"
		}
		if why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

// Backend polling: fast until the backend first answers, slower after.
const (
	pollStarting = 500 * time.Millisecond
	pollServing  = 5 * time.Second
	pollTimeout  = 2 * time.Second
)

// backendCheck polls the backend's health path and keeps the last result.
// A change of state is logged once.
type backendCheck struct {
	url     string
	log     *slog.Logger
	client  *http.Client
	ok      atomic.Bool
	healthy chan struct{} // closed at the first success
	once    sync.Once
	cancel  context.CancelFunc
	done    chan struct{}
}

func newBackendCheck(cfg flags.Config, lg *slog.Logger) *backendCheck {
	u := *cfg.Backend
	u.Path = cfg.BackendHealth
	ctx, cancel := context.WithCancel(context.Background())
	b := &backendCheck{url: u.String(), log: lg, client: &http.Client{Timeout: pollTimeout},
		healthy: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go b.loop(ctx)
	return b
}

func (b *backendCheck) loop(ctx context.Context) {
	defer close(b.done)
	var lastErr string
	for {
		err := b.probe(ctx)
		switch {
		case err == nil && !b.ok.Load():
			b.ok.Store(true)
			b.once.Do(func() { close(b.healthy) })
			b.log.Info("backend answers", slog.String("url", b.url))
			lastErr = ""
		case err != nil && ctx.Err() == nil:
			if b.ok.Swap(false) || err.Error() != lastErr {
				b.log.Warn("backend does not answer", slog.String("url", b.url), slog.String("error", err.Error()))
			}
			lastErr = err.Error()
		}
		wait := pollStarting
		if b.ok.Load() {
			wait = pollServing
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (b *backendCheck) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	// A server that is up answers; one still loading its model answers
	// 503 (llama.cpp server) or not at all. A 404 is an answer: the
	// server runs, it only lacks the path (the demo app has no
	// /v1/models).
	if resp.StatusCode >= 500 {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + http.StatusText(e.code) }

// OK reports whether the last probe succeeded.
func (b *backendCheck) OK() bool { return b.ok.Load() }

// Healthy is closed once the backend has answered.
func (b *backendCheck) Healthy() <-chan struct{} { return b.healthy }

// Stop stops polling and waits for the poller to exit.
func (b *backendCheck) Stop() {
	b.cancel()
	<-b.done
	b.client.CloseIdleConnections()
}
