package procshare_test

import (
	"math"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// observe feeds s one-second windows of a board drawing idle + k·U watts.
func observe(s *procshare.Static, n int, idle, k float64, util func(i int) float64) {
	for i := range n {
		u := util(i)
		s.Observe(1e9, uint64((idle+k*u)*1000), u)
	}
}

func TestStatic(t *testing.T) {
	tests := []struct {
		name  string
		fixed float64
		n     int
		util  func(int) float64
		want  float64
		tol   float64
	}{
		{"fixed", 70, 100, func(int) float64 { return 1 }, 70, 0},
		// One steady idle second (the first window has none before it to
		// be steady with) is short of idlepower.MinSeconds; two are not.
		{"not enough data", 0, 2, func(int) float64 { return 0 }, 0, 0},
		{"two idle seconds measure it", 0, 3, func(int) float64 { return 0 }, 90, 1e-9},
		{"idle windows measured", 0, 60, func(i int) float64 { return float64(i/5%2) * 0.8 }, 90, 0.01},
		{"constant full load: unknown", 0, 600, func(int) float64 { return 1 }, 0, 0},
		{"load changing every window: nothing steady", 0, 600, func(i int) float64 { return float64(i%2) * 0.8 }, 0, 0},
		{"varying load, never idle: fitted", 0, 120, func(i int) float64 { return 0.2 + 0.6*float64(i/4%5)/4 }, 90, 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := procshare.Static{Fixed: tt.fixed}
			observe(&s, tt.n, 90, 400, tt.util)
			if got := s.Watts(); math.Abs(got-tt.want) > tt.tol {
				t.Fatalf("Watts = %v, want %v ± %v", got, tt.want, tt.tol)
			}
		})
	}
}

func TestStaticForgets(t *testing.T) {
	var s procshare.Static
	observe(&s, 100, 90, 0, func(int) float64 { return 0 })
	// The board now idles at 60 W (a lower power limit): after three
	// horizons the old level weighs e^-3.
	observe(&s, 3*int(procshare.DefaultStaticHorizon), 60, 0, func(int) float64 { return 0 })
	if got := s.Watts(); math.Abs(got-60) > 2 {
		t.Fatalf("Watts = %v, want about 60", got)
	}
}

// TestStaticClampsToMeanPower feeds a board whose power falls as its
// utilization rises (a memory-bound phase that stalls the SMs draws less
// than a lighter compute-bound one): the line's intercept, 200 W, lies
// above every window's power, and static power above the board's mean
// would leave the processes a negative share. The estimate is clamped to
// the windows' mean power.
func TestStaticClampsToMeanPower(t *testing.T) {
	var s procshare.Static
	var sumP float64
	util := func(i int) float64 { return 0.2 + 0.6*float64(i/4%5)/4 }
	n := 120
	for i := range n {
		sumP += 200 - 100*util(i)
	}
	observe(&s, n, 200, -100, util)
	mean := sumP / float64(n)
	if got := s.Watts(); got > mean+1 || got < mean-10 {
		t.Fatalf("Watts = %.1f, want the mean power %.1f (the intercept, 200 W, clamped)", got, mean)
	}
}
