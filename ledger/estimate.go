package ledger

import (
	"math"
	"slices"
	"sync/atomic"
)

// This file is the estimate behind End: what a request's figure is before
// its intervals are split. The sampler publishes, at each settle, every
// active request's split energy plus its share of a provisional split of
// the intervals metered but not split yet, and the prices of the newest
// interval; Estimate adds, on the request path, the part of the request's
// life since the newest counter step, which nothing has metered yet,
// priced at those prices for what the request did in it: its share of the
// static power among the requests running, its prefill's share of the
// prefill pool, and its tokens.

// estimate is what the sampler publishes of one request for Estimate.
type estimate struct {
	mj   atomic.Uint64 // the split energy plus the provisional share, through thru
	thru atomic.Int64  // mj covers the request up to here; its start before it is weighed
	// tok packs, as two float32s' bits (see pack2), the output tokens mj
	// counts, reported and extrapolated (high), and what the provisional
	// split gave each of the tokens it counted, mJ (low; 0 where the
	// model priced none of them).
	tok   atomic.Uint64
	rho   atomic.Uint64 // float64 bits: its input rate as counted in the newest interval's prefill pool
	pfEnd atomic.Int64  // its prefill's end as placed; -1 while not placed
	// What reweighed needs of the provisional share of a request whose
	// prompt it weighed unreported, as float64 bits: the part of it the
	// prompt drove (its prefill pool share and its input tokens' energy,
	// residual included) less the part of that the rest of its pool
	// would give way for, mJ (pfGive; 0 once a prompt is reported), and,
	// as two float32s' bits in one word (pfFrac), that part over the
	// pool's energy (high) and the fraction of it that is its input
	// tokens' energy (low).
	pfGive, pfFrac atomic.Uint64
}

// published is what the sampler publishes for every estimate: the newest
// interval's prices (float64 bits, summed over devices), the prefill time
// and the batch's figures, and the counts of the running requests that
// price the static power.
type published struct {
	prices   [nPrices]atomic.Uint64 // a prices struct, field by field
	pfCoef   [3]atomic.Uint64       // prefillTime's coefficients
	pfCoefOK atomic.Bool
	pfMoveNS atomic.Int64  // how far the chosen placement moves a prefill's end (model.placementNS)
	meanIn   atomic.Uint64 // the recent prompts' mean length
	rho      atomic.Uint64 // the batch's input rate
	provThru atomic.Int64  // the provisional split covers every device up to here
	running
}

// provShare is what the provisional split gave one active request, mJ,
// with what reweighed needs of it (see estimate), and the part of it its
// output tokens drove (tokMJ) with those tokens (tokN).
type provShare struct{ mj, pf, pfIn, dyn, pool, tokMJ, tokN float64 }

// provBudget bounds the request-intervals one provisional pass weighs per
// device: the pending intervals are merged into provBudget/active groups
// (at least one), so that a pass stays O(active requests).
const provBudget = 1024

// provisional splits, with the current model, the intervals of every
// device that are pushed but not yet split, and notes each active
// request's share for its estimate. It runs only when a device stepped
// or split since it last ran (split says one split now): otherwise what
// it would find is what it published then. It reports whether it ran.
func (l *Ledger) provisional(split bool) bool {
	stepped := split
	for i := range l.devs {
		if l.devs[i].ivs.stepped() {
			stepped = true
		}
	}
	if !stepped {
		return false
	}
	n := len(l.reqs.active)
	l.buf.prov = slices.Grow(l.buf.prov[:0], n)[:n]
	clear(l.buf.prov)
	groups := max(1, provBudget/max(1, n))
	thru := int64(math.MaxInt64)
	for i := range l.devs {
		d := &l.devs[i]
		if d.lost {
			continue
		}
		thru = min(thru, d.ivs.pending(groups, func(iv interval) { l.provisionalSplit(d, iv) })-l.model.lag(i))
	}
	if thru != math.MaxInt64 {
		l.est.provThru.Store(thru)
	}
	return true
}

// provisionalSplit weighs the pending interval iv of device d as split
// would, and adds each request's share of its attributable energy to the
// provisional shares.
func (l *Ledger) provisionalSplit(d *device, iv interval) {
	if iv.T1 <= iv.T0 {
		return
	}
	f, dm := l.splitFeatures(d, iv)
	attr := attributable(d, iv.EnergyMJ)
	wg := weigh(&f, dm, attr, float64(iv.T1-iv.T0), true)
	static, dyn := float64(wg.static), float64(attr-wg.static)
	for i := range f.parts {
		p := &f.parts[i]
		mj, pf, pfIn, tok, own := static*p.cov/wg.dt, 0.0, 0.0, 0.0, 0.0
		switch {
		case wg.total <= 0:
		case wg.by == byWeight:
			own = dyn * p.weight / wg.total
			pf = dyn * p.pf / wg.total
			pfIn = dyn * p.pfIn / wg.total
			tok = dyn * p.outW / wg.total
		default:
			own = dyn * p.cov / wg.total
		}
		if mj += own; mj > 0 && !math.IsInf(mj, 0) {
			ps := &l.buf.prov[p.idx]
			ps.mj += mj
			if tok > 0 {
				ps.tokMJ, ps.tokN = ps.tokMJ+tok, ps.tokN+p.out
			}
			if pf > 0 && own <= dyn {
				ps.pf, ps.pfIn, ps.dyn, ps.pool = ps.pf+pf, ps.pfIn+pfIn, ps.dyn+own, ps.pool+dyn
			}
		}
	}
	l.noteNewest(d, &f, wg)
}

// noteNewest notes the prices of the newest interval weighed on device
// d, and each request's input rate as its prefill pool counted it, for
// the estimates.
func (l *Ledger) noteNewest(d *device, f *featureSet, wg weighing) {
	d.prices = wg.prices
	span := float64(f.x[fStatic] * nsPerSecond)
	for i := range f.parts {
		p := &f.parts[i]
		p.r.st.rhoNow = p.rho * float64(p.pfHi-p.pfLo) / span
	}
}

// publishEstimate publishes the estimate of r, the i-th active request,
// after a provisional pass: its split energy plus its provisional share,
// as one figure, so that a reader never adds a provisional share to the
// real share of the same interval; the tokens that figure counts; and
// what prices its time after it. Each is stored only when it changed: a
// store costs far more than a load.
func (l *Ledger) publishEstimate(r *Account, i int) {
	s, e := &r.st, &r.est
	thru := max(l.est.provThru.Load(), r.start)
	store(&e.mj, r.mj.Load()+uint64(min(l.buf.prov[i].mj, 1<<62)))
	// The tokens through thru: those reported, less those reported after
	// it, plus those extrapolated for it while silent.
	pfEnd := s.prefillEnd(l.model.shift)
	tok := float64(s.last().out) - s.outputIn(thru, math.MaxInt64, pfEnd)
	if !s.endSeen && s.known < thru {
		if pfEnd < 0 {
			pfEnd = l.model.expectedPrefillEnd(r.start, float64(s.last().in), thru)
		}
		if from := max(pfEnd, s.last().t); pfEnd >= 0 && thru > from {
			tok += silentRate(s, &l.model) * float64(thru-from)
		}
	}
	var price float64
	if ps := &l.buf.prov[i]; ps.tokN > 0 {
		price = ps.tokMJ / ps.tokN
	}
	store(&e.tok, pack2(max(0, tok), price))
	store(&e.rho, math.Float64bits(s.rhoNow))
	if ps := &l.buf.prov[i]; ps.pool > 0 && s.last().in == 0 {
		store(&e.pfGive, math.Float64bits(ps.pf*max(0, 1-ps.dyn/ps.pool)))
		store(&e.pfFrac, packFracs(ps.pf/ps.pool, ps.pfIn/ps.pf))
	} else {
		store(&e.pfGive, 0)
	}
	if pfEnd = s.prefillEnd(l.model.shift); e.pfEnd.Load() != pfEnd {
		e.pfEnd.Store(pfEnd)
	}
	if e.thru.Load() != thru {
		e.thru.Store(thru)
	}
}

// store stores v in a unless a holds it already.
func store(a *atomic.Uint64, v uint64) {
	if a.Load() != v {
		a.Store(v)
	}
}

// publish publishes the model stage's figures for the estimates and
// Coefficients: the newest interval's prices summed over devices, the
// prefill time's coefficients once learned, the batch's figures, and the
// power model.
func (l *Ledger) publish() {
	var pr [nPrices]float64
	for i := range l.devs {
		v := l.devs[i].prices.vec()
		for k := range v {
			pr[k] += v[k]
		}
	}
	sum := pricesOf(pr)
	sum.rho /= float64(max(1, len(l.devs))) // the same requests on every device
	sum.staticW = 0
	for i := range l.model.devs {
		sum.staticW += l.model.devs[i].staticW(l.model.devs[i].usable)
	}
	sum.tokJ = l.model.batch.tokPrice * float64(len(l.devs))
	if sum.staticW == 0 || sum.decBusyW+sum.decEachW+sum.outJ+sum.tokJ == 0 {
		// Before any static power is known, or while nothing prices the
		// work (no device's model is usable and no split has priced a
		// token yet: the first seconds of a Monitor whose clients report
		// only at their end), the unmetered time is priced at the
		// devices' newest measured power, shared by time: the device's
		// current power times the request's share. The static power
		// alone would price a running request as if it were idle.
		var newest float64
		for i := range l.devs {
			if !l.devs[i].lost {
				newest += l.devs[i].ivs.newestW()
			}
		}
		sum.staticW = max(sum.staticW, newest)
	}
	for i, v := range sum.vec() {
		store(&l.est.prices[i], math.Float64bits(v))
	}
	th, ok := l.model.prefill.coefs()
	for i, v := range th {
		store(&l.est.pfCoef[i], math.Float64bits(v))
	}
	if l.est.pfCoefOK.Load() != ok {
		l.est.pfCoefOK.Store(ok)
	}
	if mv := l.model.placementNS(); l.est.pfMoveNS.Load() != mv {
		l.est.pfMoveNS.Store(mv)
	}
	store(&l.est.meanIn, math.Float64bits(l.model.prefill.meanTokens()))
	store(&l.est.rho, math.Float64bits(l.model.batch.rho))
	coef := l.model.coefs()
	for i, v := range coef {
		store(&l.coef[i], math.Float64bits(v))
	}
}

// pfCoefs returns the published prefill time's coefficients, and false
// before they are learned.
func (p *published) pfCoefs() (th [3]float64, ok bool) {
	if !p.pfCoefOK.Load() {
		return th, false
	}
	for i := range th {
		th[i] = math.Float64frombits(p.pfCoef[i].Load())
	}
	return th, true
}

// loadPrices returns the published prices.
func (p *published) loadPrices() prices {
	var v [nPrices]float64
	for i := range v {
		v[i] = math.Float64frombits(p.prices[i].Load())
	}
	return pricesOf(v)
}

// Estimate returns the request's energy up to t as well as it is known
// now: the energy split to it so far and its share of the provisional
// split (with the current model) of the intervals pushed but not yet
// split, as the sampler last published them, plus the part of its life
// after those, at the newest interval's prices: its share of the static
// power among the requests running (see staticTime), its prefill's share
// of the prefill pool for the part of its prefill in that time, and its
// decoding in that time as the model has decode (a share by time of the
// power any decoding draws, its own decode power, its tokens' own
// energy); the tokens it made before that time beyond those the
// provisional split counted, or short of them, at the price that split
// gave its tokens (the recent energy per output token where the model
// priced none); and, when it reported a prompt only after the
// provisional split weighed it unreported, its provisional share
// reweighed for that prompt (see reweighed). It is lock-free and
// allocates nothing.
func (l *Ledger) Estimate(r *Account, t int64) uint64 {
	// final is loaded first: the sampler adds to mj before it stores
	// final, so a final request's mj is complete.
	if r.final.Load() {
		return r.mj.Load()
	}
	mj := r.mj.Load()
	est := max(mj, r.est.mj.Load())
	thru := max(r.est.thru.Load(), r.through.Load(), r.start)
	pr := l.est.loadPrices()
	var after float64 // tokens taken to come after thru
	out := float64(r.Output())
	add := l.reweighed(r) // mJ
	if t > thru {
		now := l.runningNow()
		st := l.staticTime(r, thru, t, now)
		pfEnd := l.estPrefillEnd(r, t)
		add += pr.staticW * st / 1e6
		add += l.prefillTail(r, &pr, thru, t, pfEnd, now.newcomers)
		if from := max(thru, pfEnd); pr.decBusyW+pr.decEachW > 0 && t > from {
			// Its decoding since from, as the model has decode: a share
			// by time of the busy power (in a batch each request decodes
			// a token a step), its own power, and its tokens' own
			// energy; the tokens taken as spread evenly since its
			// prefill, and priced here rather than at tokJ.
			dec := float64(t - from)
			after = out * dec / float64(max(1, t-pfEnd))
			add += (pr.decBusyW*st*dec/float64(t-thru) + pr.decEachW*dec) / 1e6
			add += pr.outJ * 1000 * after
		}
	}
	// The tokens the provisional split counted that the request did not
	// make, or that it made and the split did not count (the split
	// extrapolates a silent request at the batch's rate), are priced as
	// that split priced its tokens: where a client reports late, the
	// recent energy per output token comes from final splits seconds
	// old. The recent price serves where the model priced none of them.
	counted, price := unpack2(r.est.tok.Load())
	if price <= 0 {
		price = pr.tokJ * 1000
	}
	tokAdd := price * (out - after - counted)
	// What tokens it did not make take back is at most the provisional
	// part, which paid for them.
	add += max(tokAdd, -float64(est-mj))
	switch {
	case math.IsNaN(add):
		return est // a price it cannot read moves nothing
	case add >= 0:
		return est + uint64(min(add, 1<<62))
	case -add >= float64(est-mj):
		return mj
	default:
		return est - uint64(-add)
	}
}

// reweighed returns, in mJ, what the provisional share of r misses, or
// has too much of, when r reports a prompt that the provisional split
// weighed unreported, as the recent prompts' mean: the common case of a
// client that reports its prompt only at the end. The part pf of its
// share that the prompt drove is scaled, each of its two parts as the
// model prices it: its input tokens' energy (a share q of pf) by the one
// prompt's tokens against the other's, and its share of the prefill pool
// (the rest), which the model prices by the time a prefill runs, by the
// prefill time learned for the one against the other:
// Δ = pf·(q·(in/mean − 1) + (1 − q)·(time(in)/time(mean) − 1)). A model
// that prices prefill by tokens thus leaves End() to the tokens, and the
// prefill time, the least determined of the learned figures where every
// client reports at its end, weighs only where the model prices time. The
// energy split is what was metered, so the rest of the pool gives way: a
// weight w in a pool of weight T takes D·w/T of its energy D, and w+Δ
// takes D·(w+Δ)/(T+Δ), which adds Δ·(1−s/D)/(1+Δ/D) to its share s (Δ in
// mJ as priced at D/T). A request alone in its pool gains nothing.
func (l *Ledger) reweighed(r *Account) float64 {
	e := &r.est
	give := math.Float64frombits(e.pfGive.Load())
	if give <= 0 {
		return 0 // the common case: a prompt reported at the start
	}
	in, mean := float64(r.uncached()), math.Float64frombits(l.est.meanIn.Load())
	if in <= 0 || mean <= 0 {
		return 0
	}
	frac, q := unpack2(e.pfFrac.Load())
	x := q * (in/mean - 1)
	if th, ok := l.est.pfCoefs(); ok {
		dur := func(n float64) float64 { return max(prefillSeconds(th, n)*nsPerSecond, minPrefillNS) }
		x += (1 - q) * (dur(in)/dur(mean) - 1)
	}
	k := 1 + frac*x // (D+Δ)/D
	if !(k > 0) {
		return 0
	}
	return give * x / k
}

// packFracs packs two fractions as float32s into one word: hi in the
// high half, lo clamped to [0, 1] (unpack2 undoes it).
func packFracs(hi, lo float64) uint64 { return pack2(hi, min(max(lo, 0), 1)) }

// pack2 packs two figures as float32s into one word, hi in the high
// half, so that a reader loads both at once.
func pack2(hi, lo float64) uint64 {
	return uint64(math.Float32bits(float32(hi)))<<32 | uint64(math.Float32bits(float32(lo)))
}

// unpack2 is pack2 undone.
func unpack2(w uint64) (hi, lo float64) {
	return float64(math.Float32frombits(uint32(w >> 32))), float64(math.Float32frombits(uint32(w)))
}

// prefillTail returns, in mJ, r's prefill energy in (thru, t], its
// prefill ending at pfEnd (see estPrefillEnd): its share of the prefill
// pool at its input rate, or, with no other prefill running, one
// prefill's power alone; and the energy of its input tokens processed
// then.
func (l *Ledger) prefillTail(r *Account, pr *prices, thru, t, pfEnd, newcomers int64) float64 {
	in := float64(r.uncached())
	lo, hi := max(thru, r.start), min(t, pfEnd)
	if hi <= lo {
		return 0
	}
	dur := float64(max(pfEnd-r.start, 1))
	rho := math.Float64frombits(l.est.rho.Load())
	if in > 0 || rho <= 0 {
		rho = in / max(dur, minPrefillNS)
	}
	return l.prefillPower(r, pr, rho, newcomers)*float64(hi-lo)/1e6 + pr.inJ*1000*in*float64(hi-lo)/dur
}

// estPrefillEnd returns where r's prefill ended, or is expected to end,
// as the request path can tell at t: placed by the sampler, or expected
// from the prefill time learned, or one token's even share of its life
// before either.
func (l *Ledger) estPrefillEnd(r *Account, t int64) int64 {
	if pfEnd := r.est.pfEnd.Load(); pfEnd >= 0 {
		return pfEnd
	}
	n := float64(r.uncached())
	if n <= 0 {
		n = math.Float64frombits(l.est.meanIn.Load())
	}
	if th, ok := l.est.pfCoefs(); ok {
		return placedPrefillEnd(r.start, th, n, l.est.pfMoveNS.Load())
	}
	return r.start + (t-r.start)/int64(r.Output()+1)
}

// prefillPower returns the power, W, of r's prefill at input rate rho:
// its share, by input rate, of the prefill pool of the newest interval
// (less what it weighed there itself), joined by the requests that came
// since, each taken to be in prefill at the batch's input rate and to add
// one prefill's power to the pool, or one prefill's power alone when
// nothing else is in prefill; with the pool's part of the newest
// interval's residual, laid as the split lays it (see residual).
func (l *Ledger) prefillPower(r *Account, pr *prices, rho float64, came int64) float64 {
	if rho <= 0 {
		return 0
	}
	counted := math.Float64frombits(r.est.rho.Load())
	joined := 1 - min(1, counted/rho) // how much of it the pool did not count
	newcomers := max(0, float64(came)-joined)
	others := max(0, pr.rho-counted) + newcomers*math.Float64frombits(l.est.rho.Load())
	pool := pr.pfPoolW + pr.pfAddW*(joined+newcomers)
	if pr.rho-counted <= 1e-12*pr.rho {
		pool = pr.pfLoneW + pr.pfAddW*newcomers // alone but for the newcomers
	}
	kPf, _ := residual(pool, pr.restW, pool+pr.restW+pr.residW)
	return pool * kPf * rho / (others + rho)
}

// running is what the estimates know of the requests running, published
// by the sampler (see Ledger.runningNow). provN packs the number of
// requests active at provThru (low 32 bits) with how many of them had
// ended by the last settle (high 32 bits), and provOff sums those ends'
// times after provThru, ns. live packs the number of active requests not
// ended at the last settle (low 32 bits) with the inbox's ended counts
// summed just before it counted them (high 32 bits, modulo 2³²); liveEndT
// is the inbox's endT then, and liveT the time of the settle that stored
// them. adopted counts the requests adopted since the last settle that
// were running at its time (see noteAdopted).
type running struct {
	provN    atomic.Uint64
	provOff  atomic.Int64
	live     atomic.Uint64
	liveEndT atomic.Uint64
	liveT    atomic.Int64
	adopted  atomic.Int64
}

// noteAdopted counts the requests just adopted (rs): they left the
// inbox's count, and until the next settle counts them among the running,
// runningNow counts them here, those not ended by that settle's time (an
// end after it is among the ends it subtracts).
func (p *published) noteAdopted(rs []*Account) {
	var n int64
	liveT := p.liveT.Load()
	for _, r := range rs {
		if e := r.end.Load(); e == notEnded || e > liveT {
			n++
		}
	}
	if n > 0 {
		p.adopted.Add(n)
	}
}

// countRunning publishes, at the settle at t, what runningNow reads: the
// requests active at provThru and their ends since, and the active
// requests not ended, with the inbox's end counts summed before they were
// looked at (an End between the two is then missed by neither: a request
// that ends in between is counted once too often, until the next settle).
func (l *Ledger) countRunning(t int64) {
	p := &l.est
	endedSum, endT := l.in.endedSum()
	pThru := p.provThru.Load()
	var live, atThru, thruEnded, thruOff int64
	for _, r := range l.reqs.active {
		s := &r.st
		e := r.end.Load()
		if r.start < pThru && (!s.endSeen || s.end > pThru) {
			atThru++
			if e != notEnded {
				thruEnded++
				thruOff += max(0, e-pThru)
			}
		}
		if e == notEnded {
			live++
		}
	}
	if v := uint64(uint32(min(live, math.MaxUint32))) | uint64(uint32(endedSum))<<32; v != p.live.Load() || endT != p.liveEndT.Load() {
		// liveT is only the origin of the end times' offsets, so it
		// moves only with what it refers to.
		p.live.Store(v)
		p.liveEndT.Store(endT)
		p.liveT.Store(t)
	}
	p.adopted.Store(0)
	store(&p.provN, uint64(uint32(min(atThru, math.MaxUint32)))|uint64(uint32(min(thruEnded, math.MaxUint32)))<<32)
	if thruOff != p.provOff.Load() {
		p.provOff.Store(thruOff)
	}
}

// runningNow returns what the request path can tell, without a lock, of
// the tracked requests running now (see running): those not ended at the
// last settle, plus those waiting in the inbox, less the ends counted
// since; the ends since then, with the sum of their times after the
// settle (ns); and the newcomers, the requests adopted since the last
// settle or waiting. A request that ended or started during that settle
// may be counted once too often or too seldom.
func (l *Ledger) runningNow() runningNow {
	p := &l.est
	v := p.live.Load()
	queued, ended, endT := l.in.waiting()
	k := uint32(ended) - uint32(v>>32)
	adopted := p.adopted.Load()
	// The times are summed modulo 2⁶⁴; their offsets from the settle's
	// time are small, so their sum comes out exact.
	return runningNow{
		n:         int64(uint32(v)) + queued + adopted - int64(k),
		ends:      int64(k),
		endOff:    int64(endT - p.liveEndT.Load() - uint64(k)*uint64(p.liveT.Load())),
		newcomers: queued + adopted,
	}
}

// runningNow is what Ledger.runningNow returns.
type runningNow struct{ n, ends, endOff, newcomers int64 }

// staticTime returns ∫ ds/n(s) over (thru, t], in ns, for the number n of
// requests running, r among them: the static power is shared by time
// among the requests active at each instant, so r's share of it moves
// with their number, from n0 at thru (the requests the sampler counted
// then) to n1 now, through the ends counted since.
func (l *Ledger) staticTime(r *Account, thru, t int64, now runningNow) float64 {
	p := &l.est
	pn := p.provN.Load()
	n0 := float64(max(1, uint32(pn)))
	n1, ends, endOff := now.n, now.ends, now.endOff
	// The ends in (thru, t]: those the last settle saw after provThru,
	// and those counted since, with their times.
	pThru, liveT := p.provThru.Load(), p.liveT.Load()
	thruEnded, thruOff := int64(uint32(pn>>32)), p.provOff.Load()
	if e, ended := r.Ended(); ended {
		// The request ran until t: it is among the running, not among
		// the ends that thin them out. Its own end was counted with the
		// others (Ledger.End), after the last settle or, before it, among
		// those of the requests active at provThru.
		n1++
		switch {
		case e > liveT && ends > 0:
			ends--
			endOff -= e - liveT
		case r.start < pThru && e > pThru && thruEnded > 0:
			thruEnded--
			thruOff -= e - pThru
		}
	}
	k := float64(thruEnded) + float64(ends)
	if thru > pThru {
		// provN counts the requests active at provThru, not at thru: this
		// request, and any that started with it, came later. At thru at
		// least those running now and those that ended since were active.
		n0 = max(n0, float64(max(1, n1))+k)
	}
	var mean float64
	if k > 0 {
		mean = (float64(thruOff) + float64(thruEnded)*float64(pThru-thru) +
			float64(endOff) + float64(ends)*float64(liveT-thru)) / k
	}
	return integrateInverse(float64(t-thru), n0, float64(max(1, n1)), k, mean)
}

// integrateInverse returns ∫ ds/n(s) over a span of tau ns in which the
// number of requests goes from n0 to n1 (both positive) through k ends
// whose mean time is mean ns into the span: n(s) goes linearly from n0 to
// n1 over a part of the span whose midpoint is that mean time, and stays
// n0 before it or n1 after it. For ends spread evenly over the span that
// is the mean of 1/n for n linear, ln(n0/n1)/(n0−n1) per ns; ends bunched
// at the span's end leave most of it at n0.
func integrateInverse(tau, n0, n1, k, mean float64) float64 {
	if math.Abs(n0-n1) < 1e-9*n0 {
		return tau / n0
	}
	inv := math.Log(n0/n1) / (n0 - n1) // the mean of 1/n, n linear from n0 to n1
	if k <= 0 || tau <= 0 || math.IsNaN(mean) {
		return tau * inv
	}
	f := min(max(mean/tau, 0), 1)
	if f >= 0.5 {
		lin := 2 * (1 - f) * tau
		return (tau-lin)/n0 + lin*inv
	}
	lin := 2 * f * tau
	return lin*inv + (tau-lin)/n1
}
