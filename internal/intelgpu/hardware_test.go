package intelgpu_test

import (
	"errors"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/intelgpu"
	"github.com/otelenergy/otelenergy/internal/source"
)

// TestHardwareIntelGPU reads this machine's Intel GPUs twice, a second apart,
// and prints the power each shows. It skips where there is no
// i915 or xe GPU.
func TestHardwareIntelGPU(t *testing.T) {
	s, err := intelgpu.New()
	switch {
	case errors.Is(err, source.ErrUnavailable):
		t.Skipf("no Intel GPU here: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	defer s.Close()
	first := make([]uint64, len(s.Devices()))
	for i := range first {
		if first[i], err = s.ReadEnergy(i); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	for i, d := range s.Devices() {
		mj, err := s.ReadEnergy(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s (%s): %d mJ, %.1f W", d.ID, d.Name, d.HWType(), mj, float64(mj-first[i])/1000)
	}
	for _, sk := range s.Skipped() {
		t.Logf("left out %s (%s): %v", sk.Device.ID, sk.Device.Name, sk.Reason)
	}
}
