package steptime

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestEstimatorPlacesSteps reads a staircase counter of each period at a
// cadence faster than it, and checks that once the period is learned every
// step is placed within a millisecond of its true instant.
func TestEstimatorPlacesSteps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		period, read time.Duration
		phase        time.Duration
		jitter       time.Duration
		maxErr       time.Duration
	}{
		{"100ms at 17ms", 100 * time.Millisecond, 17 * time.Millisecond, 37 * time.Millisecond, 0, 2 * time.Millisecond},
		{"50ms at 17ms", 50 * time.Millisecond, 17 * time.Millisecond, 3 * time.Millisecond, 0, 2 * time.Millisecond},
		{"20ms at 17ms", 20 * time.Millisecond, 17 * time.Millisecond, 11 * time.Millisecond, 0, time.Millisecond},
		{"100ms at 20ms", 100 * time.Millisecond, 20 * time.Millisecond, 37 * time.Millisecond, 0, 10 * time.Millisecond},
		{"100ms at 17ms, read jitter", 100 * time.Millisecond, 17 * time.Millisecond, 61 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var e Estimator
			step := func(tm int64) int64 { // index of the last step at or before tm
				if tm < int64(tc.phase) {
					return -1
				}
				return (tm - int64(tc.phase)) / int64(tc.period)
			}
			var worst time.Duration
			prevK := int64(-2)
			for i := range 2000 {
				tm := int64(i) * int64(tc.read)
				if tc.jitter > 0 {
					tm += rng.Int64N(int64(tc.jitter))
				}
				k := step(tm)
				at, ok := e.Observe(tm, prevK != -2 && k != prevK)
				if ok && i > 300 { // after about 5 s of reads
					want := int64(tc.phase) + k*int64(tc.period)
					if d := time.Duration(abs(at - want)); d > worst {
						worst = d
					}
				}
				prevK = k
			}
			if got := time.Duration(e.Period()); absDur(got-tc.period) > 100*time.Microsecond {
				t.Errorf("period %v, want %v", got, tc.period)
			}
			if worst > tc.maxErr {
				t.Errorf("worst step placement error %v, want ≤ %v", worst, tc.maxErr)
			}
		})
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func absDur(d time.Duration) time.Duration { return time.Duration(abs(int64(d))) }

// TestStampedPlacesAtStamp: a device that updates every 10 ms on a clock
// offset by an unknown amount, read every 17 ms with reads that take
// 0-2 ms. Read instants alone place a step up to 17 ms late; the stamps
// place it within the smallest read latency seen.
func TestStampedPlacesAtStamp(t *testing.T) {
	const ms = int64(1e6)
	const devOffset = 123456789 * ms // sampler time = device time + offset
	var e Stamped
	var worst, worstPlain int64
	var plain Estimator
	for k := range 2000 {
		tr := int64(k)*17*ms + int64(k*7919%3)*ms    // read return, with latency jitter
		lastStep := (tr - 1) / (10 * ms) * (10 * ms) // the latest update before the read
		stamp := lastStep - devOffset
		prevStep := (tr - 17*ms - 1) / (10 * ms) * (10 * ms)
		changed := k == 0 || lastStep != prevStep
		at, ok := e.ObserveStamped(tr, changed, stamp)
		pat, pok := plain.Observe(tr, changed)
		if !ok || k < 300 {
			continue
		}
		if at < lastStep {
			t.Fatalf("read %d: placed at %d, before the step at %d", k, at, lastStep)
		}
		worst = max(worst, at-lastStep)
		if pok {
			worstPlain = max(worstPlain, pat-lastStep)
		}
	}
	if worst > 2*ms {
		t.Errorf("stamped steps placed up to %v ms late, want at most the 2 ms read latency", float64(worst)/1e6)
	}
	t.Logf("worst lateness: stamped %.2f ms, from reads alone %.2f ms", float64(worst)/1e6, float64(worstPlain)/1e6)
}

// FuzzStamped checks ObserveStamped's guarantees on arbitrary reads and
// stamps: a step is placed in its bracket (previous read, t] and never
// before the previous step.
func FuzzStamped(f *testing.F) {
	f.Add([]byte{17, 1, 5, 17, 0, 9, 3, 1, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Stamped
		var tr, stamp, prev, last int64
		first := true
		for i := 0; i+2 < len(b); i += 3 {
			tr += int64(b[i]) * 1e5
			stamp += int64(b[i+1]) * 1e5
			if b[i+1] == 255 {
				stamp = 0 // a device clock that restarts
			}
			changed := b[i+2]&1 == 1
			at, ok := e.ObserveStamped(tr, changed, stamp)
			if ok && !first {
				// An empty bracket (a read at the previous one's time)
				// places the step at the read, as Observe does.
				if (at <= prev && at != tr) || at > tr {
					t.Fatalf("read at %d (previous %d): step placed at %d", tr, prev, at)
				}
				if at < last {
					t.Fatalf("step at %d before the previous step at %d", at, last)
				}
			}
			if ok {
				last = at
			}
			first, prev = false, tr
		}
	})
}
