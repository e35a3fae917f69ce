package procshare_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// TestCover pins the device time each process of an interval is
// charged embodied emissions for: the interval's time shared equally among
// the processes with energy in it, the remainder a nanosecond each to the
// first of them, so that their times add up to the interval's and no
// embodied emissions slip to the rest.
func TestCover(t *testing.T) {
	for _, tt := range []struct {
		name   string
		dt     uint64
		shares []uint64
		want   []uint64
	}{
		{"remainder to the first", 100_000_002, []uint64{5, 0, 7, 9}, []uint64{33_333_334, 0, 33_333_334, 33_333_334}},
		{"remainder of one", 100_000_000, []uint64{5, 7, 9}, []uint64{33_333_334, 33_333_334 - 1, 33_333_334 - 1}},
		{"one process", 99, []uint64{0, 1}, []uint64{0, 99}},
		{"none with energy", 99, []uint64{0, 0}, []uint64{0, 0}},
		{"no process", 99, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cover := make([]uint64, len(tt.shares))
			for i := range cover {
				cover[i] = 77 // overwritten, not added to
			}
			procshare.Cover(tt.dt, tt.shares, cover, nil)
			var sum uint64
			for i := range cover {
				if cover[i] != tt.want[i] {
					t.Fatalf("cover = %v, want %v", cover, tt.want)
				}
				sum += cover[i]
			}
			if active := sum > 0; active && sum != tt.dt {
				t.Fatalf("the processes' times add up to %d ns of %d", sum, tt.dt)
			}
		})
	}
}
