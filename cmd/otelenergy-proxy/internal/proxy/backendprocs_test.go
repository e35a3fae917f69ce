//go:build linux

package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
)

// stepShell is a shell that takes a step at each line written to it: it
// starts a sleep and prints its pid, then kills it and prints "gone"
// once it is reaped. Its steps wait for the test, not for a clock.
type stepShell struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startStepShell(t *testing.T) *stepShell {
	t.Helper()
	cmd := exec.Command("sh", "-c", `read x; sleep 300 & echo $!; read x; kill $!; wait $!; echo gone; read x`)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := &stepShell{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return sh
}

// step lets the shell take its next step and returns the line it prints.
func (s *stepShell) step(t *testing.T) string {
	t.Helper()
	if _, err := io.WriteString(s.in, "\n"); err != nil {
		t.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// TestBackendProcsFollowChild: in wrapper mode the set is the child's
// tree at each call: a process it starts is a member from the first
// call after it started, and drops out once it has exited; each change
// is logged once.
func TestBackendProcsFollowChild(t *testing.T) {
	sh := startStepShell(t)
	var logs syncBuffer
	u, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(closedPort(t)))
	b := newBackendProcs("/proc", sh.cmd.Process.Pid, u, slog.New(slog.NewTextHandler(&logs, nil)))
	if b == nil {
		t.Fatal("no process set for a wrapped child")
	}
	if got := b.AppendPIDs(nil); !slices.Equal(got, []int{sh.cmd.Process.Pid}) {
		t.Fatalf("before the runner: %v, want the shell alone", got)
	}
	runner, err := strconv.Atoi(sh.step(t))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(runner, syscall.SIGKILL)
	if got := b.AppendPIDs([]int{1}); !slices.Equal(got, []int{1, sh.cmd.Process.Pid, runner}) {
		t.Fatalf("after the runner started: %v, want [1 (dst kept) %d %d]", got, sh.cmd.Process.Pid, runner)
	}
	b.AppendPIDs(nil) // unchanged: not logged again
	if got := sh.step(t); got != "gone" {
		t.Fatalf("the shell said %q", got)
	}
	if got := b.AppendPIDs(nil); !slices.Equal(got, []int{sh.cmd.Process.Pid}) {
		t.Fatalf("after the runner exited: %v, want the shell alone", got)
	}
	if n := strings.Count(logs.String(), "the backend's processes"); n != 3 ||
		!strings.Contains(logs.String(), "added=["+strconv.Itoa(runner)+"]") ||
		!strings.Contains(logs.String(), "removed=["+strconv.Itoa(runner)+"]") {
		t.Fatalf("%d change lines, want 3 (start, runner added, runner removed):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "not attributed") {
		t.Fatalf("the log warns of an unattributed process:\n%s", logs.String())
	}
}

// TestBackendProcsFollowListener: in front mode the set is the tree of
// the process listening on the backend's port: none before it listens,
// then that process (found by scanning every process's descriptors), and
// a new one once the backend restarts under another pid.
func TestBackendProcsFollowListener(t *testing.T) {
	addr := freeAddr(t)
	u, _ := url.Parse("http://" + addr)
	var logs syncBuffer
	b := newBackendProcs("/proc", 0, u, slog.New(slog.NewTextHandler(&logs, nil)))
	if got := b.AppendPIDs(nil); len(got) != 0 {
		t.Fatalf("nothing listens yet: %v", got)
	}
	var pids []int
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childAddrEnv+"="+addr)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		waitListening(t, addr)
		if got := b.AppendPIDs(nil); !slices.Equal(got, []int{cmd.Process.Pid}) {
			t.Errorf("listener of %s: %v, want the backend %d", addr, got, cmd.Process.Pid)
		}
		if got := b.AppendPIDs(nil); !slices.Equal(got, []int{cmd.Process.Pid}) {
			t.Errorf("listener of %s, found again from its last holder: %v, want the backend %d", addr, got, cmd.Process.Pid)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	if got := b.AppendPIDs(nil); len(got) != 0 {
		t.Fatalf("the backend stopped: %v", got)
	}
	if !strings.Contains(logs.String(), "removed=["+strconv.Itoa(pids[0])+"]") || !strings.Contains(logs.String(), "added=["+strconv.Itoa(pids[1])+"]") {
		t.Fatalf("the log does not follow the restart from %d to %d:\n%s", pids[0], pids[1], logs.String())
	}
}

// TestBackendProcesses: the runner's start finds this process as the
// backend listening on an httptest server's port, and warns when nothing
// listens yet or the backend is on another host.
func TestBackendProcesses(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(srv.URL)
	var logs syncBuffer
	p := &runner{cfg: flags.Config{Backend: u}, env: Env{ProcRoot: "/proc"}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if got := p.backendProcesses(); len(got) == 0 || got[0] != os.Getpid() || p.procs == nil {
		t.Fatalf("backend tree %v, want this process first", got)
	}
	srv.Close()
	if got := p.backendProcesses(); len(got) != 0 || !strings.Contains(logs.String(), "listens on the backend's port yet") {
		t.Fatalf("with nothing listening: %v, log %q", got, logs.String())
	}

	// -backend-pid names the backend in front mode: no listener is
	// looked for.
	p = &runner{cfg: flags.Config{Backend: u, BackendPIDs: []int{4242}}, env: Env{ProcRoot: "/proc"}, log: p.log}
	if got := p.backendProcesses(); !slices.Equal(got, []int{4242}) || p.procs != nil {
		t.Fatalf("-backend-pid 4242: %v, set %v", got, p.procs)
	}

	// A backend on another host: nothing of this host is its process.
	remote, _ := url.Parse("http://192.0.2.1:" + u.Port())
	p = &runner{cfg: flags.Config{Backend: remote}, env: Env{ProcRoot: "/proc"}, log: p.log}
	if got := p.backendProcesses(); len(got) != 0 || p.procs != nil || !strings.Contains(logs.String(), "not on this host") {
		t.Fatalf("a remote backend: %v, set %v, log %q", got, p.procs, logs.String())
	}
}

func TestLocal(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "::1": true, "127.3.2.1": true, "0.0.0.0": true,
		"192.0.2.1": false, "2001:db8::1": false, "no-such-host.invalid": false,
	} {
		if got := local(host); got != want {
			t.Errorf("local(%q) = %v, want %v", host, got, want)
		}
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitListening waits until addr accepts a connection; a generous bound
// only a broken child exceeds.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
