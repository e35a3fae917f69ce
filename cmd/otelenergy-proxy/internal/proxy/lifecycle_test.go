package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLifecycleReverseOrder checks that services stop in the reverse of
// their start, each once, with every error wrapped and named.
func TestLifecycleReverseOrder(t *testing.T) {
	var l lifecycle
	var stopped []string
	errB := errors.New("b broke")
	for _, name := range []string{"a", "b", "c"} {
		l.add(name, func(context.Context) error {
			stopped = append(stopped, name)
			if name == "b" {
				return errB
			}
			return nil
		})
	}
	err := l.shutdown(context.Background())
	if !slices.Equal(stopped, []string{"c", "b", "a"}) {
		t.Fatalf("stopped %v, want c b a", stopped)
	}
	if !errors.Is(err, errB) || err.Error() != "failed to shut down b: b broke" {
		t.Fatalf("error %q, want b's wrapped and named", err)
	}
	if err := l.shutdown(context.Background()); err != nil || len(stopped) != 3 {
		t.Fatalf("a second shutdown stopped again: %v %v", stopped, err)
	}
}

// startStages are the stages of a wrapper-mode start under -simulate, in
// order.
var startStages = []string{"listeners", "admin server", "backend check", "backend", "energy source", "telemetry", "carbon", "energy monitor", "API server"}

// TestStartFailureAtEveryStage fails the start after each stage in turn:
// the proxy must exit 1 with the error, stop the backend it started,
// release both addresses, log no "stopped" line, and leak no goroutine
// (TestMain checks).
func TestStartFailureAtEveryStage(t *testing.T) {
	errStage := errors.New("injected")
	for i, stage := range startStages {
		t.Run(stage, func(t *testing.T) {
			var reached []string
			startHook = func(s string) error {
				reached = append(reached, s)
				if s == stage {
					return fmt.Errorf("%s: %w", s, errStage)
				}
				return nil
			}
			t.Cleanup(func() { startHook = nil })
			backendAddr, api, admin := freeAddr(t), freeAddr(t), freeAddr(t)
			t.Setenv(childAddrEnv, backendAddr)
			var logs syncBuffer
			code := Main([]string{"-simulate", "-listen", api, "-admin-listen", admin, "-backend", "http://" + backendAddr, "-drain-timeout", "5s",
				"--", os.Args[0], "-test.run=^$"}, Env{Stdout: &logs, Stderr: &logs, Signals: make(chan os.Signal, 1)})
			if code != exitFailure || !strings.Contains(logs.String(), "injected") || strings.Contains(logs.String(), "stopped") {
				t.Fatalf("status %d, log:\n%s\nwant 1, the injected error and no stopped line", code, logs.String())
			}
			if !slices.Equal(reached, startStages[:i+1]) {
				t.Fatalf("stages reached %v", reached)
			}
			if m := regexp.MustCompile(`backend started pid=(\d+)`).FindStringSubmatch(logs.String()); m != nil {
				pid, _ := strconv.Atoi(m[1])
				if !dead(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("the backend, pid %d, outlived a failed start", pid)
				}
			}
			for _, a := range []string{api, admin} {
				ln, err := net.Listen("tcp", a)
				if err != nil {
					t.Fatalf("%s still bound after a failed start: %v", a, err)
				}
				ln.Close()
			}
		})
	}
}

// TestTakenPortFailsFast takes the API's address: the proxy exits 1 at
// once with one error naming -listen, before starting a backend.
func TestTakenPortFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs syncBuffer
	began := time.Now()
	code := Main([]string{"-simulate", "-listen", ln.Addr().String(), "-admin-listen", "127.0.0.1:0", "--", "sh", "-c", "echo started"},
		Env{Stdout: &logs, Stderr: &logs, Signals: make(chan os.Signal, 1)})
	l := logs.String()
	if code != exitFailure || !strings.Contains(l, "-listen") || !strings.Contains(l, "address already in use") ||
		strings.Contains(l, "stopped") || strings.Contains(l, "backend started") || strings.Count(l, "level=ERROR") != 1 {
		t.Fatalf("status %d after %v, log:\n%s\nwant 1 and one error naming -listen, no backend", code, time.Since(began), l)
	}
}

// TestNVMLCheckedBeforeChild runs wrapper mode without -simulate on this
// machine, which has no NVML: the proxy must fail before it starts the
// backend, which would otherwise load its model first.
func TestNVMLCheckedBeforeChild(t *testing.T) {
	marker := t.TempDir() + "/started"
	var logs syncBuffer
	code := Main([]string{"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "--", "sh", "-c", "touch " + marker + "; sleep 5"},
		Env{Stdout: &logs, Stderr: &logs, Signals: make(chan os.Signal, 1)})
	if code == exitOK && strings.Contains(logs.String(), "source=nvml") {
		t.Skip("NVML is present here")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the backend started before NVML was found missing:\n%s", logs.String())
	}
	if code != exitFailure || !strings.Contains(logs.String(), "NVML is not available") {
		t.Fatalf("status %d, log:\n%s", code, logs.String())
	}
}

// TestServeErrorEndsRun checks that a server whose Serve fails reports
// it, where the admin server's error used to be dropped.
func TestServeErrorEndsRun(t *testing.T) {
	p := &runner{failed: make(chan error, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // Serve fails at once
	p.serveHTTP("admin server", &http.Server{}, ln)
	select {
	case err := <-p.failed:
		if !strings.Contains(err.Error(), "admin server") {
			t.Fatalf("error %q does not name the server", err)
		}
	default:
		t.Fatal("the failed Serve was not reported")
	}
}

// fakeDelay releases -shutdown-delay when the test says.
type fakeDelay struct{ fire chan time.Time }

func (c fakeDelay) After(time.Duration) <-chan time.Time { return c.fire }

// TestShutdownDelayKeepsServing checks, on a fake clock, that after
// SIGTERM /readyz says 503 at once while the API still takes new
// requests, until the delay passes; then new connections are refused.
func TestShutdownDelayKeepsServing(t *testing.T) {
	clk := fakeDelay{fire: make(chan time.Time)}
	b := newTestBackend(t)
	r := startEnv(t, []string{"-simulate", "-backend", b, "-horizon", "1s", "-shutdown-delay", "1h"}, nil, func(e *Env) { e.After = clk.After })
	waitReady(t, r.admin)
	r.sig <- syscall.SIGTERM
	waitStatus(t, r.admin+"/readyz", http.StatusServiceUnavailable)
	resp, body := post(t, context.Background(), &http.Client{}, r.api, false)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request during the shutdown delay got %d: %s", resp.StatusCode, body)
	}
	clk.fire <- time.Now()
	if code := <-r.code; code != 0 {
		t.Fatalf("exit %d", code)
	}
	r.code <- 0
	if _, err := http.Get(r.api + "/v1/models"); err == nil {
		t.Fatal("the API still accepts connections after the delay and the drain")
	}
}

// TestSecondSignalStopsNow sends SIGTERM, then, during a shutdown delay
// that would last an hour, SIGINT: the proxy says so, forwards SIGINT to
// the wrapped backend (which exits 4 on SIGINT, 3 on SIGTERM) and exits
// with the backend's status, without claiming a drain timed out.
func TestSecondSignalStopsNow(t *testing.T) {
	clk := fakeDelay{fire: make(chan time.Time)}
	addr := freeAddr(t)
	t.Setenv(childAddrEnv, addr)
	r := startEnv(t, []string{"-simulate", "-horizon", "1s", "-shutdown-delay", "1h", "-backend", "http://" + addr, "--", os.Args[0], "-test.run=^$"},
		nil, func(e *Env) { e.After = clk.After })
	waitReady(t, r.admin)
	r.sig <- syscall.SIGTERM
	waitStatus(t, r.admin+"/readyz", http.StatusServiceUnavailable)
	r.sig <- syscall.SIGINT
	select {
	case code := <-r.code:
		r.code <- code
		l := r.stderr.String()
		if code != 4 || !strings.Contains(l, "second signal: stopping now") || strings.Contains(l, "drain timed out") {
			t.Fatalf("status %d, log:\n%s\nwant the backend's 4 for SIGINT and the second signal logged", code, l)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the proxy did not stop on the second signal:\n%s", r.stderr)
	}
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %d after 10 s (%v)", url, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
