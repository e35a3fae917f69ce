package rapl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/internal/rapl"
	"github.com/otelenergy/otelenergy/internal/source"
)

// writeProc writes a fake /proc: the node's busy and idle ticks, and per
// pid its parent and utime.
func writeProc(t *testing.T, root string, busy, idle uint64, procs map[uint32][2]uint64) {
	t.Helper()
	line := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", busy, idle)
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	for pid, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (p) S %d %d %d 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 1\n", pid, p[0], pid, pid, p[1])
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShare(t *testing.T) {
	root := tree(t)
	t.Run("default", func(t *testing.T) {
		s, err := rapl.New(rapl.WithRoot(root))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got, want := s.Share(0), (source.Share{Processes: -1, Split: true, Fraction: 1}); got != want {
			t.Fatalf("share %+v, want %+v", got, want)
		}
	})
	t.Run("processes", func(t *testing.T) {
		proc := t.TempDir()
		// 100 is the server, 200 its worker, 300 another process.
		writeProc(t, proc, 1000, 5000, map[uint32][2]uint64{100: {1, 10}, 200: {100, 40}, 300: {1, 500}})
		s, err := rapl.New(rapl.WithRoot(root), rapl.WithProcesses(100), rapl.WithProc(proc, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := s.Share(0); !got.Shared || got.Split {
			t.Fatalf("before a second reading: share %+v, want unproven", got)
		}
		// The node uses 200 ticks: the server 20, its worker 30.
		writeProc(t, proc, 1200, 6000, map[uint32][2]uint64{100: {1, 30}, 200: {100, 70}, 300: {1, 650}})
		s.RefreshShare()
		for i := range s.Devices() {
			if got, want := s.Share(i), (source.Share{Processes: -1, Shared: true, Split: true, Fraction: 0.25}); got != want {
				t.Errorf("zone %d: share %+v, want %+v", i, got, want)
			}
		}
	})
}

func TestShareStopsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	proc := t.TempDir()
	writeProc(t, proc, 1000, 5000, map[uint32][2]uint64{100: {1, 10}})
	s, err := rapl.New(rapl.WithRoot(tree(t)), rapl.WithProcesses(100), rapl.WithProc(proc, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
