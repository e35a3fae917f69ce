package proxy

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dead reports whether pid has exited: gone, or a zombie that holds
// nothing but its entry.
func dead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// groupRunning reports whether process group pgid has a member that is
// not a zombie. After SIGKILL every member is dead, but an orphan leaves
// the group only once init reaps it, which a loaded machine can take
// seconds to do (Stop waits killWait for that, no longer: a zombie holds
// nothing); groupAlive, which counts zombies, would then fail a group
// that was killed.
func groupRunning(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return groupAlive(pgid)
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		s := string(b)
		// After the command's closing parenthesis: state, ppid, pgrp.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == want && f[0] != "Z" {
			return true
		}
	}
	return false
}

// ppid returns pid's parent, or 0 once it is gone.
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, _ := strconv.Atoi(f[1])
	return n
}

// pidFrom waits for a shell to write a pid to path.
func pidFrom(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			n, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nothing written to %s", path)
	return 0
}

// quietEnv gives children /dev/null itself, not a pipe that os/exec would
// copy from until every process holding it (a background job) exits.
func quietEnv(t *testing.T) Env {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return Env{Stdout: f, Stderr: f}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestStopKillsGroupIgnoringTERM starts a backend whose shell and
// background job ignore SIGTERM: Stop must SIGKILL the whole group once
// the grace period is over.
func TestStopKillsGroupIgnoringTERM(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pid")
	ch, err := startChild([]string{"sh", "-c", `trap "" TERM; sleep 60 & echo $! > ` + f + `; wait`}, quietEnv(t), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	job := pidFrom(t, f)
	t.Cleanup(func() { syscall.Kill(job, syscall.SIGKILL) })
	began := time.Now()
	code := ch.Stop(syscall.SIGTERM, 300*time.Millisecond)
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Fatalf("Stop returned after %v, before the grace period, with the group ignoring SIGTERM", d)
	}
	if code != 128+int(syscall.SIGKILL) || !dead(job) || groupRunning(ch.pgid) {
		t.Fatalf("status %d, job dead %t, group running %t: want the group killed with SIGKILL", code, dead(job), groupRunning(ch.pgid))
	}
}

// TestSecondSignalKillsAtOnce stops a backend that ignores SIGTERM with a
// long grace period: the second signal must make Stop kill the group at
// once, whether it comes while Stop waits or before Stop is called.
func TestSecondSignalKillsAtOnce(t *testing.T) {
	for _, before := range []bool{false, true} {
		f := filepath.Join(t.TempDir(), "pid")
		ch, err := startChild([]string{"sh", "-c", `trap "" TERM; sleep 60 & echo $! > ` + f + `; wait`}, quietEnv(t), quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		job := pidFrom(t, f)
		t.Cleanup(func() { syscall.Kill(job, syscall.SIGKILL) })
		const grace = 30 * time.Second
		if before {
			ch.Signal(syscall.SIGTERM)
		} else {
			time.AfterFunc(200*time.Millisecond, func() { ch.Signal(syscall.SIGTERM) })
		}
		began := time.Now()
		code := ch.Stop(syscall.SIGTERM, grace)
		if d := time.Since(began); d > grace/3 {
			t.Fatalf("signal before Stop %t: Stop took %v after the second signal, want a prompt SIGKILL", before, d)
		}
		if code != 128+int(syscall.SIGKILL) || !dead(job) || groupRunning(ch.pgid) {
			t.Fatalf("signal before Stop %t: status %d, job dead %t, group running %t: want the group killed with SIGKILL", before, code, dead(job), groupRunning(ch.pgid))
		}
	}
}

// TestPeekExitedPid checks the siginfo layout: waitid must report the pid
// of a child that has exited, without reaping it.
func TestPeekExitedPid(t *testing.T) {
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "exit 3"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	defer syscall.Wait4(pid, &ws, 0, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !dead(pid) {
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := peekExited()
	if err != nil || got != pid {
		t.Fatalf("peekExited() = %d, %v; want the exited child %d", got, err, pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatalf("peekExited reaped the child: %v", err)
	}
}

// TestStopAfterLeaderExited starts a backend whose shell exits at once,
// leaving a background job that ignores SIGTERM in its group: Stop must
// still signal the group and kill what remains.
func TestStopAfterLeaderExited(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pid")
	ch, err := startChild([]string{"sh", "-c", `trap "" TERM; sleep 60 & echo $! > ` + f}, quietEnv(t), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	job := pidFrom(t, f)
	t.Cleanup(func() { syscall.Kill(job, syscall.SIGKILL) })
	<-ch.Exited()
	if dead(job) {
		t.Fatal("the background job is gone before Stop")
	}
	if code := ch.Stop(syscall.SIGTERM, 200*time.Millisecond); code != 0 {
		t.Fatalf("status %d, want the shell's 0", code)
	}
	if !dead(job) {
		t.Fatalf("pid %d of the backend's group outlived Stop", job)
	}
}

// TestReaperReapsOrphans runs a backend that leaves an orphan: with the
// proxy its subreaper, the orphan is reparented to the proxy, and reaped
// when it exits, while the backend's own status still reaches os/exec.
func TestReaperReapsOrphans(t *testing.T) {
	rp, err := startReaper(quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Stop()
	f := filepath.Join(t.TempDir(), "pid")
	ch, err := startChild([]string{"sh", "-c", `sleep 0.5 & echo $! > ` + f + `; exit 7`}, quietEnv(t), quietLog(), rp)
	if err != nil {
		t.Fatal(err)
	}
	orphan := pidFrom(t, f)
	<-ch.Exited()
	if ch.Code() != 7 {
		t.Fatalf("the backend's status is %d, want 7: the reaper took it", ch.Code())
	}
	if p := ppid(orphan); p != os.Getpid() && p != 0 {
		t.Fatalf("the orphan's parent is %d, want this process, %d, its subreaper", p, os.Getpid())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d was not reaped (dead %t)", orphan, dead(orphan))
		}
		time.Sleep(20 * time.Millisecond)
	}
	ch.Stop(syscall.SIGTERM, time.Second)
}
