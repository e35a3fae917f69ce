package amdsmi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/source"
)

// TestHardwareAMDSMI reads this machine's AMD GPUs through the real
// libamd_smi.so twice, a second apart, and prints the power each shows and
// the processes on it. It skips where the library cannot be loaded.
func TestHardwareAMDSMI(t *testing.T) {
	s, err := amdsmi.New()
	if errors.Is(err, source.ErrUnavailable) && !errors.Is(err, amdsmi.ErrOldROCm) {
		t.Skipf("no AMD SMI here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := make([]uint64, len(s.Devices()))
	stamps := make([]uint64, len(s.Devices()))
	for i := range first {
		if first[i], stamps[i], err = s.ReadEnergyStamped(i); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	for i, d := range s.Devices() {
		mj, ts, err := s.ReadEnergyStamped(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s: %d mJ, %.1f W over %.3f s of its own clock; share %+v",
			d.ID, d.Name, mj, float64(mj-first[i])/1000, float64(ts-stamps[i])/1e9, s.Share(i))
	}
	for _, sk := range s.Skipped() {
		t.Logf("left out %s (%s): %v", sk.Device.ID, sk.Device.Name, sk.Reason)
	}
}
