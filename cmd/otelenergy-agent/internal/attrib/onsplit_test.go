package attrib_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// TestOnSplitPerInterval: OnSplit sees every interval once, as it is
// split, with shares and a rest that add up to the interval's energy,
// and the shares of all calls add up to what Split returned, per process.
func TestOnSplitPerInterval(t *testing.T) {
	type call struct {
		iv   procshare.Interval
		mj   map[uint32]uint64
		rest uint64
	}
	var calls []call
	b := attrib.New(attrib.Config{IdleWatts: 50, Dev: 3, OnSplit: func(dev int, t0, t1 int64, procs []attrib.Proc, mj []uint64, rest uint64, cover []uint64) {
		if len(procs) != len(mj) || (len(cover) != len(mj) && cover != nil) || dev != 3 {
			t.Fatalf("device %d: %d processes, %d shares, %d covers", dev, len(procs), len(mj), len(cover))
		}
		c := call{iv: procshare.Interval{T0: t0, T1: t1}, mj: map[uint32]uint64{}, rest: rest}
		var covered uint64
		for k, p := range procs {
			c.mj[p.Pid] += mj[k]
			c.iv.EnergyMJ += mj[k]
			covered += cover[k]
			if (mj[k] > 0) != (cover[k] > 0) {
				t.Fatalf("process %d: %d mJ over %d ns", p.Pid, mj[k], cover[k])
			}
		}
		if covered != 0 && covered != uint64(t1-t0) {
			t.Fatalf("covers add up to %d ns of %d", covered, t1-t0)
		}
		c.iv.EnergyMJ += rest
		calls = append(calls, c)
	}})
	var r attrib.Result
	var ivs []procshare.Interval
	for k := range 10 {
		// 50 W idle (5 J a step) plus 120 W of two processes, and an
		// uneven energy per step.
		ivs = append(ivs, procshare.Interval{T0: int64(k) * 100 * ms, T1: int64(k+1) * 100 * ms, EnergyMJ: 17_000 + uint64(k)*7})
	}
	b.Push(ivs)
	// pid 1 at 60 % and pid 2 at 30 % over the first 600 ms; none after.
	b.AddSamples([]attrib.Sample{{Pid: 1, T0: 0, T1: 600 * ms, SM: 60}, {Pid: 2, T0: 0, T1: 600 * ms, SM: 30}})
	b.Split(10_000*ms, false, &r)
	if len(calls) != len(ivs) {
		t.Fatalf("%d calls for %d intervals", len(calls), len(ivs))
	}
	sum := map[uint32]uint64{}
	var rest uint64
	for k, c := range calls {
		if c.iv != ivs[k] {
			t.Fatalf("call %d for %+v, want %+v", k, c.iv, ivs[k])
		}
		var e uint64
		for p, mj := range c.mj {
			e += mj
			sum[p] += mj
		}
		if e+c.rest != c.iv.EnergyMJ {
			t.Fatalf("interval %d: shares %d + rest %d != %d", k, e, c.rest, c.iv.EnergyMJ)
		}
		rest += c.rest
	}
	if sum[1] != share(&r, 1) || sum[2] != share(&r, 2) || rest != r.IdleMJ+r.UnattributedMJ || sum[1] == 0 || sum[2] == 0 {
		t.Fatalf("per interval %v rest %d; Split gave %d, %d, rest %d", sum, rest, share(&r, 1), share(&r, 2), r.IdleMJ+r.UnattributedMJ)
	}
}
