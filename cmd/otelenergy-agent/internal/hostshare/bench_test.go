package hostshare_test

import (
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
)

// BenchmarkPass measures one pass over a two-socket host (4 domains) and
// 8 tracked processes on the fake tree, against the baseline of the same
// pass's counter reads alone: the rest is reading /proc (the node's stat
// and each process's), and the split; "carbon" is the same pass with each
// domain's split converted into emissions (a Factor at 436 g/kWh and a
// PUE of 1.135, the conversion the agent's model makes). On the fake tree
// every read is a regular file's, not sysfs's or procfs's.
func BenchmarkPass(b *testing.B) {
	n := newNode(b)
	var ps []hostshare.Proc
	for p := uint32(10); p < 18; p++ {
		n.process(p, uint64(p)*100, 1000)
		ps = append(ps, procs(p)...)
	}
	src, _, err := energysource.Host(energysource.WithSysfs(n.sys))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range 4 {
				if _, err := src.ReadEnergy(i); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("host", func(b *testing.B) {
		clk := newFakeClock()
		h, err := hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: n.proc}, Now: clk.Stepping(time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		h.Pass(ps, nil)
		h.Pass(ps, nil)
		b.ReportAllocs()
		for b.Loop() {
			h.Pass(ps, nil)
		}
	})
	b.Run("carbon", func(b *testing.B) {
		f, err := carbon.NewFactor(436_000, 1_135_000)
		if err != nil {
			b.Fatal(err)
		}
		var em hostshare.Emissions = factorEm{f} // boxed once, as the agent passes a pointer
		clk := newFakeClock()
		h, err := hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: n.proc}, Now: clk.Stepping(time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		h.Pass(ps, em)
		h.Pass(ps, em)
		b.ReportAllocs()
		for b.Loop() {
			h.Pass(ps, em)
		}
	})
}
