package otelenergy

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// staircase is a hardware-like energy counter on a fake clock: it draws a
// constant power and publishes the energy drawn so far every period, so a
// read between two publications returns the older one.
type staircase struct {
	clock  *fakeClock
	start  time.Time
	period time.Duration
	watts  uint64
}

// at returns the counter's value at now, in mJ: watts × the time of the
// last publication, which is a whole number of mJ because every period
// the tests use is a whole number of ms.
func (s staircase) at(now time.Time) uint64 {
	pub := now.Sub(s.start) / s.period * s.period
	return s.watts * uint64(pub/time.Millisecond)
}

// stallRig is a Monitor on a fake clock over staircase counters whose read
// can stall: the clock moves on while the read runs, which is how a slow
// NVML call or a lock held by the process listing looks to the sampler.
type stallRig struct {
	m        *Monitor
	clock    *fakeClock
	counters []staircase
	// stall, when set to i+1, makes device i's next read take stallFor;
	// sampleFirst says whether the counter is sampled before the pause
	// (a slow return) or after it (a wait for a lock).
	stall       atomic.Int32
	stallFor    time.Duration
	sampleFirst bool
	first, last []uint64 // the first and the latest value read, per device
	seen        []bool
}

func newStallRig(t *testing.T, n int, period time.Duration, watts uint64, maxWatts float64) *stallRig {
	t.Helper()
	r := &stallRig{clock: newFakeClock(), first: make([]uint64, n), last: make([]uint64, n), seen: make([]bool, n)}
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{ID: fmt.Sprintf("GPU-%d", i), MaxWatts: maxWatts}
		r.counters = append(r.counters, staircase{clock: r.clock, start: r.clock.Now(), period: period, watts: watts})
	}
	read := func(i int) (uint64, error) {
		stalled := r.stall.CompareAndSwap(int32(i+1), 0)
		if stalled && !r.sampleFirst {
			r.clock.Advance(r.stallFor)
		}
		v := r.counters[i].at(r.clock.Now())
		if stalled && r.sampleFirst {
			r.clock.Advance(r.stallFor)
		}
		if !r.seen[i] {
			r.first[i], r.seen[i] = v, true
		}
		r.last[i] = v
		return v, nil
	}
	src, err := NewFuncSource(devs, read, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The counters start at a phase no read is aligned with.
	r.clock.Advance(3 * time.Millisecond)
	m, err := NewMonitor(src, WithClock(r.clock.Now), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(t.Context()) })
	r.m = m
	return r
}

// run samples by hand every DefaultInterval for d, as the sampler
// goroutine does.
func (r *stallRig) run(d time.Duration) {
	for range int(d / DefaultInterval) {
		r.clock.Advance(DefaultInterval)
		r.m.Sample()
	}
}

// check says how far each device's metered total is from the energy its
// counter really counted between the first and the latest read, and fails
// on any difference or glitch.
func (r *stallRig) check(t *testing.T) {
	t.Helper()
	tot, st := r.m.Totals(), r.m.Stats()
	for i := range r.counters {
		want := r.last[i] - r.first[i]
		got := tot.EnergyMJ[i]
		if got != want || st.Devices[i].Glitches != 0 {
			t.Errorf("device %d: metered %d mJ, the counter counted %d mJ (lost %.1f J), %d glitches",
				i, got, want, (float64(want)-float64(got))/1e3, st.Devices[i].Glitches)
		}
	}
}

// TestSamplerStallInsideReadLosesNothing stalls one device's read for 3 s
// on two 700 W boards bounded at 1050 W (an enforced limit of 700 W × 1.5):
// neither board may lose energy to the stall or see a glitch, whether the
// counter was sampled before or after the pause.
func TestSamplerStallInsideReadLosesNothing(t *testing.T) {
	for _, sampleFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("sampled before the pause=%v", sampleFirst), func(t *testing.T) {
			r := newStallRig(t, 2, 100*time.Millisecond, 700, 1050)
			r.sampleFirst, r.stallFor = sampleFirst, 3*time.Second
			r.m.Sample()
			r.run(2 * time.Second)
			r.stall.Store(1) // device 0
			r.run(2 * time.Second)
			r.check(t)
		})
	}
}

// TestSamplerShortStallOnFastCounterLosesNothing stalls a read for 60 ms
// on a 20 ms counter at 650 W bounded at 975 W.
func TestSamplerShortStallOnFastCounterLosesNothing(t *testing.T) {
	for _, sampleFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("sampled before the pause=%v", sampleFirst), func(t *testing.T) {
			r := newStallRig(t, 1, 20*time.Millisecond, 650, 975)
			r.sampleFirst, r.stallFor = sampleFirst, 60*time.Millisecond
			r.m.Sample()
			r.run(time.Second)
			r.stall.Store(1)
			r.run(time.Second)
			r.check(t)
		})
	}
}

// TestSamplerStallOnEveryDeviceLosesNothing stalls each device's read in
// turn, in successive passes, on four boards: every stamp must be its own
// device's.
func TestSamplerStallOnEveryDeviceLosesNothing(t *testing.T) {
	r := newStallRig(t, 4, 100*time.Millisecond, 700, 1050)
	r.stallFor = 500 * time.Millisecond
	r.m.Sample()
	r.run(time.Second)
	for i := range 4 {
		r.stall.Store(int32(i + 1))
		r.run(time.Second)
	}
	r.check(t)
	for i := range 4 {
		v, err := r.m.view(i)
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < v.Len(); k++ {
			newer, _ := v.Back(k - 1)
			older, _ := v.Back(k)
			if newer.T < older.T {
				t.Fatalf("device %d: ring point at %d after one at %d", i, newer.T, older.T)
			}
		}
	}
}
