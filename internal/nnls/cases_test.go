package nnls_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/otelenergy/otelenergy/internal/nnls"
)

// TestCollinearPrefers: the second term is always half the first
// (memory traffic that tracks SM exactly), so the data cannot tell them
// apart: every fit that puts the power on either is as good. The fit
// puts it on the preferred term, not on whichever subset it tried first.
func TestCollinearPrefers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var f nnls.Fit
	f.Prefer(1 << 1)
	for range 500 {
		sm := rng.Float64()
		f.Add([]float64{1, sm, 0.5 * sm}, 70+300*sm+rng.NormFloat64(), math.Exp(-1.0/300))
	}
	th, ok := f.Solve([nnls.MaxTerms]float64{}, 0)
	if !ok || math.Abs(th[1]-300) > 6 || th[2] != 0 || math.Abs(th[0]-70) > 2 {
		t.Fatalf("coefficients %.2f, want 70, 300 on the preferred term, 0", th[:3])
	}
}

// TestNearCollinearPrefers: as above, the second term within 1e-4 of
// half the first: the three-term fit is ill-conditioned, its
// coefficients noise; the fit keeps the preferred term alone.
func TestNearCollinearPrefers(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var f nnls.Fit
	f.Prefer(1 << 1)
	for range 500 {
		sm := rng.Float64()
		f.Add([]float64{1, sm, 0.5*sm + 1e-4*rng.Float64()}, 70+300*sm+rng.NormFloat64(), math.Exp(-1.0/300))
	}
	th, ok := f.Solve([nnls.MaxTerms]float64{}, 0)
	if !ok || math.Abs(th[1]-300) > 6 || th[2] > 1 {
		t.Fatalf("coefficients %.2f, want 70, 300 on the preferred term, 0", th[:3])
	}
}

// TestNegativeDirection: memory-bound work draws less per % of SM, which
// the data show as power falling with the second term. No coefficient
// goes negative; the fit keeps the first term with the power it can
// explain.
func TestNegativeDirection(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var f nnls.Fit
	f.Prefer(1 << 1)
	for range 500 {
		sm, mem := rng.Float64(), rng.Float64()
		f.Add([]float64{1, sm, mem}, 70+300*sm-80*mem+rng.NormFloat64(), math.Exp(-1.0/300))
	}
	th, ok := f.Solve([nnls.MaxTerms]float64{}, 0)
	if !ok || th[2] != 0 || th[0] < 0 || math.Abs(th[1]-300) > 10 {
		t.Fatalf("coefficients %.2f, want the memory term 0 and SM about 300", th[:3])
	}
}

// TestDecayedColumn: a term seen in one row long ago and never since
// (5,000 rows of forgetting on a 300-row horizon) carries no data: it
// leaves the model instead of keeping a coefficient fitted to one
// forgotten row.
func TestDecayedColumn(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var f nnls.Fit
	f.Add([]float64{1, 0.5, 1}, 70+150+1e6, 1) // an absurd row
	for range 5000 {
		sm := rng.Float64()
		f.Add([]float64{1, sm, 0}, 70+300*sm+rng.NormFloat64(), math.Exp(-1.0/300))
	}
	th, ok := f.Solve([nnls.MaxTerms]float64{}, 0)
	if !ok || th[2] != 0 || math.Abs(th[1]-300) > 6 {
		t.Fatalf("coefficients %.2f, want the decayed term out (0) and 300", th[:3])
	}
}
