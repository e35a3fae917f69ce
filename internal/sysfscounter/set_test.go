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

// TestSetWrapRule pins which drop is a wrap, the tracker's rule as the
// RAPL source sees it: the previous reading in the top quarter of the
// range, the new one in the bottom quarter; any other drop passes through
// for the Monitor's tracker.
func TestSetWrapRule(t *testing.T) {
	const max = 1_000_000
	for _, tt := range []struct {
		name  string
		steps []uint64 // µJ readings, a second apart
		want  []uint64 // extended µJ; 0 with err: an error
		wraps uint64
	}{
		{"wrap from the top quarter to the bottom", []uint64{760_000, 10}, []uint64{760_000, 1_000_011}, 1},
		// Above a half but below three quarters: a rule at ½ would count
		// a wrap and add a whole range.
		{"no wrap from below the top quarter", []uint64{700_000, 10}, []uint64{700_000, 10}, 0},
		// In the bottom quarter, from the top: but the new reading lies
		// above a quarter, so no wrap.
		{"no wrap into the second quarter", []uint64{900_000, 260_000}, []uint64{900_000, 260_000}, 0},
		{"two wraps", []uint64{800_000, 100_000, 800_000, 5}, []uint64{800_000, 1_100_001, 1_800_001, 2_000_007}, 2},
		{"at the range's top", []uint64{max, 0}, []uint64{max, max + 1}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := Set{Name: "test"}
			f, err := Open(counterFile(t, dir, "c", tt.steps[0]))
			if err != nil {
				t.Fatal(err)
			}
			s.Add(f, max, "c")
			for k, raw := range tt.steps {
				counterFile(t, dir, "c", raw)
				got, err := s.Read(0)
				if err != nil || got != tt.want[k] {
					t.Fatalf("reading %d (%d µJ): %d, %v; want %d", k, raw, got, err, tt.want[k])
				}
			}
			if s.Wraps(0) != tt.wraps {
				t.Fatalf("%d wraps, want %d", s.Wraps(0), tt.wraps)
			}
		})
	}
}

// TestSetAboveRange: a reading above max_energy_range_uj followed by a
// normal one adds no energy. A quarter rule alone would take the pair for
// a wrap and add a whole range (263,143,329 mJ on a 262,143,328,850 µJ
// zone) that was never drawn.
func TestSetAboveRange(t *testing.T) {
	const max = 262_143_328_850
	dir := t.TempDir()
	s := Set{Name: "rapl"}
	f, err := Open(counterFile(t, dir, "c", 100_000_000))
	if err != nil {
		t.Fatal(err)
	}
	s.Add(f, max, "intel-rapl:0")
	if got, err := s.ReadEnergy(0); err != nil || got != 100_000 {
		t.Fatalf("first reading %d mJ, %v", got, err)
	}
	counterFile(t, dir, "c", max+5_000_000)
	if _, err := s.ReadEnergy(0); !errors.Is(err, ErrOutOfRange) || !errors.Is(err, source.ErrRead) {
		t.Fatalf("a reading above the range: %v, want ErrOutOfRange and source.ErrRead", err)
	}
	counterFile(t, dir, "c", 100_002_000)
	if got, err := s.ReadEnergy(0); err != nil || got != 100_002 || s.Wraps(0) != 0 {
		t.Fatalf("the reading after: %d mJ, %v, %d wraps; want 100002 mJ and no wrap", got, err, s.Wraps(0))
	}
}
