package nnls_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/otelenergy/otelenergy/internal/nnls"
)

func TestSolve(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name  string
		truth [3]float64 // intercept, x1, x2
		base  [nnls.MaxTerms]float64
		given uint
		want  [3]float64
	}{
		{"recovers positive terms", [3]float64{70, 300, 120}, [nnls.MaxTerms]float64{}, 0, [3]float64{70, 300, 120}},
		{"drops a term that explains nothing", [3]float64{70, 300, 0}, [nnls.MaxTerms]float64{}, 0, [3]float64{70, 300, 0}},
		// y falls with x2: the best non-negative fit has no x2 term.
		{"never negative", [3]float64{70, 300, -50}, [nnls.MaxTerms]float64{}, 0, [3]float64{-1, -1, 0}},
		{"a given term is kept", [3]float64{70, 300, 120}, [nnls.MaxTerms]float64{65}, 1, [3]float64{65, -1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f nnls.Fit
			for range 400 {
				x1, x2 := rng.Float64(), rng.Float64()
				y := tt.truth[0] + tt.truth[1]*x1 + tt.truth[2]*x2 + rng.NormFloat64()
				f.Add([]float64{1, x1, x2}, y, 1)
			}
			th, ok := f.Solve(tt.base, tt.given)
			if !ok {
				t.Fatal("no solution")
			}
			for i, w := range tt.want {
				if w >= 0 && math.Abs(th[i]-w) > 0.02*w+1 {
					t.Errorf("term %d = %.2f, want %.2f (all: %.2f)", i, th[i], w, th[:3])
				}
				if th[i] < 0 {
					t.Errorf("term %d = %.2f is negative", i, th[i])
				}
			}
		})
	}
}

func TestForgets(t *testing.T) {
	var f nnls.Fit
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		k := 100.0
		if i >= 1000 {
			k = 200 // the board's power per unit of x doubled
		}
		x := rng.Float64()
		f.Add([]float64{1, x}, 50+k*x, math.Exp(-1.0/100))
	}
	th, ok := f.Solve([nnls.MaxTerms]float64{}, 0)
	if !ok || math.Abs(th[1]-200) > 1 || math.Abs(th[0]-50) > 1 {
		t.Fatalf("coefficients %.2f, want 50 and 200 after ten horizons", th[:2])
	}
}

func TestEmpty(t *testing.T) {
	var f nnls.Fit
	if _, ok := f.Solve([nnls.MaxTerms]float64{}, 0); ok {
		t.Fatal("an empty fit solved")
	}
}

func BenchmarkSolve(b *testing.B) {
	var f nnls.Fit
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float64, 5)
	for range 100 {
		for i := range x {
			x[i] = rng.Float64()
		}
		f.Add(x, 3+x[1], 0.99)
	}
	b.Run("add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Add(x, 3+x[1], 0.99)
		}
	})
	b.Run("solve5", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Solve([nnls.MaxTerms]float64{}, 0)
		}
	})
}

func TestSystemSolve(t *testing.T) {
	// 2x + y − z = 8, −3x − y + 2z = −11, −2x + y + 2z = −3: x=2, y=3, z=−1.
	var g nnls.System
	rows := [][]float64{{2, 1, -1, 8}, {-3, -1, 2, -11}, {-2, 1, 2, -3}}
	for r, row := range rows {
		copy(g[r][:], row[:3])
		g[r][3] = row[3]
	}
	got, ok := g.Solve(3)
	want := [3]float64{2, 3, -1}
	if !ok {
		t.Fatal("Solve: not ok on a regular system")
	}
	for i, w := range want {
		if math.Abs(got[i]-w) > 1e-12 {
			t.Errorf("x[%d] = %v, want %v", i, got[i], w)
		}
	}
	if got[3] != 0 {
		t.Errorf("x[3] = %v beyond k, want 0", got[3])
	}

	// A singular system: the second row is twice the first.
	var s nnls.System
	s[0] = [nnls.MaxTerms + 1]float64{1, 2}
	s[0][2] = 3
	s[1] = [nnls.MaxTerms + 1]float64{2, 4}
	s[1][2] = 6
	if _, ok := s.Solve(2); ok {
		t.Error("Solve: ok on a singular system")
	}
}
