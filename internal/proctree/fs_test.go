package proctree

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// The fake /proc under testdata/proc: 100 is a server (ollama serve)
// listening on 127.0.0.1:11434 over IPv4 (inode 21870) and IPv6 (21871);
// 200 is its runner, and 201 the runner's child; 400 is another child of
// 100 whose command name holds ") 1 (" to fool a naive parser; 300 is
// unrelated and listens on 8080; 500 is an orphan whose parent 150
// exited, reparented to 1. A socket on 8081 has inode 0 (no holder) and
// a connected socket on 11434 is not listening.
func fakeProc(t testing.TB) FS {
	fs, err := NewFS(filepath.Join("testdata", "proc"))
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestNewFS(t *testing.T) {
	if _, err := NewFS(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrNoProc) {
		t.Errorf("NewFS(absent dir): %v, want ErrNoProc", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFS(f); !errors.Is(err, ErrNoProc) {
		t.Errorf("NewFS(a file): %v, want ErrNoProc", err)
	}
	if fs := fakeProc(t); fs.Root() != filepath.Join("testdata", "proc") {
		t.Errorf("Root() = %q", fs.Root())
	}
}

func TestTrees(t *testing.T) {
	fs := fakeProc(t)
	for _, tt := range []struct {
		name  string
		roots []int
		want  []int
	}{
		{"server", []int{100}, []int{100, 200, 201, 400}},
		{"runner", []int{200}, []int{200, 201}},
		{"a root below another is kept once", []int{100, 201}, []int{100, 200, 201, 400}},
		{"two trees", []int{300, 200}, []int{200, 201, 300}},
		{"a root that exited", []int{150}, nil},
		{"an exited root's orphan is not its member", []int{150, 500}, []int{500}},
		{"none", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fs.Trees(nil, tt.roots...)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Trees(%v) = %v, want %v", tt.roots, got, tt.want)
			}
		})
	}
	// Trees appends: what dst held stays first.
	got, err := fs.Trees([]int{7}, 200)
	if err != nil || !slices.Equal(got, []int{7, 200, 201}) {
		t.Errorf("Trees([7], 200) = %v, %v; want [7 200 201]", got, err)
	}
}

func TestListeningInodes(t *testing.T) {
	fs := fakeProc(t)
	for _, tt := range []struct {
		port int
		want []uint64
	}{
		{11434, []uint64{21870, 21871}}, // IPv4 and IPv6; the connected socket is not listening
		{8080, []uint64{30000}},
		{8081, nil}, // inode 0: no process holds it
		{9, nil},
	} {
		got, err := fs.ListeningInodes(tt.port)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ListeningInodes(%d) = %v, %v; want %v", tt.port, got, err, tt.want)
		}
	}
}

func TestSocketHolders(t *testing.T) {
	fs := fakeProc(t)
	for _, tt := range []struct {
		inodes []uint64
		want   []int
	}{
		{[]uint64{21870, 21871}, []int{100}},
		{[]uint64{21871}, []int{100}},
		{[]uint64{30000}, []int{300}},
		{[]uint64{99}, nil},
		{nil, nil},
	} {
		got, err := fs.SocketHolders(nil, tt.inodes)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("SocketHolders(%v) = %v, %v; want %v", tt.inodes, got, err, tt.want)
		}
	}
	// 200's pipe:[21870] names the inode, but not a socket.
	if fs.HoldsSocket(200, []uint64{21870}) {
		t.Error("a pipe with a socket's inode number counts as the socket")
	}
	if fs.HoldsSocket(201, []uint64{21870}) || !fs.HoldsSocket(100, []uint64{21870}) {
		t.Error("HoldsSocket: 201 holds 21870, or 100 does not")
	}
}

// TestLiveProc reads this machine's /proc: a listener this test opens is
// held by this process, and a child it starts is in this process's tree
// until it exits.
func TestLiveProc(t *testing.T) {
	fs, err := NewFS("/proc")
	if err != nil {
		t.Skip("no /proc on this system:", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	inodes, err := fs.ListeningInodes(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || len(inodes) != 1 {
		t.Fatalf("ListeningInodes of our listener: %v, %v", inodes, err)
	}
	if !fs.HoldsSocket(os.Getpid(), inodes) {
		t.Error("this process does not hold its own listener")
	}
	holders, err := fs.SocketHolders(nil, inodes)
	if err != nil || !slices.Equal(holders, []int{os.Getpid()}) {
		t.Errorf("SocketHolders = %v, %v; want this process alone", holders, err)
	}

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	child := cmd.Process.Pid
	tree, err := fs.Trees(nil, os.Getpid())
	if err != nil || tree[0] != os.Getpid() || !slices.Contains(tree, child) {
		t.Errorf("this process's tree %v, %v; want it first, with child %d", tree, err, child)
	}
	cmd.Process.Kill()
	cmd.Wait()
	tree, _ = fs.Trees(nil, os.Getpid(), child)
	if slices.Contains(tree, child) {
		t.Errorf("tree %v still holds child %d after it was reaped", tree, child)
	}
}

// BenchmarkTrees measures one pass over this machine's /proc, the cost
// of one listing of a backend's process tree.
func BenchmarkTrees(b *testing.B) {
	fs, err := NewFS("/proc")
	if err != nil {
		b.Skip(err)
	}
	n, _ := fs.Pids(nil)
	b.ReportAllocs()
	var dst []int
	for b.Loop() {
		dst, _ = fs.Trees(dst[:0], os.Getpid())
	}
	b.ReportMetric(float64(len(n)), "processes")
}

// BenchmarkListener measures finding the holder of a listening socket:
// the check of a known holder, and the scan of every process.
func BenchmarkListener(b *testing.B) {
	fs, err := NewFS("/proc")
	if err != nil {
		b.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	b.Run("holds", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ino, _ := fs.ListeningInodes(port)
			if !fs.HoldsSocket(os.Getpid(), ino) {
				b.Fatal("not held")
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ino, _ := fs.ListeningInodes(port)
			if h, _ := fs.SocketHolders(nil, ino); len(h) != 1 {
				b.Fatal(strconv.Itoa(len(h)) + " holders")
			}
		}
	})
}
