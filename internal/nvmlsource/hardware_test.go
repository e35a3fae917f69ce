//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
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
