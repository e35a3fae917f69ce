package ledger

import (
	"math"
	"slices"
	"sync/atomic"
)

// This file is the settlement stage: once the intervals are split, it
// finalizes the requests whose intervals are all split on every device
// that holds them back, lets go of them (their token counts retired,
// their timelines recycled), prunes the timelines of the others to what
// is not split yet, reconciles the escrow of requests split while silent,
// and runs the provisional split behind the estimates. Settle is the one
// place where the stages meet, in one direction: intake (Observe, before
// it), then per device intervals, model and split, then settlement.

// settlement is the settlement stage's books: what it keeps of the
// requests it let go. Sampler-owned, but for the counters, which anyone
// may read.
type settlement struct {
	// free holds timelines of released requests for addPoint to reuse.
	free [][]point
	// retiredOut and retiredIn sum the tokens of the requests let go, as
	// counted when they were (see retire).
	retiredOut, retiredIn atomic.Uint64
	// escN counts the requests that had a share escrowed; escAssumed and
	// escReported sum, as float64 bits, their tokens assumed in the
	// intervals split at the horizon and those they reported for the same
	// time (see Escrow).
	escN                    atomic.Uint64
	escAssumed, escReported atomic.Uint64
}

// finalize makes r final: its end is split on every device, so its
// figure is complete. It is flagged forced where a device's silence, not
// its steps, vouched for the time up to its end (stall for the devices,
// timeStall for the time rings). The caller hands it to its owner then.
func (b *settlement) finalize(r *Account, stall, timeStall int64) {
	s := &r.st
	if s.end > stall {
		r.setFlag(FlagForced)
	}
	if s.end > timeStall {
		r.setFlag(FlagTimeForced)
	}
	r.through.Store(s.end)
	b.release(r)
	r.final.Store(true)
}

// release retires r and returns its timeline to the free list.
func (b *settlement) release(r *Account) {
	b.retire(r)
	if cap(r.st.pts) > len(r.st.inline) && len(b.free) < 1024 {
		b.free = append(b.free, r.st.pts[:0])
	}
	r.st.pts = nil
}

// reuse returns a recycled timeline with room for more than n points,
// and false when there is none.
func (b *settlement) reuse(n int) ([]point, bool) {
	k := len(b.free)
	if k == 0 || cap(b.free[k-1]) <= n {
		return nil, false
	}
	pts := b.free[k-1][:0]
	b.free = b.free[:k-1]
	return pts, true
}

// retire takes r's token counts into the retired totals and marks its
// counters, in one atomic operation each, so that every later report is
// seen by its caller as not counted here (see retiredBit). It is called
// once per request: when it is released, dropped or flushed from the
// inbox.
func (b *settlement) retire(r *Account) {
	if o := r.out.Or(retiredBit) &^ retiredBit; o != 0 {
		b.retiredOut.Add(o)
	}
	if i := r.in.Or(retiredBit) &^ retiredBit; i != 0 {
		b.retiredIn.Add(i)
	}
	r.cached.Or(retiredBit)
}

// reconcile counts r's escrow once its end is seen: the tokens assumed
// against those its reports put in the same time.
func (b *settlement) reconcile(r *Account) {
	s := &r.st
	if s.escTok <= 0 {
		return
	}
	rep := s.outputIn(r.start, s.escHi, s.pfEnd)
	b.escN.Add(1)
	b.escAssumed.Store(math.Float64bits(math.Float64frombits(b.escAssumed.Load()) + s.escTok))
	b.escReported.Store(math.Float64bits(math.Float64frombits(b.escReported.Load()) + rep))
	s.escTok = 0
}

// prune drops the points of r's timeline that every device has split
// past, keeping the newest of them as the anchor of the next segment.
func prune(r *Account, through int64) {
	pts := r.st.pts
	k := 0
	for k+1 < len(pts) && pts[k+1].t <= through {
		k++
	}
	if k > 0 {
		// The first output segment's start comes from pfEnd, which
		// survives pruning, so the anchor keeps its meaning.
		n := copy(pts, pts[k:])
		r.st.pts = pts[:n]
	}
}

// Settle splits every interval that is ready as of t and finalizes the
// requests whose intervals are all split, calling final for each. An
// interval is ready when every request active in it has reported past its
// end or ended, or when it is older than the horizon.
func (l *Ledger) Settle(t int64, final func(*Account)) { l.settle(t, false, final) }

// settle is Settle; with force, every interval pushed so far is ready.
// It runs the stages after intake in their one direction: per device,
// intervals, model and split (splitDevices), the time rings, the
// provisional split, then the settlement of the requests, and last it
// publishes the model for the estimates.
func (l *Ledger) settle(t int64, force bool, final func(*Account)) {
	minKnown := int64(math.MaxInt64)
	running := false // some request has not ended
	for _, r := range l.active {
		if !r.st.endSeen {
			minKnown = min(minKnown, r.st.known)
			running = true
		}
	}
	horizon := l.cfg.Horizon
	if force {
		horizon = -1 << 62
	}
	through, stall, flipSeen, splitNow := l.splitDevices(t, horizon, minKnown)
	timeHorizon := l.cfg.TimeHorizon
	if force {
		timeHorizon = horizon
	}
	tThrough, timeStall := l.settleTimes(t, timeHorizon)
	if through == math.MaxInt64 {
		through = t // every device lost: nothing more will be split
	}
	through = min(through, tThrough)
	if flipSeen {
		lost := func(i int) bool { return l.devs[i].lost }
		// A flip stops the prefill-time candidates (they learned under
		// the other placement of the prefill's end), so that they choose
		// nothing in the settle that flipped.
		if !l.fit.maybeFlip(lost) && l.fit.maybeRetau(lost) {
			l.replaceGuesses()
		}
	}
	provThru, prov := l.provisional(t, minKnown, splitNow, running)
	if prov {
		l.provThru.Store(provThru)
	}
	l.settleRequests(t, through, stall, timeStall, prov, final)
	l.publishModel()
}

// splitDevices learns from every ready interval of every device and then
// splits the learned ones, and returns how far every request's intervals
// are split on the devices that hold requests back (MaxInt64 when none
// does), how far only a stalled device's silence vouches for that
// (MaxInt64 when none stalled), and whether the model learned and an
// interval was split. minKnown is the earliest time up to which every
// running request has reported.
func (l *Ledger) splitDevices(t, horizon, minKnown int64) (through, stall int64, learnedAny, splitAny bool) {
	through, stall = math.MaxInt64, math.MaxInt64
	for i := range l.devs {
		d := &l.devs[i]
		// Learn from every ready interval first, then split the learned
		// ones: while the model is still too young to trust, intervals
		// wait for it, up to the horizon.
		learned := 0
		for {
			iv, teach, ok := d.ivs.nextLearn(minKnown, t, horizon, l.cfg.Horizon)
			if !ok {
				break
			}
			if teach {
				l.learn(d, iv.a, iv.b, iv.e)
				learned++
			}
		}
		f := &l.fit.devs[d.idx]
		if learned > 0 {
			f.chooseLag(learned)
			learnedAny = true
		}
		// While the model is young, intervals wait for it as long as the
		// horizon allows: the first requests of a run start together, and
		// what they did cannot be told apart until later requests have
		// started and ended at other times. Waiting holds every request's
		// timeline, so a busy service (more than maxWarmActive requests at
		// once) splits with what it has.
		young := (!f.m.usable || d.ivs.learnedFor() < l.cfg.Horizon*3/4) && len(l.active) <= maxWarmActive
		for {
			iv, split, ok := d.ivs.nextSplit(young, t, horizon)
			if !ok {
				break
			}
			if split {
				l.splitMJ.Add(iv.e)
				l.split(d, iv.a, iv.b, iv.e, minKnown)
				splitAny = true
			}
		}
		if d.lost {
			continue
		}
		dThrough, stalled := d.ivs.splitThrough(l.firstRead, t, horizon)
		if stalled {
			// A device that has not stepped for a horizon (stuck, or
			// failing every read, even the first) must not hold every
			// request back: they are finalized without its energy for
			// that time, and flagged. When it steps again, its energy
			// goes to the requests active in that interval.
			stall = min(stall, dThrough-f.lag)
			dThrough = t - horizon
		}
		through = min(through, dThrough-f.lag)
	}
	return through, stall, learnedAny, splitAny
}

// settleRequests is the settlement of the active requests at t, once
// every interval up to through is split: each one that ended by then is
// final and handed to final; the others publish their estimates (with
// prov, the provisional pass's shares) and keep only the part of their
// timeline not split yet. It then publishes what Estimate reads of the
// requests still running.
func (l *Ledger) settleRequests(t, through, stall, timeStall int64, prov bool, final func(*Account)) {
	// The ended count is summed before the requests are looked at: an
	// End between the two is then missed by neither (a request that ends
	// in between is counted once too often, until the next settle).
	endedSum, endT := l.in.endedSum()
	pThru := l.provThru.Load()
	var live, atThru, thruEnded, thruOff int64
	kept := 0
	for i, r := range l.active {
		s := &r.st
		if r.start < pThru && (!s.endSeen || s.end > pThru) {
			atThru++
			if e := r.end.Load(); e != notEnded {
				thruEnded++
				thruOff += max(0, e-pThru)
			}
		}
		if s.endSeen && s.end <= through {
			l.books.finalize(r, stall, timeStall)
			if final != nil {
				final(r)
			}
			continue
		}
		r.through.Store(max(r.start, through))
		if !s.endSeen && len(s.pts) == 1 && s.pts[0].out == 0 {
			// Silent since its start: it is taken to produce tokens at
			// the batch's rate once its prefill is expected to end, and
			// the estimate must know that rate as the batch's moves
			// (extrapolate publishes only a change). Here rather than at
			// every read: the splits that use it come with a settle.
			l.extrapolate(r)
		}
		if prov && !s.endSeen {
			l.publishEstimate(r, i)
		}
		if r.end.Load() == notEnded {
			live++
		}
		prune(r, through)
		l.active[kept] = r
		kept++
	}
	l.publishLive(t, live, endedSum, endT)
	l.adopted.Store(0)
	if v := uint64(uint32(min(atThru, math.MaxUint32))) | uint64(uint32(min(thruEnded, math.MaxUint32)))<<32; v != l.provN.Load() {
		l.provN.Store(v)
	}
	if thruOff != l.provOff.Load() {
		l.provOff.Store(thruOff)
	}
	clear(l.active[kept:])
	l.active = l.active[:kept]
	prune(&l.unowned, through)
	l.setActive(kept)
}

// publishEstimate publishes the estimate of r, the i-th active request,
// after a provisional pass. The estimate is published as one figure, the
// split part plus the provisional share of what follows, so that a reader
// never adds a provisional share to the real share of the same interval.
// Each is stored only when it changed: a store costs far more than a
// load. With nothing pending (the pass had nothing to weigh) it is the
// split part alone, and the power the split gave last.
func (l *Ledger) publishEstimate(r *Account, i int) {
	s := &r.st
	var acc struct{ mj, tok, tokJ, pf, pfS, pfT float64 }
	if i < len(l.provAcc) {
		acc = l.provAcc[i]
	}
	if v := r.mj.Load() + uint64(min(acc.mj, 1<<62)); v != r.estMJ.Load() {
		r.estMJ.Store(v)
	}
	old := r.powPrice.Load()
	price := math.Float32frombits(uint32(old >> 32))
	if acc.tok > 0 {
		price = float32(acc.tokJ / acc.tok)
	}
	if v := uint64(math.Float32bits(s.powW)) | uint64(math.Float32bits(price))<<32; v != old {
		r.powPrice.Store(v)
	}
	if v := packPair(s.pfMJ+acc.pf, s.inHat); v != r.pfIn.Load() {
		r.pfIn.Store(v)
	}
	var f float64
	if t := s.pfT + acc.pfT; t > 0 {
		f = (s.pfS + acc.pfS) / t
	}
	if v := packPair(s.tHat, f); v != r.pfTF.Load() {
		r.pfTF.Store(v)
	}
}

// publishModel publishes the model stage's figures for Estimate and
// Coefficients: the prefill time's coefficients once learned, the power
// model summed over devices, the recent power and the recent energy per
// output token.
func (l *Ledger) publishModel() {
	if th, ok := l.prefillTimeCoefs(); ok {
		for i, v := range th {
			l.pfCoef[i].Store(math.Float64bits(v))
		}
		l.pfCoefOK.Store(true)
	} else if l.pfCoefOK.Load() {
		// The counter's choice went back to the even share with no
		// timing learned: the estimates must not keep the prefill time
		// it replaced.
		l.pfCoefOK.Store(false)
	}
	if v := int32(l.fit.tau); v != l.tauPub.Load() {
		l.tauPub.Store(v)
	}
	th, w := l.fit.coefs()
	for i, v := range th {
		l.coef[i].Store(math.Float64bits(v))
	}
	l.avgW.Store(math.Float64bits(w))
	l.jOutBits.Store(math.Float64bits(l.jOut))
}

// Flush splits every interval pushed so far, as if the horizon had passed,
// finalizes the requests that ended by then, and then every other tracked
// request with what it has, marking it flushed; it calls final for each.
// Shutdown uses it so that nothing waits for a split that will not come.
func (l *Ledger) Flush(final func(*Account)) {
	if l.read {
		l.settle(l.prevRead, true, final)
	}
	l.in.drain(func(r *Account) {
		l.books.retire(r)
		r.setFlag(FlagFlushed)
		r.final.Store(true)
	})
	for _, r := range l.active {
		r.setFlag(FlagFlushed)
		l.books.release(r)
		r.final.Store(true)
		if final != nil {
			final(r)
		}
	}
	clear(l.active)
	l.active = l.active[:0]
	l.setActive(0)
	// Nothing is active or waiting: the retired counts are every
	// request's.
	l.tokOut.Store(l.books.retiredOut.Load())
	l.tokIn.Store(l.books.retiredIn.Load())
}

// provisional splits, with the current model, the intervals of every
// device that are pushed but not yet split, adding each request's share
// to its provisional energy, and returns the instant (on the requests'
// clock) through which it did so, and whether it ran. Many pending
// intervals are merged into at most provBudget/active groups, so that the
// work stays O(active) per read and bounded. It runs only when a device
// stepped or split since it last ran: otherwise what it would find is
// what it published then. running says some request has not ended.
func (l *Ledger) provisional(t, minKnown int64, split, running bool) (int64, bool) {
	if !running {
		// Every request has ended: no estimate is wanted.
		return t, true
	}
	stepped := split
	for i := range l.devs {
		if l.devs[i].ivs.stepped() {
			stepped = true
		}
	}
	if !stepped {
		return 0, false
	}
	// Many requests at once make each pass costly; then it runs less
	// often, and estimates lean on each request's recent power for
	// longer.
	if n := len(l.active); n > provBudget && t-l.provLast < provGap*int64(n/provBudget) {
		return 0, false
	}
	l.provLast = t
	l.provAcc = l.provAcc[:0] // sized when there is something to weigh
	thru := t
	groups := min(provMaxGroups, max(1, provBudget/len(l.active)))
	for i := range l.devs {
		d := &l.devs[i]
		if d.lost || !d.ivs.split.primed {
			continue
		}
		end := d.ivs.pending(groups, func(iv interval) {
			if len(l.provAcc) != len(l.active) {
				l.provAcc = slices.Grow(l.provAcc[:0], len(l.active))[:len(l.active)]
				clear(l.provAcc)
			}
			attr := attributable(d, iv.e)
			w := l.weigh(d, iv.a, iv.b, attr, minKnown, false, true)
			l.noteShares(w, attr, true)
		})
		thru = min(thru, end-l.fit.devs[i].lag)
	}
	return thru, true
}

// provBudget bounds the request-intervals one provisional pass weighs,
// and provMaxGroups the groups of intervals on one device.
const (
	provBudget    = 1024
	provMaxGroups = 128
	provGap       = 50e6 // ns between passes per provBudget requests beyond the first
)

// EscrowStats says how well the shares escrowed for silent requests
// matched what they reported. An interval that a request active in it has
// not reported past is split at the horizon with that request taken to
// produce tokens at its own recent rate (the batch's, for one that never
// reported) from its expected prefill end: its expected share is escrowed
// to it, and the other requests' figures become final. When it reports,
// the tokens it really produced in that time are known; the difference
// moves no energy (figures already exported are never revised) and is
// counted here, in tokens.
type EscrowStats struct {
	// Requests is how many requests had a share escrowed and have since
	// reported their end.
	Requests uint64
	// AssumedTokens is the output tokens those requests were taken to
	// produce in intervals split while they were silent; ReportedTokens
	// is what their reports put in the same time.
	AssumedTokens, ReportedTokens float64
}

// Escrow returns the escrow's reconciliation so far. It is safe from any
// goroutine.
func (l *Ledger) Escrow() EscrowStats {
	return EscrowStats{
		Requests:       l.books.escN.Load(),
		AssumedTokens:  math.Float64frombits(l.books.escAssumed.Load()),
		ReportedTokens: math.Float64frombits(l.books.escReported.Load()),
	}
}
