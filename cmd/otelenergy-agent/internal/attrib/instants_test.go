package attrib_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// TestPerPidInstants: NVML stamps each process's sample at its own
// instant (go-nvml #51). Two processes run side by side at the same
// load, pid 2 stamped a microsecond (and, in the second case, up to
// 50 µs) after pid 1: each gets half the active energy and none is
// unattributed, as when both share an instant.
func TestPerPidInstants(t *testing.T) {
	for _, skew := range []int64{0, 1000, 50_000} {
		b := attrib.New(attrib.Config{IdleWatts: 50})
		var r attrib.Result
		var got [2]uint64
		var idle, un uint64
		const period = 200 * ms
		for pass := range 30 {
			t0 := int64(pass) * 1000 * ms
			var ivs []procshare.Interval
			for k := range 10 {
				// 50 W idle plus 2 × 100 W.
				ivs = append(ivs, procshare.Interval{T0: t0 + int64(k)*100*ms, T1: t0 + int64(k+1)*100*ms, EnergyMJ: 25_000})
			}
			b.Push(ivs)
			var ss []attrib.Sample
			if pass > 0 {
				p0 := t0 - 1000*ms
				for k := range 5 {
					at := p0 + int64(k+1)*period
					ss = append(ss, attrib.Sample{Pid: 1, T1: at, SM: 60},
						attrib.Sample{Pid: 2, T1: at + skew*int64(k%2+1)/2, SM: 60})
				}
			}
			b.AddSamples(ss)
			b.Split(t0+1000*ms, false, &r)
			if pass < 2 {
				continue // the first samples' spans start at an estimate
			}
			got[0] += share(&r, 1)
			got[1] += share(&r, 2)
			idle += r.IdleMJ
			un += r.UnattributedMJ
		}
		tot := float64(got[0] + got[1] + idle + un)
		for k, g := range got {
			if e := float64(g)/(tot*0.4) - 1; e > 0.01 || e < -0.01 {
				t.Errorf("skew %d ns: pid %d got %d mJ of %.0f: %.1f%% off", skew, k+1, g, tot*0.4, 100*e)
			}
		}
		if un > uint64(tot/1000) {
			t.Errorf("skew %d ns: %d mJ unattributed of %.0f", skew, un, tot)
		}
	}
}
