package ledger

import (
	"math"

	"github.com/otelenergy/otelenergy/internal/nnls"
)

// This file is the model stage: what the ledger learns from the intervals
// and the requests' reports, and nothing else. fit owns every learned
// figure the split reads (each device's power model and its reporting lag,
// the prefill time, and where a prefill ends), and the cadence at which
// they are solved. It reads the requests only through the features it is
// handed (featureSource), and it never splits, so learning runs ahead of
// the split and a split reads the model as it stands.

// fit is the model stage's state.
type fit struct {
	devs []devFit // by device, as Config.Rings
	ttft ttft
	// shift places the end of every prefill shift·step after its
	// request's pfEnd (one decode step before the first token): 0 when
	// the first token follows the prefill by a decode step, 1 when the
	// prefill itself ends with it. The data choose it (fit.maybeFlip).
	shift float64
	// tau indexes taus: the prefill time per input token that places the
	// prefills no timing placed (prefillrate.go).
	tau int
}

// devFit is one device's power model: a model per candidate reporting
// lag, the chosen one, and the chosen lag's model under the other
// placement of the prefill's end.
type devFit struct {
	m model // the model of the chosen lag
	// cands are the models of each candidate reporting lag: a counter
	// whose step at τ reports the energy up to τ − lag. The one that
	// explains the steps best is chosen.
	cands [len(lags)]model
	// alt is the chosen lag's model with the other placement of the
	// prefill's end (fit.shift); wantFlip says it explains the steps
	// clearly better.
	alt      model
	wantFlip bool
	// idleY and idleT sum, with a forgetting of idleForget, the energy (J)
	// and the time (s) of intervals with nothing in them.
	idleY, idleT float64
	lag          int64 // the chosen lag, ns
	best         int
	solves       int     // intervals learned: the chosen lag's cadence
	calls        int     // device steps that learned: the lag search's cadence
	avgW         float64 // recent attributable power, W
	// tc is the prefill-time candidates' state (prefillrate.go), nil
	// until a guessed prefill is learned: kept apart, so that a device
	// whose requests all show timing keeps its models in few cache lines.
	tc *tauCands
}

// featureSource gives the model stage an interval's features, as the
// requests' timelines place them: (a, b] on the requests' clock, with
// every prefill's end placed shift steps after its request's pfEnd, and
// with tau ≥ 0 every guessed prefill placed at tau ns per input token
// instead; guessed says the interval holds a guessed prefill.
type featureSource interface {
	learnFeatures(a, b int64, shift, tau float64) (x [nFeat]float64, guessed bool)
}

// newFit returns the model stage of n devices, with the static power and
// the token weights fixed as cfg says.
func newFit(n int, cfg Config) fit {
	f := fit{devs: make([]devFit, n)}
	for i := range f.devs {
		d := &f.devs[i]
		for c := range d.cands {
			m := &d.cands[c]
			if cfg.IdleFixed {
				m.fixed[fStatic] = true
				m.theta[fStatic] = cfg.IdleWatts / float64(n)
			}
			if cfg.WeightsFixed {
				// Tokens go in as one weighted feature; prefill as its
				// own feature is left out.
				m.fixed[fPrefill], m.fixed[fPrefillBusy], m.fixed[fInput] = true, true, true
				m.fixed[fDecodeBusy], m.fixed[fDecode] = true, true
			}
		}
		d.alt = d.cands[0]
		d.m = d.cands[0]
	}
	return f
}

// coefs returns the chosen models' coefficients summed over devices, and
// their recent attributable power summed likewise, W.
func (f *fit) coefs() (th [nFeat]float64, avgW float64) {
	for i := range nFeat {
		var sum float64
		for d := range f.devs {
			sum += f.devs[d].m.theta[i]
		}
		th[i] = sum
	}
	for d := range f.devs {
		avgW += f.devs[d].avgW
	}
	return th, avgW
}

// Feature indices of the energy model. An interval's metered energy is
// modelled as
//
//	E ≈ Ps·Δt + eOut·(output tokens) + Ppf·(request-seconds in prefill)
//	    + Pbusy·(seconds with any request in prefill) + eIn·(input tokens)
//	    + Pdec·(seconds with any request decoding)
//	    + Pdr·(request-seconds decoding)
//
// with every coefficient non-negative. The two prefill terms span how a
// board's power grows with concurrent prefills, from linear (each prefill
// adds its own power) to saturating (a compute-bound board draws about the
// same power for one prefill or several); the fit finds where between them
// the hardware lies. The two decode terms do the same for decode, whose
// power rises with the batch far slower than its tokens do
// (memory-bound), and eOut is the small part that follows the tokens.
const (
	fStatic      = iota // Δt, s
	fOutput             // output tokens produced in the interval
	fPrefill            // request-seconds spent in prefill in the interval
	fPrefillBusy        // seconds in which at least one request was in prefill
	fInput              // input tokens processed in the interval
	fDecodeBusy         // seconds in which at least one request was decoding
	fDecode             // request-seconds spent decoding in the interval
	nFeat
)

// model is a non-negative least-squares fit with exponential forgetting.
//
// It keeps the weighted normal equations (A = Σ λ·x·xᵀ, b = Σ λ·x·y) and
// solves them by trying every subset of features as the free set and
// keeping the feasible solution with the best information criterion. With
// seven features that is 127 tiny solves, and it is exactly the choice among
// model structures (prefill as power, as energy per input token, both, or
// neither) by the residual of the fit.
type model struct {
	a      [nFeat][nFeat]float64
	b      [nFeat]float64
	yy     float64
	n      float64 // effective number of intervals, divided by scale
	scale  float64 // the decay shared by a, b, yy and n; 0 before the first add
	theta  [nFeat]float64
	fixed  [nFeat]bool // coefficients set by the user and not fitted
	usable bool
	// idleW, when idleKnown, is the static power as measured on idle
	// intervals: solve takes it as given rather than fitting it, since
	// while requests run the static power and decode's busy power move
	// together and the data cannot tell them apart.
	idleW     float64
	idleKnown bool
}

// minIntervals is the effective number of intervals the fit needs before
// its coefficients are used.
const minIntervals = 64

// add folds one interval in, after decaying the past by lambda. x and y
// are in SI units; the fixed coefficients' part of y is removed first.
//
// The decay is kept as one scale shared by every sum (the sums are stored
// divided by it), so that an interval costs O(k²) in its k non-zero
// features rather than O(nFeat²): an idle interval touches one entry.
//
// The interval counts w times: its products and its count are scaled by w
// (1 for an interval learned as it came).
func (m *model) add(x [nFeat]float64, y, lambda, w float64) {
	for i := range nFeat {
		if m.fixed[i] {
			y -= m.theta[i] * x[i]
			x[i] = 0
		}
	}
	if m.scale == 0 {
		m.scale = 1
	}
	m.scale *= lambda
	if m.scale < 1e-150 {
		m.rescale()
	}
	inv := w / m.scale
	var idx [nFeat]int
	k := 0
	for i := range nFeat {
		if x[i] != 0 {
			idx[k] = i
			k++
		}
	}
	for _, i := range idx[:k] {
		xi := x[i] * inv
		m.b[i] += xi * y
		for _, j := range idx[:k] {
			m.a[i][j] += xi * x[j]
		}
	}
	m.yy += y * y * inv
	m.n += inv
}

// rescale folds the shared scale into the sums.
func (m *model) rescale() {
	for i := range nFeat {
		m.b[i] *= m.scale
		for j := range nFeat {
			m.a[i][j] *= m.scale
		}
	}
	m.yy *= m.scale
	m.n *= m.scale
	m.scale = 1
}

// count returns the effective number of intervals.
func (m *model) count() float64 { return m.n * m.scale }

// solve refits the free coefficients.
func (m *model) solve() {
	if m.count() < minIntervals {
		return
	}
	n := m.count()
	best, bestRSS := [nFeat]float64{}, math.Inf(1)
	// Only the features the data have seen can be free: enumerate the
	// subsets of those alone.
	var base [nFeat]float64 // coefficients taken as given
	mask := 0
	for i := range nFeat {
		if !m.fixed[i] && m.a[i][i] > 0 {
			mask |= 1 << i
		}
	}
	if m.idleKnown && !m.fixed[fStatic] {
		mask &^= 1 << fStatic
		base[fStatic] = m.idleW
	}
	for set := mask; set > 0; set = (set - 1) & mask {
		var idx [nFeat]int
		k := 0
		for i := range nFeat {
			if set&(1<<i) != 0 {
				idx[k] = i
				k++
			}
		}
		th, ok := m.solveSubset(idx[:k], base)
		if !ok {
			continue
		}
		full := base
		feasible := true
		for j, i := range idx[:k] {
			if th[j] < 0 || math.IsNaN(th[j]) {
				feasible = false
				break
			}
			full[i] = th[j]
		}
		if !feasible {
			continue
		}
		// Bayesian information criterion: a feature earns its place only
		// if it explains enough of the energy for the data there is.
		score := n*math.Log(max(m.rss(full), 1e-12)/n) + float64(k)*math.Log(n)
		if score < bestRSS {
			best, bestRSS = full, score
		}
	}
	if base != ([nFeat]float64{}) {
		// The given part alone, with nothing free.
		if score := n * math.Log(max(m.rss(base), 1e-12)/n); score < bestRSS {
			best, bestRSS = base, score
		}
	}
	if math.IsInf(bestRSS, 1) {
		return
	}
	for i := range nFeat {
		if !m.fixed[i] {
			m.theta[i] = best[i]
		}
	}
	m.usable = true
}

// rss is the weighted residual sum of squares of theta.
func (m *model) rss(theta [nFeat]float64) float64 { return m.rawRSS(theta) * m.scale }

// rawRSS is rss divided by the shared scale.
func (m *model) rawRSS(theta [nFeat]float64) float64 {
	r := m.yy
	for i := range nFeat {
		r -= 2 * theta[i] * m.b[i]
		for j := range nFeat {
			r += theta[i] * m.a[i][j] * theta[j]
		}
	}
	return r
}

// solveSubset solves the normal equations restricted to idx, the other
// features taken from base, with a small ridge so that a feature the data
// cannot tell from another does not blow up.
func (m *model) solveSubset(idx []int, base [nFeat]float64) ([nFeat]float64, bool) {
	k := len(idx)
	var g nnls.System
	for r, i := range idx {
		for c, j := range idx {
			g[r][c] = m.a[i][j]
		}
		g[r][r] *= 1 + nnls.Ridge
		g[r][k] = m.b[i]
		for j := range nFeat {
			g[r][k] -= m.a[i][j] * base[j]
		}
	}
	sol, ok := g.Solve(k)
	// A constant slice bound: nFeat > nnls.MaxTerms would not compile.
	return [nFeat]float64(sol[:nFeat]), ok
}

// ttft learns the prefill time (start to the end of prefill, one decode
// step before the first token) against a request's input tokens n, as
// a + b·n + c·n² (attention makes long prompts superlinear), with every
// coefficient non-negative, by least squares with forgetting. It learns
// from the requests whose first token was seen (direct). When too few
// show it, as when every client reports only at its end or every output
// is shorter than a report chunk, it learns from every request whose
// prompt is known, whole: under continuous batching a request lasts its
// prefill plus a step per output token, so its length is
// a + b·n + c·n² + s·(output tokens), and the first three terms are its
// prefill time (whole). The step grows with the batch (each step runs
// every sequence in it), so the decode term is (s₀ + s₁·m)·(output
// tokens), with m the mean number of requests running over the request's
// life: under a batch that swings by a factor of two, a fixed step would
// leave its error to the prefill terms. It places the prefill of
// requests that report their first output tokens late, and weighs
// requests still in prefill.
type ttft struct {
	direct, whole lsq
	// s0 and s1 sum, with forgetting, the prompts seen and their tokens,
	// for meanTokens.
	s0, s1 float64
}

// ttftLambda is the forgetting factor per request.
const ttftLambda = 0.98

// minDirect and minWhole are the effective numbers of requests each fit
// needs before it is used. The whole-request fit is used only while it
// explains at least minWholeR2 of the variance of the requests' lengths:
// where requests decode at rates of their own (not one step for the
// batch), their lengths follow their rates, the fit's terms mean nothing,
// and a prefill time read from them would be wrong by seconds.
const (
	minDirect  = 4
	minWhole   = 8
	minWholeR2 = 0.7
)

func (t *ttft) add(tokens, seconds float64) {
	k := tokens / 1000
	// Unweighted: what a placement gets wrong is mostly absolute (a read
	// interval, a decode step), so short prefills are measured no better
	// than long ones in absolute terms, and weighing them by 1/y² made
	// the fit worse.
	t.direct.add([lsqN]float64{1, k, k * k}, 3, seconds, 1)
	t.note(tokens)
}

// addWhole learns from a request that ran seconds in all, with its prompt
// of tokens and out output tokens, while batch requests were active on
// average.
func (t *ttft) addWhole(tokens, out, seconds, batch float64) {
	k := tokens / 1000
	t.whole.add([lsqN]float64{1, k, k * k, out / 1000, out * batch / batchScale}, 5, seconds, 1)
	t.note(tokens)
}

// batchScale brings the output tokens × batch feature near the others'
// magnitude.
const batchScale = 1e5

func (t *ttft) note(tokens float64) {
	t.s0 = ttftLambda*t.s0 + 1
	t.s1 = ttftLambda*t.s1 + tokens
}

// meanTokens returns the recent prompts' mean length, 0 before any.
func (t *ttft) meanTokens() float64 {
	if t.s0 <= 0 {
		return 0
	}
	return t.s1 / t.s0
}

// predict returns the expected time to first token in seconds, and false
// while neither fit has seen enough requests.
func (t *ttft) predict(tokens float64) (float64, bool) {
	th, ok := t.coefs()
	if !ok {
		return 0, false
	}
	return prefillSeconds(th, tokens), true
}

// coefs returns the coefficients predict uses (a, b, c of a + b·k + c·k²
// seconds for k thousand tokens), and false while neither fit has seen
// enough requests.
func (t *ttft) coefs() ([3]float64, bool) {
	f := &t.direct
	if f.n < minDirect {
		f = &t.whole
		if f.n < minWhole || f.r2() < minWholeR2 {
			if t.direct.n < 1 {
				return [3]float64{}, false
			}
			f = &t.direct
		}
	}
	th := f.solved()
	return [3]float64{th[0], th[1], th[2]}, true
}

// prefillSeconds returns the prefill time of a prompt of tokens under
// the coefficients th of ttft.coefs.
func prefillSeconds(th [3]float64, tokens float64) float64 {
	k := tokens / 1000
	return max(0, th[0]+th[1]*k+th[2]*k*k)
}

// unknowable reports whether no prefill time can be predicted although
// enough whole requests have been seen: none showed its first token, and
// their lengths do not follow continuous batching's form.
func (t *ttft) unknowable() bool {
	return t.direct.n < 1 && t.whole.n >= minWhole && t.whole.r2() < minWholeR2
}

// stepSeconds returns the decode step learned from whole requests, in
// seconds per output token, with batch requests active on average, and
// false when it is not known.
func (t *ttft) stepSeconds(batch float64) (float64, bool) {
	if t.whole.n < minWhole || t.whole.r2() < minWholeR2 {
		return 0, false
	}
	th := t.whole.solved()
	s := th[3]/1000 + th[4]*batch/batchScale
	return s, s > 0
}

// lsqN is the most features an lsq fits.
const lsqN = 5

// lsq fits y ≈ θ·x over up to lsqN features, with every θ non-negative,
// by least squares with forgetting: every subset of the features is
// solved and the feasible one with the best Bayesian information
// criterion kept, so that a term the data do not support (the quadratic
// one, while prompts are short) stays zero rather than fitting noise.
type lsq struct {
	a      [lsqN][lsqN]float64
	b      [lsqN]float64
	yy     float64
	n      float64 // effective number of requests
	k      int     // features in use
	theta  [lsqN]float64
	fitted bool // theta is current
}

// add folds in one observation of weight w.
func (f *lsq) add(x [lsqN]float64, k int, y, w float64) {
	f.k = k
	for i := range k {
		f.b[i] = ttftLambda*f.b[i] + w*x[i]*y
		for j := range k {
			f.a[i][j] = ttftLambda*f.a[i][j] + w*x[i]*x[j]
		}
	}
	f.yy = ttftLambda*f.yy + w*y*y
	f.n = ttftLambda*f.n + 1
	f.fitted = false
}

// r2 returns the share of y's variance that theta explains.
func (f *lsq) r2() float64 {
	th := f.solved()
	rss := f.yy
	for i := range f.k {
		rss -= 2 * th[i] * f.b[i]
		for j := range f.k {
			rss += th[i] * f.a[i][j] * th[j]
		}
	}
	mean := f.b[0] / max(f.a[0][0], 1e-300) // x[0] is 1: the weighted mean
	v := f.yy - f.a[0][0]*mean*mean
	if v <= 0 {
		return 0
	}
	return 1 - rss/v
}

// solved returns theta, solving it first if an add came since.
func (f *lsq) solved() [lsqN]float64 {
	if f.fitted {
		return f.theta
	}
	f.fitted = true
	// The mean alone, the fallback when nothing else is feasible.
	best := [lsqN]float64{max(0, f.b[0]/max(f.a[0][0], 1e-300))}
	bestScore := math.Inf(1)
	for set := 1; set < 1<<f.k; set++ {
		var idx [lsqN]int
		m := 0
		for i := range f.k {
			if set&(1<<i) != 0 {
				idx[m] = i
				m++
			}
		}
		th, ok := f.solveSubset(idx[:m])
		if !ok {
			continue
		}
		var full [lsqN]float64
		feasible := true
		for j, i := range idx[:m] {
			if th[j] < 0 || math.IsNaN(th[j]) {
				feasible = false
				break
			}
			full[i] = th[j]
		}
		if !feasible {
			continue
		}
		rss := f.yy
		for i := range f.k {
			rss -= 2 * full[i] * f.b[i]
			for j := range f.k {
				rss += full[i] * f.a[i][j] * full[j]
			}
		}
		score := f.n*math.Log(max(rss, 1e-12)/max(f.n, 1e-12)) + float64(m)*math.Log(max(f.n, 2))
		if score < bestScore {
			best, bestScore = full, score
		}
	}
	f.theta = best
	return best
}

// solveSubset solves the normal equations restricted to idx, with a
// small ridge.
func (f *lsq) solveSubset(idx []int) ([lsqN]float64, bool) {
	k := len(idx)
	var g nnls.System
	for r, i := range idx {
		for c, j := range idx {
			g[r][c] = f.a[i][j]
		}
		g[r][r] *= 1 + nnls.Ridge
		g[r][k] = f.b[i]
	}
	sol, ok := g.Solve(k)
	return [lsqN]float64(sol[:lsqN]), ok
}

// lags are the candidate reporting lags, in ns: a counter's step at τ may
// report the energy consumed up to τ − lag. Each has a model; the one with
// the least residual is used.
var lags = [...]int64{0, 10e6, 20e6, 30e6, 40e6, 50e6, 60e6, 80e6, 100e6}

// maxLagSearch bounds the requests for which every candidate lag is
// evaluated on every interval; with more active requests only the chosen
// lag keeps learning, which keeps a busy sampler's work O(active).
const maxLagSearch = 64

// learn folds the interval (a, b] of device i, whose attributable
// energy is y J, into the device's models: every candidate lag's while at
// most maxLagSearch requests are active, the chosen one's alone beyond,
// and the chosen lag's model under the other placement of the prefill's
// end. src gives the interval's features at each lag; idle says nothing
// is active in it, so that every lag sees the same features. b > a.
func (f *fit) learn(i int, a, b int64, y float64, active int, idle bool, src featureSource) {
	d := &f.devs[i]
	lambda := math.Exp(-float64(b-a) / DefaultForget)
	search := active <= maxLagSearch
	var x, xBest [nFeat]float64
	var guessed, gBest bool
	for c, lag := range lags {
		if !search && c != d.best {
			continue
		}
		if !idle || c == 0 {
			// With nothing active every lag sees the same features.
			x, guessed = src.learnFeatures(a-lag, b-lag, f.shift, -1)
		}
		if c == d.best {
			if guessed {
				d.startTaus(&d.cands[c])
			}
			xBest, gBest = x, guessed
		}
		d.cands[c].add(x, y, lambda, 1)
		if c == d.best {
			// An interval with nothing in it measures the static power,
			// which changes far more slowly than the rest: it is kept
			// for idleForget, so that a long busy stretch does not lose it.
			li := math.Exp(-float64(b-a) / idleForget)
			d.idleY, d.idleT = li*d.idleY, li*d.idleT
			if x[fStatic] > 0 && x == ([nFeat]float64{fStatic: x[fStatic]}) {
				d.idleY += y
				d.idleT += x[fStatic]
			}
		}
		if c == d.best && search {
			// The other placement of the prefill's end, at the chosen
			// lag, for chooseLag to weigh against it.
			xAlt, _ := src.learnFeatures(a-lag, b-lag, 1-f.shift, -1)
			d.alt.add(xAlt, y, lambda, 1)
		}
	}
	if d.tc != nil {
		f.learnTaus(d, a-d.lag, b-d.lag, &xBest, gBest, y, lambda, active, src)
	}
	// About the last ten seconds' power, for estimates before the model.
	w := y / (float64(b-a) / nsPerSecond)
	if d.avgW == 0 {
		d.avgW = w
	} else {
		d.avgW += (1 - math.Exp(-float64(b-a)/10e9)) * (w - d.avgW)
	}
}

// chooseLag solves the chosen lag's model once every fourth interval
// learned (n were just learned), and every candidate's every thirty-second
// call (once per device step that taught the models something), taking
// the lag whose model leaves the least residual per interval. The models
// forget over minutes and a counter's lag does not change, so solving now
// and then is enough, and it keeps a sampler tick cheap. The chosen lag's
// cadence counts intervals, not calls: intervals wait to be learned while
// a request is silent (a long prefill), then come together, and the
// splits that follow must not use a model that has not seen them. The lag
// search keeps counting calls: run on every such burst it switched lags
// on few intervals, and End's estimates after bursts of prompts doubled
// their p99.
func (d *devFit) chooseLag(n int) {
	d.calls++
	before := d.solves
	d.solves += n
	// crossed reports whether some count s in (before, d.solves] has
	// s mod k = 1, the counts a solve falls on.
	crossed := func(k int) bool { return before == 0 || (d.solves-1)/k > (before-1)/k }
	if known := d.idleT >= minIdleSeconds; known {
		w := d.idleY / d.idleT
		for c := range d.cands {
			d.cands[c].idleKnown, d.cands[c].idleW = true, w
		}
		d.alt.idleKnown, d.alt.idleW = true, w
	}
	switch {
	case d.calls%32 == 1 || !d.m.usable:
	case crossed(4):
		d.cands[d.best].solve()
		d.m = d.cands[d.best]
		return
	default:
		return
	}
	best, bestRSS := d.best, math.Inf(1)
	for c := range d.cands {
		m := &d.cands[c]
		m.solve()
		if !m.usable || m.count() <= 0 {
			continue
		}
		if r := m.rss(m.theta) / m.count(); r < bestRSS {
			best, bestRSS = c, r
		}
	}
	d.best, d.lag, d.m = best, lags[best], d.cands[best]
	d.solveTaus()
	d.alt.solve()
	d.wantFlip = d.alt.usable && d.alt.count() > 0 && !math.IsInf(bestRSS, 1) &&
		d.alt.rss(d.alt.theta)/d.alt.count() < flipMargin*bestRSS
}

// minIdleSeconds is how much idle time, within idleForget, the ledger
// needs before it takes the static power as measured on it.
const (
	minIdleSeconds = 0.5
	idleForget     = 1800e9 // ns
)

// flipMargin is how much less residual per interval the other placement
// of the prefill's end must leave before the ledger takes it.
const flipMargin = 0.95

// maybeFlip moves every prefill's end to the other placement when every
// device that can tell (lost says which cannot) finds that it explains the
// steps clearly better; the models swap with their alternatives, which
// learned under it; it reports whether it flipped. The prefill-time
// candidates, which learned under the old placement, are stopped: the next
// guessed prefill starts them again from the flipped model.
func (f *fit) maybeFlip(lost func(i int) bool) bool {
	want := false
	for i := range f.devs {
		d := &f.devs[i]
		if lost(i) || !d.alt.usable {
			continue
		}
		if !d.wantFlip {
			return false
		}
		want = true
	}
	if !want {
		return false
	}
	f.shift = 1 - f.shift
	for i := range f.devs {
		d := &f.devs[i]
		d.cands[d.best], d.alt = d.alt, d.cands[d.best]
		d.m = d.cands[d.best]
		d.wantFlip = false
	}
	f.stopTaus()
	return true
}
