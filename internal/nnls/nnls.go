// Package nnls fits a linear model with non-negative coefficients to rows
// that arrive one at a time, forgetting old rows exponentially. It is the
// method of the ledger's power model (ledger/model.go), sized at run time,
// for the agent's per-board power model. [System] is the elimination
// that every subset's solve ends in, here and in the ledger's fits.
//
// # Method
//
// [Fit] keeps the weighted normal equations, A = Σ λ·x·xᵀ and
// b = Σ λ·x·y, and [Fit.Solve] tries every subset of the terms the data
// have seen as the free set, solving each by Gaussian elimination with a
// small ridge, and keeps the feasible (all free coefficients
// non-negative) solution with the best Bayesian information criterion: a
// term earns its place only by explaining enough of y for the data there
// is. A term enters only with data behind it (a mean square of at least
// 1e-4 per row after forgetting); a subset whose terms are collinear
// (condition number over 1e6) is skipped; and of subsets that tie, the
// one with more of the terms set by [Fit.Prefer] wins. With k terms that is at most 2^k − 1 solves of at most k×k, so k is
// capped at [MaxTerms].
//
// # Guarantees
//
// Every coefficient Solve returns is non-negative or given. Add and
// Solve allocate nothing. A Fit is not safe for concurrent use.
package nnls

import "math"

// MaxTerms is the most terms a [Fit] holds.
const MaxTerms = 8

const (
	// minColumn is the least mean square a term must have over the
	// rows (Σλx² ≥ minColumn·n) to enter the model: a term seen in a row
	// long forgotten has no data behind it, and a coefficient fitted to
	// that row's residual alone would be noise (or absurd).
	minColumn = 1e-4
	// maxCond is the condition number (of the free terms' normal
	// equations, scaled to a unit diagonal) above which a subset's terms
	// are taken for collinear: their coefficients are noise.
	maxCond = 1e6
	// tie is how close two scores are to be equal, relative to n.
	tie = 1e-9
)

// Fit is the state of one fit. The zero value is an empty fit of
// MaxTerms terms; unused terms stay zero and are never chosen.
//
// The sums are kept divided by one scale that carries the forgetting of
// every one of them, so that a row costs O(k²) in its k non-zero terms, not
// O(MaxTerms²): a row of one term touches one entry.
type Fit struct {
	a      [MaxTerms][MaxTerms]float64
	b      [MaxTerms]float64
	yy     float64
	n      float64
	scale  float64 // the sums are a, b, yy and n times it; 0 before the first row
	prefer uint
}

// Prefer sets the terms (bit i for term i) that [Fit.Solve] prefers when
// the data cannot choose: of two subsets whose scores tie, the one with
// more preferred terms wins, and a subset whose terms are (nearly)
// collinear is not used at all.
func (f *Fit) Prefer(mask uint) { f.prefer = mask }

// Add folds in one row, x → y, after weighing the past by lambda (1 keeps
// it all, 0 forgets it). Terms of x beyond MaxTerms are ignored.
func (f *Fit) Add(x []float64, y, lambda float64) {
	x = x[:min(len(x), MaxTerms)]
	if f.scale == 0 || lambda <= 0 {
		*f = Fit{prefer: f.prefer, scale: 1}
	} else if f.scale *= lambda; f.scale < 1e-150 {
		f.rescale()
	}
	inv := 1 / f.scale
	for i, xi := range x {
		if xi == 0 {
			continue
		}
		xi *= inv
		f.b[i] += xi * y
		for j, xj := range x {
			f.a[i][j] += xi * xj
		}
	}
	f.yy += y * y * inv
	f.n += inv
}

// rescale folds the shared scale into the sums.
func (f *Fit) rescale() {
	for i := range MaxTerms {
		f.b[i] *= f.scale
		for j := range MaxTerms {
			f.a[i][j] *= f.scale
		}
	}
	f.yy *= f.scale
	f.n *= f.scale
	f.scale = 1
}

// Count returns the effective number of rows.
func (f *Fit) Count() float64 { return f.n * f.scale }

// Solve returns the coefficients: term i is base[i] when given has bit i
// set, and fitted otherwise (zero when the data never saw it). ok is false
// when no row was added or no choice of free terms is feasible.
func (f *Fit) Solve(base [MaxTerms]float64, given uint) (theta [MaxTerms]float64, ok bool) {
	if f.n <= 0 {
		return theta, false
	}
	mask := uint(0)
	for i := range MaxTerms {
		if given&(1<<i) == 0 {
			base[i] = 0
			if f.a[i][i] > 0 && f.a[i][i] >= minColumn*f.n {
				mask |= 1 << i
			}
		}
	}
	best, bestScore, bestPref := base, math.Inf(1), 0
	if given != 0 {
		bestScore = f.score(base, 0)
	}
	for set := mask; set > 0; set = (set - 1) & mask {
		var idx [MaxTerms]int
		k := 0
		for i := range MaxTerms {
			if set&(1<<i) != 0 {
				idx[k] = i
				k++
			}
		}
		th, solved := f.solveSubset(idx[:k], base)
		if !solved || k > 1 && f.cond(idx[:k]) > maxCond {
			continue
		}
		full := base
		feasible := true
		for j, i := range idx[:k] {
			if !(th[j] >= 0) { // NaN too
				feasible = false
				break
			}
			full[i] = th[j]
		}
		if !feasible {
			continue
		}
		s := f.score(full, k)
		pref := bits(set & f.prefer)
		switch {
		case s < bestScore-tie*f.Count():
		case s <= bestScore+tie*f.Count() && pref > bestPref:
			// A tie: the data cannot choose, the preference does.
		default:
			continue
		}
		best, bestScore, bestPref = full, s, pref

	}
	if math.IsInf(bestScore, 1) {
		return theta, false
	}
	return best, true
}

// bits counts the set bits of m.
func bits(m uint) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// cond estimates the condition number of the normal equations of the
// terms idx, scaled to a unit diagonal: the ratio of the largest to the
// smallest pivot of their Cholesky factorization, squared. It is +Inf
// when they are singular.
func (f *Fit) cond(idx []int) float64 {
	var g [MaxTerms][MaxTerms]float64
	k := len(idx)
	for r, i := range idx {
		for c, j := range idx {
			g[r][c] = f.a[i][j] / math.Sqrt(f.a[i][i]*f.a[j][j])
		}
	}
	lo, hi := math.Inf(1), 0.0
	for c := range k {
		d := g[c][c]
		for p := range c {
			d -= g[c][p] * g[c][p]
		}
		if !(d > 0) {
			return math.Inf(1)
		}
		d = math.Sqrt(d)
		g[c][c] = d
		for r := c + 1; r < k; r++ {
			v := g[r][c]
			for p := range c {
				v -= g[r][p] * g[c][p]
			}
			g[r][c] = v / d
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	return (hi / lo) * (hi / lo)
}

// score is the Bayesian information criterion of theta with k free terms.
func (f *Fit) score(theta [MaxTerms]float64, k int) float64 {
	n := f.Count()
	return n*math.Log(max(f.RSS(theta), 1e-12)/n) + float64(k)*math.Log(n)
}

// RSS returns the weighted residual sum of squares of theta.
func (f *Fit) RSS(theta [MaxTerms]float64) float64 {
	r := f.yy
	for i := range MaxTerms {
		r -= 2 * theta[i] * f.b[i]
		for j := range MaxTerms {
			r += theta[i] * f.a[i][j] * theta[j]
		}
	}
	return r * f.scale
}

// solveSubset solves the normal equations restricted to idx, the other
// terms taken from base, with a small ridge, so that a term the data
// cannot tell from another does not blow up.
func (f *Fit) solveSubset(idx []int, base [MaxTerms]float64) ([MaxTerms]float64, bool) {
	k := len(idx)
	var g System
	for r, i := range idx {
		for c, j := range idx {
			g[r][c] = f.a[i][j]
		}
		g[r][r] *= 1 + Ridge
		g[r][k] = f.b[i]
		for j := range MaxTerms {
			g[r][k] -= f.a[i][j] * base[j]
		}
	}
	return g.Solve(k)
}

// Ridge is the relative ridge a subset's solver adds to the diagonal of
// its normal equations.
const Ridge = 1e-9

// System is k linear equations in k unknowns, k ≤ MaxTerms: row r holds
// the coefficients in columns 0..k-1 and the right-hand side in column k.
// The ledger's fits and [Fit] fill one per subset of terms they try.
type System [MaxTerms][MaxTerms + 1]float64

// Solve solves the first k equations of g by Gaussian elimination with
// partial pivoting, overwriting g, and returns the unknowns in out[:k].
// ok is false when a pivot is zero (the equations are singular).
func (g *System) Solve(k int) (out [MaxTerms]float64, ok bool) {
	for c := range k {
		p := c
		for r := c + 1; r < k; r++ {
			if math.Abs(g[r][c]) > math.Abs(g[p][c]) {
				p = r
			}
		}
		if g[p][c] == 0 {
			return out, false
		}
		g[c], g[p] = g[p], g[c]
		for r := c + 1; r < k; r++ {
			q := g[r][c] / g[c][c]
			for cc := c; cc <= k; cc++ {
				g[r][cc] -= q * g[c][cc]
			}
		}
	}
	for r := k - 1; r >= 0; r-- {
		v := g[r][k]
		for c := r + 1; c < k; c++ {
			v -= g[r][c] * out[c]
		}
		out[r] = v / g[r][r]
	}
	return out, true
}
