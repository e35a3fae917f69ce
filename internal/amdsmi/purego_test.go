//go:build linux && (amd64 || arm64)

package amdsmi

import (
	"testing"

	"github.com/ebitengine/purego"
)

// BenchmarkPuregoCall measures the real call path of EnergyCount (purego,
// four pointer arguments, out-parameters on the heap) without ROCm: the
// function called is libc's getpid, which ignores the arguments, as the
// SysV calling convention allows. baseline calls getpid through
// purego.SyscallN with no arguments.
func BenchmarkPuregoCall(b *testing.B) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		b.Skip(err)
	}
	getpid, err := purego.Dlsym(libc, "getpid")
	if err != nil {
		b.Skip(err)
	}
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			purego.SyscallN(getpid)
		}
	})
	b.Run("energy", func(b *testing.B) {
		l := &lib{energy: getpid, e: new(energyOut)}
		b.ReportAllocs()
		for b.Loop() {
			l.EnergyCount(Handle(1))
		}
	})
}

func TestPuregoCallAllocs(t *testing.T) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Skip(err)
	}
	getpid, err := purego.Dlsym(libc, "getpid")
	if err != nil {
		t.Skip(err)
	}
	l := &lib{energy: getpid, e: new(energyOut)}
	if n := testing.AllocsPerRun(100, func() { l.EnergyCount(Handle(1)) }); n != 0 {
		t.Errorf("EnergyCount through purego allocates %v times per call", n)
	}
}
