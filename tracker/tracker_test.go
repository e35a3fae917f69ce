package tracker_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sync"
	"testing"

	"github.com/otelenergy/otelenergy/tracker"
)

func TestTrackerSteps(t *testing.T) {
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
			tr := tracker.New(tt.max)
			for i, s := range tt.steps {
				got, err := tr.Advance(s.raw)
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

func TestAccumulatorNeverLosesOrDoubleCountsAcrossReset(t *testing.T) {
	// Ground truth: a device draws 1000 mJ between readings. The driver
	// reloads between the 3rd and 4th reading, after 400 of those mJ.
	a := tracker.NewAccumulator(0)
	readings := []uint64{10_000, 11_000, 12_000, 600, 1_600, 2_600}
	var prevTotal uint64
	for _, r := range readings {
		if _, err := a.Advance(r); err != nil {
			t.Fatal(err)
		}
		if a.Total() < prevTotal {
			t.Fatalf("total went backwards: %d < %d", a.Total(), prevTotal)
		}
		prevTotal = a.Total()
	}
	// 2000 before the reset, 600 counted since it, 2000 after. The 400 mJ
	// drawn before the reload were never observable and are not invented.
	if got, want := a.Total(), uint64(4600); got != want {
		t.Fatalf("Total = %d, want %d", got, want)
	}
	if a.Resets() != 1 || a.Wraps() != 0 {
		t.Fatalf("resets=%d wraps=%d, want 1 and 0", a.Resets(), a.Wraps())
	}
}

func TestAccumulatorSaturates(t *testing.T) {
	a := tracker.NewAccumulator(0)
	for _, r := range []uint64{0, math.MaxUint64, 1 << 62, math.MaxUint64} {
		if _, err := a.Advance(r); err != nil {
			t.Fatal(err)
		}
	}
	if a.Total() != math.MaxUint64 {
		t.Fatalf("Total = %d, want saturation at MaxUint64", a.Total())
	}
}

func TestAccumulatorConcurrentSafe(t *testing.T) {
	a := tracker.NewAccumulator(0)
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i <= n; i++ {
			if _, err := a.Advance(i * 3); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for i := 0; i < n; i++ {
				v := a.Total()
				if v < last || v%3 != 0 {
					t.Errorf("observed total %d after %d", v, last)
					return
				}
				last = v
			}
		}()
	}
	wg.Wait()
	if a.Total() != 3*n {
		t.Fatalf("Total = %d, want %d", a.Total(), 3*n)
	}
}

// refAdvance is the reference model: it computes deltas in unbounded
// integers straight from the rule's definition.
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

func FuzzTracker(f *testing.F) {
	f.Add(uint64(0), []byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Add(uint64(1000), []byte{0, 0, 0, 0, 0, 0, 3, 0xe7, 0, 0, 0, 0, 0, 0, 0, 5})
	f.Fuzz(func(t *testing.T, max uint64, data []byte) {
		a := tracker.NewAccumulator(max)
		tr := tracker.New(max)
		bigMax := new(big.Int).SetUint64(tr.Max())
		want := new(big.Int)
		var prev uint64
		seen := false
		for len(data) >= 8 {
			raw := uint64(data[0])<<56 | uint64(data[1])<<48 | uint64(data[2])<<40 | uint64(data[3])<<32 |
				uint64(data[4])<<24 | uint64(data[5])<<16 | uint64(data[6])<<8 | uint64(data[7])
			data = data[8:]
			got, err := a.Advance(raw)
			if raw > tr.Max() {
				if !errors.Is(err, tracker.ErrOutOfRange) {
					t.Fatalf("Advance(%d) with max %d: err = %v", raw, tr.Max(), err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Advance(%d): %v", raw, err)
			}
			kind, delta := refAdvance(bigMax, prev, raw, seen)
			prev, seen = raw, true
			if got.Kind != kind || !delta.IsUint64() || got.Delta != delta.Uint64() {
				t.Fatalf("Advance(%d) = %+v, reference %v %s", raw, got, kind, delta)
			}
			want.Add(want, delta)
			sat := want
			if !want.IsUint64() {
				sat = new(big.Int).SetUint64(math.MaxUint64)
			}
			if a.Total() != sat.Uint64() {
				t.Fatalf("Total = %d, reference %s", a.Total(), sat)
			}
		}
	})
}

func ExampleTracker() {
	tr := tracker.New(0) // NVML: the full uint64 range
	for _, raw := range []uint64{1000, 1500, 300} {
		s, _ := tr.Advance(raw)
		fmt.Println(s.Kind, s.Delta)
	}
	// Output:
	// first 0
	// forward 500
	// reset 300
}

func ExampleAccumulator() {
	a := tracker.NewAccumulator(1<<20 - 1) // a 20-bit counter
	for _, raw := range []uint64{1<<20 - 100, 1<<20 - 1, 50} {
		a.Advance(raw)
	}
	fmt.Println(a.Total(), a.Wraps())
	// Output: 150 1
}
