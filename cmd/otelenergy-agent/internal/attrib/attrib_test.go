package attrib_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

const ms = int64(time.Millisecond)

func share(r *attrib.Result, pid uint32) uint64 {
	for k, p := range r.Pids {
		if p == pid {
			return r.MJ[k]
		}
	}
	return 0
}

// TestAlignedByTimestamp: two processes take turns every 500 ms, and
// each one's samples arrive a second late. Split by arrival, each window
// would go to the wrong process; split by timestamp, each gets its own
// energy exactly.
func TestAlignedByTimestamp(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 50})
	var r attrib.Result
	var got [2]uint64
	var idle uint64
	const period = 250 * ms // NVML's periods are 1/6 s to 1 s
	for pass := range 20 {
		t0 := int64(pass) * 1000 * ms
		var ivs []procshare.Interval
		for k := range 10 {
			// 50 W idle (5 J a step) plus the running process's 200 W.
			ivs = append(ivs, procshare.Interval{T0: t0 + int64(k)*100*ms, T1: t0 + int64(k+1)*100*ms, EnergyMJ: 25_000})
		}
		b.Push(ivs)
		// The samples of the previous second: pid 1 in its first half,
		// pid 2 in its second, each sample describing 250 ms.
		var ss []attrib.Sample
		if pass > 0 {
			p0 := t0 - 1000*ms
			for k := range 4 {
				pid := uint32(1 + k/2)
				ss = append(ss, attrib.Sample{Pid: pid, T1: p0 + int64(k+1)*period, SM: 80})
			}
		}
		b.AddSamples(ss)
		b.Split(t0+1000*ms, false, &r)
		got[0] += share(&r, 1)
		got[1] += share(&r, 2)
		idle += r.IdleMJ
		if r.UnattributedMJ != 0 {
			t.Fatalf("pass %d: %d mJ unattributed", pass, r.UnattributedMJ)
		}
	}
	// 19 seconds split (the last is held for its samples): each process
	// ran 9.5 s at 200 W.
	if got[0] != 1_900_000 || got[1] != 1_900_000 || idle != 950_000 {
		t.Fatalf("shares %v idle %d, want 1,900,000 each and 950,000", got, idle)
	}
	if b.PendingMJ() != 250_000 {
		t.Fatalf("pending %d, want the last second's 250,000", b.PendingMJ())
	}
}

// TestHold: an interval whose samples have not arrived waits; once the
// hold has passed with none, its active energy is unattributed, and a
// sample that arrives within the hold reaches it.
func TestHold(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 10, Hold: 2 * time.Second})
	var r attrib.Result
	b.Push([]procshare.Interval{{T0: 0, T1: 1000 * ms, EnergyMJ: 30_000}})
	b.Split(2900*ms, false, &r)
	if r.SplitMJ != 0 || b.PendingMJ() != 30_000 {
		t.Fatalf("split %d pending %d before the hold passed", r.SplitMJ, b.PendingMJ())
	}
	b.Split(3000*ms, false, &r)
	if r.SplitMJ != 30_000 || r.IdleMJ != 10_000 || r.UnattributedMJ != 20_000 || b.PendingMJ() != 0 {
		t.Fatalf("after the hold: %+v pending %d", r, b.PendingMJ())
	}
	b.Push([]procshare.Interval{{T0: 5000 * ms, T1: 6000 * ms, EnergyMJ: 30_000}})
	b.Split(7000*ms, false, &r)
	b.AddSamples([]attrib.Sample{{Pid: 9, T1: 6000 * ms, T0: 5000 * ms, SM: 40}})
	b.Split(7500*ms, false, &r)
	if share(&r, 9) != 20_000 || r.UnattributedMJ != 0 {
		t.Fatalf("a sample within the hold: %+v", r)
	}
}

// TestIdleFromFirstSeconds: a board idle at 70 W for its first seconds
// knows its idle power from them, then learns its power model from a
// compute-bound and a memory-bound process whose loads vary, and splits
// by it: the memory-bound one draws 2 W per percent of memory besides
// 1.5 W per percent of SM.
func TestIdleFromFirstSeconds(t *testing.T) {
	b := attrib.New(attrib.Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	var r attrib.Result
	var truth, got [3]float64
	for pass := range 120 {
		t0 := int64(pass) * 1000 * ms
		var ivs []procshare.Interval
		var ss []attrib.Sample
		for k := range 5 {
			a, b0 := t0+int64(k)*200*ms, t0+int64(k+1)*200*ms
			e := 70.0 * 0.2
			if pass >= 3 {
				sm1, sm2 := 20+rng.Float64()*60, 10+rng.Float64()*50
				m1, m2 := math.Round(0.1*sm1), math.Round(0.9*sm2)
				sm1, sm2 = math.Round(sm1), math.Round(sm2)
				p1, p2 := 1.5*sm1+2*m1, 1.5*sm2+2*m2
				e += (p1 + p2) * 0.2
				truth[1] += p1 * 0.2
				truth[2] += p2 * 0.2
				ss = append(ss, attrib.Sample{Pid: 1, T1: b0, SM: uint32(sm1), Mem: uint32(m1)},
					attrib.Sample{Pid: 2, T1: b0, SM: uint32(sm2), Mem: uint32(m2)})
			}
			ivs = append(ivs, procshare.Interval{T0: a, T1: b0, EnergyMJ: uint64(e * 1000)})
		}
		b.Push(ivs)
		b.AddSamples(ss)
		b.Split(t0+1000*ms, false, &r)
		if pass == 3 {
			if w := b.IdleWatts(); math.Abs(w-70) > 0.1 {
				t.Fatalf("idle %.2f W after 3 idle seconds, want 70", w)
			}
		}
		if pass >= 60 {
			got[1] += float64(share(&r, 1)) / 1000
			got[2] += float64(share(&r, 2)) / 1000
		} else {
			truth = [3]float64{}
		}
	}
	// Memory never exceeds SM here: 1.5 W per % of SM plus 2 W per % of
	// memory is 150 W at full SM alone and 350 W at full SM overlapped
	// by memory; memory beyond SM is never seen.
	theta, learned := b.Model()
	if !learned || math.Abs(theta[attrib.TermSM]-150) > 3 || math.Abs(theta[attrib.TermSMMem]-350) > 4 || theta[attrib.TermMem] != 0 {
		t.Fatalf("model %.1f learned %v, want SM 150 W, SM with memory 350 W and memory beyond SM 0 at full use", theta, learned)
	}
	for p := 1; p <= 2; p++ {
		if e := math.Abs(got[p]-truth[p]) / truth[p]; e > 0.01 {
			t.Errorf("process %d: %.1f J, truth %.1f J", p, got[p], truth[p])
		}
	}
}

// FuzzBoard checks conservation against random intervals, samples and
// clocks: every split gives out exactly the energy of the intervals it
// took, and what is pending plus what was split is what was pushed.
func FuzzBoard(f *testing.F) {
	f.Add(uint64(1), int64(2000), uint8(3))
	f.Add(uint64(7), int64(-1), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, holdMs int64, npid uint8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		b := attrib.New(attrib.Config{Hold: time.Duration(holdMs%10_000) * time.Millisecond, IdleWatts: float64(rng.IntN(3) * 40)})
		var r attrib.Result
		var pushed, split_ uint64
		var now int64
		for range 50 {
			var ivs []procshare.Interval
			for range rng.IntN(12) {
				d := int64(rng.IntN(200)) * ms
				ivs = append(ivs, procshare.Interval{T0: now, T1: now + d, EnergyMJ: uint64(rng.IntN(100_000))})
				pushed += ivs[len(ivs)-1].EnergyMJ
				now += d
			}
			b.Listed(rng.IntN(3) - 1)
			b.Push(ivs)
			var ss []attrib.Sample
			for range rng.IntN(8) {
				ss = append(ss, attrib.Sample{Pid: uint32(rng.IntN(int(npid%6) + 1)), Key: uint64(rng.IntN(2)), T1: now - int64(rng.IntN(3000))*ms,
					T0: int64(rng.IntN(2)) * (now - int64(rng.IntN(4000))*ms), SM: uint32(rng.IntN(101)), Mem: uint32(rng.IntN(101))})
			}
			b.AddSamples(ss)
			b.Split(now+int64(rng.IntN(3000))*ms, rng.IntN(10) == 0, &r)
			var given uint64
			for _, mj := range r.MJ {
				given += mj
			}
			if given+r.IdleMJ+r.UnattributedMJ != r.SplitMJ {
				t.Fatalf("shares %d + idle %d + unattributed %d != split %d", given, r.IdleMJ, r.UnattributedMJ, r.SplitMJ)
			}
			split_ += r.SplitMJ
			if split_+b.PendingMJ() != pushed {
				t.Fatalf("split %d + pending %d != pushed %d", split_, b.PendingMJ(), pushed)
			}
		}
	})
}

// BenchmarkSplit is one board's pass: ten new intervals and eight
// processes' samples, split and the model refitted.
func BenchmarkSplit(b *testing.B) {
	bd := attrib.New(attrib.Config{})
	var r attrib.Result
	var now int64
	ivs := make([]procshare.Interval, 10)
	ss := make([]attrib.Sample, 0, 48)
	step := func() {
		for k := range ivs {
			ivs[k] = procshare.Interval{T0: now, T1: now + 100*ms, EnergyMJ: 40_000 + uint64(k)*100}
			now += 100 * ms
		}
		ss = ss[:0]
		for k := range 6 {
			for p := range 8 {
				ss = append(ss, attrib.Sample{Pid: uint32(p), T1: now - 1000*ms + int64(k+1)*166*ms, SM: uint32(10 + 5*p + k), Mem: uint32(3 * p)})
			}
		}
		bd.Push(ivs)
		bd.AddSamples(ss)
		bd.Split(now, false, &r)
	}
	for range 50 {
		step()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

// TestMemoryBoundDrawsLess: memory-bound work draws less per percent of SM
// than compute-bound work (a decode at 2.4 W per % against a GEMM at
// 4.8 W per %), while showing more memory utilization: Csm·SM + Cmem·MEM
// would need a negative Cmem. Split by the overlap of SM and memory, the
// model learns both draws with non-negative coefficients, and each
// process's share follows its physics on a held-out stretch; the shares
// by SM alone would be a third off.
func TestMemoryBoundDrawsLess(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 70})
	rng := rand.New(rand.NewPCG(5, 8))
	var r attrib.Result
	var truth, got, bySM [3]float64
	for pass := range 150 {
		t0 := int64(pass) * 1000 * ms
		var ivs []procshare.Interval
		var ss []attrib.Sample
		for k := range 5 {
			a, b0 := t0+int64(k)*200*ms, t0+int64(k+1)*200*ms
			sm1, sm2 := math.Round(20+rng.Float64()*60), math.Round(10+rng.Float64()*50)
			m1, m2 := math.Round(0.1*sm1), math.Round(0.9*sm2)
			p1, p2 := 4.8*sm1, 2.4*sm2 // compute-bound, memory-bound
			e := (70 + p1 + p2) * 0.2
			ss = append(ss, attrib.Sample{Pid: 1, T1: b0, SM: uint32(sm1), Mem: uint32(m1)},
				attrib.Sample{Pid: 2, T1: b0, SM: uint32(sm2), Mem: uint32(m2)})
			ivs = append(ivs, procshare.Interval{T0: a, T1: b0, EnergyMJ: uint64(e * 1000)})
			if pass >= 60 {
				truth[1] += p1 * 0.2
				truth[2] += p2 * 0.2
				act := (p1 + p2) * 0.2
				bySM[1] += act * sm1 / (sm1 + sm2)
				bySM[2] += act * sm2 / (sm1 + sm2)
			}
		}
		b.Push(ivs)
		b.AddSamples(ss)
		b.Split(t0+1000*ms, false, &r)
		if pass >= 60 {
			got[1] += float64(share(&r, 1)) / 1000
			got[2] += float64(share(&r, 2)) / 1000
		}
	}
	theta, learned := b.Model()
	// 4.8 W per % at SM 0.9 + overlap 0.1, 2.4 W at 0.1 + 0.9: 510 W and
	// 210 W at 100 %.
	if !learned || math.Abs(theta[attrib.TermSM]-510)/510 > 0.03 || math.Abs(theta[attrib.TermSMMem]-210)/210 > 0.05 {
		t.Errorf("model %.1f learned %v, want SM 510 W and SM with memory 210 W at 100 %%", theta, learned)
	}
	for p := 1; p <= 2; p++ {
		e := math.Abs(got[p]-truth[p]) / truth[p]
		t.Logf("process %d: %.1f J, truth %.1f J (%.2f%%); by SM %.1f J", p, got[p], truth[p], 100*e, bySM[p])
		if e > 0.01 {
			t.Errorf("process %d: %.1f J, truth %.1f J, %.1f%% off", p, got[p], truth[p], 100*e)
		}
	}
}
