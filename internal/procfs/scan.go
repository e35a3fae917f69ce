package procfs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
)

// MaxAncestry is how many generations up a process's chain of parents is
// followed to find the attributed process it descends from.
const MaxAncestry = 8

// Proc is one process of a [Scanner]'s scan.
type Proc struct {
	Pid uint32
	Stat
}

// Scanner reads the node's CPU time and every process's stat in one
// pass over a proc mount, reusing its buffers: in steady state a scan
// allocates nothing on Linux, where files are opened and read with raw
// system calls into the Scanner's own buffers. It is the CPU-time side of
// the host's split (the node's busy time, each process tree's time).
//
// The zero value reads /proc. A Scanner is not safe for concurrent use;
// the slices it returns are valid until its next call.
type Scanner struct {
	// Root is where proc is mounted; "" means /proc. Set it before the
	// first call.
	Root string

	r     reader
	procs []Proc
	order []int // Trees' scratch: indices of pids sorted by pid
}

func (s *Scanner) root() string {
	if s.Root == "" {
		return "/proc"
	}
	return s.Root
}

// NodeTicks returns the node's CPU time from the first line of
// <Root>/stat, in clock ticks over all CPUs: busy is user, nice, system,
// irq, softirq and steal; total adds idle and iowait. Guest time is
// already in user. It fails with an error wrapping [ErrFormat] when the
// file does not start with the cpu line.
func (s *Scanner) NodeTicks() (busy, total uint64, err error) {
	b, err := s.r.read(s.root(), []byte("stat"))
	if err != nil {
		return 0, 0, fmt.Errorf("procfs: %s: %w", filepath.Join(s.root(), "stat"), err)
	}
	return parseCPULine(b, s.root())
}

// parseCPULine parses the cpu line that starts a /proc/stat file.
func parseCPULine(b []byte, root string) (busy, total uint64, err error) {
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	rest, ok := bytes.CutPrefix(b, []byte("cpu "))
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s does not start with the cpu line", ErrFormat, filepath.Join(root, "stat"))
	}
	for k := range 8 {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		v, ok := parseUint(rest[:j])
		if !ok {
			return 0, 0, fmt.Errorf("%w: %s: field %d is %q", ErrFormat, filepath.Join(root, "stat"), k+2, rest[:j])
		}
		total += v
		if k != 3 && k != 4 { // idle, iowait
			busy += v
		}
		rest = rest[j:]
	}
	return busy, total, nil
}

// Scan reads every process's stat under Root and returns them sorted by
// pid. A process that exits during the scan, or whose stat cannot be
// parsed, is left out. It fails only when Root cannot be listed.
func (s *Scanner) Scan() ([]Proc, error) {
	s.procs = s.procs[:0]
	err := s.r.pids(s.root(), func(pid uint32) {
		var name [16]byte
		b, err := s.r.read(s.root(), append(appendUint(name[:0], uint64(pid)), "/stat"...))
		if err != nil {
			return
		}
		if st, ok := ParseStat(b); ok {
			s.procs = append(s.procs, Proc{Pid: pid, Stat: st})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("procfs: listing %s: %w", s.root(), err)
	}
	// Directory order is pid order on a real /proc; a fake tree's may
	// not be.
	if !slices.IsSortedFunc(s.procs, byPid) {
		slices.SortFunc(s.procs, byPid)
	}
	return s.procs, nil
}

func byPid(a, b Proc) int { return int(int64(a.Pid) - int64(b.Pid)) }

// Find returns pid's process in the latest scan.
func (s *Scanner) Find(pid uint32) (Proc, bool) {
	k, ok := s.Index(pid)
	if !ok {
		return Proc{}, false
	}
	return s.procs[k], true
}

// Index returns the index of pid's process in the latest scan's slice.
func (s *Scanner) Index(pid uint32) (int, bool) {
	return slices.BinarySearchFunc(s.procs, pid, func(p Proc, pid uint32) int { return int(int64(p.Pid) - int64(pid)) })
}

// Trees sets ticks[i] to the CPU time of process pids[i]'s tree in the
// latest scan: the [Stat.TreeTicks] of every live process whose nearest
// ancestor-or-self among pids, within MaxAncestry generations, is
// pids[i]. So a process tracked on its own (a child that is itself one of
// pids) is counted in its own tree, not also in its parent's, and every
// process is counted once at most. A pid listed twice counts once, at its
// first place. ticks must be at least as long as pids.
func (s *Scanner) Trees(pids []uint32, ticks []uint64) {
	clear(ticks[:len(pids)])
	s.sortPids(pids)
	for _, p := range s.procs {
		if i, ok := s.nearest(p.Pid, pids); ok {
			ticks[i] += p.TreeTicks()
		}
	}
}

// Give adds each process's figure in the latest scan, by[k] for the
// scan's k-th process, to out[i], where pids[i] is its nearest
// ancestor-or-self among pids within MaxAncestry generations, as
// [Scanner.Trees] sums them. by must be as long as the scan.
func (s *Scanner) Give(pids []uint32, by, out []uint64) {
	s.sortPids(pids)
	for k, p := range s.procs {
		if by[k] == 0 {
			continue
		}
		if i, ok := s.nearest(p.Pid, pids); ok {
			out[i] += by[k]
		}
	}
}

// sortPids fills s.order with the indices of pids in pid order, the first
// of equal pids first.
func (s *Scanner) sortPids(pids []uint32) {
	s.order = s.order[:0]
	for i := range pids {
		s.order = append(s.order, i)
	}
	slices.SortStableFunc(s.order, func(a, b int) int { return int(int64(pids[a]) - int64(pids[b])) })
}

// nearest returns the index in pids (sorted by sortPids) of pid's nearest
// ancestor-or-self among them.
func (s *Scanner) nearest(pid uint32, pids []uint32) (int, bool) {
	q := pid
	for range MaxAncestry + 1 {
		k, ok := slices.BinarySearchFunc(s.order, q, func(i int, pid uint32) int { return int(int64(pids[i]) - int64(pid)) })
		if ok {
			return s.order[k], true
		}
		up, ok := s.Find(q)
		// pid 1 may be tracked (a server that is its container's init):
		// the climb stops at 0, above it.
		if !ok || up.PPid == 0 || up.PPid == q {
			return 0, false
		}
		q = up.PPid
	}
	return 0, false
}

// appendUint appends v in decimal to b.
func appendUint(b []byte, v uint64) []byte {
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}
