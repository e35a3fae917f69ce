//go:build cgo && linux

package nvmlsource

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/source"
)

// exclusive is the share of a board that only attributed processes use.
// It is also every board's share before its first listing.
var exclusive = source.Share{Processes: -1, Split: true, Fraction: 1}

// sharing is the part of a [Source] that tracks who uses its boards.
//
// Locks, in the order they nest: refreshMu (held for a whole refresh),
// then Source.mu's read side (held for one NVML call), then shareMu (held
// for one copy). Share takes only shareMu, so it never waits on NVML, and
// ReadEnergy takes only Source.mu's read side, so it never waits for a
// listing call.
type sharing struct {
	// attributed are the pids whose work is attributed, as NVML numbers
	// them.
	attributed []uint32
	// identifiable is false when this process's pids are in a namespace
	// other than the one NVML reports; pids then cannot be compared.
	identifiable bool

	refreshMu sync.Mutex
	// lastSeen[i] is the newest utilization sample timestamp of board i,
	// in NVML's microseconds.
	lastSeen []uint64
	// failing[i] reports whether board i's latest listing failed, so that
	// a failure is reported once, not on every refresh.
	failing []bool
	// pids is scratch space for the distinct pids of one board.
	pids []uint32

	shareMu sync.Mutex
	shares  []source.Share

	// stop is closed by the first Close; done is closed when the listing
	// goroutine has returned. Both are nil when no goroutine runs.
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// startSharing lists the processes on every board once, then, if the
// interval is positive, starts the goroutine that lists them again every
// interval until Close.
func (s *Source) startSharing(c config) {
	s.identifiable = c.hostPIDs()
	for _, p := range c.pids {
		if p > 0 && p <= int(^uint32(0)) && !slices.Contains(s.attributed, uint32(p)) {
			s.attributed = append(s.attributed, uint32(p))
		}
	}
	n := len(s.devices)
	s.lastSeen = make([]uint64, n)
	s.failing = make([]bool, n)
	s.shares = make([]source.Share, n)
	for i := range s.shares {
		s.shares[i] = exclusive
	}
	s.refreshShares()
	if c.shareInterval <= 0 {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.runSharing(c.shareInterval)
}

func (s *Source) runSharing(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.refreshShares()
		}
	}
}

// stopSharing ends the listing goroutine and waits for it.
func (s *Source) stopSharing() {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
		}
	})
	if s.done != nil {
		<-s.done
	}
}

// Share returns how much of Devices()[i]'s energy belongs to the attributed
// processes, as of the latest listing; see the package doc for each layout.
// It makes no NVML call and never waits on one. An i outside Devices()
// yields the zero Share.
func (s *Source) Share(i int) source.Share {
	s.shareMu.Lock()
	defer s.shareMu.Unlock()
	if i < 0 || i >= len(s.shares) {
		return source.Share{}
	}
	return s.shares[i]
}

// refreshShares lists the processes on every board and recomputes the
// shares. It holds Source.mu's read side for one NVML call at a time, so
// that Close waits for at most one call, and it stops at Close.
func (s *Source) refreshShares() {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	for i := range s.handles {
		sh, ok, err := s.shareOf(i)
		if !ok {
			if s.isClosed() {
				return
			}
			continue // lost: its share stays as it was
		}
		if err != nil && !s.failing[i] {
			otel.Handle(fmt.Errorf("nvmlsource: listing processes on GPU %d %s: %w", s.devices[i].Index, s.devices[i].ID, err))
		}
		s.failing[i] = err != nil
		s.shareMu.Lock()
		s.shares[i] = sh
		s.shareMu.Unlock()
	}
}

func (s *Source) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// call runs f, one NVML call, under Source.mu's read side, unless the
// source is closed or board i lost. It reports whether f ran.
func (s *Source) call(i int, f func()) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.lost[i].Load() != nil {
		return false
	}
	f()
	return true
}

// shareOf computes board i's share. ok is false when the source closed or
// the board was lost, and the share must be left as it is. err is a failed
// listing, after which the share keeps its split and has Processes -1.
func (s *Source) shareOf(i int) (sh source.Share, ok bool, err error) {
	h := s.handles[i]
	var (
		procs, mps []nvml.ProcessInfo
		ret        nvml.Return
	)
	if !s.call(i, func() { procs, ret = h.GetComputeRunningProcesses() }) {
		return sh, false, nil
	}
	if ret != nvml.SUCCESS {
		sh = s.Share(i)
		sh.Processes = -1
		return sh, true, &returnError{op: "GetComputeRunningProcesses", ret: ret}
	}
	// MPS clients are listed apart from the MPS server. Drivers without
	// MPS listing answer NOT_SUPPORTED, which leaves the plain list.
	if !s.call(i, func() { mps, _ = h.GetMPSComputeRunningProcesses() }) {
		return sh, false, nil
	}
	pids := s.pids[:0]
	for _, list := range [2][]nvml.ProcessInfo{procs, mps} {
		for _, p := range list {
			if !slices.Contains(pids, p.Pid) {
				pids = append(pids, p.Pid)
			}
		}
	}
	s.pids = pids

	n := len(pids)
	if !s.identifiable {
		// Which listed process is ours cannot be told: a lone process is
		// taken to be the attributed one; more are shared, unsplit.
		if n <= 1 {
			return source.Share{Processes: n, Split: true, Fraction: 1}, true, nil
		}
		return source.Share{Processes: n, Shared: true}, true, nil
	}
	mine := 0
	for _, p := range pids {
		if slices.Contains(s.attributed, p) {
			mine++
		}
	}
	excl := source.Share{Processes: n, Split: true, Fraction: 1}
	if n == 0 {
		return excl, true, nil
	}

	var mode int
	if !s.call(i, func() { mode, _, ret = h.GetMigMode() }) {
		return sh, false, nil
	}
	if ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE {
		// NVML gives no per-process utilization under MIG.
		if mine == n {
			return excl, true, nil
		}
		return source.Share{Processes: n, Shared: true}, true, nil
	}

	// Utilization is read even when only attributed processes run, so that
	// lastSeen stays current and a newcomer is measured from its arrival.
	var samples []nvml.ProcessUtilizationSample
	last := s.lastSeen[i]
	if !s.call(i, func() { samples, ret = h.GetProcessUtilization(last) }) {
		return sh, false, nil
	}
	var ours, total uint64
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
		// NOT_FOUND: no sample newer than last.
		for _, smp := range samples {
			if smp.TimeStamp <= last {
				continue
			}
			s.lastSeen[i] = max(s.lastSeen[i], smp.TimeStamp)
			total += uint64(smp.SmUtil)
			if slices.Contains(s.attributed, smp.Pid) {
				ours += uint64(smp.SmUtil)
			}
		}
	default:
		// vGPU and some boards have no per-process utilization.
		if mine == n {
			return excl, true, nil
		}
		return source.Share{Processes: n, Shared: true}, true, nil
	}
	if mine == n {
		return excl, true, nil
	}
	if total == 0 {
		// No process used the SMs: the idle board is split evenly among
		// the processes that hold it.
		return source.Share{Processes: n, Shared: true, Split: true, Fraction: float64(mine) / float64(n)}, true, nil
	}
	return source.Share{Processes: n, Shared: true, Split: true, Fraction: float64(ours) / float64(total)}, true, nil
}

// inHostPIDNamespace reports whether this process runs in the initial PID
// namespace, whose pids are the ones NVML reports. A container with its own
// PID namespace sees other numbers. The initial namespace's inode is fixed
// by the kernel (PROC_PID_INIT_INO).
func inHostPIDNamespace() bool {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		// Unknown: comparing pids is the better guess outside containers,
		// where /proc is always there.
		return true
	}
	return ns == "pid:[4026531836]"
}
