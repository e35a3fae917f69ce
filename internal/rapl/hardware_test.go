package rapl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/rapl"
	"github.com/otelenergy/otelenergy/internal/source"
)

// TestHardwareRAPL reads this machine's RAPL zones twice, a second apart,
// and prints the power each shows. It skips where there is no powercap
// RAPL interface; where its counters are refused it prints the grant
// missing and skips.
func TestHardwareRAPL(t *testing.T) {
	s, err := rapl.New()
	switch {
	case errors.Is(err, source.ErrUnavailable):
		t.Skipf("no RAPL here: %v", err)
	case errors.Is(err, rapl.ErrPermission):
		t.Skipf("RAPL refused: %v", err)
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
