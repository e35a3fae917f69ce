package ledger

import (
	"math"
	"slices"
)

// This file reads the requests' timelines for the other stages: the
// features of an interval (who was active in it, in prefill or decoding,
// with how many tokens), which the model stage learns from
// (learnFeatures), and the weighing of an interval's requests under the
// current model, which the split stage divides by (weigh). It decides
// nothing about energy itself: every millijoule is placed by divide.

// attributable returns the part of e that belongs to the attributed
// processes on device d.
func attributable(d *device, e uint64) uint64 {
	if d.split && d.frac < 1 {
		return min(e, uint64(float64(e)*d.frac))
	}
	return e
}

// features collects, into l.parts, the requests active in (a, b] with
// their features, and returns the interval's feature vector and the
// tokens reported outside any request in it. minKnown is the earliest time
// up to which every running request has reported; an interval ending after
// it is being split at the horizon; with mark, the requests that had not
// reported past it are flagged, and so are requests on a shared device.
func (l *Ledger) features(d *device, a, b, minKnown int64, mark, prov bool, shift float64) (x [nFeat]float64, unowned float64) {
	forced := b > minKnown
	parts := l.parts[:0]
	running := 0
	for idx, r := range l.active {
		s := &r.st
		if !s.activeIn(r.start, a, b) {
			continue
		}
		lo, hi := s.span(r.start, a, b)
		in := float64(s.pts[len(s.pts)-1].in)
		pfEnd := s.prefillEnd(shift)
		// A request that has not reported past b is silent in the
		// interval: the provisional split extrapolates it, and so does a
		// split at the horizon, which escrows its expected share.
		silent := !s.endSeen && s.known < b && (prov || forced)
		if silent && pfEnd < 0 {
			pfEnd = l.expectedPrefillEnd(r, in, b)
		}
		pfLo, pfHi := r.start, pfEnd
		if pfEnd < 0 {
			pfLo, pfHi = s.prefill(r.start, max(s.known, b), shift)
		}
		pLo, pHi := max(pfLo, a), min(pfHi, b)
		// Filled in place, field by field: a part is large. The shares
		// and weights are left as they were; coverage and weigh set them
		// before they are read.
		if len(parts) < cap(parts) {
			parts = parts[:len(parts)+1]
		} else {
			parts = append(parts, part{})
		}
		p := &parts[len(parts)-1]
		p.r, p.idx, p.lo, p.hi = r, idx, lo, hi
		p.pfLo, p.pfHi = pLo, max(pLo, pHi)
		p.out, p.in = s.outputIn(a, b, pfEnd), in*overlap(pfLo, l.inputEnd(r, in, pfEnd, pfHi), a, b)
		p.rho, p.tail = 0, 0
		p.dLo = hi // no decode until the prefill is placed
		if pfEnd >= 0 {
			p.dLo = min(max(lo, pfEnd), hi)
		}
		if t0 := s.pts[len(s.pts)-1].t; s.endSeen && s.step > 0 && s.end > t0 && hi > t0 && lo < t0+s.step {
			// A request stays in the batch for up to a step after its
			// last token: it weighs in decode's split for that time as at
			// its rate, though it produced nothing.
			t1 := min(s.end, t0+s.step)
			p.tail = s.ownRate() * float64(max(0, min(hi, t1)-max(lo, t0)))
		}
		if silent {
			esc := l.silentTokens(r, pfEnd, lo, hi)
			p.out += esc
			if mark && esc > 0 {
				s.escTok += esc
				s.escHi = max(s.escHi, hi)
			}
		}
		if p.pfHi > p.pfLo {
			p.rho = l.prefillRate(r, in, pfEnd)
			// Without its prompt it weighs, over the prefill placed for
			// it, as a prompt of rate × length tokens: noted, for the
			// estimate to reprice when it reports its own (Estimate).
			s.inHat, s.tHat = 0, 0
			if in <= 0 {
				dur := float64(max(pfHi-pfLo, minPrefillNS))
				s.inHat, s.tHat = p.rho*dur, dur/nsPerSecond
				if s.pfEnd >= 0 {
					s.tHat = -s.tHat // placed by its own first token
				}
			}
		}
		if !s.endSeen {
			running++
		}
		if mark && forced && !s.endSeen && s.known < b {
			r.setFlag(FlagForced)
		}
		if mark && d.shared {
			r.setFlag(FlagShared)
		}
	}
	l.parts, l.running = parts, running
	unowned = l.unowned.st.outputIn(a, b, l.unowned.st.pfEnd)
	// A split needs each part's share of the time; the prefill and
	// decode shares only where the learned model weighs by them (decode's
	// when no token came in the interval).
	shares := mark || prov
	if shares {
		l.coverage(parts, a, b, spanActive, true)
	}
	model := shares && l.fit.devs[d.idx].m.usable && !l.cfg.WeightsFixed
	busy := l.coverage(parts, a, b, spanPrefill, model)
	noTokens := unowned == 0
	if model {
		for i := range parts {
			if parts[i].out > 0 || parts[i].tail > 0 {
				noTokens = false
				break
			}
		}
	}
	dbusy := l.coverage(parts, a, b, spanDecode, model && noTokens)

	wo, wi := l.tokenWeights()
	x[fStatic] = float64(b-a) / nsPerSecond
	x[fOutput] = unowned * wo
	for i := range parts {
		p := &parts[i]
		if l.cfg.WeightsFixed {
			x[fOutput] += wo*p.out + wi*p.in
		} else {
			x[fOutput] += p.out
			x[fPrefill] += float64(p.pfHi-p.pfLo) / nsPerSecond
			x[fInput] += p.in
			x[fDecode] += float64(p.hi-p.dLo) / nsPerSecond
		}
	}
	if !l.cfg.WeightsFixed {
		x[fPrefillBusy] = busy / nsPerSecond
		x[fDecodeBusy] = dbusy / nsPerSecond
	}
	return x, unowned
}

// extrapolate sets, for provisional splits and estimates, the instant
// since which r's output tokens are not reported yet and the rate at
// which they are taken to come: its own since its prefill, or the recent
// requests'. A request that ended, or is still in prefill, has none (rate
// 0). It publishes them with the tokens seen, for [Ledger.Estimate]; the
// sampler calls it when r reports.
func (l *Ledger) extrapolate(r *Account) {
	s := &r.st
	last := s.pts[len(s.pts)-1]
	if s.endSeen {
		// Estimates after End are not what they are for, and an ended
		// request is not extrapolated: leave them.
		return
	}
	var extFrom int64
	var extRate float64
	pfEnd := s.prefillEnd(l.fit.shift)
	if pfEnd < 0 && !s.endSeen {
		in := float64(last.in)
		if in <= 0 {
			in = l.fit.ttft.meanTokens()
		}
		if sec, ok := l.prefillTime(in); ok {
			pfEnd = r.start + int64(sec*nsPerSecond)
		} else if l.fit.ttft.unknowable() && l.rate > 0 {
			pfEnd = r.start // as expectedPrefillEnd takes it
		}
	}
	if !s.endSeen && pfEnd >= 0 {
		rate := s.ownRate()
		if s.firstN > 0 && last.t > s.pfEnd && s.pfEnd >= 0 {
			rate = float64(s.firstN) / float64(last.t-s.pfEnd)
		}
		if rate <= 0 {
			rate = l.rate
		}
		extFrom, extRate = max(last.t, pfEnd), rate
	}
	// Stores cost far more than loads, and a request that streams at a
	// steady rate reports what the published figures already predict:
	// publish only when they predict the tokens seen by half a token or
	// more, or the rate moved by 2% or more.
	seen0, rate0 := unpackSeenRate(r.seenRate.Load())
	from0 := r.extFrom.Load()
	predicted := float64(seen0) + rate0*float64(max(0, last.t-from0))
	if (extRate == 0) == (rate0 == 0) && math.Abs(predicted-float64(last.out)) < 0.5 &&
		math.Abs(extRate-rate0) < 0.02*rate0 && (from0 >= last.t) == (extFrom > last.t) {
		return
	}
	r.seenRate.Store(packSeenRate(last.out, extRate))
	r.extFrom.Store(extFrom)
}

// expectedPrefillEnd returns when the prefill of r, a request that has
// not shown its first token, is expected to end: its start plus the
// prefill time learned for its prompt (for the recent prompts' mean
// length when its own is not reported), or -1 when that is unknown or at
// or after b, so that r is taken to be in prefill through b.
func (l *Ledger) expectedPrefillEnd(r *Account, in float64, b int64) int64 {
	if in <= 0 {
		in = l.fit.ttft.meanTokens()
	}
	sec, ok := l.prefillTime(in)
	if !ok {
		// No prefill time can be known: no request has shown its first
		// token, and whole requests' lengths, enough of them, do not
		// tell it. A request that reports once at its end is then placed
		// with a prefill of a token's share of its length (see
		// placePrefill), about none: it is taken as decoding from its
		// start, as it will be split.
		if l.fit.ttft.unknowable() && l.rate > 0 {
			return r.start
		}
		return -1
	}
	if e := r.start + int64(sec*nsPerSecond); e < b {
		return e
	}
	return -1
}

// inputEnd returns the end of the span over which r's input tokens are
// spread: its prefill's end, pfHi, once placed (pfEnd ≥ 0) or once r
// ended, and for a prefill still running, the later of pfHi (where the
// running prefill is cut off for now) and its expected end. Cut off at
// pfHi, a prefill that runs on would put its whole prompt's tokens in the
// interval being split, and a burst of long prompts would weigh many
// times what it drew there.
func (l *Ledger) inputEnd(r *Account, in float64, pfEnd, pfHi int64) int64 {
	if pfEnd >= 0 || r.st.endSeen {
		return pfHi
	}
	if in <= 0 {
		in = l.fit.ttft.meanTokens()
	}
	if sec, ok := l.prefillTime(in); ok {
		return max(pfHi, r.start+int64(sec*nsPerSecond))
	}
	return pfHi
}

// silentTokens returns the output tokens r, silent in (lo, hi], is taken
// to have produced there: at the rate published for its estimate since its
// last report (its own, or the batch's when it has none), or at the
// batch's recent rate when none is published, from its last report or its
// prefill's end (pfEnd, -1 when still in prefill), whichever is later.
// Only past its last report: the published origin may be an earlier
// report that predicted this one.
func (l *Ledger) silentTokens(r *Account, pfEnd, lo, hi int64) float64 {
	if pfEnd < 0 {
		return 0
	}
	s := &r.st
	from := max(lo, pfEnd, s.pts[len(s.pts)-1].t)
	_, rate := unpackSeenRate(r.seenRate.Load())
	if rate > 0 {
		from = max(from, r.extFrom.Load())
	} else {
		rate = l.rate
	}
	if hi <= from || rate <= 0 {
		return 0
	}
	return rate * float64(hi-from)
}

// learn folds the interval (a, b] of device d, with energy e, into the
// model stage, which reads the interval's features from the requests
// through learnFeatures.
func (l *Ledger) learn(d *device, a, b int64, e uint64) {
	if b <= a {
		return
	}
	idle := len(l.active) == 0 && len(l.unowned.st.pts) <= 1
	l.fit.learn(d.idx, a, b, float64(attributable(d, e))/1000, len(l.active), idle, l)
}

// learnFeatures returns the features of (a, b] as features does, for
// learning: it keeps no per-request parts, only the prefill and decode
// spans whose union it measures, so that a busy sampler writes little per
// request. With tau ≥ 0 the guessed prefills are placed at tau ns per
// input token instead of where they are; guessed reports whether the
// interval holds one.
func (l *Ledger) learnFeatures(a, b int64, shift, tau float64) (x [nFeat]float64, guessed bool) {
	pf, dec := l.pfSpans[:0], l.decSpans[:0]
	var out, pfNS, in, decNS float64
	for _, r := range l.active {
		s := &r.st
		if !s.activeIn(r.start, a, b) {
			continue
		}
		lo, hi := s.span(r.start, a, b)
		pfEnd := s.prefillEnd(shift)
		if s.pfGuess {
			guessed = true
			if tau >= 0 {
				pfEnd = s.shifted(s.guessedEnd(r.start, tau), shift)
			}
		}
		silent := !s.endSeen && s.known < b
		if silent && pfEnd < 0 {
			pfEnd = l.expectedPrefillEnd(r, float64(s.pts[len(s.pts)-1].in), b)
		}
		pfLo, pfHi := r.start, pfEnd
		if pfEnd < 0 {
			pfLo, pfHi = s.prefill(r.start, max(s.known, b), shift)
		}
		if silent {
			out += l.silentTokens(r, pfEnd, lo, hi)
		}
		if pLo, pHi := max(pfLo, a), min(pfHi, b); pHi > pLo {
			pf = append(pf, span{pLo, pHi})
			pfNS += float64(pHi - pLo)
		}
		if pfEnd >= 0 {
			if dLo := min(max(lo, pfEnd), hi); hi > dLo {
				dec = append(dec, span{dLo, hi})
				decNS += float64(hi - dLo)
			}
		}
		out += s.outputIn(a, b, pfEnd)
		pin := float64(s.pts[len(s.pts)-1].in)
		in += pin * overlap(pfLo, l.inputEnd(r, pin, pfEnd, pfHi), a, b)
	}
	l.pfSpans, l.decSpans = pf, dec
	unowned := l.unowned.st.outputIn(a, b, l.unowned.st.pfEnd)
	wo, wi := l.tokenWeights()
	x[fStatic] = float64(b-a) / nsPerSecond
	if l.cfg.WeightsFixed {
		x[fOutput] = wo*(unowned+out) + wi*in
		return x, guessed
	}
	x[fOutput] = unowned + out
	x[fPrefill] = pfNS / nsPerSecond
	x[fInput] = in
	x[fDecode] = decNS / nsPerSecond
	x[fPrefillBusy] = l.union(pf, a, b) / nsPerSecond
	x[fDecodeBusy] = l.union(dec, a, b) / nsPerSecond
	return x, guessed
}

// span is a non-empty time span within an interval.
type span struct{ lo, hi int64 }

// union returns the time in (a, b] that spans cover, as coverage counts
// it: exactly, by a sweep over the edges of the spans inside the interval,
// while there are at most maxExactPartial of them.
func (l *Ledger) union(spans []span, a, b int64) float64 {
	if len(spans) == 0 {
		return 0
	}
	ev := l.sweep[:0]
	exact := b-a < 1<<edgeTBits && len(spans) < 1<<edgeIBits
	var sumLen float64
	hullLo, hullHi := b, a
	for i, s := range spans {
		switch {
		case s.hi <= s.lo:
		case s.lo == a && s.hi == b:
			return float64(b - a)
		default:
			hullLo, hullHi = min(hullLo, s.lo), max(hullHi, s.hi)
			sumLen += float64(s.hi - s.lo)
			if exact && len(ev) < 2*maxExactPartial {
				ev = append(ev, edgeKey(a, s.lo, i, true), edgeKey(a, s.hi, i, false))
			} else {
				exact = false
			}
		}
	}
	if cap(ev) != cap(l.sweep) {
		l.sweep = ev // grown
	}
	switch {
	case hullHi <= hullLo:
		return 0
	case !exact:
		return min(float64(b-a), sumLen, float64(hullHi-hullLo))
	}
	slices.Sort(ev)
	var covered float64
	open := 0
	prev := a
	for _, k := range ev {
		t, _, start := edgeOf(a, k)
		if open > 0 {
			covered += float64(t - prev)
		}
		prev = t
		if start {
			open++
		} else {
			open--
		}
	}
	return covered
}

// prefillRate returns r's weight among concurrent prefills: the input
// tokens it processes per second of its prefill (the recent requests'
// average when its prompt is not reported). Batched prefill is
// compute-bound, and each request's part of the compute is its prompt
// tokens, so a prompt five times longer in the same time takes five times
// the share. A prefill still running is timed by the learned prefill time
// for its prompt, or by how long it has run if that is longer.
func (l *Ledger) prefillRate(r *Account, in float64, pfEnd int64) float64 {
	s := &r.st
	var dur float64
	switch {
	case pfEnd >= 0:
		dur = float64(pfEnd - r.start)
	case s.endSeen:
		dur = float64(s.end - r.start)
	default:
		if sec, ok := l.prefillTime(in); ok {
			dur = sec * nsPerSecond
		}
		dur = max(dur, float64(s.known-r.start))
	}
	if in <= 0 {
		// Its prompt is not reported (yet): it weighs as the recent
		// prompts did, not by its length, which says little.
		if l.rhoAvg > 0 {
			return l.rhoAvg
		}
		return 1 / minPrefillNS
	}
	rho := in / max(dur, minPrefillNS)
	if pfEnd >= 0 {
		l.rhoAvg += 0.02 * (rho - l.rhoAvg)
	}
	return rho
}

// minPrefillNS bounds a prefill's length from below in its rate, so that
// a request whose first token came at once does not weigh without bound.
const minPrefillNS = 5e6

// tokenWeights returns the weights of output and input tokens in the
// fixed-weight and fallback splits.
func (l *Ledger) tokenWeights() (float64, float64) {
	if l.cfg.WeightsFixed {
		return l.cfg.OutputWeight, l.cfg.InputWeight
	}
	return 1, fallbackInput
}

// weigh fills l.parts with the requests active in the interval (a, b] of
// device d (before the device's lag is applied) and their coverage and
// weights for splitting attr, its attributable energy. With prov, a
// request still silent after its expected prefill is taken to be
// decoding since then, as the provisional split assumes.
func (l *Ledger) weigh(d *device, a, b int64, attr uint64, minKnown int64, mark, prov bool) weighing {
	m := &l.fit.devs[d.idx].m
	lag := l.fit.devs[d.idx].lag
	x, unowned := l.features(d, a-lag, b-lag, minKnown, mark, prov, l.fit.shift)
	a, b = a-lag, b-lag
	parts := l.parts
	dt := float64(b - a)
	wo, wi := l.tokenWeights()
	th := m.theta
	learned := m.usable

	w := weighing{dt: dt, by: byWeight}
	if learned || m.fixed[fStatic] {
		w.static = min(attr, uint64(th[fStatic]*dt/nsPerSecond*1000))
	} else if df := &l.fit.devs[d.idx]; df.idleT >= minIdleSeconds && !l.cfg.WeightsFixed {
		// Before the model, the static power measured while the device
		// was idle is shared by time as the model's is: by tokens, the
		// requests that report few of them (or none yet) would lose
		// their share of a power that runs whatever they do.
		w.static = min(attr, uint64(df.idleY/df.idleT*dt/nsPerSecond*1000))
	}
	dyn := attr - w.static

	// The modelled prefill energy of the interval is shared by the
	// rate-weighted prefill time; the modelled decode power by the output
	// tokens each decoder produced in it (its token rate), or by decode
	// time when none was produced.
	var pfPerNS, decPerTok, decPerNS float64
	if learned && !l.cfg.WeightsFixed {
		if x[fPrefillBusy] > 0 {
			pfPerNS = (th[fPrefill]*x[fPrefill] + th[fPrefillBusy]*x[fPrefillBusy]) / (x[fPrefillBusy] * nsPerSecond)
		}
		decJ := th[fDecodeBusy]*x[fDecodeBusy] + th[fDecode]*x[fDecode]
		tok := x[fOutput]
		for i := range parts {
			tok += parts[i].tail
		}
		if tok > 0 {
			decPerTok = decJ / tok
		} else if x[fDecodeBusy] > 0 {
			decPerNS = decJ / (x[fDecodeBusy] * nsPerSecond)
		}
		if !prov && x[fOutput] > 0 {
			// The recent intervals price the tokens the estimates have
			// not seen: energy per token moves with the batch.
			l.jOut += (1 - math.Exp(-dt/jOutForget)) * (th[fOutput] + decPerTok - l.jOut)
		}
	}
	w.tokPrice = th[fOutput] + decPerTok
	var total float64
	for i := range parts {
		p := &parts[i]
		switch {
		case l.cfg.WeightsFixed:
			p.tokJ, p.pfJ, p.inJ = 0, 0, 0
			p.weight = wo*p.out + wi*p.in
		case learned:
			p.inJ = th[fInput] * p.in
			p.tokJ = w.tokPrice*p.out + decPerTok*p.tail + p.inJ + decPerNS*p.decShare
			p.pfJ = pfPerNS * p.pfShare
			p.weight = p.tokJ + p.pfJ
		default:
			p.tokJ, p.pfJ, p.inJ = 0, 0, 0
			p.weight = p.out + fallbackInput*p.in
		}
		total += p.weight
	}
	if !learned && !l.cfg.WeightsFixed {
		total += l.weighSilent(parts, b)
	}
	var unownedW float64
	switch {
	case l.cfg.WeightsFixed:
		unownedW = wo * unowned
	case learned:
		unownedW = (th[fOutput] + decPerTok) * unowned
	default:
		unownedW = unowned
	}
	total += unownedW
	if learned && !l.cfg.WeightsFixed && total > 0 {
		total = l.spreadResidual(parts, float64(dyn)/1000, unownedW)
	}
	w.total = total
	w.fallBack(parts)
	return w
}

// weighSilent gives, in a split before the model is learned (provisional,
// or final at the horizon), each request that has reported nothing past b
// and weighs nothing (its
// prompt not reported, its output not extrapolated: no rate or prefill
// time is known yet) the mean weight per ns of active time of the
// requests that weigh something, and returns the weight it added. By
// tokens alone such a request would take none of the dynamic energy, and
// no static power is known to give it: when every client reports only
// at its end, the first to end took the whole board's energy in the
// estimates of the others, which got none (End's estimate −100%), and
// split at the horizon, the requests that had ended by then took the
// shares of those still silent for good.
func (l *Ledger) weighSilent(parts []part, b int64) float64 {
	var w, cov float64
	for i := range parts {
		if p := &parts[i]; p.weight > 0 {
			w += p.weight
			cov += p.cov
		}
	}
	if w <= 0 || cov <= 0 {
		return 0
	}
	var added float64
	for i := range parts {
		p := &parts[i]
		if s := &p.r.st; p.weight == 0 && !s.endSeen && s.known < b {
			p.weight = w / cov * p.cov
			added += p.weight
		}
	}
	return added
}

// noteShares records, for each request in l.parts, the power it was given
// in the interval just weighed (for estimates of what is not split yet),
// and with prov adds its share to its provisional energy.
func (l *Ledger) noteShares(w weighing, attr uint64, prov bool) {
	static, dyn := float64(w.static), float64(attr-w.static)
	for i := range l.parts {
		p := &l.parts[i]
		var mj float64
		if w.dt > 0 {
			mj = static * p.cov / w.dt
		}
		if w.total > 0 {
			if w.by == byWeight {
				mj += dyn * p.weight / w.total
			} else {
				mj += dyn * p.cov / w.total
			}
		}
		if mj < 0 || math.IsNaN(mj) {
			mj = 0
		}
		s := &p.r.st
		if s.endSeen {
			continue // no estimate is wanted after End
		}
		// The part of its share that is its prefill's and its prompt's.
		var pf float64
		if modelled := p.tokJ + p.pfJ; modelled > 0 && w.total > 0 && w.by == byWeight {
			pf = max(0, dyn*p.weight/w.total*min(1, (p.pfJ+p.inJ)/modelled))
		}
		var pfS, pfT float64
		if pf > 0 {
			pfS, pfT = p.pfShare, float64(p.pfHi-p.pfLo)
		}
		if prov {
			acc := &l.provAcc[p.idx]
			acc.mj += mj
			acc.pf += pf
			acc.pfS += pfS
			acc.pfT += pfT
			if p.out > 0 {
				acc.tok += p.out
				acc.tokJ += w.tokPrice * p.out
			}
		} else {
			s.pfMJ += pf
			s.pfS += pfS
			s.pfT += pfT
		}
		if span := p.hi - p.lo; span > 0 {
			pw := mj
			if p.pfHi < p.hi {
				// Its prefill is over: the power carried past the newest
				// step is its decode's and its static share, not the
				// prefill's, nor its prompt's cost, which a long prompt
				// makes many times its decode's in the interval where it
				// ran.
				pw -= pf
			}
			s.powW = float32(max(0, pw) / float64(span) * 1e6) // mJ/ns to W
		}
	}
}

// jOutForget is the time constant, in ns, of the energy per output token
// that estimates use.
const jOutForget = 2e9

// Relative uncertainties of the modelled parts of a request's energy in an
// interval. Prefill's energy varies with the prompt, the batch and the
// kernel far more than a decode token's does, so the part of an interval's
// energy that the model does not explain is most likely prefill's.
const (
	prefillUncertainty = 0.3
	tokenUncertainty   = 0.05
)

// spreadResidual turns the modelled weights (in J) into the requests'
// expected shares of the dynamic energy dynJ. The residual, dynJ − Σ
// modelled, is laid on the two pools in proportion to their variances
// (the prefill pool's far larger: prefill power varies with the prompts,
// the batch and the kernels; decode's with the batch only), which is the
// least-squares estimate of each pool given their sum; within a pool it is
// shared like the pool itself, since what the model misses is the pool's
// total, not how its requests divide it. When that would make a share
// negative, that pool is emptied and the rest laid on the other. It
// returns the new total weight.
func (l *Ledger) spreadResidual(parts []part, dynJ, unownedJ float64) float64 {
	pf, tok := 0.0, unownedJ
	for i := range parts {
		pf += parts[i].pfJ
		tok += parts[i].weight - parts[i].pfJ
	}
	modelled := pf + tok
	vPf, vTok := sq(prefillUncertainty*pf), sq(tokenUncertainty*tok)
	if vPf+vTok <= 0 || modelled <= 0 {
		return modelled
	}
	resid := dynJ - modelled
	// Each pool takes its part of the residual; a pool that would go
	// below zero is emptied and the rest goes to the other, so that large
	// negative residuals move energy as large positive ones do.
	rPf := resid * vPf / (vPf + vTok)
	rTok := resid - rPf
	if pf+rPf < 0 {
		rPf, rTok = -pf, rTok+pf+rPf
	} else if tok+rTok < 0 {
		rPf, rTok = rPf+tok+rTok, -tok
	}
	var kPf, kTok float64 = 1, 1
	if pf > 0 {
		kPf = max(0, 1+rPf/pf)
	}
	if tok > 0 {
		kTok = max(0, 1+rTok/tok)
	}
	if kPf == 0 && kTok == 0 {
		return modelled
	}
	total := unownedJ * kTok
	for i := range parts {
		p := &parts[i]
		p.weight = p.pfJ*kPf + (p.weight-p.pfJ)*kTok
		total += p.weight
	}
	return total
}

func sq(x float64) float64 { return x * x }

// Span kinds for coverage.
const (
	spanActive  = iota // the request's active span; shares in cov
	spanPrefill        // its prefill, weighted by rho; shares in pfShare
	spanDecode         // its decode; shares in decShare
	// spanTime is spanActive for the time rings, swept exactly however
	// many spans start or end in the interval: their windows are long
	// (250 ms to 2 s, and longer after a stall), so they hold far more
	// short requests than a counter step, and their rule is the exact
	// one. The sweep is O(n log n) in the active requests, once a window.
	spanTime
)

// coverage sets each part's share of the interval's time, in ns, for the
// spans of kind (with shares; without, it only measures), and returns the
// time covered: at every instant the time is shared among the requests
// whose span holds it, in proportion to their weights (rho for prefill,
// equal otherwise), and time with none is nobody's. It is exact however
// many spans start or end inside the interval: a sweep over their edges,
// O(k log k) for k such spans, accumulates the time per unit of weight,
// and each span's share is its weight times that accumulated over it. So
// a burst of requests ending together gives the last of them the growing
// share that is theirs, and the time after the last one ended to nobody.
func (l *Ledger) coverage(parts []part, a, b int64, kind int, shares bool) float64 {
	if len(parts) == 0 {
		return 0
	}
	dt := float64(b - a)
	span := func(p *part) (int64, int64) {
		switch kind {
		case spanPrefill:
			return p.pfLo, p.pfHi
		case spanDecode:
			return p.dLo, p.hi
		}
		return p.lo, p.hi
	}
	out := func(p *part) *float64 {
		switch kind {
		case spanPrefill:
			return &p.pfShare
		case spanDecode:
			return &p.decShare
		}
		return &p.cov
	}
	weight := func(p *part) float64 {
		if kind == spanPrefill && p.rho > 0 {
			return p.rho
		}
		return 1
	}
	ev := l.sweep[:0]
	full := 0
	exact := b-a < 1<<edgeTBits && len(parts) < 1<<edgeIBits
	var fullW, sumLen, sumWLen float64
	hullLo, hullHi := b, a
	for i := range parts {
		p := &parts[i]
		if shares {
			*out(p) = 0
		}
		lo, hi := span(p)
		switch {
		case hi <= lo:
		case lo == a && hi == b:
			full++
			fullW += weight(p)
		default:
			hullLo, hullHi = min(hullLo, lo), max(hullHi, hi)
			sumLen += float64(hi - lo)
			sumWLen += weight(p) * float64(hi-lo)
			if exact && (len(ev) < 2*maxExactPartial || kind == spanTime) {
				ev = append(ev, edgeKey(a, lo, i, true), edgeKey(a, hi, i, false))
			} else {
				exact = false
			}
		}
	}
	if cap(ev) != cap(l.sweep) {
		l.sweep = ev // grown
	}
	switch {
	case full == 0 && hullHi <= hullLo:
		return 0
	case !shares && full > 0:
		return dt
	case hullHi <= hullLo:
		for i := range parts {
			if lo, hi := span(&parts[i]); lo == a && hi == b {
				*out(&parts[i]) = dt * weight(&parts[i]) / fullW
			}
		}
		return dt
	case !exact:
		// Too many spans start or end inside the interval to sweep them
		// at every split: weighted span time, scaled so that the total
		// never exceeds the time the spans can cover.
		covered := dt
		if full == 0 {
			covered = min(dt, sumLen, float64(hullHi-hullLo))
		}
		if shares {
			for i := range parts {
				lo, hi := span(&parts[i])
				*out(&parts[i]) = weight(&parts[i]) * float64(max(0, hi-lo)) * covered / (sumWLen + fullW*dt)
			}
		}
		return covered
	}
	slices.Sort(ev)
	// perW is the time per unit of weight so far; a span's share is its
	// weight times perW's growth over it.
	var perW, covered float64
	w, open := fullW, 0
	prev := a
	for _, k := range ev {
		t, i, start := edgeOf(a, k)
		if seg := float64(t - prev); seg > 0 && (full > 0 || open > 0) {
			covered += seg
			perW += seg / w
		}
		prev = t
		p := &parts[i]
		pw := weight(p)
		if start {
			w += pw
			open++
			if shares {
				*out(p) -= pw * perW
			}
			continue
		}
		open--
		if w -= pw; open == 0 {
			w = fullW // no drift from the adds and subtracts
		}
		if shares {
			*out(p) += pw * perW
		}
	}
	if full > 0 {
		seg := float64(b - prev)
		covered += seg
		perW += seg / w
	}
	if !shares {
		return covered
	}
	for i := range parts {
		p := &parts[i]
		if lo, hi := span(p); lo == a && hi == b {
			*out(p) = perW * weight(p)
		} else if *out(p) < 0 {
			*out(p) = 0 // rounding
		}
	}
	return covered
}

// The sweep sorts the edges of the spans inside an interval as one word
// each: the time since the interval's start (edgeTBits), the span's index
// (edgeIBits) and whether it starts there (the low bit). maxExactPartial
// bounds the spans swept in one interval; beyond, the split is
// proportional to span time (see coverage).
const (
	edgeTBits       = 40 // 18 minutes in ns
	edgeIBits       = 23
	maxExactPartial = 512
)

func edgeKey(a, t int64, i int, start bool) uint64 {
	k := uint64(t-a)<<(edgeIBits+1) | uint64(i)<<1
	if start {
		k |= 1
	}
	return k
}

func edgeOf(a int64, k uint64) (t int64, i int, start bool) {
	return a + int64(k>>(edgeIBits+1)), int(k>>1) & (1<<edgeIBits - 1), k&1 == 1
}
