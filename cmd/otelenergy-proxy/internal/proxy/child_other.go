//go:build !linux

package proxy

import (
	"log/slog"
	"os/exec"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// reaper is Linux's only: elsewhere orphans go to init.
type reaper struct{}

func startReaper(*slog.Logger) (*reaper, error) { return nil, nil }

func (r *reaper) start(cmd *exec.Cmd) error { return cmd.Start() }
func (r *reaper) release(int)               {}
func (r *reaper) Stop()                     {}
