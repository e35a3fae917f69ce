//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/steptime"
)

// TestHardwareNVML reads the real GPUs through libnvidia-ml.so.1. It skips
// where the library cannot be loaded, which is what a machine without an
// NVIDIA driver looks like; New then makes no NVML call after Init.
func TestHardwareNVML(t *testing.T) {
	s, err := nvmlsource.New()
	if errors.Is(err, source.ErrUnavailable) && errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Skipf("libnvidia-ml.so was not found, so the hardware test cannot run: %v", err)
	}
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})

	for _, sk := range s.Skipped() {
		t.Logf("skipped GPU %d %q %s: %v", sk.Device.Index, sk.Device.Name, sk.Device.ID, sk.Reason)
	}
	devs := s.Devices()
	if len(devs) == 0 {
		t.Fatal("New() succeeded with no devices")
	}
	first := make([]uint64, len(devs))
	for i := range devs {
		if first[i], err = s.ReadEnergy(i); err != nil {
			t.Fatalf("first ReadEnergy(%d) = %v", i, err)
		}
	}
	time.Sleep(time.Second)
	for i, d := range devs {
		second, err := s.ReadEnergy(i)
		if err != nil {
			t.Fatalf("second ReadEnergy(%d) = %v", i, err)
		}
		t.Logf("GPU %d %q %s: %d mJ, then %d mJ 1 s later", d.Index, d.Name, d.ID, first[i], second)
		if second < first[i] {
			t.Errorf("GPU %d: counter went from %d to %d mJ within 1 s", d.Index, first[i], second)
		}
	}
}

// TestHardwareCounterUpdatePeriod measures how often each real GPU's
// energy counter advances, by reading it in a tight loop for a few seconds
// and logging the instants it changed; and it checks that the step
// estimator the Monitor uses, fed reads at the Monitor's 17 ms cadence,
// learns the same period. It also logs what each read costs, the power
// bound and the board's share. It skips without the NVML library.
func TestHardwareCounterUpdatePeriod(t *testing.T) {
	s, err := nvmlsource.New()
	if errors.Is(err, source.ErrUnavailable) && errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Skipf("libnvidia-ml.so was not found, so the hardware test cannot run: %v", err)
	}
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	const poll = 3 * time.Second
	for i, d := range s.Devices() {
		t.Logf("GPU %d %q %s: MaxWatts %.0f, share %+v", d.Index, d.Name, d.ID, d.MaxWatts, s.Share(i))
		start := time.Now()
		prev, err := s.ReadEnergy(i)
		if err != nil {
			t.Fatalf("ReadEnergy(%d) = %v", i, err)
		}
		var changes []time.Duration
		var deltas []uint64
		reads := 0
		var est steptime.Estimator
		nextEst := time.Duration(0)
		lastEstVal := prev
		for time.Since(start) < poll {
			v, err := s.ReadEnergy(i)
			if err != nil {
				t.Fatalf("ReadEnergy(%d) = %v", i, err)
			}
			reads++
			at := time.Since(start)
			if v != prev {
				changes = append(changes, at)
				deltas = append(deltas, v-prev)
				prev = v
			}
			if at >= nextEst {
				// What the Monitor's sampler sees, every 17 ms.
				est.Observe(int64(at), v != lastEstVal)
				lastEstVal = v
				nextEst += 17 * time.Millisecond
			}
		}
		perRead := poll / time.Duration(max(reads, 1))
		if len(changes) < 3 {
			t.Logf("GPU %d: %d reads (%v each), only %d changes in %v: too few to measure", d.Index, reads, perRead, len(changes), poll)
			continue
		}
		gaps := make([]time.Duration, 0, len(changes)-1)
		for k := 1; k < len(changes); k++ {
			gaps = append(gaps, changes[k]-changes[k-1])
		}
		sorted := slices.Sorted(slices.Values(gaps))
		period := (changes[len(changes)-1] - changes[0]) / time.Duration(len(changes)-1)
		var mj uint64
		for _, dlt := range deltas {
			mj += dlt
		}
		watts := float64(mj) / (changes[len(changes)-1] - changes[0] + period).Seconds() / 1000
		t.Logf("GPU %d: %d reads in %v (%v per read), %d counter changes: period %v (gaps min %v, median %v, max %v), phase %v after the first read, about %.0f W; the 17 ms estimator learned %v",
			d.Index, reads, poll, perRead, len(changes), period, sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1],
			changes[0]%period, watts, time.Duration(est.Period()))
		if p := time.Duration(est.Period()); p > 0 && (p < period*9/10 || p > period*11/10) {
			t.Errorf("GPU %d: the estimator learned %v, the tight loop measured %v", d.Index, p, period)
		}
	}
}
