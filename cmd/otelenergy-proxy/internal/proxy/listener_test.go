//go:build linux

package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
)

func TestListenerPID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := listenerPID("/proc", ln.Addr().(*net.TCPAddr).Port); got != os.Getpid() {
		t.Fatalf("listener of port %d: pid %d, want this process, %d", ln.Addr().(*net.TCPAddr).Port, got, os.Getpid())
	}
	free := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if got := listenerPID("/proc", free); got != 0 {
		t.Fatalf("a closed port's listener: pid %d", got)
	}
}

// TestFindBackend finds this process as the backend listening on an
// httptest server's port, and warns when nothing listens.
func TestFindBackend(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(srv.URL)
	var logs syncBuffer
	p := &runner{cfg: flags.Config{Backend: u}, env: Env{ProcRoot: "/proc"}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if got := p.findBackend(); len(got) == 0 || got[0] != os.Getpid() {
		t.Fatalf("backend tree %v, want this process first", got)
	}
	srv.Close()
	if got := p.findBackend(); got != nil || !strings.Contains(logs.String(), "pass -backend-pid") {
		t.Fatalf("with nothing listening: %v, log %q", got, logs.String())
	}
}
