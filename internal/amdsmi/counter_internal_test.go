package amdsmi

import (
	"math"
	"testing"
)

// TestCounterWrapRule pins which drop of the 64-bit accumulator is a wrap,
// package tracker's rule: the previous reading in the top quarter of the
// range and the new one in the bottom quarter. Any other drop restarts
// the count (a driver reload), which the Monitor's tracker then classes.
func TestCounterWrapRule(t *testing.T) {
	const q = math.MaxUint64 / 4
	for _, tt := range []struct {
		name  string
		steps []uint64
		hi    []uint64
	}{
		{"wrap from the top quarter to the bottom", []uint64{math.MaxUint64 - 10, 5}, []uint64{0, 1}},
		{"at the very top", []uint64{math.MaxUint64, 0}, []uint64{0, 1}},
		// Above a half, below three quarters: a rule at ½ would wrap.
		{"no wrap from below the top quarter", []uint64{3*q - 1<<40, 5}, []uint64{0, 0}},
		// From the top into the second quarter: a rule at ½ would wrap.
		{"no wrap into the second quarter", []uint64{math.MaxUint64 - 10, q + 1<<40}, []uint64{0, 0}},
		{"a wrap, then a restart", []uint64{math.MaxUint64 - 10, 5, 1 << 50, 7}, []uint64{0, 1, 1, 0}},
		{"rises only", []uint64{1, 2, 3}, []uint64{0, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c counter
			for k, acc := range tt.steps {
				if got := c.extend(acc); got != tt.hi[k] {
					t.Fatalf("reading %d (%d): %d wraps, want %d", k, acc, got, tt.hi[k])
				}
			}
		})
	}
}
