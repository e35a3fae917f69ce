package procfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/otelenergy/otelenergy/internal/procfs"
)

// fakeProc is a proc mount under a temporary directory.
type fakeProc struct {
	t    testing.TB
	root string
}

func newFakeProc(t testing.TB) fakeProc {
	f := fakeProc{t: t, root: t.TempDir()}
	if err := os.WriteFile(filepath.Join(f.root, "stat"), []byte("cpu  300 0 0 100 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"self", "sys", "net"} { // entries that are not processes
		if err := os.MkdirAll(filepath.Join(f.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// proc writes pid's stat: its parent, own time ut+st split 2:1 and its
// reaped children's time ct.
func (f fakeProc) proc(pid, ppid uint32, own, children, start uint64) {
	dir := filepath.Join(f.root, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	line := fmt.Sprintf("%d (w) S %d %d %d 0 -1 0 0 0 0 0 %d %d %d 0 20 0 1 0 %d 1 1\n", pid, ppid, pid, pid, own-own/3, own/3, children, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f fakeProc) gone(pid uint32) {
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(int(pid)))); err != nil {
		f.t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	f := newFakeProc(t)
	f.proc(30, 1, 9, 3, 300)
	f.proc(4, 1, 6, 0, 40)
	f.proc(1000, 30, 12, 0, 1000)
	if err := os.MkdirAll(filepath.Join(f.root, "77"), 0o755); err != nil { // a process gone before its stat was read
		t.Fatal(err)
	}
	s := &procfs.Scanner{Root: f.root}
	ps, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []procfs.Proc{
		{Pid: 4, Stat: procfs.Stat{PPid: 1, UTime: 4, STime: 2, StartTime: 40}},
		{Pid: 30, Stat: procfs.Stat{PPid: 1, UTime: 6, STime: 3, CUTime: 3, StartTime: 300}},
		{Pid: 1000, Stat: procfs.Stat{PPid: 30, UTime: 8, STime: 4, StartTime: 1000}},
	}
	if len(ps) != len(want) {
		t.Fatalf("Scan = %+v, want %+v", ps, want)
	}
	for i := range ps {
		if ps[i] != want[i] {
			t.Fatalf("Scan = %+v, want %+v", ps, want)
		}
	}
	if p, ok := s.Find(1000); !ok || p.PPid != 30 {
		t.Fatalf("Find(1000) = %+v, %v", p, ok)
	}
	if _, ok := s.Find(77); ok {
		t.Fatal("Find found a process with no stat")
	}
	if _, err := (&procfs.Scanner{Root: filepath.Join(f.root, "none")}).Scan(); err == nil {
		t.Fatal("Scan of a missing root: no error")
	}
}

// TestTrees checks the nearest-ancestor rule: every process's time goes
// to its nearest tracked ancestor-or-self within MaxAncestry generations,
// once.
func TestTrees(t *testing.T) {
	f := newFakeProc(t)
	// 10 is a server: worker 11 and its child 12 are its tree; 20 is
	// tracked on its own though 10 started it; 21 is 20's child. 30 is
	// untracked, 40 chains nine generations below 10.
	f.proc(10, 1, 100, 50, 1) // 50 ticks of reaped children
	f.proc(11, 10, 10, 0, 2)
	f.proc(12, 11, 1, 0, 3)
	f.proc(20, 10, 7, 0, 4)
	f.proc(21, 20, 2, 0, 5)
	f.proc(30, 1, 1000, 0, 6)
	parent := uint32(10)
	for g := uint32(0); g < procfs.MaxAncestry+1; g++ {
		f.proc(40+g, parent, 1, 0, 7)
		parent = 40 + g
	}
	s := &procfs.Scanner{Root: f.root}
	if _, err := s.Scan(); err != nil {
		t.Fatal(err)
	}
	ticks := []uint64{99, 99, 99, 99}
	s.Trees([]uint32{20, 10, 999, 10}, ticks)
	// 10: its 150, 11's 10, 12's 1, and one each of the eight generations
	// 40..47 within reach; the ninth, 48, is out of it.
	want := []uint64{7 + 2, 150 + 10 + 1 + 8, 0, 0}
	for i := range ticks {
		if ticks[i] != want[i] {
			t.Fatalf("Trees = %v, want %v", ticks, want)
		}
	}
	// The init of a container may be tracked: the climb stops above it.
	f2 := newFakeProc(t)
	f2.proc(1, 0, 5, 0, 1)
	f2.proc(7, 1, 3, 0, 2)
	s2 := &procfs.Scanner{Root: f2.root}
	if _, err := s2.Scan(); err != nil {
		t.Fatal(err)
	}
	s2.Trees([]uint32{1}, ticks)
	if ticks[0] != 8 {
		t.Fatalf("init's tree = %d ticks, want 8", ticks[0])
	}
}

// TestScanRealProc reads this machine's /proc: this process is in it,
// with its own start time.
func TestScanRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	s := &procfs.Scanner{}
	ps, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	me, ok := s.Find(uint32(os.Getpid()))
	if !ok || len(ps) < 2 {
		t.Fatalf("this process is not in a scan of %d processes", len(ps))
	}
	start, err := procfs.FS{}.StartTime(uint32(os.Getpid()))
	if err != nil || start != me.StartTime {
		t.Fatalf("start time %d in the scan, %d, %v from FS", me.StartTime, start, err)
	}
	if busy, total, err := s.NodeTicks(); err != nil || busy == 0 || total < busy {
		t.Fatalf("NodeTicks = %d, %d, %v", busy, total, err)
	}
}
