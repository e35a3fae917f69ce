package cputime

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// tree is a fake /proc whose processes the test sets: own ticks, reaped
// children's ticks, parent and start time.
type tree struct {
	t          *testing.T
	root       string
	busy, idle uint64
}

func newTree(t *testing.T) *tree {
	tr := &tree{t: t, root: t.TempDir()}
	tr.node(0, 0)
	return tr
}

func (tr *tree) node(busy, idle uint64) {
	tr.busy += busy
	tr.idle += idle
	line := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", tr.busy, tr.idle)
	if err := os.WriteFile(filepath.Join(tr.root, "stat"), []byte(line), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) proc(pid, ppid uint32, own, children, start uint64) {
	dir := filepath.Join(tr.root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (w) S %d %d %d 0 -1 0 0 0 0 0 %d 0 %d 0 20 0 1 0 %d 1 1\n", pid, ppid, pid, pid, own, children, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) gone(pid uint32) {
	if err := os.RemoveAll(filepath.Join(tr.root, fmt.Sprint(pid))); err != nil {
		tr.t.Fatal(err)
	}
}

// TestTreesPass drives the agent's tracked trees through the cases that
// move time between processes: children working, a tracked process's
// child tracked on its own, a child reaped, a pid reused, a process that
// stops being tracked, a tracked process that exits.
func TestTreesPass(t *testing.T) {
	tr := newTree(t)
	const server, worker, tracked, child, other = 10, 11, 20, 21, 30
	tr.proc(server, 1, 100, 0, 1)
	tr.proc(worker, server, 50, 0, 2)
	tr.proc(tracked, server, 70, 0, 3) // started by the server, tracked on its own
	tr.proc(child, tracked, 5, 0, 4)
	tr.proc(other, 1, 1000, 0, 5)
	tr.node(2000, 1000)
	trees := &Trees{Root: tr.root}
	pids := []uint32{server, tracked}
	starts := []uint64{1, 3}
	ticks := make([]uint64, 2)
	alive := make([]bool, 2)
	pass := func() (uint64, uint64, bool) {
		t.Helper()
		b, tot, ok, err := trees.Pass(pids, starts, ticks, alive)
		if err != nil {
			t.Fatal(err)
		}
		return b, tot, ok
	}
	if _, _, ok := pass(); ok || ticks[0] != 0 || !alive[0] || !alive[1] {
		t.Fatalf("first pass: ok %v, ticks %v, alive %v; want no interval, both alive", ok, ticks, alive)
	}
	// Every process works: the server's tree is itself and its worker,
	// the tracked process's is itself and its child.
	tr.proc(server, 1, 110, 0, 1)
	tr.proc(worker, server, 70, 0, 2)
	tr.proc(tracked, server, 73, 0, 3)
	tr.proc(child, tracked, 9, 0, 4)
	tr.proc(other, 1, 1500, 0, 5)
	tr.node(600, 400)
	if b, tot, ok := pass(); !ok || b != 600 || tot != 1000 || ticks[0] != 10+20 || ticks[1] != 3+4 {
		t.Fatalf("children: busy %d of %d (%v), ticks %v; want 600 of 1000, [30 7]", b, tot, ok, ticks)
	}
	// The worker exits and the server reaps it: its 70 + 6 more ticks
	// move into the server's cutime. Only the 6 and the server's own 1
	// are this interval's. A new child of the server brings its 8.
	tr.gone(worker)
	tr.proc(server, 1, 111, 76, 1)
	tr.proc(12, server, 8, 0, 9)
	tr.node(100, 0)
	if _, _, ok := pass(); !ok || ticks[0] != 1+6+8 || ticks[1] != 0 {
		t.Fatalf("a reaped child: ticks %v, want [15 0]", ticks)
	}
	// The tracked process is tracked no longer (it left the GPU): its
	// tree's growth from now on is the server's, and nothing it used
	// before moves.
	pids, starts = pids[:1], starts[:1]
	tr.proc(tracked, server, 75, 0, 3)
	tr.node(100, 0)
	if _, _, ok := pass(); !ok || ticks[0] != 2 {
		t.Fatalf("untracked child: ticks %v, want [2]", ticks[:1])
	}
	// The tracked pid holds another process now: it is not alive, and
	// its tree is empty.
	pids, starts = []uint32{server, tracked}, []uint64{1, 3}
	tr.proc(tracked, 1, 1, 0, 50)
	tr.node(100, 0)
	if _, _, ok := pass(); !ok || alive[1] || ticks[1] != 0 {
		t.Fatalf("a reused pid: alive %v, ticks %v; want not alive, nothing", alive, ticks)
	}
	// No CPU time elapsed: no interval.
	if _, _, ok := pass(); ok {
		t.Fatal("an interval with no CPU time")
	}
	// A failure drops the baselines.
	if err := os.Remove(filepath.Join(tr.root, "stat")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := trees.Pass(pids, starts, ticks, alive); err == nil {
		t.Fatal("no /proc/stat: no error")
	}
	tr.node(1, 0)
	if _, _, ok := pass(); ok {
		t.Fatal("an interval right after a failure")
	}
}

// TestPassAllocatesNothing: the agent calls Trees.Pass at every pass, and
// the Monitor's host share Meter.Times at every host window; both read
// /proc through procfs's Scanner, which allocates nothing in steady state.
func TestPassAllocatesNothing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux reads /proc with raw system calls")
	}
	tr := newTree(t)
	for p := uint32(10); p < 40; p++ {
		tr.proc(p, 1, uint64(p), 0, uint64(p))
	}
	trees := &Trees{Root: tr.root}
	pids, starts := []uint32{12, 20, 33}, []uint64{12, 20, 33}
	ticks, alive := make([]uint64, 3), make([]bool, 3)
	n := uint64(0)
	pass := func() {
		n++
		tr.node(n, 0) // outside the count: the test's own writes allocate
	}
	pass()
	trees.Pass(pids, starts, ticks, alive)
	if a := testing.AllocsPerRun(20, func() {
		if _, _, _, err := trees.Pass(pids, starts, ticks, alive); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%.1f allocations per pass, want 0", a)
	}
	m := &Meter{Root: tr.root, Pids: pids}
	m.Times()
	if a := testing.AllocsPerRun(20, func() {
		if _, _, err := m.Times(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%.1f allocations per Times, want 0", a)
	}
}
