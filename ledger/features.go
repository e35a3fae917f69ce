package ledger

// This file is the feature builder, the one reading of the requests'
// timelines that every other stage uses: for an interval (a, b], who was
// active in it, in prefill or decoding, with how many tokens, and the
// interval's feature vector. The model stage learns from the vector; the
// weighing splits by the parts. It reads the requests and the model and
// writes only its output, the scratch it is handed.

// part is one request's features in an interval.
type part struct {
	r          *Account
	idx        int     // r's index in the active requests
	lo, hi     int64   // active span in the interval
	pfLo, pfHi int64   // prefill span in the interval
	dLo        int64   // decode span in the interval: [dLo, hi]; hi when none
	rho        float64 // prefill weight: uncached input tokens per ns of prefill
	out, in    float64 // output and uncached input tokens in the interval
	tail       float64 // decode weight, in tokens, after the last token
	silent     bool    // not reported past the interval: its tokens are extrapolated
	meanIn     bool    // silent with no prompt reported: in is the recent prompts' mean
	// With shares: its share of the interval's time (cov), of the time
	// with any prefill weighted by rho (pfShare), and of the time with
	// any decode (decShare), ns. See coverage.
	cov, pfShare, decShare float64
	// weight is the weighing's: the part's modelled energy, J, residual
	// included; pf is the part of it that its prompt drives, its share of
	// the prefill pool and its input tokens' energy (0 before the
	// device's model is usable), which End's estimate rescales for a
	// prompt reported late (see reweighed).
	// pfIn is the part of pf that is its input tokens' energy. outW is
	// the part of weight that its output tokens in the interval drive,
	// their own energy and decode's per token (0 before the model is
	// usable), by which End's estimate prices the tokens a provisional
	// split miscounted; tail, decode after an ended request's last token,
	// is no token it counted.
	weight, pf, pfIn, outW float64
}

// featureSet is an interval's features: the vector the model learns, the
// tokens reported outside any request in it, and the parts.
type featureSet struct {
	x       [nFeat]float64
	unowned float64
	parts   []part
}

// featureBuf is a feature build's working memory: its parts and
// coverage's edge keys.
type featureBuf struct {
	parts []part
	sweep []uint64
}

// keptFeatures is the build learn made of the interval (t0, t1] of device
// dev under the chosen timing, with the shares a split needs, kept for
// the split of the same interval in the same pass: the vector a build
// gives does not depend on whether it sets the shares (see coverage), and
// nothing a build reads changes between the two, so the split need not
// scan every active request again. ok is false once it is used or the
// pass ends.
type keptFeatures struct {
	buf    featureBuf
	f      featureSet
	dev    int
	t0, t1 int64
	shift  float64
	ok     bool
}

// buildFeatures returns the features of (a, b] over the active requests
// and the tokens reported outside any request (unowned), under the model
// m, into sc's parts, with every placed prefill's end moved shift decode
// steps later (see timing). With shares it also sets each part's coverage, as a
// split needs (of the prefill and decode time only when usable: the
// device's model weighs by them); without, it measures only the union of
// the prefill and decode spans, as learning needs. A request that has not reported past
// b and has not ended is silent in the interval: it is taken to produce
// output tokens at its own recent rate (the batch's, before it has one)
// from its expected prefill end on, and, until it reports a prompt, to
// have the recent prompts' mean.
func buildFeatures(active []*Account, unowned *sampled, m *model, a, b int64, shift float64, shares, usable bool, sc *featureBuf) featureSet {
	parts := sc.parts[:0]
	for i, r := range active {
		if s := &r.st; s.activeIn(r.start, a, b) {
			parts = append(parts, partOf(r, i, m, a, b, shift))
		}
	}
	sc.parts = parts
	f := featureSet{parts: parts, unowned: unowned.outputIn(a, b, unowned.pfEnd)}
	if shares {
		coverage(parts, a, b, spanActive, true, &sc.sweep)
	}
	usable = shares && usable
	pfBusy := coverage(parts, a, b, spanPrefill, usable, &sc.sweep)
	noTokens := f.unowned == 0
	for i := range parts {
		if parts[i].out > 0 || parts[i].tail > 0 {
			noTokens = false
			break
		}
	}
	decBusy := coverage(parts, a, b, spanDecode, usable && noTokens, &sc.sweep)
	x := &f.x
	x[fStatic] = float64(b-a) / nsPerSecond
	x[fOutput] = f.unowned
	for i := range parts {
		p := &parts[i]
		x[fOutput] += p.out
		x[fPrefill] += float64(p.pfHi-p.pfLo) / nsPerSecond
		x[fInput] += p.in
		x[fDecode] += float64(p.hi-p.dLo) / nsPerSecond
	}
	x[fPrefillBusy] = pfBusy / nsPerSecond
	x[fDecodeBusy] = decBusy / nsPerSecond
	return f
}

// partOf returns the features in (a, b] of r, the i-th active request,
// which was active in it, with its prefill's end moved shift decode steps
// later.
func partOf(r *Account, i int, m *model, a, b int64, shift float64) part {
	s := &r.st
	lo, hi := s.span(r.start, a, b)
	last := s.last()
	in := float64(last.in)
	p := part{r: r, idx: i, lo: lo, hi: hi, dLo: hi}
	p.silent = !s.endSeen && s.known < b
	pfEnd := s.prefillEnd(shift)
	if p.silent && pfEnd < 0 {
		pfEnd = m.expectedPrefillEnd(r.start, in, b)
	}
	pfLo, pfHi := r.start, pfEnd
	switch {
	case pfEnd >= 0:
	case s.endSeen:
		pfHi = s.end
	default:
		pfHi = max(s.known, b) // in prefill through the interval
	}
	p.pfLo, p.pfHi = max(pfLo, a), max(max(pfLo, a), min(pfHi, b))
	p.out = s.outputIn(a, b, pfEnd)
	if pfEnd >= 0 {
		p.dLo = min(max(lo, pfEnd), hi)
	}
	if p.silent && pfEnd >= 0 {
		// Its tokens since its last report (or its prefill's end), at its
		// own rate or the batch's.
		if from := max(lo, pfEnd, last.t); hi > from {
			p.out += silentRate(s, m) * float64(hi-from)
		}
	}
	if t0 := last.t; s.endSeen && s.step > 0 && s.end > t0 && hi > t0 && lo < t0+s.step {
		// A request stays in the batch for up to a step after its last
		// token: it weighs in decode's split for that time as at its
		// rate, though it produced nothing.
		t1 := min(s.end, t0+s.step)
		p.tail = s.ownRate() * float64(max(0, min(hi, t1)-max(lo, t0)))
	}
	// A silent request that has reported no prompt is weighed with the
	// recent prompts' mean, as its prefill's expected length already is:
	// its prefill's rate and its input tokens' energy, which is all the
	// prompt's energy under a model that prices prefill by input tokens.
	// Weighed with none, it took no prefill energy at all while it was
	// silent, and End's estimate of a client that reports only at its end
	// came out short (see reweighed).
	if in <= 0 && p.silent {
		in, p.meanIn = m.prefill.meanTokens(), true
	}
	// The prompt's tokens are spread over the prefill: over a prefill
	// still running, over its expected length, so that a burst of long
	// prompts does not put each whole prompt in the interval being split.
	inEnd := pfHi
	if pfEnd < 0 && !s.endSeen {
		inEnd = max(pfHi, m.expectedPrefillEnd(r.start, in, -1))
	}
	p.in = in * overlap(pfLo, inEnd, a, b)
	if p.pfHi > p.pfLo {
		p.rho = m.prefillRate(r.start, in, inEnd)
	}
	return p
}

// silentRate returns the output rate, tokens per ns, at which a request
// silent since its last report is taken to produce tokens: its own since
// its prefill, or the batch's before it has one.
func silentRate(s *sampled, m *model) float64 {
	if rate := s.ownRate(); rate > 0 {
		return rate
	}
	return m.batch.rate()
}

// expectedPrefillEnd returns when the prefill of a request that started
// at start, with an uncached prompt of in tokens (0: not reported yet,
// taken as the recent prompts' mean), is expected to end: by the prefill
// time learned, moved as every placed prefill's end is (placementNS), or
// at once when none is learned (a request that shows no timing is then
// placed with a prefill of a token's share of its length: about none).
// It returns -1 when the end is at or after b (b < 0: never), so that
// the request is in prefill through b.
func (m *model) expectedPrefillEnd(start int64, in float64, b int64) int64 {
	if in <= 0 {
		in = m.prefill.meanTokens()
	}
	th, ok := m.prefill.coefs()
	if !ok {
		return start
	}
	if e := placedPrefillEnd(start, th, in, m.placementNS()); b < 0 || e < b {
		return e
	}
	return -1
}

// placementNS returns how far the chosen placement moves a prefill's end,
// ns: the shift in decode steps (see timing) at the batch's recent step.
// The prefill time is learned to one step before the first token, so an
// expected end must move as a placed one does (sampled.prefillEnd), or a
// request that has shown no timing yet ends its prefill a step before
// the others under the other placement.
func (m *model) placementNS() int64 { return int64(m.shift * m.batch.step) }

// placedPrefillEnd returns where a prefill that started at start, of an
// uncached prompt of in tokens, ends under the prefill time th (see
// prefillTime.coefs) with the placement moving its end by move ns: the
// one formula of the sampler's expectation (expectedPrefillEnd) and the
// request path's, from what the sampler published (estPrefillEnd).
func placedPrefillEnd(start int64, th [3]float64, in float64, move int64) int64 {
	return start + int64(prefillSeconds(th, in)*nsPerSecond) + move
}

// prefillRate returns a request's weight among concurrent prefills: its
// uncached input tokens per ns of its prefill, which runs from start to
// end, and the batch's recent average when its prompt is not reported.
// Batched prefill is compute-bound, and each request's part of the
// compute is its prompt tokens, so a prompt five times longer in the same
// time takes five times the share.
func (m *model) prefillRate(start int64, in float64, end int64) float64 {
	if in <= 0 {
		if m.batch.rho > 0 {
			return m.batch.rho
		}
		return 1 / minPrefillNS
	}
	return in / max(float64(end-start), minPrefillNS)
}
