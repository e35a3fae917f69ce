package ledger

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestRunningNowCountsEnds checks the count of running requests that
// Estimate prices the static power with: the active requests not ended at
// the last settle, plus those waiting in the inbox, less the ends
// Ledger.End counted since; an end counts once, and a dropped request's
// not at all.
func TestRunningNowCountsEnds(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e9, MaxActive: 12})
	g.step(0, 0, nil)
	rs := make([]*Account, 10)
	for i := range rs {
		rs[i] = newAccount(10, nil)
		g.l.Add(rs[i])
	}
	if n, _, _ := g.l.running3(); n != 10 {
		t.Fatalf("10 requests waiting to be adopted: running %d", n)
	}
	g.step(100, 1000, nil)
	if n, _, _ := g.l.running3(); n != 10 {
		t.Fatalf("10 adopted requests: running %d", n)
	}
	for _, r := range rs[:4] {
		g.l.End(r, 150)
	}
	g.l.End(rs[0], 160) // counted once
	if n, k, off := g.l.running3(); n != 6 || k != 4 || off != 4*50 {
		t.Fatalf("4 of 10 ended 50 ns after the settle: running %d, want 6; %d ends %d ns after it, want 4 and 200", n, k, off)
	}
	late := []*Account{newAccount(170, nil), newAccount(170, nil), newAccount(170, nil)}
	for _, r := range late {
		g.l.Add(r) // the last is beyond MaxActive: dropped
	}
	g.l.End(late[2], 180)
	if late[2].Flags()&FlagDropped == 0 {
		t.Fatal("the 13th request was not dropped")
	}
	if n, _, _ := g.l.running3(); n != 8 {
		t.Fatalf("6 running and 2 waiting: running %d, want 8", n)
	}
	g.step(200, 1000, nil)
	if n, _, _ := g.l.running3(); n != 8 {
		t.Fatalf("after a settle: running %d, want 8", n)
	}
	g.l.End(late[0], 210)
	if n, _, _ := g.l.running3(); n != 7 {
		t.Fatalf("one more ended: running %d, want 7", n)
	}
}

// TestStaticTime checks integrateInverse against ∫ ds/n(s) summed ns by ns for
// k ends spread evenly over a part of the span at its end, at its start,
// or over all of it: the profiles it assumes, which it must get to
// rounding; and within 1% for ends in the middle of the span.
func TestStaticTime(t *testing.T) {
	const tau, n0 = 100_000, 100.0
	for _, c := range []struct {
		k      int
		lo, hi float64 // the part of the span the ends spread over
		tol    float64
	}{{99, 0, 1, 1e-3}, {99, 0.8, 1, 1e-3}, {60, 0.9, 1, 1e-3}, {50, 0, 0.3, 1e-3}, {10, 0.4, 0.6, 1e-2}} {
		var want, sumT float64
		n := n0
		for s := 0; s < tau; s++ {
			x := (float64(s) + 0.5) / tau
			n = n0
			if x > c.lo {
				n -= float64(c.k) * min(1, (x-c.lo)/(c.hi-c.lo))
			}
			want += 1 / n
		}
		for i := range c.k {
			sumT += (c.lo + (c.hi-c.lo)*(float64(i)+0.5)/float64(c.k)) * tau
		}
		n1 := n0 - float64(c.k)
		got := integrateInverse(tau, n0, n1, float64(c.k), sumT/float64(c.k))
		if math.Abs(got-want) > c.tol*want {
			t.Errorf("%d ends over [%.1f, %.1f] of the span: %v, want %v", c.k, c.lo, c.hi, got, want)
		}
	}
	if got := integrateInverse(tau, n0, n0, 0, 0); got != tau/n0 {
		t.Errorf("no ends: %v, want %v", got, tau/n0)
	}
}

// TestCoverageBeyondExact: with more spans inside an interval than the
// sweep takes, the time split is proportional to span time, gives out
// exactly the time covered, and never more than the spans' hull.
func TestCoverageBeyondExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	a, b := int64(0), int64(100_000)
	for _, withFull := range []bool{false, true} {
		parts := make([]part, 2*maxExactPartial)
		for i := range parts {
			// A burst of ends in the first half of the interval.
			hi := int64(rng.IntN(int(b / 2)))
			parts[i] = part{lo: a, hi: hi}
		}
		if withFull {
			parts[0].hi = b
		}
		var sweep []uint64
		covered := coverage(parts, a, b, spanActive, true, &sweep)
		var sum, hull float64
		for _, p := range parts {
			sum += p.cov
			hull = max(hull, float64(p.hi-a))
		}
		if math.Abs(sum-covered) > 1e-6*covered {
			t.Fatalf("full %v: shares add up to %v, covered %v", withFull, sum, covered)
		}
		if covered > hull {
			t.Fatalf("full %v: covered %v, beyond the spans' hull %v", withFull, covered, hull)
		}
		if got := coverage(parts, a, b, spanActive, false, &sweep); got != covered {
			t.Fatalf("full %v: measuring alone covers %v, with shares %v", withFull, got, covered)
		}
	}
}

// BenchmarkCoverage is one interval's time split with many requests
// ending inside it (the sweep) and beyond what it takes (proportional).
func BenchmarkCoverage(b *testing.B) {
	for _, n := range []int{100, 2 * maxExactPartial} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			parts := make([]part, n)
			for i := range parts {
				parts[i] = part{lo: 0, hi: int64(rng.IntN(100_000))}
			}
			var sweep []uint64
			b.ReportAllocs()
			for b.Loop() {
				coverage(parts, 0, 100_000, spanActive, true, &sweep)
			}
		})
	}
}

// running3 returns runningNow's counts of the running and the ends, with
// the ends' time offsets.
func (l *Ledger) running3() (n, ends, endOff int64) {
	now := l.runningNow()
	return now.n, now.ends, now.endOff
}
