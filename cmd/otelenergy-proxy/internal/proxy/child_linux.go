package proxy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// childAttr puts the child in a process group of its own and has the
// kernel kill it if the proxy dies first, so that no backend outlives its
// proxy holding the GPU.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(pid int, s syscall.Signal) error {
	if err := syscall.Kill(-pid, s); err != nil {
		return syscall.Kill(pid, s)
	}
	return nil
}

// processTree returns pid and its descendants, from /proc, as this
// process's PID namespace numbers them.
func processTree(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the process exited
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, err1 := strconv.Atoi(fields[1])
		p, err2 := strconv.Atoi(strings.Fields(s)[0])
		if err1 != nil || err2 != nil {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}
