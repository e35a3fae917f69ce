package ledger

import (
	"math"

	"github.com/otelenergy/otelenergy/internal/nnls"
)

// This file is the model stage: every value the ledger learns, and
// nothing else. The power model of each device learns from the features
// of the intervals (features.go) and their metered energy; the prefill
// time and the batch's figures learn from the requests' reports as the
// sampler notes them (timeline.go). The stages that read the model (the
// feature builder, the weighing, the estimates) never write it.

// Feature indices of the power model. An interval's mean power is
// modelled as
//
//	P ≈ Ps + eOut·(output tokens/s) + Ppf·(requests in prefill)
//	    + Pbusy·(share of the time with any prefill) + eIn·(input tokens/s)
//	    + Pdec·(share of the time with any decode)
//	    + Pdr·(requests decoding)
//
// with every coefficient non-negative. The two prefill terms span how a
// board's power grows with concurrent prefills, from linear (each adds
// its own power) to saturating (a compute-bound board draws about the same
// for one prefill or several); the two decode terms do the same for
// decode, whose power rises with the batch far slower than its tokens do
// (memory-bound), down to a plateau (Pdec alone); eOut and eIn are what
// follows the tokens themselves.
const (
	fStatic      = iota // Δt, s
	fOutput             // output tokens produced in the interval
	fPrefill            // request-seconds in prefill
	fPrefillBusy        // seconds in which any request was in prefill
	fInput              // uncached input tokens processed
	fDecodeBusy         // seconds in which any request was decoding
	fDecode             // request-seconds decoding
	nFeat
)

// Model constants. Each is in the tunables table of docs/attribution.md,
// with its measured effect when halved and doubled.
const (
	// forget is the power model's memory, ns: long enough to see
	// many batch sizes, short enough to follow a new model or power cap.
	forget = 120e9
	// minIntervals is the effective number of intervals with work a
	// device's model needs before its coefficients price the final
	// splits: 0.3–1.6 s of steps at 20–100 ms. (End's estimate uses them
	// earlier: see solve.)
	minIntervals = 16
	// batchMemory is how many reports the batch's running figures (its
	// decode step and rate, its prompts' input rate and length, the
	// prefill time) average over.
	batchMemory = 50
	// tokenPriceForget is the memory, ns, of the energy per output token
	// that estimates use: energy per token moves with the batch.
	tokenPriceForget = 2e9
	// minPrefillNS bounds a prefill's length from below in its input
	// rate, so that a request whose first token came at once does not
	// weigh without bound.
	minPrefillNS = 5e6
)

// model is the model stage's state.
type model struct {
	devs    []devModel
	prefill prefillTime
	batch   batchFigures
	// shift places the end of every prefill shift decode steps after its
	// request's pfEnd, one step before the first token: 0 where the first
	// token follows the prefill by a step, 1 where the prefill's pass
	// emits it. The counter chooses (see timing.go).
	shift float64
	// ended counts the requests seen to their end, up to nFeat+1: all
	// solve asks of it.
	ended int
}

// devModel is one device's power model: a fit per candidate reporting
// lag at the chosen placement of the prefill's end, the chosen one's
// coefficients, and the chosen lag's fit under the other placement.
type devModel struct {
	cands    [len(lags)]nnls.Fit
	alt      nnls.Fit
	best     int            // the chosen lag's index in lags
	wantFlip bool           // alt explains the steps clearly better
	learned  int            // intervals learned since the last choice
	theta    [nFeat]float64 // W per unit of each feature's rate
	usable   bool           // theta prices the provisional split behind End's estimate
	ready    bool           // and the final splits (see solve)
	fixedW   float64        // the static power the user fixed, when fixed
	fixed    bool
	idle     idlePower
	busy     float64 // intervals learned with something in them, with the fit's forgetting
}

// rowScale scales the model's rows (both sides, which leaves the fit's
// coefficients as they are) to units of 10 ms.
const rowScale = 100

// newModel returns the model stage of n devices; idleW, when fixed, is
// the static power of all of them together.
func newModel(n int, idleW float64, fixed bool) model {
	m := model{devs: make([]devModel, n)}
	for i := range m.devs {
		m.devs[i].fixed, m.devs[i].fixedW = fixed, idleW/float64(n)
	}
	return m
}

// learn folds one interval of device i into its models: dt ns long, y J
// of attributable energy; xs its features at each candidate lag (only the
// chosen one's when search is false) and alt at the chosen lag under the
// other placement of the prefill's end; idle says nothing ran in it.
func (m *model) learn(i int, xs *[len(lags)][nFeat]float64, alt *[nFeat]float64, y float64, dt int64, idle, search bool) {
	d := &m.devs[i]
	d.idle.add(y, dt, idle)
	lambda := math.Exp(-float64(dt) / forget)
	for c := range lags {
		if search || c == d.best {
			addRow(&d.cands[c], &xs[c], y, lambda)
		}
	}
	if search {
		addRow(&d.alt, alt, y, lambda)
	}
	d.learned++
	d.busy *= lambda
	if !idle {
		d.busy++
	}
}

// addRow adds one interval to f, in units of rowScale⁻¹ s: the fit's
// floor on a term's data (nnls's mean square per row) is absolute, and a
// prefill's seconds in a 20 ms interval are far below it in seconds.
func addRow(f *nnls.Fit, x *[nFeat]float64, y, lambda float64) {
	var row [nFeat]float64
	for k := range nFeat {
		row[k] = x[k] * rowScale
	}
	f.Add(row[:], y*rowScale, lambda)
}

// solve refits device i's chosen model from what it learned, and every
// chooseEvery intervals learned chooses the lag whose model leaves the
// least residual per interval. The static power is the user's when fixed,
// the idle intervals' once measured, and fitted with the rest before.
//
// The model is ready, and prices the final splits, once it has seen
// minIntervals intervals with work in them (idle ones alone teach it
// nothing of what work costs). Before that it is usable, and prices the
// provisional split behind End's estimate, once its fit is determined:
// more intervals with work than it has terms, and more requests seen to
// their end than that, so that their costs can be told apart. The final
// figure of a request that ends before the model is ready comes from the
// ready model (its intervals wait for it, up to the horizon), and this
// model is the better forecast of it than the by-tokens weighing; on a
// slow counter, minIntervals is seconds of a run's first requests.
func (m *model) solve(i int) {
	d := &m.devs[i]
	if d.busy < minIntervals && (d.busy <= nFeat || m.ended <= nFeat) {
		return
	}
	var base [nnls.MaxTerms]float64
	var given uint
	if w, ok := d.static(); ok {
		base[fStatic], given = w, 1<<fStatic
	}
	if d.busy >= minIntervals && (d.learned >= chooseEvery || !d.ready) {
		d.learned = 0
		d.choose(base, given)
	}
	th, ok := d.cands[d.best].Solve(base, given)
	if !ok {
		return
	}
	copy(d.theta[:], th[:nFeat])
	d.usable = true
	d.ready = d.ready || d.busy >= minIntervals
}

// static returns the device's static power when it is fixed or measured.
func (d *devModel) static() (float64, bool) {
	if d.fixed {
		return d.fixedW, true
	}
	return d.idle.watts()
}

// staticW returns the static power the split shares by time: the
// model's when modelled (the split weighs by the model), else the fixed
// or measured one, else none.
func (d *devModel) staticW(modelled bool) float64 {
	if modelled {
		return d.theta[fStatic]
	}
	w, _ := d.static()
	return w
}

// coefs returns the devices' coefficients summed.
func (m *model) coefs() (th [nFeat]float64) {
	for i := range m.devs {
		d := &m.devs[i]
		for k := range nFeat {
			th[k] += d.theta[k]
		}
	}
	return th
}

// prefillTime learns the prefill time (from the start to the end of the
// prefill, one decode step before the first token) against the uncached
// prompt's length n, as a + b·n + c·n² (attention makes long prompts
// superlinear), from the requests whose first token was seen (direct):
// every coefficient non-negative, the terms chosen by the Bayesian
// information criterion so that c stays zero while the prompts do not
// show it. When no request shows its first token (every client reports
// only at its end, or every output is shorter than a report chunk), it
// learns the same terms from whole requests instead: under continuous
// batching a request lasts its prefill and a decode step per output
// token, so its life is a + b·n + c·n² + s·(output tokens), and the fit
// of that relation (whole) gives both the prefill time and the step. The
// step grows with the batch (each step runs every sequence in it), so the
// decode term is (s₀ + s₁·m)·(output tokens), with m the mean number of
// requests active over the request's life: under a batch that swings by a
// factor of two, one step would leave its error to the prefill terms. It
// also keeps the recent prompts' mean length, for requests whose prompt
// is not reported yet.
type prefillTime struct {
	direct, whole nnls.Fit
	theta         [3]float64 // direct's
	// wholeTh is whole's solution, and wholeOK says that its prefill
	// terms are a prefill time: one that grows with the uncached prompt
	// (a batched prefill is compute-bound), or none at all. Where
	// requests decode at rates of their own rather than one step for the
	// batch, their lives follow their rates, not their prompts: the fit's
	// constant alone then takes what the lives share, seconds of it, and
	// is no prefill time.
	wholeTh    [wholeTerms]float64
	wholeOK    bool
	s0, s1     float64    // prompts seen and their tokens, with forgetting
	solvedFrom [2]float64 // each fit's count when it was solved
}

// batchScale brings the output tokens × batch term near the others'
// magnitude.
const batchScale = 1e5

// wholeTerms is how many terms the whole-request fit has; it is used only
// once it has seen more requests than that, so that it is determined.
const wholeTerms = 5

// add learns one request's prefill: seconds for a prompt of tokens.
func (p *prefillTime) add(tokens, seconds float64) {
	k := tokens / 1000
	p.direct.Add([]float64{1, k, k * k}, seconds, 1-1.0/batchMemory)
	p.note(tokens)
}

// addWhole learns one whole request: seconds from its start to its end,
// for a prompt of tokens and out output tokens, while batch requests were
// active on average.
func (p *prefillTime) addWhole(tokens, out, seconds, batch float64) {
	k := tokens / 1000
	p.whole.Add([]float64{1, k, k * k, out / 1000, out * batch / batchScale}, seconds, 1-1.0/batchMemory)
}

// note notes a prompt's length, for meanTokens.
func (p *prefillTime) note(tokens float64) {
	p.s0 = (1-1.0/batchMemory)*p.s0 + 1
	p.s1 = (1-1.0/batchMemory)*p.s1 + tokens
}

// meanTokens returns the recent prompts' mean length, 0 before any.
func (p *prefillTime) meanTokens() float64 {
	if p.s0 <= 0 {
		return 0
	}
	return p.s1 / p.s0
}

// solve refits the coefficients when a fit learned since it last did.
func (p *prefillTime) solve() {
	n := [2]float64{p.direct.Count(), p.whole.Count()}
	if n == p.solvedFrom {
		return
	}
	p.solvedFrom = n
	if n[0] > 0 {
		if th, ok := p.direct.Solve([nnls.MaxTerms]float64{}, 0); ok {
			copy(p.theta[:], th[:3])
		}
	}
	p.wholeOK = false
	if n[1] > wholeTerms {
		th, ok := p.whole.Solve([nnls.MaxTerms]float64{}, 0)
		copy(p.wholeTh[:], th[:wholeTerms])
		p.wholeOK = ok && (th[0] == 0 || th[1] > 0 || th[2] > 0)
	}
}

// fromWhole reports whether the prefill time is whole's: no request has
// shown its first token, and whole explains the lives.
func (p *prefillTime) fromWhole() bool { return p.solvedFrom[0] <= 0 && p.wholeOK }

// stepSeconds returns the decode step the whole-request fit gives with
// batch requests active on average, s per token, and false when it has
// none.
func (p *prefillTime) stepSeconds(batch float64) (float64, bool) {
	s := p.wholeTh[3]/1000 + p.wholeTh[4]*batch/batchScale
	return s, p.wholeOK && s > 0
}

// coefs returns a, b, c (s, s per thousand tokens, s per million
// tokens²): direct's once any request showed its first token, whole's
// before, and false while neither is known.
func (p *prefillTime) coefs() ([3]float64, bool) {
	if p.fromWhole() {
		return [3]float64(p.wholeTh[:3]), true
	}
	return p.theta, p.solvedFrom[0] > 0
}

// seconds returns the prefill time of a prompt of tokens, and false when
// it is not known.
func (p *prefillTime) seconds(tokens float64) (float64, bool) {
	th, ok := p.coefs()
	return prefillSeconds(th, tokens), ok
}

// prefillSeconds returns the prefill time of a prompt of tokens under
// the coefficients th of prefillTime.coefs.
func prefillSeconds(th [3]float64, tokens float64) float64 {
	k := tokens / 1000
	return max(0, th[0]+th[1]*k+th[2]*k*k)
}

// batchFigures are running averages over the recent requests' reports:
// what places a first chunk's prefill, extrapolates a silent request and
// weighs a prompt not reported yet.
type batchFigures struct {
	step     float64 // decode step, ns per token; 0 unknown
	rateSum  float64 // bias-corrected average of the output rate: rateSum/rateW
	rateW    float64
	rho      float64 // prefills' input tokens per ns; 0 unknown
	tokPrice float64 // energy per output token, decode's power included, J
}

// mix moves avg towards v by one report's weight, starting at v.
func mix(avg, v float64) float64 {
	if avg <= 0 {
		return v
	}
	return avg + (v-avg)/batchMemory
}

// noteStep notes a request's decode step, ns per token.
func (b *batchFigures) noteStep(ns float64) { b.step = mix(b.step, ns) }

// noteRho notes a prefill's input rate, tokens per ns.
func (b *batchFigures) noteRho(rho float64) { b.rho = mix(b.rho, rho) }

// noteRate notes a request's output rate, tokens per ns. The average is
// bias-corrected (its weight gathered so far divides it), so that the
// first requests' rates are not averaged with a zero no request reported.
func (b *batchFigures) noteRate(rate float64) {
	b.rateSum += (rate - b.rateSum) / batchMemory
	b.rateW += (1 - b.rateW) / batchMemory
}

// rate returns the recent requests' output rate, tokens per ns; 0 before
// any.
func (b *batchFigures) rate() float64 {
	if b.rateW <= 0 {
		return 0
	}
	return b.rateSum / b.rateW
}

// notePrice notes the energy per output token an interval of dt ns
// priced.
func (b *batchFigures) notePrice(j float64, dt int64) {
	if b.tokPrice <= 0 {
		b.tokPrice = j
		return
	}
	b.tokPrice += -math.Expm1(-float64(dt)/tokenPriceForget) * (j - b.tokPrice)
}
