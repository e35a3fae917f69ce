package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is the backend run in wrapper mode. It inherits the proxy's
// environment (so its CUDA_VISIBLE_DEVICES is the proxy's, and the same
// GPUs are metered), stdout and stderr, and runs in a process group of its
// own, so that a terminal's ^C reaches the proxy alone: the proxy drains
// first, then forwards the signal to the whole group.
type child struct {
	cmd    *exec.Cmd
	log    *slog.Logger
	exited chan struct{}
	code   int
}

func startChild(argv []string, env Env, lg *slog.Logger) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = env.Stdout, env.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the backend %q: %w", argv[0], err)
	}
	c := &child{cmd: cmd, log: lg, exited: make(chan struct{})}
	lg.Info("backend started", slog.Int("pid", cmd.Process.Pid), slog.Any("command", argv))
	go func() {
		err := cmd.Wait()
		c.code = exitStatus(cmd.ProcessState, err)
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

// Exited is closed once the child has exited.
func (c *child) Exited() <-chan struct{} { return c.exited }

// Code returns the child's exit status; valid once Exited is closed.
func (c *child) Code() int { return c.code }

// Stop sends sig to the child's process group, waits up to grace for it
// to exit, then kills the group, and returns its exit status.
func (c *child) Stop(sig os.Signal, grace time.Duration) int {
	select {
	case <-c.exited:
		return c.code
	default:
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	c.log.Info("stopping the backend", slog.String("signal", s.String()), slog.Int("pid", c.Pid()))
	if err := signalGroup(c.Pid(), s); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.log.Warn("signalling the backend", slog.Any("error", err))
	}
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.log.Warn("the backend did not exit in time: killing it", slog.Duration("grace", grace))
		signalGroup(c.Pid(), syscall.SIGKILL)
		<-c.exited
	}
	c.log.Info("backend exited", slog.Int("status", c.code))
	return c.code
}
