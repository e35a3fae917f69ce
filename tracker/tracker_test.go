package tracker_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/tracker"
)

func TestTrackerStepsUnbounded(t *testing.T) {
	const raplMax = 262143328850 // a real RAPL max_energy_range_uj
	type step struct {
		raw  uint64
		want tracker.Step
	}
	tests := []struct {
		name  string
		max   uint64
		steps []step
	}{
		{
			name:  "first reading anchors",
			steps: []step{{raw: 12345, want: tracker.Step{Kind: tracker.First}}},
		},
		{
			name: "forward",
			steps: []step{
				{raw: 100, want: tracker.Step{Kind: tracker.First}},
				{raw: 250, want: tracker.Step{Kind: tracker.Forward, Delta: 150}},
				{raw: 251, want: tracker.Step{Kind: tracker.Forward, Delta: 1}},
			},
		},
		{
			name: "equal readings",
			steps: []step{
				{raw: 7, want: tracker.Step{Kind: tracker.First}},
				{raw: 7, want: tracker.Step{Kind: tracker.Forward, Delta: 0}},
				{raw: 7, want: tracker.Step{Kind: tracker.Forward, Delta: 0}},
			},
		},
		{
			name: "wrap at 2^64",
			steps: []step{
				{raw: math.MaxUint64 - 9, want: tracker.Step{Kind: tracker.First}},
				{raw: 5, want: tracker.Step{Kind: tracker.Wrap, Delta: 15}},
				{raw: 6, want: tracker.Step{Kind: tracker.Forward, Delta: 1}},
			},
		},
		{
			name: "wrap exactly onto zero",
			steps: []step{
				{raw: math.MaxUint64, want: tracker.Step{Kind: tracker.First}},
				{raw: 0, want: tracker.Step{Kind: tracker.Wrap, Delta: 1}},
			},
		},
		{
			name: "wrap at a small maximum",
			max:  raplMax,
			steps: []step{
				{raw: raplMax - 1000, want: tracker.Step{Kind: tracker.First}},
				{raw: 499, want: tracker.Step{Kind: tracker.Wrap, Delta: 1500}},
			},
		},
		{
			name: "reading above a small maximum is rejected",
			max:  1000,
			steps: []step{
				{raw: 10, want: tracker.Step{Kind: tracker.First}},
				{raw: 1001},
				{raw: 20, want: tracker.Step{Kind: tracker.Forward, Delta: 10}},
			},
		},
		{
			name: "reset to a small value",
			steps: []step{
				{raw: 5_000_000, want: tracker.Step{Kind: tracker.First}},
				{raw: 6_000_000, want: tracker.Step{Kind: tracker.Forward, Delta: 1_000_000}},
				{raw: 1200, want: tracker.Step{Kind: tracker.Reset, Delta: 1200}},
				{raw: 1300, want: tracker.Step{Kind: tracker.Forward, Delta: 100}},
			},
		},
		{
			name: "reset to zero",
			steps: []step{
				{raw: 42, want: tracker.Step{Kind: tracker.First}},
				{raw: 0, want: tracker.Step{Kind: tracker.Reset, Delta: 0}},
				{raw: 3, want: tracker.Step{Kind: tracker.Forward, Delta: 3}},
			},
		},
		{
			name: "backwards from the top quarter into the middle is a reset",
			steps: []step{
				{raw: math.MaxUint64 - 1, want: tracker.Step{Kind: tracker.First}},
				{raw: math.MaxUint64 / 2, want: tracker.Step{Kind: tracker.Reset, Delta: math.MaxUint64 / 2}},
			},
		},
		{
			name: "backwards within the bottom quarter is a reset",
			max:  1000,
			steps: []step{
				{raw: 200, want: tracker.Step{Kind: tracker.First}},
				{raw: 100, want: tracker.Step{Kind: tracker.Reset, Delta: 100}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := tracker.New(tracker.Limits{CounterMax: tt.max})
			for i, s := range tt.steps {
				got, err := tr.Advance(s.raw, int64(i)*int64(100*time.Millisecond))
				if s.raw > tr.Max() {
					if !errors.Is(err, tracker.ErrOutOfRange) {
						t.Fatalf("step %d: Advance(%d) error = %v, want ErrOutOfRange", i, s.raw, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Advance(%d): %v", i, s.raw, err)
				}
				if got != s.want {
					t.Fatalf("step %d: Advance(%d) = %+v, want %+v", i, s.raw, got, s.want)
				}
			}
		})
	}
}

const ms = int64(time.Millisecond)

func TestTrackerStepsBounded(t *testing.T) {
	type step struct {
		raw  uint64
		at   int64 // ns
		want tracker.Step
		err  error
	}
	first := tracker.Step{Kind: tracker.First}
	fwd := func(d uint64) tracker.Step { return tracker.Step{Kind: tracker.Forward, Delta: d} }
	kw := tracker.Limits{MaxWatts: 1000} // 1000 W: 100 J = 1e5 mJ per 100 ms
	tests := []struct {
		name   string
		limits tracker.Limits
		steps  []step
		total  uint64
	}{
		{
			name:   "forward up to exactly the bound",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				// window (0, 200 ms]: the baseline 5e9+100 appeared after 0.
				{raw: 5e9 + 100 + 200_000, at: 200 * ms, want: fwd(200_000)},
			},
			total: 200_100,
		},
		{
			name:   "first step may use the whole allowance",
			limits: kw,
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 1_000_000, at: 0, want: fwd(1_000_000)},
			},
			total: 1_000_000,
		},
		{
			name:   "rise past the bound with no known power is a glitch charged nothing",
			limits: kw,
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 1_000_001, at: 0, want: tracker.Step{Kind: tracker.Glitch}},
				{raw: 1_000_051, at: 100 * ms, want: fwd(50)},
			},
			total: 50,
		},
		{
			name:   "glitch is charged the last power over the time since the baseline was first seen",
			limits: kw,
			steps: []step{
				{raw: 1000, at: 0, want: first},
				{raw: 1100, at: 100 * ms, want: fwd(100)},
				// window (0, 200 ms]: power 100 mJ / 200 ms.
				{raw: 1200, at: 200 * ms, want: fwd(100)},
				{raw: 1e12, at: 300 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 50}},
				{raw: 1e12 + 70, at: 400 * ms, want: fwd(70)},
			},
			total: 320,
		},
		{
			name:   "glitch is charged no more than the bound",
			limits: kw,
			steps: []step{
				{raw: 0, at: 0, want: first},
				// power 1e6 mJ / 10 ms
				{raw: 1_000_000, at: 10 * ms, want: fwd(1_000_000)},
				// bound: window (0, 20 ms] is 20_000 mJ; power × 10 ms is 1e6.
				{raw: 12_000_000, at: 20 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 20_000}},
			},
			total: 1_020_000,
		},
		{
			name:   "backwards by 1 mJ is jitter",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 - 1, at: 100 * ms, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: 5e9 + 10, at: 200 * ms, want: fwd(10)},
			},
			total: 10,
		},
		{
			name:   "spurious drop to zero then the true value",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				{raw: 0, at: 200 * ms, want: tracker.Step{Kind: tracker.Reset}},
				{raw: 5e9 + 200, at: 300 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100}},
			},
			total: 200,
		},
		{
			name:   "jitter then forward from the high-water mark",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				{raw: 5e9 + 99, at: 200 * ms, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: 5e9 + 200, at: 300 * ms, want: fwd(100)},
			},
			total: 200,
		},
		{
			name:   "driver reload",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				{raw: 40, at: 200 * ms, want: tracker.Step{Kind: tracker.Reset, Delta: 40}},
				{raw: 140, at: 300 * ms, want: fwd(100)},
				{raw: 240, at: 400 * ms, want: fwd(100)},
			},
			total: 340,
		},
		{
			name:   "reset above the bound is jitter",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				// bound: window (0, 200 ms] is 200_000 mJ.
				{raw: 200_001, at: 200 * ms, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: 5e9 + 150, at: 300 * ms, want: fwd(50)},
			},
			total: 150,
		},
		{
			name:   "one bad reading: a spike and back costs nothing and loses nothing",
			limits: kw,
			steps: []step{
				{raw: 1000, at: 0, want: first},
				{raw: 1100, at: 100 * ms, want: fwd(100)},
				{raw: 5e9, at: 200 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100}},
				{raw: 1300, at: 300 * ms, want: fwd(100)},
				{raw: 1400, at: 400 * ms, want: fwd(100)},
			},
			total: 400,
		},
		{
			name:   "a glitch on a staircase counter: the next real step is a step, and the glitch's charge is paid back",
			limits: tracker.Limits{MaxWatts: 400},
			steps: []step{
				{raw: 1_000_000, at: 0, want: first},
				{raw: 1_030_000, at: 100 * ms, want: fwd(30_000)},
				{raw: 1_030_000, at: 117 * ms, want: fwd(0)},
				// Power 30_000 mJ over (0, 100 ms]; the step covers the
				// 34 ms since 1_030_000 was first seen: 10_200 mJ.
				{raw: 9e12, at: 134 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 10_200}},
				{raw: 1_030_000, at: 151 * ms, want: fwd(0)},
				{raw: 1_030_000, at: 168 * ms, want: fwd(0)},
				// The next real step: within the bound from before the
				// glitch, and the 10_200 mJ the glitch charged is paid back.
				{raw: 1_060_000, at: 200 * ms, want: fwd(19_800)},
			},
			total: 60_000,
		},
		{
			name:   "a run of four glitches at one power raises the bound and charges what they were not",
			limits: kw,
			// A staircase stepping 160_000 mJ every 100 ms (1600 W), read
			// every 50 ms: each step's window is the 150 ms since the read
			// before its baseline appeared, so the bound allows 150_000.
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 0, at: 50 * ms, want: fwd(0)},
				// Power 160_000 mJ over (0, 100 ms].
				{raw: 160_000, at: 100 * ms, want: fwd(160_000)},
				{raw: 160_000, at: 150 * ms, want: fwd(0)},
				// Window (50, 200 ms]: bound 150_000. Charged the power
				// over the 100 ms since 160_000 appeared, at most the bound.
				{raw: 320_000, at: 200 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 150_000}},
				// Confirmed: the power follows the board, as far as the
				// bound lets it: 150_000 mJ over 150 ms, 1000 W.
				{raw: 320_000, at: 250 * ms, want: fwd(0)},
				{raw: 480_000, at: 300 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				{raw: 480_000, at: 350 * ms, want: fwd(0)},
				{raw: 640_000, at: 400 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				{raw: 640_000, at: 450 * ms, want: fwd(0)},
				{raw: 800_000, at: 500 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				// The fourth confirmation: each implied 160_000 mJ over
				// 150 ms, 1066.7 W. The bound becomes 1.5 × that, 1600 W,
				// and the run is charged its rises, 4 × 160_000, less the
				// 450_000 it was charged.
				{raw: 800_000, at: 550 * ms, want: tracker.Step{Kind: tracker.Forward, Delta: 190_000, Raised: true}},
				// Window (450, 600 ms] at 1600 W: 240_000.
				{raw: 960_000, at: 600 * ms, want: fwd(160_000)},
			},
			total: 960_000,
		},
		{
			name:   "after a confirmed glitch the last known power follows the board up to the bound",
			limits: kw,
			// 500 W, then 1600 W from 200 ms on; 100 ms steps read every 50 ms.
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 0, at: 50 * ms, want: fwd(0)},
				{raw: 50_000, at: 100 * ms, want: fwd(50_000)},
				{raw: 50_000, at: 150 * ms, want: fwd(0)},
				// Power 50_000 mJ over (50, 200 ms]: 333 W.
				{raw: 100_000, at: 200 * ms, want: fwd(50_000)},
				{raw: 100_000, at: 250 * ms, want: fwd(0)},
				// Beyond 150_000 over (150, 300 ms]: charged 333 W × 100 ms.
				{raw: 260_000, at: 300 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 33_333}},
				// Confirmed: the power is now 150_000 mJ over 150 ms.
				{raw: 260_000, at: 350 * ms, want: fwd(0)},
				{raw: 420_000, at: 400 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
			},
			total: 233_333,
		},
		{
			name:   "one corrupt reading inside a run of glitches ends the run and costs nothing",
			limits: kw,
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 0, at: 50 * ms, want: fwd(0)},
				{raw: 160_000, at: 100 * ms, want: fwd(160_000)},
				{raw: 160_000, at: 150 * ms, want: fwd(0)},
				{raw: 320_000, at: 200 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 150_000}},
				{raw: 320_000, at: 250 * ms, want: fwd(0)},
				{raw: 480_000, at: 300 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				{raw: 480_000, at: 350 * ms, want: fwd(0)},
				{raw: 640_000, at: 400 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				{raw: 640_000, at: 450 * ms, want: fwd(0)},
				// A corrupt reading, where the fourth step would be.
				{raw: 9e12, at: 500 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 100_000}},
				// Back: a Forward from 640_000 within (350, 550 ms], less
				// what the corrupt reading charged. Not a fourth
				// confirmation: the bound stays.
				{raw: 800_000, at: 550 * ms, want: fwd(60_000)},
				// Window (450, 600 ms]: a glitch, charged 1000 W over the
				// 50 ms since 800_000 was seen, and the first of a new run:
				// confirming it raises nothing.
				{raw: 960_000, at: 600 * ms, want: tracker.Step{Kind: tracker.Glitch, Delta: 50_000}},
				{raw: 960_000, at: 650 * ms, want: fwd(0)},
			},
			total: 720_000,
		},
		{
			name:   "a small step back at a small counter is jitter",
			limits: kw,
			steps: []step{
				{raw: 1000, at: 0, want: first},
				{raw: 1100, at: 100 * ms, want: fwd(100)},
				{raw: 1099, at: 200 * ms, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: 1200, at: 300 * ms, want: fwd(100)},
			},
			total: 200,
		},
		{
			name:   "reset exactly at the bound",
			limits: kw,
			steps: []step{
				{raw: 5e9, at: 0, want: first},
				{raw: 5e9 + 100, at: 100 * ms, want: fwd(100)},
				{raw: 200_000, at: 200 * ms, want: tracker.Step{Kind: tracker.Reset, Delta: 200_000}},
			},
			total: 200_100,
		},
		{
			name:   "wrap within the bound",
			limits: tracker.Limits{CounterMax: 1_000_000, MaxWatts: 1},
			steps: []step{
				{raw: 999_990, at: 0, want: first},
				{raw: 9, at: 100 * ms, want: tracker.Step{Kind: tracker.Wrap, Delta: 20}},
				{raw: 30, at: 200 * ms, want: fwd(21)},
			},
			total: 41,
		},
		{
			name:   "wrap exactly at the bound",
			limits: tracker.Limits{CounterMax: 1_000_000, MaxWatts: 1},
			steps: []step{
				{raw: 999_001, at: 0, want: first},
				// bound: the 1 s allowance at 1 W is 1000 mJ.
				{raw: 0, at: 0, want: tracker.Step{Kind: tracker.Wrap, Delta: 1000}},
			},
			total: 1000,
		},
		{
			name:   "wrap beyond the bound to a small raw value is a reset",
			limits: tracker.Limits{CounterMax: 1_000_000, MaxWatts: 1},
			steps: []step{
				{raw: 999_000, at: 0, want: first},
				{raw: 9, at: 0, want: tracker.Step{Kind: tracker.Reset, Delta: 9}},
			},
			total: 9,
		},
		{
			name:   "wrap beyond the bound to a large raw value is jitter",
			limits: tracker.Limits{CounterMax: 4_000_000, MaxWatts: 1},
			steps: []step{
				{raw: 3_999_000, at: 0, want: first},
				{raw: 999_999, at: 0, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: 3_999_500, at: 100 * ms, want: fwd(500)},
			},
			total: 500,
		},
		{
			name:   "unchanged readings keep the anchor",
			limits: kw,
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 1000, at: 17 * ms, want: fwd(1000)},
				{raw: 1000, at: 34 * ms, want: fwd(0)},
				{raw: 1000, at: 51 * ms, want: fwd(0)},
				// window (0, 68 ms], not (51 ms, 68 ms]: 1000 appeared after 0.
				{raw: 51_000, at: 68 * ms, want: fwd(50_000)},
			},
			total: 51_000,
		},
		{
			name:   "time going backwards is rejected and changes nothing",
			limits: kw,
			steps: []step{
				{raw: 100, at: 1000 * ms, want: first},
				{raw: 200, at: 900 * ms, err: tracker.ErrTimeBackwards},
				{raw: 200, at: 1000 * ms, want: fwd(100)},
			},
			total: 100,
		},
		{
			name:   "reading above the maximum is rejected and changes nothing",
			limits: tracker.Limits{CounterMax: 1000, MaxWatts: 1000},
			steps: []step{
				{raw: 10, at: 0, want: first},
				{raw: 1001, at: 100 * ms, err: tracker.ErrOutOfRange},
				{raw: 20, at: 100 * ms, want: fwd(10)},
			},
			total: 10,
		},
		{
			name:   "the whole int64 time range does not overflow",
			limits: kw,
			steps: []step{
				{raw: 0, at: math.MinInt64, want: first},
				// bound: (2^64-1 ns + 1 s) × 1000 W ≈ 1.8e16 mJ
				{raw: math.MaxUint64, at: math.MaxInt64, want: tracker.Step{Kind: tracker.Glitch}},
			},
			total: 0,
		},
		{
			name:   "a huge power bound saturates",
			limits: tracker.Limits{MaxWatts: math.MaxFloat64},
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: math.MaxUint64, at: 1, want: fwd(math.MaxUint64)},
				// A step back of 1 is jitter, however huge the bound.
				{raw: math.MaxUint64 - 1, at: 2, want: tracker.Step{Kind: tracker.Jitter}},
				{raw: math.MaxUint64 / 2, at: 3, want: tracker.Step{Kind: tracker.Reset, Delta: math.MaxUint64 / 2}},
			},
			total: math.MaxUint64,
		},
		{
			name:   "glitches over an empty window teach nothing, however huge the bound",
			limits: tracker.Limits{MaxWatts: math.MaxFloat64},
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 1, at: 0, want: fwd(1)},
				// Every window from here on is (0, 0]: a bound of 0, and an
				// infinite implied power.
				{raw: 2, at: 0, want: tracker.Step{Kind: tracker.Glitch}},
				{raw: 2, at: 0, want: fwd(0)},
				{raw: 3, at: 0, want: tracker.Step{Kind: tracker.Glitch}},
				{raw: 3, at: 0, want: fwd(0)},
				{raw: 4, at: 0, want: tracker.Step{Kind: tracker.Glitch}},
				{raw: 4, at: 0, want: fwd(0)},
				{raw: 5, at: 0, want: tracker.Step{Kind: tracker.Glitch}},
				{raw: 5, at: 0, want: fwd(0)},
			},
			total: 1,
		},
		{
			name:   "a tiny power bound makes every rise a glitch",
			limits: tracker.Limits{MaxWatts: math.SmallestNonzeroFloat64},
			steps: []step{
				{raw: 0, at: 0, want: first},
				{raw: 1, at: 100 * ms, want: tracker.Step{Kind: tracker.Glitch}},
				// Back to the old baseline: the glitch was one bad reading.
				{raw: 0, at: 200 * ms, want: tracker.Step{Kind: tracker.Forward}},
			},
			total: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tracker.NewAccumulator(tt.limits)
			for i, s := range tt.steps {
				got, err := a.Advance(s.raw, s.at)
				if s.err != nil {
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d: Advance(%d, %d) error = %v, want %v", i, s.raw, s.at, err, s.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Advance(%d, %d): %v", i, s.raw, s.at, err)
				}
				// Confirmed is checked by TestTrackerStepConfirmed; these
				// cases state kinds and charges.
				if got.Confirmed = false; got != s.want {
					t.Fatalf("step %d: Advance(%d, %d) = %+v, want %+v", i, s.raw, s.at, got, s.want)
				}
			}
			if a.Total() != tt.total {
				t.Fatalf("Total = %d, want %d", a.Total(), tt.total)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	tests := []struct {
		kind tracker.Kind
		want string
	}{
		{tracker.First, "first"},
		{tracker.Forward, "forward"},
		{tracker.Wrap, "wrap"},
		{tracker.Reset, "reset"},
		{tracker.Jitter, "jitter"},
		{tracker.Glitch, "glitch"},
		{tracker.Glitch + 1, "Kind(6)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.kind.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTrackerInvalidWattsMeanNoBound(t *testing.T) {
	tests := []struct {
		name  string
		watts float64
	}{
		{name: "zero", watts: 0},
		{name: "NaN", watts: math.NaN()},
		{name: "+Inf", watts: math.Inf(1)},
		{name: "-Inf", watts: math.Inf(-1)},
		{name: "negative", watts: -1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := tracker.New(tracker.Limits{MaxWatts: tt.watts})
			want := []tracker.Step{
				{Kind: tracker.First},
				{Kind: tracker.Forward, Delta: 1e12},
				{Kind: tracker.Reset, Delta: 1e12 - 1},
			}
			for i, raw := range []uint64{0, 1e12, 1e12 - 1} {
				got, err := tr.Advance(raw, int64(i)*ms)
				if err != nil || got != want[i] {
					t.Fatalf("step %d: Advance(%d) = %+v, %v; want %+v", i, raw, got, err, want[i])
				}
			}
		})
	}
}

// TestTrackerStaircaseAtFullPower reads a counter that publishes a step
// every period while the device draws exactly MaxWatts: every step must be
// plausible, whatever the read cadence and phase.
func TestTrackerStaircaseAtFullPower(t *testing.T) {
	const watts = 1000 // 1000 W is 1000 mJ per ms
	tests := []struct {
		name              string
		period, readEvery int64 // ms
		phase             int64 // ms: a step is published at phase + k × period
	}{
		{name: "NVML slow, read fast, published just after a read", period: 100, readEvery: 17, phase: 1},
		{name: "NVML slow, read fast, published just before a read", period: 100, readEvery: 17, phase: 16},
		{name: "NVML fast, read fast", period: 20, readEvery: 17, phase: 3},
		{name: "read slower than published", period: 20, readEvery: 150, phase: 7},
		{name: "longest allowed period", period: 1000, readEvery: 17, phase: 999},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value := func(r int64) uint64 { // mJ counted up to the last step published at or before r
				k := (r - tt.phase + 1_000_000*tt.period) / tt.period // ≥ 0: offset by a million periods
				return uint64(k * tt.period * watts)
			}
			a := tracker.NewAccumulator(tracker.Limits{MaxWatts: watts})
			var firstRaw, raw uint64
			for r := int64(0); r <= 5000; r += tt.readEvery {
				raw = value(r)
				if r == 0 {
					firstRaw = raw
				}
				s, err := a.Advance(raw, r*ms)
				if err != nil {
					t.Fatal(err)
				}
				if s.Kind != tracker.First && s.Kind != tracker.Forward {
					t.Fatalf("read at %d ms of %d: %+v, want forward", r, raw, s)
				}
			}
			if a.Total() != raw-firstRaw {
				t.Fatalf("Total = %d, want %d", a.Total(), raw-firstRaw)
			}
		})
	}
}

func TestAccumulatorNeverLosesOrDoubleCountsAcrossReset(t *testing.T) {
	// Ground truth: a device draws 1000 mJ between readings. The driver
	// reloads between the 3rd and 4th reading, after 400 of those mJ.
	tests := []struct {
		name   string
		limits tracker.Limits
	}{
		{name: "no bound", limits: tracker.Limits{}},
		{name: "bounded", limits: tracker.Limits{MaxWatts: 20}}, // 2000 mJ per 100 ms
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tracker.NewAccumulator(tt.limits)
			readings := []uint64{10_000, 11_000, 12_000, 600, 1_600, 2_600}
			var prevTotal uint64
			for i, r := range readings {
				if _, err := a.Advance(r, int64(i)*100*ms); err != nil {
					t.Fatal(err)
				}
				if a.Total() < prevTotal {
					t.Fatalf("total went backwards: %d < %d", a.Total(), prevTotal)
				}
				prevTotal = a.Total()
			}
			// 2000 before the reset, 600 counted since it, 2000 after. The
			// 400 mJ drawn before the reload were never observable and are
			// not invented.
			if got, want := a.Total(), uint64(4600); got != want {
				t.Fatalf("Total = %d, want %d", got, want)
			}
			if a.Resets() != 1 || a.Wraps() != 0 || a.Jitters() != 0 || a.Glitches() != 0 {
				t.Fatalf("resets=%d wraps=%d jitters=%d glitches=%d, want 1 0 0 0",
					a.Resets(), a.Wraps(), a.Jitters(), a.Glitches())
			}
		})
	}
}

func TestAccumulatorCountsAnomalies(t *testing.T) {
	a := tracker.NewAccumulator(tracker.Limits{CounterMax: 1<<40 - 1, MaxWatts: 1000})
	series := []uint64{
		1<<40 - 1000, // first
		1<<40 - 900,  // forward 100
		99,           // wrap 999
		1 << 30,      // glitch
		1<<30 - 1,    // jitter
		5,            // reset
		1<<30 + 6,    // glitch
		1<<30 + 5,    // jitter
	}
	for i, raw := range series {
		if _, err := a.Advance(raw, int64(i)*100*ms); err != nil {
			t.Fatal(err)
		}
	}
	if a.Wraps() != 1 || a.Resets() != 1 || a.Jitters() != 2 || a.Glitches() != 2 {
		t.Fatalf("wraps=%d resets=%d jitters=%d glitches=%d, want 1 1 2 2",
			a.Wraps(), a.Resets(), a.Jitters(), a.Glitches())
	}
}

func TestAccumulatorSaturates(t *testing.T) {
	a := tracker.NewAccumulator(tracker.Limits{})
	for i, r := range []uint64{0, math.MaxUint64, 1 << 62, math.MaxUint64} {
		if _, err := a.Advance(r, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if a.Total() != math.MaxUint64 {
		t.Fatalf("Total = %d, want saturation at MaxUint64", a.Total())
	}
}

func TestAccumulatorConcurrentSafe(t *testing.T) {
	// 3 mJ per ms never reaches 1000 W; every 7th reading steps back by 1,
	// too high to be a reset.
	a := tracker.NewAccumulator(tracker.Limits{MaxWatts: 1000})
	const offset = 1e12
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i <= n; i++ {
			if _, err := a.Advance(offset+i*3, int64(i)*ms); err != nil {
				t.Error(err)
				return
			}
			if i%7 == 6 {
				if _, err := a.Advance(offset+i*3-1, int64(i)*ms); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last, lastJ uint64
			for i := 0; i < n; i++ {
				v, j := a.Total(), a.Jitters()
				if v < last || v%3 != 0 || j < lastJ {
					t.Errorf("observed total %d after %d, jitters %d after %d", v, last, j, lastJ)
					return
				}
				last, lastJ = v, j
			}
		}()
	}
	wg.Wait()
	if a.Total() != 3*n || a.Jitters() != n/7 || a.Glitches() != 0 {
		t.Fatalf("Total = %d, jitters = %d, glitches = %d; want %d, %d, 0", a.Total(), a.Jitters(), a.Glitches(), 3*n, n/7)
	}
}

// refAdvance is the reference model without a power bound: it computes
// deltas in unbounded integers straight from the rule's definition.
func refAdvance(max *big.Int, prev, raw uint64, seen bool) (tracker.Kind, *big.Int) {
	p, r := new(big.Int).SetUint64(prev), new(big.Int).SetUint64(raw)
	quarter := new(big.Int).Quo(max, big.NewInt(4))
	switch {
	case !seen:
		return tracker.First, new(big.Int)
	case r.Cmp(p) >= 0:
		return tracker.Forward, new(big.Int).Sub(r, p)
	case p.Cmp(new(big.Int).Sub(max, quarter)) > 0 && r.Cmp(quarter) < 0:
		// Distance from prev up to max, one step onto 0, then up to raw.
		d := new(big.Int).Sub(max, p)
		d.Add(d, r)
		return tracker.Wrap, d.Add(d, big.NewInt(1))
	default:
		return tracker.Reset, r
	}
}

// refBounded is the reference model with a power bound: the rules of the
// package doc in rational arithmetic, with no saturation and no overflow.
type refBounded struct {
	max      *big.Int
	watts    *big.Rat // nil: no bound
	seen     bool
	base     uint64
	anchored bool
	anchor   int64
	firstAt  int64
	lastRaw  uint64
	lastAt   int64
	lastFrom int64 // when the previous reading began
	runFrom  int64
	baseAt   int64
	pd, pw   *big.Int // last known power pd/pw mJ/ns; nil while none
	// After a Glitch: the baseline it replaced, for one reading, and the
	// glitch's rise, window and bound.
	glitched            bool
	preBase             uint64
	preBaseAt           int64
	preAnchor           int64
	preAnchored         bool
	preLastAt           int64
	glitchDelta         *big.Int
	gRise, gWin, gBound *big.Int
	debt                *big.Int
	// The bound's learning: the configured bound in W, the one in force,
	// and the run of confirmed glitches (rise, window, charged).
	watts0, wattsF float64
	run            [][3]*big.Int
	runMin, runMax float64
}

// pay takes what a step charges toward the debt a recovered Glitch left.
func (m *refBounded) pay(d *big.Int) *big.Int {
	if m.debt == nil || m.debt.Sign() == 0 {
		return d
	}
	p := new(big.Int).Set(d)
	if m.debt.Cmp(p) < 0 {
		p.Set(m.debt)
	}
	m.debt.Sub(m.debt, p)
	return new(big.Int).Sub(d, p)
}

// within reports whether x ≤ bound, where a nil bound is unlimited.
func within(x, bound *big.Int) bool { return bound == nil || x.Cmp(bound) <= 0 }

func span(from, to int64) *big.Int { return new(big.Int).Sub(big.NewInt(to), big.NewInt(from)) }

// millijoules is ⌊watts × ns / 1e6⌋, or nil, unlimited, without a bound.
func (m *refBounded) millijoules(ns *big.Int) *big.Int {
	if m.watts == nil {
		return nil
	}
	r := new(big.Rat).Mul(m.watts, new(big.Rat).SetInt(ns))
	r.Quo(r, big.NewRat(1_000_000, 1))
	return new(big.Int).Quo(r.Num(), r.Denom())
}

// confirm is the rule for a glitch whose next reading did not come back:
// the power follows it up to its bound, and a fourth consistent one in a
// row raises the bound and returns the run's credit (nil: no raise).
func (m *refBounded) confirm() *big.Int {
	b := m.gRise
	if m.gBound != nil && m.gBound.Cmp(b) < 0 {
		b = m.gBound
	}
	if m.gWin.Sign() != 0 {
		m.pd, m.pw = new(big.Int).Set(b), m.gWin
	}
	w := math.Inf(1)
	if m.gWin.Sign() != 0 {
		w = float64(m.gRise.Uint64()) / float64(m.gWin.Uint64()) * 1e6
	}
	if len(m.run) == 0 {
		m.runMin, m.runMax = w, w
	} else {
		m.runMin, m.runMax = min(m.runMin, w), max(m.runMax, w)
	}
	m.run = append(m.run, [3]*big.Int{m.gRise, m.gWin, m.glitchDelta})
	if len(m.run) < 4 {
		return nil
	}
	run := m.run
	m.run = nil
	limit := min(m.watts0*tracker.MaxBoundGrowth, math.MaxFloat64)
	if !(m.runMax <= 2*m.runMin) || !(m.runMax <= limit) {
		return nil
	}
	to := min(m.runMax*1.5, limit)
	if !(to > m.wattsF) {
		return nil
	}
	m.wattsF, m.watts = to, new(big.Rat).SetFloat64(to)
	credit := new(big.Int)
	for _, g := range run {
		c := m.millijoules(g[1])
		if g[0].Cmp(c) < 0 {
			c = g[0]
		}
		credit.Add(credit, new(big.Int).Sub(c, g[2]))
	}
	return credit
}

func (m *refBounded) advanceRead(raw uint64, from, at int64) (tracker.Kind, *big.Int, bool) {
	from = min(from, at)
	if !m.seen {
		m.seen, m.base, m.firstAt, m.lastRaw, m.lastAt, m.lastFrom, m.baseAt = true, raw, from, raw, at, from, at
		return tracker.First, new(big.Int), false
	}
	if raw != m.lastRaw {
		m.runFrom = m.lastFrom
	}
	prevAt := m.lastFrom
	m.lastRaw, m.lastAt, m.lastFrom = raw, at, from
	var window, powWin *big.Int
	if m.anchored {
		window = span(m.anchor, at)
		powWin = window
	} else {
		powWin = span(m.firstAt, at)
		window = new(big.Int).Add(powWin, big.NewInt(int64(tracker.MaxUpdatePeriod)))
	}
	pending := m.glitched
	if m.glitched {
		m.glitched = false
		if raw < m.base && raw >= m.preBase {
			var w *big.Int
			if m.preAnchored {
				w = span(m.preAnchor, at)
			} else {
				w = new(big.Int).Add(span(m.firstAt, at), big.NewInt(int64(tracker.MaxUpdatePeriod)))
			}
			rise := new(big.Int).SetUint64(raw - m.preBase)
			if within(rise, m.millijoules(w)) {
				refund := new(big.Int).Set(m.glitchDelta)
				if rise.Cmp(refund) < 0 {
					refund.Set(rise)
				}
				if m.debt == nil {
					m.debt = new(big.Int)
				}
				m.debt.Add(m.debt, new(big.Int).Sub(m.glitchDelta, refund))
				if raw == m.preBase {
					m.base, m.baseAt, m.anchor, m.anchored = raw, m.preBaseAt, m.preAnchor, m.preAnchored
				} else {
					m.base, m.baseAt, m.anchor, m.anchored = raw, at, m.preLastAt, true
				}
				m.run = nil
				return tracker.Forward, new(big.Int).Sub(rise, refund), false
			}
		}
	}
	var credit *big.Int
	if pending {
		credit = m.confirm()
	}
	bound := m.millijoules(window)
	b, r := new(big.Int).SetUint64(m.base), new(big.Int).SetUint64(raw)
	quarter := new(big.Int).Quo(m.max, big.NewInt(4))
	wrapped := new(big.Int).Sub(m.max, b)
	wrapped.Add(wrapped, r).Add(wrapped, big.NewInt(1))
	var kind tracker.Kind
	var delta *big.Int
	move := true
	switch rise := new(big.Int).Sub(r, b); {
	case rise.Sign() >= 0 && within(rise, bound):
		kind, delta = tracker.Forward, rise
		if rise.Sign() == 0 {
			move = false
			break
		}
		if powWin.Sign() != 0 {
			m.pd, m.pw = rise, powWin
		}
		delta = m.pay(delta)
	case rise.Sign() > 0:
		kind, delta = tracker.Glitch, new(big.Int)
		if m.pd != nil {
			delta.Mul(m.pd, span(m.baseAt, at)).Quo(delta, m.pw)
			if !within(delta, bound) {
				delta.Set(bound)
			}
		}
		m.glitched, m.preBase, m.preBaseAt, m.preAnchor, m.preAnchored, m.preLastAt = true, m.base, m.baseAt, m.anchor, m.anchored, prevAt
		m.glitchDelta, m.gRise, m.gWin, m.gBound = new(big.Int).Set(delta), rise, window, bound
	case b.Cmp(new(big.Int).Sub(m.max, quarter)) > 0 && r.Cmp(quarter) < 0 && within(wrapped, bound):
		kind, delta = tracker.Wrap, wrapped
		if powWin.Sign() != 0 {
			m.pd, m.pw = wrapped, powWin
		}
		delta = m.pay(delta)
	case within(r, bound) && (bound == nil || new(big.Int).Mul(r, big.NewInt(2)).Cmp(b) <= 0):
		kind, delta = tracker.Reset, r
	default:
		kind, delta, move = tracker.Jitter, new(big.Int), false
	}
	if kind != tracker.Glitch && (move || kind == tracker.Jitter) {
		m.run = nil
	}
	if move {
		m.base, m.baseAt, m.anchor, m.anchored = raw, at, m.runFrom, true
	}
	if credit != nil {
		delta = new(big.Int).Add(delta, m.pay(credit))
	}
	return kind, delta, credit != nil
}

// fuzzSeries decodes data into readings of 12 bytes each: an op byte, a
// 24-bit time step and a 64-bit argument. The op's low 3 bits choose how raw
// follows the previous raw (a far jump, a small rise, a small drop, a low
// value, a value near the top, ...), so that forward steps, jitter,
// glitches, resets and wraps all occur; its high bits scale the time step,
// make it huge, send the time backwards, or make the read take the second
// half of its step (a bracketed reading, [began, at]).
func fuzzSeries(max uint64, start int64, data []byte, visit func(raw uint64, began, at int64)) {
	prev, at := uint64(0), start
	for ; len(data) >= 12; data = data[12:] {
		op := data[0]
		dt := int64(data[1])<<16 | int64(data[2])<<8 | int64(data[3])
		arg := binary.BigEndian.Uint64(data[4:])
		var raw uint64
		switch op & 7 {
		case 0:
			raw = arg
		case 1:
			raw = prev + arg%4096
		case 2:
			raw = prev - min(prev, arg%8)
		case 3:
			raw = arg % 4096
		case 4:
			raw = max - arg%4096
		case 5:
			raw = prev + arg
		case 6:
			raw = prev + arg%(1<<40)
		case 7:
			raw = prev + arg%(max/8+1) // often through the wrap point
		}
		if op&7 != 0 && max != math.MaxUint64 {
			raw %= max + 1
		}
		switch op >> 5 {
		case 6:
			dt <<= 39 // up to about 2^63 ns
		case 7:
			dt = -dt - 1
		default:
			dt *= []int64{1, 1_000, 1_000_000, 100_000_000}[op>>3&3]
		}
		prevAt := at
		switch n := at + dt; {
		case dt > 0 && n < at:
			at = math.MaxInt64
		case dt < 0 && n > at:
			at = math.MinInt64
		default:
			at = n
		}
		began := at
		if op>>5 == 5 && at > prevAt {
			// A read that took the second half of the time since the
			// previous one: bracketed, sampled somewhere in it.
			began = at - int64((uint64(at)-uint64(prevAt))/2)
		}
		visit(raw, began, at)
		prev = raw
	}
}

func FuzzTracker(f *testing.F) {
	rec := func(op byte, dt uint32, arg uint64) []byte {
		b := []byte{op, byte(dt >> 16), byte(dt >> 8), byte(dt)}
		return binary.BigEndian.AppendUint64(b, arg)
	}
	series := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }
	const ms = 2 << 3 // op bits: dt in ms
	issue := series(rec(0|ms, 0, 5e9), rec(1|ms, 100, 100), rec(3|ms, 100, 0), rec(0|ms, 100, 5e9+200))
	jitter := series(rec(0|ms, 0, 5e9), rec(1|ms, 100, 100), rec(2|ms, 100, 1), rec(1|ms, 100, 101))
	wrap := series(rec(4|ms, 0, 10), rec(7|ms, 17, 100), rec(5|ms, 17, 1e15), rec(7<<5, 3, 0), rec(6<<5, 1, 7))
	for _, watts := range []float64{0, 1000, 1, 1e-5, 1e-300, 5e15, 1e16, 1e25, 1e35, 1e300, math.NaN(), -1} {
		f.Add(uint64(0), watts, int64(0), issue)
		f.Add(uint64(1_000_000), watts, int64(-1), wrap)
		f.Add(uint64(1<<32-1), watts, int64(math.MaxInt64-1e9), jitter)
	}
	f.Add(uint64(0), 0.0, int64(0), []byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	// A staircase at 1.6 W read every 50 ms under a 1 W bound: four
	// consistent glitches raise the bound. Then the same with bracketed
	// reads (op 5<<5), and a corrupt reading inside the run.
	learn := [][]byte{rec(0|ms, 0, 0)}
	bracketed := [][]byte{rec(0|ms, 0, 0)}
	corrupt := [][]byte{rec(0|ms, 0, 0)}
	for i := range 12 {
		learn = append(learn, rec(1|ms, 50, 0), rec(1|ms, 50, 160))
		bracketed = append(bracketed, rec(1|ms|5<<5, 50, 0), rec(1|ms|5<<5, 50, 160))
		if i == 3 {
			corrupt = append(corrupt, rec(1|ms, 50, 0), rec(0|ms, 50, 9e12), rec(0|ms, 50, uint64(160*(i+1))))
			continue
		}
		corrupt = append(corrupt, rec(1|ms, 50, 0), rec(1|ms, 50, 160))
	}
	f.Add(uint64(0), 1.0, int64(0), series(learn...))
	f.Add(uint64(0), 1.0, int64(0), series(bracketed...))
	f.Add(uint64(0), 1.0, int64(0), series(corrupt...))
	f.Fuzz(func(t *testing.T, max uint64, watts float64, start int64, data []byte) {
		limits := tracker.Limits{CounterMax: max, MaxWatts: watts}
		a := tracker.NewAccumulator(limits)
		tr := tracker.New(limits)
		bigMax := new(big.Int).SetUint64(tr.Max())
		bounded := watts > 0 && !math.IsInf(watts, 1)
		ref := &refBounded{max: bigMax}
		if bounded {
			ref.watts, ref.watts0, ref.wattsF = new(big.Rat).SetFloat64(watts), watts, watts
		}
		want := new(big.Int)
		var prev uint64
		var firstAt, lastAt, prevAt int64
		took := new(big.Int) // the time the accepted readings took
		overlap := false     // a bracket began before the previous reading returned
		seen := false
		fuzzSeries(tr.Max(), start, data, func(raw uint64, began, at int64) {
			before := a.Total()
			got, err := a.AdvanceRead(raw, began, at)
			switch {
			case raw > tr.Max():
				if !errors.Is(err, tracker.ErrOutOfRange) {
					t.Fatalf("Advance(%d, %d) with max %d: err = %v", raw, at, tr.Max(), err)
				}
				return
			case seen && at < lastAt:
				if !errors.Is(err, tracker.ErrTimeBackwards) {
					t.Fatalf("Advance(%d, %d) after time %d: err = %v", raw, at, lastAt, err)
				}
				return
			case err != nil:
				t.Fatalf("Advance(%d, %d): %v", raw, at, err)
			}
			if a.Total() < before {
				t.Fatalf("Total went backwards: %d < %d", a.Total(), before)
			}
			kind, delta, raised := ref.advanceRead(raw, began, at)
			if !bounded {
				// Without a bound, the rule is today's: check it against
				// the plain reference as well.
				k, d := refAdvance(bigMax, prev, raw, seen)
				if k != kind || d.Cmp(delta) != 0 {
					t.Fatalf("reference models disagree on %d after %d: %v %s, %v %s", raw, prev, k, d, kind, delta)
				}
			}
			if got.Kind != kind || !delta.IsUint64() || got.Delta != delta.Uint64() || got.Raised != raised {
				t.Fatalf("AdvanceRead(%d, %d, %d) = %+v, reference %v %s raised=%v", raw, began, at, got, kind, delta, raised)
			}
			if !seen {
				firstAt, lastAt = began, at
			} else if began < lastAt {
				overlap = true
			}
			took.Add(took, span(began, at))
			prev, seen, prevAt, lastAt = raw, true, lastAt, at
			want.Add(want, delta)
			sat := want
			if !want.IsUint64() {
				sat = new(big.Int).SetUint64(math.MaxUint64)
			}
			if a.Total() != sat.Uint64() {
				t.Fatalf("Total = %d, reference %s", a.Total(), sat)
			}
			if bounded {
				if ref.wattsF > watts*tracker.MaxBoundGrowth {
					t.Fatalf("bound raised to %v W, above MaxBoundGrowth × %v W", ref.wattsF, watts)
				}
				if overlap {
					return
				}
				// The documented ceiling, at the bound now in force W:
				// W × ((tₙ − t₀) + (tₙ₋₁ − t₀) + D + MaxUpdatePeriod), t₀
				// the First reading's start, D the time the readings took.
				ns := new(big.Int).Add(span(firstAt, lastAt), span(firstAt, prevAt))
				ns.Add(ns, took).Add(ns, big.NewInt(int64(tracker.MaxUpdatePeriod)))
				if ceiling := ref.millijoules(ns); want.Cmp(ceiling) > 0 {
					t.Fatalf("charged %s mJ from %d to %d ns at %v W, over the ceiling %s", want, firstAt, lastAt, ref.wattsF, ceiling)
				}
			}
		})
	})
}

func ExampleTracker() {
	tr := tracker.New(tracker.Limits{}) // NVML: the full uint64 range, no power bound
	for i, raw := range []uint64{1000, 1500, 300} {
		s, _ := tr.Advance(raw, int64(i)*int64(100*time.Millisecond))
		fmt.Println(s.Kind, s.Delta)
	}
	// Output:
	// first 0
	// forward 500
	// reset 300
}

func ExampleTracker_bounded() {
	// A device that draws at most 1000 W, read every 100 ms: no reading may
	// add more than about 100 J, so a drop of 1 mJ is jitter, not a reset,
	// and the jump back after a spurious drop to 0 is a glitch, charged at
	// the last known power: 100 mJ over the window (0, 300 ms] of the last
	// forward step, for the 100 ms since the reading that set the baseline,
	// the reset.
	tr := tracker.New(tracker.Limits{MaxWatts: 1000})
	for i, raw := range []uint64{5e9, 5e9 + 100, 5e9 + 99, 5e9 + 200, 0, 5e9 + 300} {
		s, _ := tr.Advance(raw, int64(i)*int64(100*time.Millisecond))
		fmt.Println(s.Kind, s.Delta)
	}
	// Output:
	// first 0
	// forward 100
	// jitter 0
	// forward 100
	// reset 0
	// glitch 33
}

func ExampleAccumulator() {
	a := tracker.NewAccumulator(tracker.Limits{CounterMax: 1<<20 - 1}) // a 20-bit counter
	for i, raw := range []uint64{1<<20 - 100, 1<<20 - 1, 50} {
		a.Advance(raw, int64(i))
	}
	fmt.Println(a.Total(), a.Wraps())
	// Output: 150 1
}
