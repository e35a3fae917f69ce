//go:build !linux

package proxy

import (
	"log/slog"
	"os/exec"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// processTree returns pid alone: descendants are listed from Linux's /proc.
func processTree(_ string, pid int) []int { return []int{pid} }

// listenerPID finds listeners from Linux's /proc only.
func listenerPID(string, int) int { return 0 }

// reaper is Linux's only: elsewhere orphans go to init.
type reaper struct{}

func startReaper(*slog.Logger) (*reaper, error) { return nil, nil }

func (r *reaper) start(cmd *exec.Cmd) error { return cmd.Start() }
func (r *reaper) release(int)               {}
func (r *reaper) Stop()                     {}
