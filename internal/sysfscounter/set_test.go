package sysfscounter

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/otelenergy/otelenergy/internal/source"
)

// counterFile writes v to a fresh file under dir and returns its path.
func counterFile(t *testing.T, dir, name string, v uint64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSet reads two counters, one that wraps at 1,000 µJ: the wrap is
// extended exactly, the other passes through, and reads after Close fail
// with ErrClosed while Close stays idempotent.
func TestSet(t *testing.T) {
	dir := t.TempDir()
	s := Set{Name: "test"}
	for i, c := range []struct {
		name string
		v    uint64
		max  uint64
	}{{"wraps", 900, 1000}, {"plain", 5, 0}} {
		f, err := Open(counterFile(t, dir, c.name, c.v))
		if err != nil {
			t.Fatal(err)
		}
		s.Add(f, c.max, c.name)
		if got, err := s.Read(i); err != nil || got != c.v {
			t.Fatalf("counter %d first read %d, %v; want %d", i, got, err, c.v)
		}
	}
	counterFile(t, dir, "wraps", 100) // 900 → 1000 → 0 → 100: 201 µJ on
	counterFile(t, dir, "plain", 7)
	if got, err := s.Read(0); err != nil || got != 1101 || s.Wraps(0) != 1 {
		t.Fatalf("after the wrap: %d, %v, %d wraps; want 1101 and 1 wrap", got, err, s.Wraps(0))
	}
	if got, err := s.Read(1); err != nil || got != 7 {
		t.Fatalf("plain counter: %d, %v; want 7", got, err)
	}
	counterFile(t, dir, "plain", 7_999)
	if mj, err := s.ReadEnergy(1); err != nil || mj != 7 {
		t.Fatalf("ReadEnergy(1) = %d, %v; want 7 mJ, rounded down", mj, err)
	}
	if _, err := s.ReadEnergy(2); !errors.Is(err, source.ErrRead) {
		t.Fatalf("ReadEnergy(2) of 2 counters: %v, want source.ErrRead", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("ReadEnergy after Close: %v, want source.ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Read(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
}

// TestSetConcurrentSafe reads a Set from several goroutines while it is
// closed: every read returns the counter or ErrClosed, never a torn
// state (run under -race).
func TestSetConcurrentSafe(t *testing.T) {
	var s Set
	f, err := Open(counterFile(t, t.TempDir(), "c", 42))
	if err != nil {
		t.Fatal(err)
	}
	s.Add(f, 1<<20, "c")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if v, err := s.Read(0); err != nil && !errors.Is(err, ErrClosed) || err == nil && v != 42 {
					t.Errorf("Read = %d, %v", v, err)
					return
				}
			}
		}()
	}
	s.Close()
	wg.Wait()
}
