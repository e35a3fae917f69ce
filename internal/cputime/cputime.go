// Package cputime measures the share of a node's CPU time that a process
// tree used, from /proc, as Kepler splits a node's CPU energy among
// processes by their CPU time.
//
// The tree is the attributed pids and every live process that descends
// from one of them within proctree.MaxAncestry generations. Its time is the sum, over the live
// members, of utime, stime, cutime and cstime (/proc/<pid>/stat fields 14
// to 17): a member that exits and is reaped moves its time into its
// parent's cutime and cstime, so the sum does not drop when workers come
// and go. The node's time is /proc/stat's first line less idle and
// iowait: the CPU time used by anything.
package cputime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/otelenergy/otelenergy/internal/proctree"
)

// ErrFormat reports a /proc file this package cannot parse.
var ErrFormat = errors.New("cputime: unexpected /proc format")

// Meter measures one process tree's CPU time against the node's. The zero
// value is not usable; set Root and Pids. A Meter is not safe for
// concurrent use.
type Meter struct {
	// Root is where proc is mounted, "/proc".
	Root string
	// Pids are the attributed processes' pids in Root's numbering.
	Pids []uint32

	tree     proctree.Tree
	prevTree uint64
	prevBusy uint64
	hasPrev  bool
}

// Sample reads the tree's and the node's cumulative CPU time, in clock
// ticks, and returns the tree's share of the CPU time used since the
// previous Sample, and whether there was one with some CPU time used in
// between. The share is in [0, 1].
func (m *Meter) Sample() (share float64, ok bool, err error) {
	busy, err := m.nodeBusy()
	if err != nil {
		return 0, false, err
	}
	tree, err := m.treeTime()
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

// Times reads the tree's and the node's cumulative CPU time, in clock
// ticks, for a caller that keeps its own windows: the tree's share of any
// window is the growth of tree over the growth of node. It keeps no
// state between calls.
func (m *Meter) Times() (tree, node uint64, err error) {
	if node, err = m.nodeBusy(); err != nil {
		return 0, 0, err
	}
	if tree, err = m.treeTime(); err != nil {
		return 0, 0, err
	}
	return tree, node, nil
}

// nodeBusy sums /proc/stat's "cpu" line: user nice system idle iowait irq
// softirq steal, less idle and iowait (guest time is already in user).
func (m *Meter) nodeBusy() (uint64, error) {
	f, err := os.Open(filepath.Join(m.Root, "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, fmt.Errorf("%w: empty %s/stat", ErrFormat, m.Root)
	}
	fields := bytes.Fields(sc.Bytes())
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("%w: %s/stat starts %q", ErrFormat, m.Root, sc.Text())
	}
	var busy uint64
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s/stat: %w", ErrFormat, m.Root, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += v
	}
	return busy, nil
}

// treeTime sums the live tree members' utime+stime+cutime+cstime. Each
// process's stat is read once, and membership is decided on the parents
// read in the same pass.
func (m *Meter) treeTime() (uint64, error) {
	ents, err := os.ReadDir(m.Root)
	if err != nil {
		return 0, err
	}
	type proc struct {
		ppid uint32
		time uint64
	}
	procs := make(map[uint32]proc, len(ents))
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		if pp, t, ok := readStat(filepath.Join(m.Root, e.Name(), "stat")); ok {
			procs[uint32(pid)] = proc{ppid: pp, time: t}
		}
	}
	var sum uint64
	for pid, p := range procs {
		q := pid
		for range proctree.MaxAncestry + 1 {
			if slices.Contains(m.Pids, q) {
				sum += p.time
				break
			}
			up, ok := procs[q]
			// pid 1 may be attributed (a server that is its
			// container's init): the climb stops at 0, above it.
			if !ok || up.ppid == 0 || up.ppid == q {
				break
			}
			q = up.ppid
		}
	}
	return sum, nil
}

// readStat reads a stat file's parent (field 4) and fields 14 to 17,
// utime, stime, cutime and cstime, counted after the command name's last
// ')'.
func readStat(name string) (ppid uint32, ticks uint64, ok bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, 0, false
	}
	r := bytes.LastIndexByte(b, ')')
	if r < 0 {
		return 0, 0, false
	}
	// After ')': state (field 3), ppid (4), ..., utime (14) is the 12th.
	fields := bytes.Fields(b[r+1:])
	if len(fields) < 15 {
		return 0, 0, false
	}
	pp, err := strconv.ParseUint(string(fields[1]), 10, 32)
	if err != nil {
		return 0, 0, false
	}
	for _, f := range fields[11:15] {
		v, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if v > 0 {
			ticks += uint64(v)
		}
	}
	return uint32(pp), ticks, true
}
