package proxy

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/freeport"
)

// freeAddr returns a loopback address that no socket held a moment ago,
// below the kernel's ephemeral range (see package freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p[0])
}

// TestWrapper runs the test binary as the wrapped backend: the proxy
// waits for it before serving, passes its environment through, forwards
// SIGTERM once drained, and exits with the child's status.
func TestWrapper(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGTERM, 3}, {syscall.SIGINT, 4}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			addr := freeAddr(t)
			t.Setenv(childAddrEnv, addr)
			t.Setenv(childDelayEnv, "700ms")
			t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-0c1a")
			began := time.Now()
			r := start(t, []string{"-simulate", "-horizon", "1s", "-backend", "http://" + addr, "--", os.Args[0], "-test.run=^$"}, nil)
			if d := time.Since(began); d < 700*time.Millisecond {
				t.Fatalf("the proxy served after %v, before the backend listened", d)
			}
			waitReady(t, r.admin)
			resp, body := post(t, context.Background(), http.DefaultClient, r.api, true)
			if resp.StatusCode != 200 || resp.Trailer.Get("Energy-Approximate") == "" {
				t.Fatalf("status %d, trailers %v, body %s", resp.StatusCode, resp.Trailer, body)
			}
			env, err := http.Get(r.api + "/env")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(env.Body)
			env.Body.Close()
			if string(got) != "GPU-0c1a" {
				t.Fatalf("the child's CUDA_VISIBLE_DEVICES is %q, want the proxy's", got)
			}
			if !strings.Contains(r.stderr.String(), "child_pid=") || !strings.Contains(r.stderr.String(), "attributed_pids=") {
				t.Fatalf("the log does not name the child and the attributed pids:\n%s", r.stderr)
			}
			r.sig <- c.sig
			select {
			case code := <-r.code:
				r.code <- code
				if code != c.want {
					t.Fatalf("exit status %d, want the child's %d:\n%s", code, c.want, r.stderr)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the proxy did not exit")
			}
		})
	}
}

// TestWrapperChildExits checks that a backend that exits before it
// answers makes the proxy exit with its status.
func TestWrapperChildExits(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv(childAddrEnv, addr)
	t.Setenv(childExitEnv, "5")
	var errOut syncBuffer
	code := Main([]string{"-simulate", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-backend", "http://" + addr, "--", os.Args[0]},
		Env{Stdout: &errOut, Stderr: &errOut, Signals: make(chan os.Signal)})
	if code != 5 || !strings.Contains(errOut.String(), "exited before it answered") {
		t.Fatalf("status %d, log:\n%s\nwant the child's 5", code, errOut.String())
	}
}
