package tracker_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/tracker"
)

// staircase returns the reading at r ms of a counter that publishes, every
// period ms, the energy drawn so far at watts(k) W during its k-th period.
func staircase(period int64, watts func(k int64) uint64) func(r int64) uint64 {
	return func(r int64) uint64 {
		var e uint64
		for k := range r / period {
			e += watts(k) * uint64(period) // W × ms = mJ
		}
		return e
	}
}

type learnRun struct {
	steps  []tracker.Step
	raised []int64 // ms of the readings with Raised
	a      *tracker.Accumulator
	tr     tracker.Raise
	first  uint64
	last   uint64
}

func runStaircase(t *testing.T, limits tracker.Limits, readEvery, until int64, value func(r int64) uint64) learnRun {
	t.Helper()
	lr := learnRun{a: tracker.NewAccumulator(limits)}
	for r := int64(0); r <= until; r += readEvery {
		raw := value(r)
		if r == 0 {
			lr.first = raw
		}
		lr.last = raw
		s, err := lr.a.Advance(raw, r*ms)
		if err != nil {
			t.Fatal(err)
		}
		if s.Raised {
			lr.raised = append(lr.raised, r)
		}
		lr.steps = append(lr.steps, s)
	}
	lr.tr = lr.a.LastRaise()
	return lr
}

// TestTrackerLearnsABoundSetTooLow is the stale-limit probe: a bound of
// 450 W (a 300 W limit × 1.5) on a board that draws 600 W, with a 100 ms
// counter read every 17 ms. After four glitches the bound is raised once,
// and every millijoule the counter counted is charged.
func TestTrackerLearnsABoundSetTooLow(t *testing.T) {
	lr := runStaircase(t, tracker.Limits{MaxWatts: 450}, 17, 10_000, staircase(100, func(int64) uint64 { return 600 }))
	if len(lr.raised) != 1 || lr.tr.Count != 1 {
		t.Fatalf("raised at %v ms (count %d), want once", lr.raised, lr.tr.Count)
	}
	if g := lr.a.Glitches(); g != 4 {
		t.Errorf("%d glitches, want the 4 of the learning run", g)
	}
	if got, want := lr.a.Total(), lr.last-lr.first; got != want {
		t.Errorf("charged %d mJ, the counter counted %d", got, want)
	}
	if lr.tr.From != 450 || lr.tr.ImpliedWatts <= 450 || lr.tr.ImpliedWatts > 600 || lr.tr.To != 1.5*lr.tr.ImpliedWatts {
		t.Errorf("raise %+v: want from 450 W to 1.5 × an implied power in (450, 600] W", lr.tr)
	}
	t.Logf("raised at %d ms: %+v", lr.raised[0], lr.tr)
}

// TestTrackerLearnsAgainWhenTheBoardDrawsMore raises the bound twice: the
// board goes from 600 W to 1100 W, above the first learned bound.
func TestTrackerLearnsAgainWhenTheBoardDrawsMore(t *testing.T) {
	watts := func(k int64) uint64 {
		if k < 50 {
			return 600
		}
		return 1100
	}
	lr := runStaircase(t, tracker.Limits{MaxWatts: 450}, 17, 12_000, staircase(100, watts))
	if len(lr.raised) != 2 {
		t.Fatalf("raised at %v ms, want twice", lr.raised)
	}
	if got, want := lr.a.Total(), lr.last-lr.first; got != want {
		t.Errorf("charged %d mJ, the counter counted %d", got, want)
	}
	if lr.tr.To > 4*450 {
		t.Errorf("bound raised to %v W, above MaxBoundGrowth × 450 W", lr.tr.To)
	}
}

// TestTrackerDoesNotLearnInconsistentGlitches alternates steps whose
// implied powers differ by more than twice: that is no steady board, and
// the bound stays.
func TestTrackerDoesNotLearnInconsistentGlitches(t *testing.T) {
	watts := func(k int64) uint64 {
		if k%2 == 0 {
			return 1700
		}
		return 4000
	}
	lr := runStaircase(t, tracker.Limits{MaxWatts: 1000}, 50, 10_000, staircase(100, watts))
	if len(lr.raised) != 0 || lr.a.Glitches() < 50 {
		t.Fatalf("raised at %v ms with %d glitches, want no raise over many glitches", lr.raised, lr.a.Glitches())
	}
	if got, ceiling := lr.a.Total(), uint64(1000*(2*10_000+1000)); got > ceiling {
		t.Fatalf("charged %d mJ, above the ceiling %d", got, ceiling)
	}
}

// TestTrackerDoesNotLearnBeyondMaxBoundGrowth bounds a 600 W board at
// 100 W: its steps imply more than MaxBoundGrowth × the bound, so the
// bound stays, and each glitch is still charged at most the bound.
func TestTrackerDoesNotLearnBeyondMaxBoundGrowth(t *testing.T) {
	lr := runStaircase(t, tracker.Limits{MaxWatts: 100}, 17, 10_000, staircase(100, func(int64) uint64 { return 600 }))
	if len(lr.raised) != 0 {
		t.Fatalf("raised at %v ms to %v W, above MaxBoundGrowth × 100 W", lr.raised, lr.tr.To)
	}
	// Charged at most the bound over the time, and, with the power
	// following the board up to the bound, about all of it.
	got, ceiling := lr.a.Total(), uint64(100*(2*10_000+1000))
	if got > ceiling || got < 100*10_000*9/10 {
		t.Fatalf("charged %d mJ; want about the bound's 1_000_000 over 10 s, under the ceiling %d", got, ceiling)
	}
	t.Logf("charged %d mJ of %d counted at a 100 W bound", got, lr.last-lr.first)
}

// TestTrackerLearnsABoundSetTooLowUnderABurstyLoad is the stale-limit probe
// for a load that varies: a 450 W bound on a 20 ms counter read every
// 17 ms, with the board alternating between a power above the bound and
// one below it. The readings of the low phase are plausible Forward steps
// between the glitches of the high phase; they must not keep the bound
// from being learned, and once it is, every millijoule the counter counted
// is charged.
func TestTrackerLearnsABoundSetTooLowUnderABurstyLoad(t *testing.T) {
	tests := []struct {
		name    string
		hi, lo  uint64 // W
		on, off int64  // ms
	}{
		{name: "900 W and 300 W, 60 ms each", hi: 900, lo: 300, on: 60, off: 60},
		{name: "900 W and 300 W, 200 ms each", hi: 900, lo: 300, on: 200, off: 200},
		{name: "1000 W for 50 ms, 200 W for 150 ms", hi: 1000, lo: 200, on: 50, off: 150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const period = 20
			watts := func(k int64) uint64 {
				if (k*period)%(tt.on+tt.off) < tt.on {
					return tt.hi
				}
				return tt.lo
			}
			lr := runStaircase(t, tracker.Limits{MaxWatts: 450}, 17, 60_000, staircase(period, watts))
			counted := lr.last - lr.first
			t.Logf("charged %.2f%% of %d mJ, %d glitches, raised at %v ms: %+v",
				100*float64(lr.a.Total())/float64(counted), counted, lr.a.Glitches(), lr.raised, lr.tr)
			if len(lr.raised) == 0 {
				t.Fatalf("bound never raised over %d glitches", lr.a.Glitches())
			}
			if lr.tr.To > tracker.MaxBoundGrowth*450 || lr.tr.To <= 450 {
				t.Errorf("bound raised to %v W; want above 450 W, at most %d W", lr.tr.To, tracker.MaxBoundGrowth*450)
			}
			if got := lr.a.Total(); got != counted {
				t.Errorf("charged %d mJ, the counter counted %d", got, counted)
			}
			if g := lr.a.Glitches(); g > 16 {
				t.Errorf("%d glitches; the bound should be learned within a few cycles", g)
			}
		})
	}
}

// runScript feeds a 300 W counter read every 17 ms (5,100 mJ a step),
// bound at 450 W, one reading per byte of script: 'F' reads it as it is,
// 'G' first adds 30,000 mJ that stay (a rise the bound cannot believe, an
// implied 1,000 W or so over the two steps its window spans, confirmed by
// the next reading), 'J' reads 1,000 mJ below
// the previous reading (a jitter), and 'R' restarts the counter at 0 (a
// reset). It returns the accumulator.
func runScript(t *testing.T, script string) *tracker.Accumulator {
	t.Helper()
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 450})
	var counter, prev uint64 = 1_000_000, 0
	if _, err := a.Advance(counter, 0); err != nil {
		t.Fatal(err)
	}
	prev = counter
	for i, c := range []byte("FF" + script) { // two steps anchor the window
		counter += 5_100
		raw := counter
		switch c {
		case 'G':
			counter += 30_000
			raw = counter
		case 'J':
			raw = prev - 1_000
		case 'R':
			counter = 5_100
			raw = counter
		}
		if _, err := a.Advance(raw, int64(i+1)*17*ms); err != nil {
			t.Fatal(err)
		}
		prev = raw
	}
	return a
}

// TestTrackerLearningRunEnds checks what ends a run of confirmed glitches
// and what does not: a plausible Forward between them does not; a Jitter,
// a Reset, or glitches spread over more than 16 steps that moved the
// baseline do.
func TestTrackerLearningRunEnds(t *testing.T) {
	spread := ""
	for range 4 {
		spread += "GFFFFFFFFFFFFFFFFF" // 18 moves apart
	}
	tests := []struct {
		name   string
		script string
		raise  bool
	}{
		{name: "four glitches in a row", script: "GGGGF", raise: true},
		{name: "forwards between glitches", script: "GFGFFGFFFGF", raise: true},
		{name: "a jitter ends the run", script: "GFGFJFGFGF", raise: false},
		{name: "a reset ends the run", script: "GFGFRFGFGF", raise: false},
		{name: "glitches too far apart", script: spread, raise: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := runScript(t, tt.script)
			if g := a.Glitches(); g < 4 {
				t.Fatalf("%d glitches, want at least 4", g)
			}
			if raised := a.LastRaise().Count != 0; raised != tt.raise {
				t.Errorf("raised = %v (%+v), want %v", raised, a.LastRaise(), tt.raise)
			}
		})
	}
}

// TestTrackerNeverRaisesAFirmBound runs the stale-limit probe against a
// bound the device's own limits fix: the glitches are a misreading, so the
// bound stays and each glitch is charged at most the bound.
func TestTrackerNeverRaisesAFirmBound(t *testing.T) {
	lr := runStaircase(t, tracker.Limits{MaxWatts: 450, MaxWattsFirm: true}, 17, 10_000, staircase(100, func(int64) uint64 { return 600 }))
	if len(lr.raised) != 0 || lr.tr.Count != 0 || lr.a.Glitches() < 16 {
		t.Fatalf("raised at %v ms (%+v) over %d glitches, want no raise over many", lr.raised, lr.tr, lr.a.Glitches())
	}
	if got, ceiling := lr.a.Total(), uint64(450*(2*10_000+1000)); got > ceiling {
		t.Errorf("charged %d mJ, above the firm bound's ceiling %d", got, ceiling)
	}
}
