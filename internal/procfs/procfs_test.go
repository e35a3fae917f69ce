package procfs_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/internal/procfs"
)

const (
	cid  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	uid1 = "6f1d5a34-2b1e-4c3a-9b8e-1a2b3c4d5e6f"
	uid2 = "0a1b2c3d-1111-2222-3333-444455556666"
)

func TestInfo(t *testing.T) {
	fs := procfs.FS{Root: "testdata/proc"}
	tests := []struct {
		name string
		pid  uint32
		want procfs.Info
	}{
		{"cgroup v2, systemd, containerd in a burstable pod", 101, procfs.Info{5000, "python3", cid, uid1}},
		{"cgroup v1, cgroupfs, best-effort pod; a comm with spaces and parentheses", 102, procfs.Info{6000, "vllm", cid, uid2}},
		{"cgroup v2, Docker under systemd", 103, procfs.Info{7000, "trainer", cid, ""}},
		{"cgroup v2, CRI-O in a guaranteed pod", 104, procfs.Info{8000, "crio-app", cid, uid1}},
		{"a user session: no container", 105, procfs.Info{9000, "jupyter", "", ""}},
		{"cgroup v1, Docker cgroupfs", 106, procfs.Info{9100, "dockerv1", cid, ""}},
		{"no comm and no cgroup", 107, procfs.Info{StartTime: 9200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fs.Info(tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Info = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseCgroup covers the layouts that need no testdata tree: paths
// relative to the reader's cgroup namespace, static pods' 32-hex UIDs,
// and a "pod<uid>" name outside kubepods, which names no pod.
func TestParseCgroup(t *testing.T) {
	const static = "3b0e9e3c2f5e4b8a9c4d1e2f3a4b5c6d"
	tests := []struct {
		name, file, cid, uid string
	}{
		{"cgroupfs, relative to the agent's cgroup namespace", "0::/../../pod" + uid1 + "/" + cid + "\n", cid, uid1},
		{"systemd, relative", "0::/../../kubepods-besteffort-pod" + strings.ReplaceAll(uid1, "-", "_") + ".slice/cri-containerd-" + cid + ".scope\n", cid, uid1},
		{"static pod, cgroupfs", "0::/kubepods/burstable/pod" + static + "/" + cid + "\n", cid, static},
		{"static pod, systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + static + ".slice/cri-containerd-" + cid + ".scope\n", cid, static},
		{"a unit named pod<uid> outside kubepods", "0::/user.slice/user-1000.slice/pod" + uid1 + ".scope\n", "", ""},
		{"a 32-hex name outside kubepods", "0::/system.slice/pod" + static + ".service\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, u := procfs.ParseCgroup(tt.file)
			if c != tt.cid || u != tt.uid {
				t.Fatalf("ParseCgroup = %q, %q; want %q, %q", c, u, tt.cid, tt.uid)
			}
		})
	}
}

// TestBootTime reads btime from a stat file.
func TestBootTime(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/stat", []byte("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bt, err := procfs.FS{Root: dir}.BootTime()
	if err != nil || bt.Unix() != 1_700_000_000 {
		t.Fatalf("BootTime = %v, %v", bt, err)
	}
	if _, err := (procfs.FS{Root: t.TempDir()}).BootTime(); err == nil {
		t.Fatal("no stat file, no error")
	}
}

func TestGone(t *testing.T) {
	fs := procfs.FS{Root: "testdata/proc"}
	if _, err := fs.Info(999); !errors.Is(err, procfs.ErrGone) {
		t.Fatalf("Info(999) = %v, want ErrGone", err)
	}
	if _, ok := procfs.ParseStartTime([]byte("12 (x) S 1 2")); ok {
		t.Fatal("a truncated stat parsed")
	}
}

// TestStartTimeSelf checks the parser against this process's real stat,
// split the plain way: its comm has no spaces.
func TestStartTimeSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	f := strings.Fields(string(b))
	want, err := strconv.ParseUint(f[21], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := procfs.FS{}.StartTime(uint32(os.Getpid()))
	if err != nil || got != want {
		t.Fatalf("StartTime = %d, %v; want %d", got, err, want)
	}
}

// FuzzParseStartTime builds a stat line around any comm (spaces,
// parentheses and all) and start time, and checks that the parser finds
// the start time.
func FuzzParseStartTime(f *testing.F) {
	f.Add("python3", uint64(5000))
	f.Add("a) (b", uint64(0))
	f.Add(") 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 (", uint64(1<<63))
	f.Fuzz(func(t *testing.T, comm string, start uint64) {
		if strings.ContainsAny(comm, "\n\x00") || len(comm) > 64 {
			t.Skip()
		}
		line := "4242 (" + comm + ") S 1 4242 4242 0 -1 4194560 1000 0 0 0 25 10 0 0 20 0 8 0 " +
			strconv.FormatUint(start, 10) + " 123456789 4000 18446744073709551615 1 1 0\n"
		got, ok := procfs.ParseStartTime([]byte(line))
		if !ok || got != start {
			t.Fatalf("ParseStartTime(%q) = %d, %v; want %d", line, got, ok, start)
		}
	})
}

// BenchmarkStartTime reads this process's start time from /proc: the
// cost the agent pays per listed process per pass, beside the parse alone.
func BenchmarkStartTime(b *testing.B) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		b.Skip("no /proc:", err)
	}
	pid := uint32(os.Getpid())
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			procfs.ParseStartTime(stat)
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (procfs.FS{}).StartTime(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestParseStat(t *testing.T) {
	b, err := os.ReadFile("testdata/proc/102/stat")
	if err != nil {
		t.Fatal(err)
	}
	// 102's stat: parent 1, utime 25, stime 10, no children's time, start
	// time 6000, behind a command name holding spaces and parentheses.
	st, ok := procfs.ParseStat(b)
	want := procfs.Stat{PPid: 1, UTime: 25, STime: 10, StartTime: 6000}
	if !ok || st != want || st.Ticks() != 35 || st.TreeTicks() != 35 {
		t.Fatalf("ParseStat = %+v, %v; want %+v", st, ok, want)
	}
	st, ok = procfs.ParseStat([]byte("7 (w) S 3 1 1 0 -1 0 0 0 0 0 4 5 6 -7 20 0 1 0 99\n"))
	if want := (procfs.Stat{PPid: 3, UTime: 4, STime: 5, CUTime: 6, StartTime: 99}); !ok || st != want || st.TreeTicks() != 15 {
		t.Fatalf("ParseStat with a negative cstime = %+v, %v; want %+v", st, ok, want)
	}
	for _, bad := range []string{"", "1 (x) S 1", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u 10 0 0 20 0 1 0 5",
		"1 (x) S 99999999999 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 -1 1 0 0 20 0 1 0 5"} {
		if _, ok := procfs.ParseStat([]byte(bad)); ok {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
	if pp, ok := procfs.ParseParent([]byte("400 (a) 1 (b) S 300 200")); !ok || pp != 300 {
		t.Fatalf("ParseParent = %d, %v; want 300", pp, ok)
	}
}

// FuzzParseStat builds a stat line around any comm and fields and checks
// the parser against the plain split of the fields after the comm.
func FuzzParseStat(f *testing.F) {
	f.Add("python3", uint32(1), uint64(25), uint64(10), int64(3), int64(-1), uint64(5000))
	f.Add(") 1 2 (", uint32(0), uint64(1<<63), uint64(0), int64(-1<<63), int64(1<<62), uint64(0))
	f.Fuzz(func(t *testing.T, comm string, ppid uint32, ut, st uint64, cut, cst int64, start uint64) {
		if strings.ContainsAny(comm, "\n\x00") || len(comm) > 64 {
			t.Skip()
		}
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		i := func(v int64) string { return strconv.FormatInt(v, 10) }
		line := "4242 (" + comm + ") S " + u(uint64(ppid)) + " 4242 4242 0 -1 4194560 1000 0 0 0 " + u(ut) + " " + u(st) + " " + i(cut) + " " + i(cst) + " 20 0 8 0 " + u(start) + " 123456789 4000\n"
		got, ok := procfs.ParseStat([]byte(line))
		nn := func(v int64) uint64 { return uint64(max(v, 0)) }
		want := procfs.Stat{PPid: ppid, UTime: ut, STime: st, CUTime: nn(cut), CSTime: nn(cst), StartTime: start}
		if !ok || got != want {
			t.Fatalf("ParseStat(%q) = %+v, %v; want %+v", line, got, ok, want)
		}
	})
}

func TestNodeTicks(t *testing.T) {
	root := t.TempDir()
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 5 30 1000 20 3 2 1 7 0\ncpu0 50 2 15 500 10 1 1 0 3 0\nbtime 1700000000\n"
	if err := os.WriteFile(root+"/stat", []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &procfs.Scanner{Root: root}
	busy, total, err := s.NodeTicks()
	if err != nil || busy != 100+5+30+3+2+1 || total != 100+5+30+1000+20+3+2+1 {
		t.Fatalf("NodeTicks = %d, %d, %v; want 141, 1161", busy, total, err)
	}
	if err := os.WriteFile(root+"/stat", []byte("intr 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.NodeTicks(); !errors.Is(err, procfs.ErrFormat) {
		t.Fatalf("NodeTicks without a cpu line = %v, want ErrFormat", err)
	}
	if _, _, err := (&procfs.Scanner{Root: t.TempDir()}).NodeTicks(); err == nil {
		t.Fatal("NodeTicks with no stat file: no error")
	}
}
