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
	b := attrib.New(attrib.Config{IdleWatts: 50, OnSplit: func(iv procshare.Interval, pids []uint32, keys []uint64, mj []uint64, rest uint64) {
		if len(pids) != len(mj) || len(keys) != len(mj) {
			t.Fatalf("%d pids, %d keys, %d shares", len(pids), len(keys), len(mj))
		}
		c := call{iv: iv, mj: map[uint32]uint64{}, rest: rest}
		for k, p := range pids {
			c.mj[p] += mj[k]
		}
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
