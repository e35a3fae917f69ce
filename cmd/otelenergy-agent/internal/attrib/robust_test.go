package attrib_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// busyBoard drives b for passes one-second passes of five 200 ms
// intervals, never idle: a compute-bound process (pid 1, memory a tenth
// of its SM) and a memory-bound one (pid 2, memory 90 % of its SM) at
// random loads, drawing power(sm1, sm2) W in all and each its share
// share(sm1, sm2) of the power above idle. It calls each(pass) before a
// pass's samples are added, which may return extra samples, and returns
// each process's energy and its truth over the passes from 60 on.
func busyBoard(b *attrib.Board, seed uint64, passes int, power func(sm1, sm2 float64) (idle, p1, p2 float64), each func(pass int, ss []attrib.Sample) []attrib.Sample) (got, truth [3]float64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	var r attrib.Result
	for pass := range passes {
		t0 := int64(pass) * 1000 * ms
		var ivs []procshare.Interval
		var ss []attrib.Sample
		for k := range 5 {
			a, b0 := t0+int64(k)*200*ms, t0+int64(k+1)*200*ms
			sm1, sm2 := math.Round(20+rng.Float64()*60), math.Round(10+rng.Float64()*50)
			idle, p1, p2 := power(sm1, sm2)
			ss = append(ss, attrib.Sample{Pid: 1, T0: a, T1: b0, SM: uint32(sm1), Mem: uint32(math.Round(0.1 * sm1))},
				attrib.Sample{Pid: 2, T0: a, T1: b0, SM: uint32(sm2), Mem: uint32(math.Round(0.9 * sm2))})
			ivs = append(ivs, procshare.Interval{T0: a, T1: b0, EnergyMJ: uint64((idle + p1 + p2) * 0.2 * 1000)})
			if pass >= 60 {
				truth[1] += p1 * 0.2
				truth[2] += p2 * 0.2
			}
		}
		if each != nil {
			ss = each(pass, ss)
		}
		b.Push(ivs)
		b.AddSamples(ss)
		b.Split(t0+1000*ms, false, &r)
		if pass >= 60 {
			got[1] += float64(share(&r, 1)) / 1000
			got[2] += float64(share(&r, 2)) / 1000
		}
	}
	return got, truth
}

// TestPeersBeforeIntercept: a board that is never idle, whose power
// saturates with its summed SM (70 W + 400 W·(1 − exp(−ΣSM/60)), shared
// in proportion to SM), beside boards that measured a 70 W idle. A
// line's intercept through a concave curve lies far above idle, and the
// processes would carry too little; the peers' measured idle comes
// first.
func TestPeersBeforeIntercept(t *testing.T) {
	b := attrib.New(attrib.Config{})
	b.SetPrior(70)
	got, truth := busyBoard(b, 3, 150, func(sm1, sm2 float64) (float64, float64, float64) {
		act := 400 * (1 - math.Exp(-(sm1+sm2)/60))
		return 70, act * sm1 / (sm1 + sm2), act * sm2 / (sm1 + sm2)
	}, nil)
	if w, src, _ := b.Idle(); src != attrib.IdlePeers || w != 70 {
		t.Errorf("idle %.1f W from %s, want the peers' 70 W", w, attrib.IdleSourceNames[src])
	}
	for p := 1; p <= 2; p++ {
		e := math.Abs(got[p]-truth[p]) / truth[p]
		t.Logf("process %d: %.1f J, truth %.1f J (%.2f%%)", p, got[p], truth[p], 100*e)
		if e > 0.05 {
			t.Errorf("process %d: %.1f J, truth %.1f J, %.1f%% off", p, got[p], truth[p], 100*e)
		}
	}
}

// TestOutlierRow: power follows SM, 4 W per percent for either kind of
// work, and one second's samples of the memory-bound process arrive
// twice (as across a wall clock step): that row's utilization is far
// above what its energy shows. Weighed as any other row, it would skew
// the model for the whole forgetting horizon; down-weighed, the model
// and the shares after it stay on the physics.
func TestOutlierRow(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 70})
	got, truth := busyBoard(b, 4, 150, func(sm1, sm2 float64) (float64, float64, float64) {
		return 70, 4 * sm1, 4 * sm2
	}, func(pass int, ss []attrib.Sample) []attrib.Sample {
		if pass == 60 {
			for _, s := range ss {
				if s.Pid == 2 {
					s.SM, s.Mem = 3*s.SM, 3*s.Mem
					ss = append(ss, s)
				}
			}
		}
		return ss
	})
	theta, _ := b.Model()
	if math.Abs(theta[attrib.TermSM]-400) > 8 || math.Abs(theta[attrib.TermSMMem]-400) > 8 {
		t.Errorf("model %.1f, want SM and SM with memory 400 W at 100 %%", theta)
	}
	for p := 1; p <= 2; p++ {
		e := math.Abs(got[p]-truth[p]) / truth[p]
		t.Logf("process %d: %.1f J, truth %.1f J (%.2f%%)", p, got[p], truth[p], 100*e)
		if e > 0.02 {
			t.Errorf("process %d: %.1f J, truth %.1f J, %.1f%% off", p, got[p], truth[p], 100*e)
		}
	}
}

// TestRobustFollowsRegimeChange: noise-free power, which the model fits
// exactly, doubles at pass 100. The outlier weight must not freeze the
// model at its old fit (a residual scale of 0 would weigh every new row
// 0): it follows the new power.
func TestRobustFollowsRegimeChange(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 70})
	k := 4.0
	busyBoard(b, 4, 400, func(sm1, sm2 float64) (float64, float64, float64) {
		return 70, k * sm1, k * sm2
	}, func(pass int, ss []attrib.Sample) []attrib.Sample {
		if pass == 100 {
			k = 8
		}
		return ss
	})
	// With the default 300 s forgetting, 300 s after the change the old
	// rows keep e^-1 of the weight: the fit is about 400 + 400·(1 − e^-1).
	want := 400 + 400*(1-math.Exp(-1))
	th, _ := b.Model()
	if math.Abs(th[attrib.TermSM]-want) > 0.1*want {
		t.Errorf("300 s after the power doubled: the model's SM term is %.1f W at 100%%, want about %.0f (the forgetting's mix of 400 and 800)", th[attrib.TermSM], want)
	}
}

// TestRobustShiftShares: one process's power per % of SM falls from 4 W
// to 1 W at pass 100, on noise-free power: the model follows, and so do
// the shares.
func TestRobustShiftShares(t *testing.T) {
	b := attrib.New(attrib.Config{IdleWatts: 70})
	k2 := 4.0
	got, truth := busyBoard(b, 4, 400, func(sm1, sm2 float64) (float64, float64, float64) {
		return 70, 4 * sm1, k2 * sm2
	}, func(pass int, ss []attrib.Sample) []attrib.Sample {
		if pass == 100 {
			k2 = 1
		}
		return ss
	})
	for p := 1; p <= 2; p++ {
		if e := math.Abs(got[p]-truth[p]) / truth[p]; e > 0.15 {
			t.Errorf("process %d: %.1f J, truth %.1f J, %.1f%% off", p, got[p], truth[p], 100*e)
		}
	}
}
