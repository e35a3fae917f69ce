package nvmlsource_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// driverSample is one sample of the model driver: stamped on the wall
// clock, visible lag later on the true (monotonic) clock.
type driverSample struct {
	pid     uint32
	ts      uint64        // wall µs
	visible time.Duration // true time
}

// wallStepRun models NVML's driver over a wall clock that steps by step
// at 60 s: pids processes, each sampled every 1/6 s at a phase of its
// own with µs jitter, stamped on the wall clock and visible 400 ms later;
// the driver keeps every sample and answers GetProcessUtilization(q) with
// those visible and stamped after q. A reader reads every `every` until
// 120 s and returns how many times it took each sample (its index).
func wallStepRun(t *testing.T, c *nvmlsource.SampleCursor, pids int, step, every time.Duration) (samples []driverSample, counts []int) {
	t.Helper()
	base := time.Unix(1_700_000_000, 0)
	const (
		stepAt = 60 * time.Second
		end    = 120 * time.Second
		lag    = 400 * time.Millisecond
		period = time.Second / 6
	)
	wallAt := func(tt time.Duration) time.Time {
		if tt >= stepAt {
			tt += step
		}
		return base.Add(tt)
	}
	rng := rand.New(rand.NewPCG(uint64(pids), uint64(step)))
	for p := range pids {
		phase := time.Duration(rng.Int64N(int64(period)))
		for tt := phase; tt < end; tt += period {
			at := tt + time.Duration(rng.Int64N(300))*time.Microsecond
			samples = append(samples, driverSample{pid: uint32(100 + p), ts: uint64(wallAt(at).UnixMicro()), visible: at + lag})
		}
	}
	// The driver's buffer is in the order samples were made.
	slices.SortStableFunc(samples, func(a, b driverSample) int { return int(a.visible - b.visible) })
	counts = make([]int, len(samples))
	var r time.Duration
	for r = every; r <= end+time.Second; r += every {
		q := c.Since(r, wallAt(r))
		for k, s := range samples {
			if s.visible <= r && s.ts > q && c.Take(s.pid, s.ts) {
				counts[k]++
			}
		}
	}
	// Samples visible after the last read are no one's to take.
	for k, s := range samples {
		if s.visible > r-every {
			counts[k] = 1
		}
	}
	return samples, counts
}

// TestSampleCursorWallStep: across a step of the wall clock, back or
// forward, read every second or every 5 s, every sample the driver makes
// is taken once: none hidden under the old timeline's stamps, none of the
// old timeline taken again when the lowered query returns it. Each step
// is off a whole number of sample periods by more than the stamps'
// jitter, as a clock set at an arbitrary instant steps by an arbitrary
// amount: a new sample with an old one's pid and µs stamp would be lost.
func TestSampleCursorWallStep(t *testing.T) {
	for _, tc := range []struct {
		step, every time.Duration
	}{
		{0, time.Second},
		{-3*time.Second - 417*time.Microsecond, time.Second},
		{-3*time.Second - 417*time.Microsecond, 5 * time.Second},
		{-700*time.Millisecond - 3*time.Microsecond, time.Second},
		{-100*time.Millisecond - 3*time.Microsecond, time.Second},
		{-20*time.Millisecond - 3*time.Microsecond, time.Second},
		{-30*time.Second - 5011*time.Microsecond, time.Second},
		{2*time.Second + 5*time.Microsecond, time.Second},
		{time.Hour, time.Second},
	} {
		t.Run(fmt.Sprintf("step%v/every%v", tc.step, tc.every), func(t *testing.T) {
			var c nvmlsource.SampleCursor
			samples, counts := wallStepRun(t, &c, 3, tc.step, tc.every)
			lost, twice := 0, 0
			for k, n := range counts {
				switch {
				case n == 0:
					lost++
					if lost <= 3 {
						t.Errorf("sample %+v lost", samples[k])
					}
				case n > 1:
					twice++
					if twice <= 3 {
						t.Errorf("sample %+v taken %d times", samples[k], n)
					}
				}
			}
			if lost+twice > 0 {
				t.Errorf("%d of %d samples lost, %d taken more than once", lost, len(samples), twice)
			}
			// A step back longer than the samples' lag hides samples
			// from a plain cursor: this one must have lowered its query.
			if back := tc.step < -500*time.Millisecond; back != (c.Steps() > 0) {
				t.Errorf("%d backward steps lowered the query", c.Steps())
			}
		})
	}
}

// TestSampleCursorLongStep: a step back longer than the record holds
// loses the samples stamped below the record's oldest, as a cursor
// without recovery would, and still takes none twice; those stamped
// after it come back.
func TestSampleCursorLongStep(t *testing.T) {
	for _, tc := range []struct {
		pids int
		step time.Duration
	}{
		{3, -time.Hour - 7013*time.Microsecond},
		{40, -20*time.Second - 7013*time.Microsecond}, // 240 samples a second: the record holds 4 s
	} {
		t.Run(fmt.Sprintf("%dpids/step%v", tc.pids, tc.step), func(t *testing.T) {
			var c nvmlsource.SampleCursor
			samples, counts := wallStepRun(t, &c, tc.pids, tc.step, time.Second)
			lost := 0
			for k, n := range counts {
				if n > 1 {
					t.Fatalf("sample %+v taken %d times", samples[k], n)
				}
				if n == 0 {
					lost++
				}
			}
			t.Logf("%d of %d samples lost", lost, len(samples))
			if c.Steps() == 0 {
				t.Error("no step detected")
			}
		})
	}
}

// TestSampleCursorClockWithoutMonotonic: with a monotonic time that is
// the wall clock's (a clock with no monotonic reading), a step back shows
// only as a query ahead of the wall clock: the samples stamped after the
// read that sees it come back, none twice.
func TestSampleCursorClockWithoutMonotonic(t *testing.T) {
	var c nvmlsource.SampleCursor
	base := time.Unix(1_700_000_000, 0)
	read := func(wall time.Duration, smp ...uint64) (took []uint64) {
		q := c.Since(wall, base.Add(wall))
		for _, ts := range smp {
			if ts > q && c.Take(7, ts) {
				took = append(took, ts)
			}
		}
		return took
	}
	us := func(d time.Duration) uint64 { return uint64(base.Add(d).UnixMicro()) }
	if got := read(10*time.Second, us(9*time.Second), us(9500*time.Millisecond)); len(got) != 2 {
		t.Fatalf("first read took %v", got)
	}
	// The clock stepped 5 s back: it reads 6 s; the driver still holds
	// the old samples and one new one.
	got := read(6*time.Second, us(9*time.Second), us(9500*time.Millisecond), us(5995*time.Millisecond))
	if !slices.Equal(got, []uint64{us(5995 * time.Millisecond)}) || c.Steps() != 1 {
		t.Fatalf("after the step took %v (%d steps), want only the new sample", got, c.Steps())
	}
}

// TestSampleCursorStale: without a step, the query is the newest stamp
// taken and a stale sample repeated by the driver is refused.
func TestSampleCursorStale(t *testing.T) {
	var c nvmlsource.SampleCursor
	base := time.Unix(1_700_000_000, 0)
	if q := c.Since(0, base); q != 0 {
		t.Fatalf("first query %d, want 0", q)
	}
	if !c.Take(1, 100) || !c.Take(2, 200) {
		t.Fatal("new samples refused")
	}
	if c.Take(1, 100) {
		t.Fatal("a sample repeated within a read taken twice")
	}
	if q := c.Since(time.Second, base.Add(time.Second)); q != 200 {
		t.Fatalf("query %d, want 200", q)
	}
	if c.Take(2, 200) || c.Take(1, 150) {
		t.Fatal("a stale sample taken")
	}
}

// FuzzSampleCursor drives a cursor with a small record through reads at
// clocks that step either way, each offering samples drawn from a small
// set of stamps (so that many repeat), and checks it against a simple
// reference: no (pid, stamp) is ever taken twice, and the record holds
// every sample taken with a stamp after its floor and no other.
func FuzzSampleCursor(f *testing.F) {
	f.Add([]byte{0, 10, 1, 2, 3, 0, 200, 4, 5, 6, 7, 0, 30, 1, 2, 8})
	f.Add([]byte{0, 50, 9, 9, 9, 0, 1, 250, 3, 4, 0, 100, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c := nvmlsource.NewCursorOf(8)
		base := time.Unix(1_700_000_000, 0)
		var mono, wall time.Duration
		type key struct {
			pid uint32
			ts  uint64
		}
		took := map[key]bool{}
		q := c.Since(0, base)
		for i := 0; i < len(ops); i++ {
			op := ops[i]
			if op == 0 && i+1 < len(ops) {
				// A read: the clocks advance by 0.1 s × the next byte, the
				// wall clock stepping by up to ±3 s.
				i++
				adv := time.Duration(ops[i]&63) * 100 * time.Millisecond
				mono += adv
				wall += adv + time.Duration(int8(ops[i]&0xc0)>>6)*1500*time.Millisecond
				q = c.Since(mono, base.Add(wall))
				continue
			}
			// A sample: pid from the low bits, stamp within 6.4 s of the
			// wall clock now on a 100 ms grid.
			k := key{pid: uint32(op & 3), ts: uint64(base.Add(wall).UnixMicro()) - uint64(op>>2)*100_000}
			if k.ts <= q {
				continue // the driver returns only stamps after the query
			}
			if c.Take(k.pid, k.ts) {
				if took[k] {
					t.Fatalf("op %d: %+v taken twice", i, k)
				}
				took[k] = true
			}
		}
		for k := range took {
			in, floor := c.Recorded(k.pid, k.ts)
			if k.ts > floor && !in {
				t.Fatalf("%+v taken after floor %d, not recorded", k, floor)
			}
		}
		for pid := range uint32(4) {
			for d := range uint64(80) {
				ts := uint64(base.Add(wall).UnixMicro()) + 10_000_000 - d*100_000
				if in, _ := c.Recorded(pid, ts); in && !took[key{pid, ts}] {
					t.Fatalf("%d@%d recorded, never taken", pid, ts)
				}
			}
		}
	})
}

// BenchmarkSampleCursor measures one read of a board with 8 processes,
// each with one new sample stamped at an instant of its own: "lastseen"
// is the plain rule it replaces (refuse stamps at or before the newest
// taken), the baseline; "cursor" is SampleCursor without a step, its
// record included.
func BenchmarkSampleCursor(b *testing.B) {
	const procs = 8
	base := time.Unix(1_700_000_000, 0)
	stamp := func(i, k int) uint64 {
		return uint64(base.UnixMicro()) + uint64(i)*166_667 + uint64((k*7919)%5000)
	}
	b.Run("lastseen", func(b *testing.B) {
		b.ReportAllocs()
		var last uint64
		n, i := 0, 0
		for b.Loop() {
			i++
			q := last
			for k := range procs {
				if ts := stamp(i, k); ts > q {
					last = max(last, ts)
					n++
				}
			}
		}
		if n != i*procs {
			b.Fatalf("took %d of %d", n, i*procs)
		}
	})
	b.Run("cursor", func(b *testing.B) {
		b.ReportAllocs()
		var c nvmlsource.SampleCursor
		n, i := 0, 0
		for b.Loop() {
			i++
			d := time.Duration(i) * time.Second / 6
			q := c.Since(d, base.Add(d))
			for k := range procs {
				if ts := stamp(i, k); ts > q && c.Take(uint32(k), ts) {
					n++
				}
			}
		}
		if n != i*procs {
			b.Fatalf("took %d of %d", n, i*procs)
		}
	})
}
