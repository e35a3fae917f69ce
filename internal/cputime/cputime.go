// Package cputime is the CPU-time share of a host's energy: a process
// tree's part of the node's CPU time, as Kepler splits a node's CPU energy
// among processes. It is the one home of that rule; package procfs reads
// the times.
//
//   - [Meter] measures one tree (the attributed pids and their
//     descendants, see package procfs) against the node: the Monitor's
//     host share of its requests, and the RAPL source's share.
//   - [Split] divides one interval's energy among several trees and the
//     node's idle time: the node agent's host split.
//   - [Share] carries a tree's part of energy from window to window, so
//     that rounding neither loses nor invents a millijoule.
//
// A tree's time is the sum, over its live members, of utime, stime,
// cutime and cstime: a member that exits and is reaped moves its time
// into its parent's cutime and cstime, so the sum does not drop when
// workers come and go. The node's busy time is /proc/stat's first line
// less idle and iowait: the CPU time used by anything.
package cputime

import (
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/internal/split"
)

// ErrFormat reports a /proc file this package cannot parse.
var ErrFormat = procfs.ErrFormat

// Meter measures one process tree's CPU time against the node's. The zero
// value is not usable; set Root and Pids. A Meter is not safe for
// concurrent use.
type Meter struct {
	// Root is where proc is mounted, "/proc".
	Root string
	// Pids are the attributed processes' pids in Root's numbering.
	Pids []uint32

	scan     procfs.Scanner
	ticks    []uint64
	prevTree uint64
	prevBusy uint64
	hasPrev  bool
}

// Sample reads the tree's and the node's cumulative CPU time, in clock
// ticks, and returns the tree's share of the CPU time used since the
// previous Sample, and whether there was one with some CPU time used in
// between. The share is in [0, 1].
func (m *Meter) Sample() (share float64, ok bool, err error) {
	tree, busy, err := m.Times()
	if err != nil {
		return 0, false, err
	}
	prevTree, prevBusy, had := m.prevTree, m.prevBusy, m.hasPrev
	m.prevTree, m.prevBusy, m.hasPrev = tree, busy, true
	if !had || busy <= prevBusy {
		return 0, false, nil
	}
	var dt uint64
	if tree > prevTree {
		dt = tree - prevTree
	}
	share = float64(dt) / float64(busy-prevBusy)
	return min(share, 1), true, nil
}

// Times reads the tree's and the node's busy cumulative CPU time, in
// clock ticks, for a caller that keeps its own windows: the tree's share
// of any window is the growth of tree over the growth of node. It keeps
// no state between calls but its buffers.
func (m *Meter) Times() (tree, node uint64, err error) {
	m.scan.Root = m.Root
	if node, _, err = m.scan.NodeTicks(); err != nil {
		return 0, 0, err
	}
	if _, err = m.scan.Scan(); err != nil {
		return 0, 0, err
	}
	if cap(m.ticks) < len(m.Pids) {
		m.ticks = make([]uint64, len(m.Pids))
	}
	m.ticks = m.ticks[:len(m.Pids)]
	m.scan.Trees(m.Pids, m.ticks)
	for _, t := range m.ticks {
		tree += t
	}
	return tree, node, nil
}

// Split divides e millijoules of one domain over one interval in which the
// node's CPUs were busy busy ticks of total, and each tree ticks[i]. It
// writes tree i's part to out[i] (len(out) ≥ len(ticks)) and returns the
// idle and unattributed parts; Σ out[:len(ticks)] + idle + unattributed =
// e exactly:
//
//   - idle: ⌊e × (total − busy) / total⌋, the part of the interval no CPU
//     was busy;
//   - each tree: the active rest in proportion to its ticks out of
//     max(busy, Σ ticks), by cumulative floors (package split): when the
//     trees' ticks add up past busy (their counts and the node's are
//     sampled apart), they share the active part by their ticks alone;
//   - unattributed: the rest, the busy time of processes that are no
//     tree's.
//
// With total 0 (no CPU time elapsed or unreadable), everything is
// unattributed. A busy above total counts as total. A caller that sets no
// energy apart as idle passes total = busy.
func Split(e, busy, total uint64, ticks, out []uint64) (idle, unattributed uint64) {
	clear(out[:len(ticks)])
	if total == 0 {
		return 0, e
	}
	busy = min(busy, total)
	idle = split.Scale(e, total-busy, total, split.Down)
	unattributed, _ = split.Among(e-idle, ticks, busy, out)
	return idle, unattributed
}

// Share is one tree's cumulative part of a device's energy, window by
// window: each window's delta × tree ÷ node, its whole part in integers,
// exactly, and the remainder's fraction carried to the next window, so
// that over many windows the total is within one millijoule of the exact
// sum and never runs ahead of it by more. The zero value is ready to use.
type Share struct {
	mj   uint64
	frac float64 // the carried fraction of a millijoule, in [0, 1)
}

// Add adds the tree's part of one window of delta mJ, in which the tree
// used tree ticks of the node's node, and returns the new total. A tree
// above node counts as node; a node of 0 adds nothing.
func (s *Share) Add(delta, tree, node uint64) uint64 {
	if node == 0 {
		return s.mj
	}
	tree = min(tree, node)
	q := split.Scale(delta, tree, node, split.Down)
	// delta·tree = q·node + r with r < node: the difference modulo 2^64
	// is r itself.
	r := delta*tree - q*node
	s.frac += float64(r) / float64(node)
	if s.frac >= 1 {
		q++
		s.frac--
	}
	s.mj += q
	return s.mj
}

// MJ returns the total given so far.
func (s *Share) MJ() uint64 { return s.mj }

// Trees measures, pass by pass, the CPU time that each of several tracked
// processes' trees used since the previous pass, and the node's: the
// agent's host split, whose tracked processes come and go, and may
// descend from one another.
//
// Each live process's growth of [procfs.Stat.TreeTicks] since the
// previous pass goes to its nearest tracked ancestor-or-self within
// procfs.MaxAncestry generations (a process that started since then
// brings all of its time), so that a process tracked on its own is not
// also counted in its parent's tree, and a process that stops or starts
// being tracked moves no time it used before. A process that exited and
// was reaped since the previous pass moved its time into its parent's
// cutime and cstime: that much, as of the previous pass, is taken off the
// parent's growth, so that only the time it used since is counted again.
// (A process reparented before it is reaped is reaped by an ancestor
// out of reach, whose growth then loses nothing: its time is no tree's.)
//
// The zero value reads /proc; set Root before the first Pass. Trees is
// not safe for concurrent use; in steady state a Pass allocates nothing.
type Trees struct {
	// Root is where proc is mounted; "" means /proc.
	Root string

	scan        procfs.Scanner
	prev        []procfs.Proc // the previous pass's processes, by pid
	delta       []uint64      // parallel to the scan: each process's growth
	primed      bool
	busy, total uint64
	live        []uint32 // pids, with 0 for those not alive
}

// NodeTicks returns the node's busy and total CPU ticks since boot
// (procfs's Scanner.NodeTicks), for a caller that keeps its own windows.
func (t *Trees) NodeTicks() (busy, total uint64, err error) {
	t.scan.Root = t.Root
	return t.scan.NodeTicks()
}

// CPUTicks returns pid's own CPU ticks, utime + stime, and its start time,
// for a caller that measures processes one by one, without their
// children; [Trees.Pass] measures their trees.
func (t *Trees) CPUTicks(pid uint32) (ticks, start uint64, err error) {
	st, err := procfs.FS{Root: t.Root}.Stat(pid)
	return st.Ticks(), st.StartTime, err
}

// Pass reads the node's and every process's CPU time and sets ticks[i] to
// the growth of tracked process i's tree since the previous Pass, and
// alive[i] to whether process pids[i] with start time starts[i] runs now
// (a dead one's tree is empty; its time goes to its nearest tracked
// ancestor's). It returns the node's busy and total ticks since the
// previous Pass; ok is false when there is no such interval (the first
// Pass, one after a failure, or a clock that did not advance), and then
// every ticks[i] is 0. ticks and alive must be at least as long as pids.
func (t *Trees) Pass(pids []uint32, starts []uint64, ticks []uint64, alive []bool) (dBusy, dTotal uint64, ok bool, err error) {
	clear(ticks[:len(pids)])
	clear(alive[:len(pids)])
	t.scan.Root = t.Root
	busy, total, err := t.scan.NodeTicks()
	if err != nil {
		t.primed = false
		return 0, 0, false, err
	}
	procs, err := t.scan.Scan()
	if err != nil {
		t.primed = false
		return 0, 0, false, err
	}
	t.live = t.live[:0]
	for i, pid := range pids {
		p, found := t.scan.Find(pid)
		alive[i] = found && p.StartTime == starts[i]
		if !alive[i] {
			pid = 0 // no process has pid 0: the tree is empty
		}
		t.live = append(t.live, pid)
	}
	ok = t.primed && total > t.total
	if ok {
		dBusy, dTotal = busy-min(busy, t.busy), total-t.total
		t.grow(procs)
		t.scan.Give(t.live, t.delta, ticks)
	}
	t.prev = append(t.prev[:0], procs...)
	t.primed, t.busy, t.total = true, busy, total
	return dBusy, dTotal, ok, nil
}

// grow sets t.delta[k] to procs[k]'s growth since the previous pass,
// less the time of its children reaped since.
func (t *Trees) grow(procs []procfs.Proc) {
	if cap(t.delta) < len(procs) {
		t.delta = make([]uint64, len(procs), 2*len(procs))
	}
	t.delta = t.delta[:len(procs)]
	j := 0 // merge by pid: both lists are sorted
	for k, p := range procs {
		for j < len(t.prev) && t.prev[j].Pid < p.Pid {
			j++
		}
		now := p.TreeTicks()
		switch {
		case j < len(t.prev) && t.prev[j].Pid == p.Pid && t.prev[j].StartTime == p.StartTime:
			t.delta[k] = now - min(now, t.prev[j].TreeTicks())
		default: // started since: all of its time is the interval's
			t.delta[k] = now
		}
	}
	j = 0
	for _, q := range t.prev {
		for j < len(procs) && procs[j].Pid < q.Pid {
			j++
		}
		if j < len(procs) && procs[j].Pid == q.Pid && procs[j].StartTime == q.StartTime {
			continue
		}
		// Gone: its parent reaped it, moving its time into its own.
		if k, found := t.scan.Index(q.PPid); found && procs[k].StartTime <= q.StartTime {
			t.delta[k] -= min(t.delta[k], q.TreeTicks())
		}
	}
}
