package ledger

import "github.com/otelenergy/otelenergy/internal/split"

// This file is the split stage: the weighing of an interval's requests
// under the model, and the division of its energy by that weighing into
// integer shares. Both are pure: they read the features, the model and
// the energy, and write only the weights and shares they are handed (the
// weighing's working copy in the scratch), so the ledger's conservation
// rests on these few lines alone, and they can be tested without a
// ledger.
//
// Invariant: Σ shares + rest = attr, exactly, whatever the weighing
// (zero, negative, NaN or infinite totals and weights included).

// weighing is how an interval's attributable energy is split: its static
// part by each part's coverage out of dt, the rest by each part's weight
// (byWeight) or coverage out of total; and the prices of the interval,
// for the estimates.
type weighing struct {
	static    uint64
	dt, total float64
	by        int
	prices    prices
}

// Pools of an interval's energy, by what their shares follow.
const (
	byCoverage = iota // each part's cov, its share of the interval's time
	byWeight          // each part's weight, its modelled energy
)

// prices are what an interval's split gave per unit of each kind of work
// (summed over devices, they price the time after the newest counter
// step; see Ledger.Estimate): the static power in W; the modelled
// prefill pool's power in W with the input rate it was shared by (its
// requests' ρ averaged over the interval), the power one more prefill
// adds to it and one prefill's power alone; the modelled power of the
// rest (decode and tokens) and the residual power the model did not
// explain, in W, for laying a prefill's part of the residual as the
// split would; and the energy of one output token and of one input token,
// residual included, in J.
type prices struct {
	staticW, pfPoolW, rho, pfAddW, pfLoneW, restW, residW, tokJ, inJ float64
	// The decode power by how the model has it, residual included: the
	// busy power while any request decodes, W, which the decoding
	// requests share by time; each decoding request's own, W; and each
	// output token's own energy, J.
	decBusyW, decEachW, outJ float64
}

// nPrices is how many figures prices holds.
const nPrices = 12

func (p prices) vec() [nPrices]float64 {
	return [nPrices]float64{p.staticW, p.pfPoolW, p.rho, p.pfAddW, p.pfLoneW, p.restW, p.residW, p.tokJ, p.inJ, p.decBusyW, p.decEachW, p.outJ}
}

func pricesOf(v [nPrices]float64) prices {
	return prices{staticW: v[0], pfPoolW: v[1], rho: v[2], pfAddW: v[3], pfLoneW: v[4], restW: v[5], residW: v[6], tokJ: v[7], inJ: v[8], decBusyW: v[9], decEachW: v[10], outJ: v[11]}
}

// prefillUncertainty is the relative uncertainty of the modelled prefill
// energy of an interval against that of the rest (decode and tokens):
// prefill's energy varies with the prompt, the batch and the kernels far
// more than a decode token's does, so the part of an interval's energy
// that the model does not explain is most likely prefill's.
const prefillUncertainty = 6

// fallbackInput is the weight of an uncached input token against an
// output token's in the split before a device's model is learned. A
// prefill is compute-bound and batched, a decode step memory-bound, so
// an input token costs a small part of an output token's energy; a long
// prompt weighed at more leaves the first requests' estimates far above
// the figures the model then gives them.
const fallbackInput = 0.05

// weigh weighs the parts of an interval of dt ns whose attributable
// energy is attr mJ under the device model d, setting each part's weight
// (its modelled energy, J). Before d is ready (usable, for a provisional
// split) the static power measured while the device was idle (or fixed)
// is shared by time, and the rest by tokens (see weighTokens).
func weigh(f *featureSet, d *devModel, attr uint64, dt float64, provisional bool) weighing {
	wg := weighing{dt: dt, by: byWeight}
	modelled := d.ready || provisional && d.usable
	wg.static = min(attr, uint64(max(0, d.staticW(modelled)*dt/nsPerSecond*1000)))
	wg.prices.staticW = float64(wg.static) / dt * 1e6
	if modelled {
		wg.total = weighModel(f, d, float64(attr-wg.static)/1000, &wg.prices)
	} else if wg.total = weighTokens(f); wg.total > 0 {
		wg.prices.tokJ = float64(attr-wg.static) / 1000 / wg.total
		wg.prices.inJ = fallbackInput * wg.prices.tokJ
	}
	wg.fallBack(f.parts)
	return wg
}

// weighTokens weighs the parts by their tokens, an input token
// fallbackInput of an output token, and returns the total with the
// unowned tokens. A silent part that weighs nothing (its prompt not
// reported, its output not extrapolated: no rate or prefill time is known
// yet) weighs the mean weight per ns of active time of the parts that
// weigh something: by tokens alone it would take none of the energy of a
// time it was active in all along.
func weighTokens(f *featureSet) float64 {
	var w, cov float64
	for i := range f.parts {
		p := &f.parts[i]
		p.weight, p.pf, p.pfIn, p.outW = p.out, 0, 0, 0
		if !p.meanIn {
			p.weight += fallbackInput * p.in
		}
		if p.weight > 0 {
			w += p.weight
			cov += p.cov
		}
	}
	total := f.unowned + w
	if w <= 0 || cov <= 0 {
		return total
	}
	for i := range f.parts {
		if p := &f.parts[i]; p.weight == 0 && p.silent {
			p.weight = w / cov * p.cov
			total += p.weight
		}
	}
	return total
}

// fallBack makes the rest go by coverage when nothing weighs anything (no
// token was produced and no time priced): the requests then share it by
// their time. A NaN total is left as it is: give refuses it, and the pool
// goes to no request.
func (w *weighing) fallBack(parts []part) {
	if w.total <= 0 {
		w.by, w.total = byCoverage, 0
		for i := range parts {
			w.total += parts[i].cov
		}
	}
}

// weighModel sets each part's weight to its modelled energy and returns
// their total with the unowned tokens'. The modelled prefill energy is shared
// by the rate-weighted prefill time; the modelled decode power by the
// output tokens each decoder produced (its token rate), or by decode time
// when none was produced. The residual, dynJ less the modelled total, is
// laid on the two pools in proportion to their variances, which is the
// least-squares estimate of each pool given their sum, and shared within
// each like the pool: what the model misses is a pool's total, not how
// its requests divide it.
func weighModel(f *featureSet, d *devModel, dynJ float64, pr *prices) float64 {
	x, th := &f.x, &d.theta
	var pfPerNS, decPerTok, decPerNS float64
	if x[fPrefillBusy] > 0 {
		pfPerNS = (th[fPrefill]*x[fPrefill] + th[fPrefillBusy]*x[fPrefillBusy]) / (x[fPrefillBusy] * nsPerSecond)
	}
	decJ := th[fDecodeBusy]*x[fDecodeBusy] + th[fDecode]*x[fDecode]
	tok := x[fOutput]
	for i := range f.parts {
		tok += f.parts[i].tail
	}
	if tok > 0 {
		decPerTok = decJ / tok
	} else if x[fDecodeBusy] > 0 {
		decPerNS = decJ / (x[fDecodeBusy] * nsPerSecond)
	}
	tokJ := th[fOutput] + decPerTok
	rest := func(p *part) float64 {
		return tokJ*p.out + decPerTok*p.tail + th[fInput]*p.in + decPerNS*p.decShare
	}
	pfJ, restJ := 0.0, tokJ*f.unowned
	for i := range f.parts {
		pfJ += pfPerNS * f.parts[i].pfShare
		restJ += rest(&f.parts[i])
	}
	kPf, kTok := residual(pfJ, restJ, dynJ)
	total := tokJ * f.unowned * kTok
	for i := range f.parts {
		p := &f.parts[i]
		pool := pfPerNS * p.pfShare * kPf
		p.weight = pool + rest(p)*kTok
		p.pfIn = th[fInput] * p.in * kTok
		p.outW = tokJ * p.out * kTok
		p.pf = pool + p.pfIn
		total += p.weight
	}
	sec := x[fStatic]
	*pr = prices{staticW: pr.staticW, tokJ: tokJ * kTok, inJ: th[fInput] * kTok,
		pfAddW: th[fPrefill], pfLoneW: th[fPrefill] + th[fPrefillBusy],
		restW: restJ / sec, residW: (dynJ - pfJ - restJ) / sec,
		decEachW: th[fDecode] * kTok, outJ: th[fOutput] * kTok}
	if x[fDecodeBusy] > 0 {
		pr.decBusyW = th[fDecodeBusy] * kTok
	}
	if x[fPrefillBusy] > 0 {
		pr.pfPoolW = pfJ / sec
		for i := range f.parts {
			pr.rho += f.parts[i].rho * float64(f.parts[i].pfHi-f.parts[i].pfLo) / (sec * nsPerSecond)
		}
	}
	return total
}

// residual returns the factors by which the prefill pool (pf J) and the
// rest (tok J) are scaled so that they add up to dyn J: the residual is
// laid on each in proportion to its variance, and a pool that would go
// below zero is emptied and the rest laid on the other.
func residual(pf, tok, dyn float64) (kPf, kTok float64) {
	vPf, vTok := sq(prefillUncertainty*pf), sq(tok)
	if vPf+vTok <= 0 || pf+tok <= 0 {
		return 1, 1
	}
	resid := dyn - pf - tok
	rPf := resid * vPf / (vPf + vTok)
	rTok := resid - rPf
	if pf+rPf < 0 {
		rPf, rTok = -pf, rTok+pf+rPf
	} else if tok+rTok < 0 {
		rPf, rTok = rPf+tok+rTok, -tok
	}
	kPf, kTok = 1, 1
	if pf > 0 {
		kPf = max(0, 1+rPf/pf)
	}
	if tok > 0 {
		kTok = max(0, 1+rTok/tok)
	}
	return kPf, kTok
}

func sq(x float64) float64 { return x * x }

// divide splits attr, an interval's attributable energy, among parts as
// w says: w.static by coverage out of w.dt, and the rest by w.by out of
// w.total, each by cumulative rounding (see give). It sets shares[i],
// which must be as long as parts, to part i's mJ, and returns the rest,
// the mJ that went to no part: attr − Σ shares, exactly.
func divide(attr uint64, w weighing, parts []part, shares []uint64) (rest uint64) {
	clear(shares)
	static := min(w.static, attr)
	given := give(static, parts, byCoverage, w.dt, shares)
	given += give(attr-static, parts, w.by, w.total, shares)
	return attr - given
}

// give splits e among parts in proportion to their coverage or weight out
// of total, by split.Floats' cumulative floors: the shares telescope,
// exactly floor(e·min(1, Σw/total)) is given, and give returns that.
// Each share is added to got[i], which must be as long as parts. A bad
// total gives nothing, and no share is negative.
func give(e uint64, parts []part, by int, total float64, got []uint64) uint64 {
	return split.Floats(e, total, len(parts), func(i int) float64 {
		if by == byWeight {
			return parts[i].weight
		}
		return parts[i].cov
	}, got)
}
