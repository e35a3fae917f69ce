package ledger

import (
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

// TestTimeSplitManyShort: a host window of 1 s (the default host interval
// is 250 ms, up to 2 s); one request runs through it, and n short requests
// of 1 ms each, one after the other, fill its first n ms. At every instant
// the ring's energy is shared equally among the requests active then, so
// the long one gets half of the first n ms and all of the rest, however
// many short ones there are (600 is past the accelerator split's exact
// sweep).
func TestTimeSplitManyShort(t *testing.T) {
	for _, n := range []int{200, 600} {
		g := newTimeRig(t, Config{Horizon: 1e12})
		g.l.SetLost(0)
		push := func(ts int64, mj uint64) {
			for _, r := range []*ring.Ring{g.dev, g.times[0], g.times[1]} {
				if err := r.Push(ring.Point{T: ts, EnergyMJ: mj}); err != nil {
					t.Fatal(err)
				}
			}
		}
		push(0, 0)
		g.l.Observe(0, 0, 0)
		g.l.Settle(0, nil)
		const ms = int64(1e6)
		long := newAccount(0, nil)
		g.l.Add(long)
		var short []*Account
		for i := range n {
			a := newAccount(int64(i)*ms, nil)
			g.l.Add(a)
			short = append(short, a)
		}
		g.l.Observe(1, 0, 0)
		for i, a := range short {
			a.End(int64(i+1) * ms)
		}
		long.End(1000 * ms)
		g.l.Observe(1000*ms, 0, 0)
		push(1000*ms, 1_000_000) // 1000 mJ per ms
		g.l.Observe(1000*ms, 0, 0)
		g.l.Settle(1000*ms, nil)
		want := uint64(1_000_000 - 500*n) // half of n ms, all of the rest
		got := g.time(long, 0)
		var sum uint64
		for _, a := range short {
			sum += g.time(a, 0)
		}
		_, un := g.l.TimeSplit(0)
		t.Logf("n=%d: long %d mJ (want %d), short %d mJ in all (want %d), unattributed %d", n, got, want, sum, 500*n, un)
		if d := int64(got) - int64(want); d > 1000 || d < -1000 {
			t.Errorf("n=%d: the long request got %d mJ, want %d (%+.1f%%)", n, got, want, 100*float64(d)/float64(want))
		}
	}
}
