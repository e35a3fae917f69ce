package cputime

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// proc writes a fake /proc: a stat line for the node and, per pid, a stat
// file with its parent and utime, stime, cutime, cstime.
type proc struct {
	root string
	t    *testing.T
}

func (p proc) node(user, idle uint64) {
	line := fmt.Sprintf("cpu  %d 0 0 %d 7 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", user, idle)
	if err := os.WriteFile(filepath.Join(p.root, "stat"), []byte(line), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p proc) pid(pid, ppid uint32, utime, stime, cutime, cstime uint64) {
	dir := filepath.Join(p.root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	// The command name holds ") S 1 (" to fool a parser that stops at the
	// first ')'.
	stat := fmt.Sprintf("%d (x) S 1 (y) S %d %d %d 0 -1 4194560 100 0 0 0 %d %d %d %d 20 0 1 0 100\n",
		pid, ppid, pid, pid, utime, stime, cutime, cstime)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p proc) gone(pid uint32) {
	if err := os.RemoveAll(filepath.Join(p.root, fmt.Sprint(pid))); err != nil {
		p.t.Fatal(err)
	}
}

func TestSample(t *testing.T) {
	p := proc{root: t.TempDir(), t: t}
	const server, worker, other = 100, 200, 300
	p.node(1000, 5000)
	p.pid(server, 1, 10, 5, 0, 0)
	p.pid(worker, server, 100, 20, 0, 0)
	p.pid(other, 1, 50, 50, 0, 0)
	m := Meter{Root: p.root, Pids: []uint32{server}}
	if _, ok, err := m.Sample(); ok || err != nil {
		t.Fatalf("first Sample = %v, %v; want no share yet", ok, err)
	}
	// The node uses 400 ticks; the server 10 and its worker 190 of them.
	p.node(1400, 9000)
	p.pid(server, 1, 20, 5, 0, 0)
	p.pid(worker, server, 250, 60, 0, 0)
	p.pid(other, 1, 150, 150, 0, 0)
	share, ok, err := m.Sample()
	if err != nil || !ok || share != 0.5 {
		t.Fatalf("Sample = %v, %v, %v; want 0.5", share, ok, err)
	}
	// The worker exits and is reaped: its 310 ticks move to the server's
	// cutime+cstime, and the tree's time does not drop. The node uses 100
	// more, 40 of them the server's.
	p.gone(worker)
	p.pid(server, 1, 60, 5, 250, 60)
	p.node(1500, 9100)
	share, ok, err = m.Sample()
	if err != nil || !ok || share != 0.4 {
		t.Fatalf("after the worker exits: Sample = %v, %v, %v; want 0.4", share, ok, err)
	}
	// No CPU time used: no share.
	if _, ok, _ := m.Sample(); ok {
		t.Fatal("a share with no CPU time used")
	}
}

func TestSampleErrors(t *testing.T) {
	m := Meter{Root: t.TempDir()}
	if _, _, err := m.Sample(); err == nil {
		t.Fatal("no /proc/stat: no error")
	}
	if err := os.WriteFile(filepath.Join(m.Root, "stat"), []byte("intr 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Sample(); err == nil {
		t.Fatal("a /proc/stat without its cpu line: no error")
	}
}

func TestTimes(t *testing.T) {
	p := proc{root: t.TempDir(), t: t}
	const server, worker, other = 100, 200, 300
	p.node(1000, 5000)
	p.pid(server, 1, 10, 5, 1, 2)
	p.pid(worker, server, 100, 20, 0, 0)
	p.pid(other, 1, 50, 50, 0, 0)
	m := Meter{Root: p.root, Pids: []uint32{server}}
	tree, node, err := m.Times()
	if err != nil || tree != 10+5+1+2+100+20 || node != 1000 {
		t.Fatalf("Times = %d, %d, %v; want 138, 1000", tree, node, err)
	}
	if _, _, err := (&Meter{Root: t.TempDir()}).Times(); err == nil {
		t.Fatal("Times without /proc/stat succeeded")
	}
}

// TestTimesInitTree: an attributed pid 1 (a server that is its
// container's init) counts its descendants too.
func TestTimesInitTree(t *testing.T) {
	p := proc{root: t.TempDir(), t: t}
	p.node(1000, 1000)
	p.pid(1, 0, 10, 5, 0, 0)
	p.pid(7, 1, 100, 20, 0, 0)
	p.pid(8, 7, 300, 0, 0, 0)
	m := Meter{Root: p.root, Pids: []uint32{1}}
	tree, _, err := m.Times()
	if err != nil || tree != 435 {
		t.Fatalf("tree of pid 1 = %d ticks, %v; want 435, its descendants' included", tree, err)
	}
	m = Meter{Root: p.root, Pids: []uint32{7}}
	if tree, _, err := m.Times(); err != nil || tree != 420 {
		t.Fatalf("tree of pid 7 = %d ticks, %v; want 420, not its parent's", tree, err)
	}
}
