package rapl_test

import (
	"testing"

	"github.com/prometheus/procfs/sysfs"

	"github.com/otelenergy/otelenergy/internal/rapl"
)

// BenchmarkReadEnergy compares one reading of a zone by this source
// (energy_uj kept open and reread at offset 0) with procfs's own
// RaplZone.GetEnergyMicrojoules (open, read, close, parse), the baseline.
// On the fake tree both read a regular file, not sysfs; the ratio is of
// system calls and allocations.
func BenchmarkReadEnergy(b *testing.B) {
	root := tree(b)
	b.Run("baseline", func(b *testing.B) {
		fs, err := sysfs.NewFS(root)
		if err != nil {
			b.Fatal(err)
		}
		zones, err := sysfs.GetRaplZones(fs)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := zones[0].GetEnergyMicrojoules(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rapl", func(b *testing.B) {
		s, err := rapl.New(rapl.WithRoot(root))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ReadEnergy(0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
