package tracker_test

import (
	"math/big"
	"testing"

	"github.com/otelenergy/otelenergy/tracker"
)

// advanceAll feeds readings (raw, began, at) to a and fails on an error.
func advanceAll(t *testing.T, a *tracker.Accumulator, readings [][3]int64) []tracker.Step {
	t.Helper()
	steps := make([]tracker.Step, len(readings))
	for i, r := range readings {
		s, err := a.AdvanceRead(uint64(r[0]), r[1], r[2])
		if err != nil {
			t.Fatalf("reading %d: %v", i, err)
		}
		steps[i] = s
	}
	return steps
}

// TestTrackerRaiseCreditsAtMostTheNewBound checks the cap on a raise's
// credit: each glitch of the run is topped up to min(rise, new bound over
// its window), never its whole rise. The run's implied power rounds to the
// growth limit in float64 (1800 W for a 450 W bound) while each rise
// exceeds 1800 W over its window of about 2^62 ns by 0.0004 mJ, so the
// bound rises to exactly the limit and each glitch is credited one
// millijoule less than its rise.
func TestTrackerRaiseCreditsAtMostTheNewBound(t *testing.T) {
	// ns between readings; each window spans two. 9 × 2 × unit ≡ 4998
	// (mod 5000), so 1800 W over a window is 0.0004 mJ short of a whole
	// millijoule, and the float64 implied power of a rise one above its
	// floor rounds to 1800 W exactly.
	const unit = int64(2305843009213693611)
	window := big.NewInt(2 * unit)
	// capMJ = ⌊1800 W × 2^62 ns⌋ in mJ, the new bound over one window.
	capMJ := new(big.Int).Div(new(big.Int).Mul(big.NewInt(1800), window), big.NewInt(1_000_000)).Int64()
	rise := capMJ + 1
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 450})
	raw := int64(0)
	readings := [][3]int64{{raw, -4 * unit, -4 * unit}}
	raw += 1000
	readings = append(readings, [3]int64{raw, -3 * unit, -3 * unit})
	for k := int64(-2); k <= 1; k++ {
		raw += rise
		readings = append(readings, [3]int64{raw, k * unit, k * unit})
	}
	readings = append(readings, [3]int64{raw, 2 * unit, 2 * unit}) // confirms the fourth
	steps := advanceAll(t, a, readings)
	if !steps[len(steps)-1].Raised || a.Glitches() != 4 {
		t.Fatalf("steps %+v, %d glitches: want four glitches and a raise", steps, a.Glitches())
	}
	if got := a.LastRaise(); got.To != 4*450 {
		t.Fatalf("raise %+v, want to the growth limit 1800 W", got)
	}
	if got, want := a.Total(), uint64(1000+4*capMJ); got != want {
		t.Errorf("charged %d mJ, want %d: the forward step and each glitch at the new bound over its window", got, want)
	}
}

// TestTrackerRaiseStopsAtMaxBoundGrowth learns a 1500 W board against a
// 450 W bound: 1.5 × its implied power is above MaxBoundGrowth × 450 W,
// so the bound is raised to that limit and no further.
func TestTrackerRaiseStopsAtMaxBoundGrowth(t *testing.T) {
	lr := runStaircase(t, tracker.Limits{MaxWatts: 450}, 17, 10_000, staircase(100, func(int64) uint64 { return 1500 }))
	if lr.tr.Count == 0 {
		t.Fatalf("no raise over %d glitches", lr.a.Glitches())
	}
	if lr.tr.ImpliedWatts*1.5 <= tracker.MaxBoundGrowth*450 {
		t.Fatalf("implied %v W: the case needs 1.5 × it above the limit", lr.tr.ImpliedWatts)
	}
	if lr.tr.To != tracker.MaxBoundGrowth*450 {
		t.Errorf("raise %+v, want To the limit", lr.tr)
	}
}

// TestTrackerRaiseCreditPaysDebtFirst has a bad reading recovered with
// nothing to refund (the counter stood still), leaving a debt, and then a
// run of glitches that raises the bound before any Forward step pays the
// debt: the raise's credit pays it, so the total is exactly what the
// counter counted.
func TestTrackerRaiseCreditPaysDebtFirst(t *testing.T) {
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 450})
	var readings [][3]int64
	at := int64(0)
	raw := int64(1_000_000)
	read := func(v int64) {
		readings = append(readings, [3]int64{v, at, at})
		at += 17 * ms
	}
	read(raw)
	for range 3 {
		raw += 5_100 // 300 W
		read(raw)
	}
	read(raw + 1_000_000) // one bad reading, a glitch charged at the last known power
	read(raw)             // back where it was: a recovery with nothing to refund
	// About 1,200 to 1,800 W over the steps a window spans: four glitches,
	// with no Forward step between the recovery and the raise to pay the
	// debt.
	for range 4 {
		raw += 60_000
		read(raw)
	}
	read(raw) // confirms the fourth glitch
	steps := advanceAll(t, a, readings)
	if !steps[len(steps)-1].Raised {
		t.Fatalf("no raise: %+v", steps)
	}
	if steps[4].Kind != tracker.Glitch || steps[4].Delta == 0 {
		t.Fatalf("bad reading gave %+v, want a glitch that charged something", steps[4])
	}
	for i, s := range steps[6:10] {
		if s.Kind != tracker.Glitch {
			t.Fatalf("step %d is %+v, want a glitch", 6+i, s)
		}
	}
	if got, want := a.Total(), uint64(raw-1_000_000); got != want {
		t.Errorf("charged %d mJ, the counter counted %d", got, want)
	}
}

// TestTrackerFirstWindowReachesBackToItsBegan brackets the First reading
// over a 3 s stall: its value may have been sampled as early as when the
// read began, so the next step's window reaches back to then, and a rise
// at the bound over that whole time is a Forward, not a Glitch.
func TestTrackerFirstWindowReachesBackToItsBegan(t *testing.T) {
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 450})
	// 450 W × (3.017 s + MaxUpdatePeriod) = 1,807,650 mJ.
	steps := advanceAll(t, a, [][3]int64{{0, 0, 3000 * ms}, {1_807_000, 3000 * ms, 3017 * ms}})
	if steps[1].Kind != tracker.Forward || steps[1].Delta != 1_807_000 {
		t.Errorf("second step %+v, want a Forward of 1807000", steps[1])
	}
}

// TestTrackerStepConfirmed checks Step.Confirmed: set on the reading after
// a Glitch that does not come back, never on a recovery.
func TestTrackerStepConfirmed(t *testing.T) {
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 450})
	steps := advanceAll(t, a, [][3]int64{
		{1_000_000, 0, 0},
		{1_005_100, 17 * ms, 17 * ms},
		{1_010_200, 34 * ms, 34 * ms},
		{2_000_000, 51 * ms, 51 * ms},   // a spike
		{1_015_300, 68 * ms, 68 * ms},   // back: recovered
		{2_000_000, 85 * ms, 85 * ms},   // a jump
		{2_005_100, 102 * ms, 102 * ms}, // stays: confirmed
		{2_010_200, 119 * ms, 119 * ms},
	})
	want := []bool{false, false, false, false, false, false, true, false}
	for i, s := range steps {
		if s.Confirmed != want[i] {
			t.Errorf("step %d %+v: Confirmed = %v, want %v", i, s, s.Confirmed, want[i])
		}
	}
	if steps[3].Kind != tracker.Glitch || steps[5].Kind != tracker.Glitch {
		t.Fatalf("steps %+v: want glitches at 3 and 5", steps)
	}
}
