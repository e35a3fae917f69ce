package proxy

import (
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// childAttr puts the child in a process group of its own and has the
// kernel kill it if the proxy dies first, so that no backend outlives its
// proxy holding the GPU.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// reaper makes the proxy a child subreaper (prctl PR_SET_CHILD_SUBREAPER)
// and reaps every orphan reparented to it. As a container's command the
// proxy is PID 1, and a backend that double-forks would otherwise leave
// zombies for the container's life; elsewhere it keeps the backend's
// orphans in the proxy's care rather than init's.
//
// The backend itself is left to os/exec's Wait, which needs its status:
// the reaper peeks at each exited child with WNOWAIT and reaps only those
// it was not told about. start registers the backend's pid under the
// lock the reaper holds while it reaps, so no exit falls between.
type reaper struct {
	log  *slog.Logger
	mu   sync.Mutex
	kept map[int]bool // pids os/exec waits for
	sigs chan os.Signal
	stop chan struct{}
	done chan struct{}
}

// reapEvery bounds how long an orphan stays a zombie when its SIGCHLD
// came while the backend, not yet reaped by Wait, was first in line.
const reapEvery = time.Second

// startReaper makes this process a subreaper and starts reaping.
func startReaper(lg *slog.Logger) (*reaper, error) {
	if err := prctl(prSetChildSubreaper, 1); err != nil {
		return nil, err
	}
	r := &reaper{log: lg, kept: map[int]bool{}, sigs: make(chan os.Signal, 1), stop: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return r, nil
}

func (r *reaper) loop() {
	defer close(r.done)
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			r.reap()
			return
		case <-r.sigs:
		case <-t.C:
		}
		r.reap()
	}
}

// reap reaps every exited child that os/exec does not wait for.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		pid, err := peekExited()
		if err != nil || pid <= 0 || r.kept[pid] {
			return
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil {
			return
		}
		r.log.Debug("reaped an orphan", slog.Int("pid", pid))
	}
}

// start starts cmd with its pid registered before any reap can see it.
// A nil reaper just starts it.
func (r *reaper) start(cmd *exec.Cmd) error {
	if r == nil {
		return cmd.Start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.kept[cmd.Process.Pid] = true
	return nil
}

// release forgets pid once os/exec has reaped it.
func (r *reaper) release(pid int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.kept, pid)
	r.mu.Unlock()
}

// Stop reaps once more, stops reaping and gives up being a subreaper.
func (r *reaper) Stop() {
	if r == nil {
		return
	}
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
	prctl(prSetChildSubreaper, 0)
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

func prctl(op, arg uintptr) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, op, arg, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// siginfo is Linux's siginfo_t for SIGCHLD, 128 bytes. si_pid is the
// union's first field: after three ints, at the union's alignment, which
// is a pointer's (the union holds pointers), so at byte 16 on 64-bit
// arches and 12 on 32-bit ones.
type siginfo struct {
	_ [0]uint64
	b [128]byte
}

const siPidOffset = 12 + unsafe.Sizeof(uintptr(0)) - 4

func (s *siginfo) pid() int32 { return *(*int32)(unsafe.Pointer(&s.b[siPidOffset])) }

// waitid options and idtype, linux/wait.h.
const (
	pAll     = 0
	wExited  = 4
	wNoWait  = 0x1000000
	wNoHangW = 1
)

// peekExited returns the pid of an exited child without reaping it, or 0
// when none has exited.
func peekExited() (int, error) {
	var info siginfo
	_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info)), wExited|wNoHangW|wNoWait, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(info.pid()), nil
}
