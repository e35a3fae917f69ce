package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/otelenergy/otelenergy/internal/carbonconf"
)

// child is the backend run in wrapper mode. It inherits the proxy's
// environment but the carbon provider's secret (so its CUDA_VISIBLE_DEVICES is the proxy's, and the same
// GPUs are metered), stdout and stderr, and runs in a process group of its
// own, so that a terminal's ^C reaches the proxy alone: the proxy drains
// first, then forwards the signal to the whole group.
//
// The group, not the leader, is what Stop waits for: a backend such as
// sh -c 'sleep 300 & exec server' leaves members behind when its leader
// exits, and they would outlive the proxy holding GPU memory.
type child struct {
	cmd    *exec.Cmd
	pgid   int
	log    *slog.Logger
	exited chan struct{}
	code   int

	stopOnce sync.Once
	// hurry is closed by the second signal: Stop then kills the group
	// without waiting out its grace period.
	hurry     chan struct{}
	hurryOnce sync.Once
}

// groupPoll is how often Stop looks whether the group is empty.
const groupPoll = 20 * time.Millisecond

// hurryGrace is how long, after the second signal, the backend has to act
// on it (the signal is forwarded to its group) before SIGKILL: long
// enough for a server's handler to exit, short enough that asking twice
// means now.
const hurryGrace = 2 * time.Second

// killWait bounds the wait for a group to empty after SIGKILL: members
// that stay are zombies no one reaps (the proxy is not their subreaper),
// which hold nothing.
const killWait = 2 * time.Second

// childEnv is the proxy's environment less the carbon provider's secret:
// the backend is someone else's code, whose environment shows in
// /proc/<pid>/environ, crash reports and dumps, and it has no use for
// the token.
func childEnv(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		return strings.HasPrefix(kv, carbonconf.TokenEnv+"=")
	})
}

// startChild starts argv in a process group of its own. A non-nil reaper
// learns the child's pid before it can exit, so that it leaves the child
// to os/exec's Wait.
func startChild(argv []string, env Env, lg *slog.Logger, rp *reaper) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = childEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = env.Stdout, env.Stderr
	cmd.SysProcAttr = childAttr()
	if err := rp.start(cmd); err != nil {
		return nil, fmt.Errorf("starting the backend %q: %w", argv[0], err)
	}
	c := &child{cmd: cmd, pgid: cmd.Process.Pid, log: lg, exited: make(chan struct{}), hurry: make(chan struct{})}
	lg.Info("backend started", slog.Int("pid", cmd.Process.Pid), slog.Any("command", argv))
	go func() {
		err := cmd.Wait()
		c.code = exitStatus(cmd.ProcessState, err)
		rp.release(cmd.Process.Pid)
		close(c.exited)
	}()
	return c, nil
}

// exitStatus is the status a shell reports: the exit code, or 128 plus
// the signal that killed the process.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return exitFailure
		}
		return exitOK
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Pid returns the child's pid.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once the child (the group's leader) has exited.
func (c *child) Exited() <-chan struct{} { return c.exited }

// Code returns the child's exit status; valid once Exited is closed.
func (c *child) Code() int { return c.code }

// Signal forwards s to the child's process group at once: the second
// signal, which means stop now. A Stop under way, or one called later,
// sends SIGKILL after hurryGrace instead of the rest of its grace period,
// so that a backend that ignores s cannot hold the proxy for the whole
// grace period after the operator asked twice.
func (c *child) Signal(s os.Signal) {
	c.hurryOnce.Do(func() { close(c.hurry) })
	if ss, ok := s.(syscall.Signal); ok && groupAlive(c.pgid) {
		c.log.Info("forwarding the signal to the backend", slog.String("signal", ss.String()), slog.Int("pgid", c.pgid))
		signalGroup(c.pgid, ss)
	}
}

// Stop sends sig to the child's process group, waits up to grace (or
// until Signal) for every member to exit, then kills the group with
// SIGKILL, and returns the leader's exit status. It does so even when the leader has already
// exited, for the members it left behind. Calls after the first wait for
// the leader and return its status.
func (c *child) Stop(sig os.Signal, grace time.Duration) int {
	c.stopOnce.Do(func() { c.stop(sig, grace) })
	<-c.exited
	return c.code
}

func (c *child) stop(sig os.Signal, grace time.Duration) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	if !groupAlive(c.pgid) {
		return
	}
	c.log.Info("stopping the backend", slog.String("signal", s.String()), slog.Int("pgid", c.pgid))
	if err := signalGroup(c.pgid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		c.log.Warn("signalling the backend", slog.Any("error", err))
	}
	if waitGroup(c.pgid, grace, c.hurry) {
		c.log.Info("backend exited", slog.Int("status", c.leaderCode(grace)))
		return
	}
	select {
	case <-c.hurry:
		// The second signal was forwarded: the backend gets hurryGrace
		// to act on it, not the rest of the grace period.
		if waitGroup(c.pgid, min(grace, hurryGrace), nil) {
			c.log.Info("backend exited", slog.Int("status", c.leaderCode(grace)))
			return
		}
		c.log.Warn("second signal: killing the backend's process group", slog.Duration("after", min(grace, hurryGrace)), slog.Int("pgid", c.pgid))
	default:
		c.log.Warn("the backend did not exit in time: killing its process group", slog.Duration("grace", grace), slog.Int("pgid", c.pgid))
	}
	signalGroup(c.pgid, syscall.SIGKILL)
	if !waitGroup(c.pgid, killWait, nil) {
		c.log.Warn("members of the backend's process group remain after SIGKILL (unreaped zombies)", slog.Int("pgid", c.pgid))
	}
}

// leaderCode returns the leader's status once reaped.
func (c *child) leaderCode(wait time.Duration) int {
	select {
	case <-c.exited:
	case <-time.After(wait):
	}
	return c.code
}

// waitGroup waits up to d, or until cut is closed, for process group pgid
// to have no members, and reports whether it has none. A nil cut never
// closes.
func waitGroup(pgid int, d time.Duration, cut <-chan struct{}) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for groupAlive(pgid) {
		select {
		case <-deadline.C:
			return !groupAlive(pgid)
		case <-cut:
			return !groupAlive(pgid)
		case <-tick.C:
		}
	}
	return true
}

// groupAlive reports whether process group pgid has a member, zombies
// included (they leave the group once reaped).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

func signalGroup(pgid int, s syscall.Signal) error { return syscall.Kill(-pgid, s) }
