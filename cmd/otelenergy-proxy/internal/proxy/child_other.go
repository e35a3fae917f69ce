//go:build !linux

package proxy

import "syscall"

func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(pid int, s syscall.Signal) error {
	if err := syscall.Kill(-pid, s); err != nil {
		return syscall.Kill(pid, s)
	}
	return nil
}

// processTree returns pid alone: descendants are listed from Linux's /proc.
func processTree(pid int) []int { return []int{pid} }

// listenerPID finds listeners from Linux's /proc only.
func listenerPID(int) int { return 0 }
