package ledger

import (
	"math"
	"slices"
	"sync/atomic"
)

// This file is the settlement stage and the one place where the stages
// meet, in one direction: intake (Observe, before it), then per device
// intervals, model and split, then the settlement of the requests. Only
// settlement decides when a figure is final, and only it holds memory
// across intervals (the requests' timelines, bounded by MaxActive).

// settlement is the settlement stage's books: what it keeps of the
// requests it let go. Sampler-owned, but for the counters, which anyone
// may read.
type settlement struct {
	// free holds timelines of released requests for addPoint to reuse.
	free [][]point
	// retiredOut and retiredIn sum the tokens of the requests let go, as
	// counted when they were (see retire).
	retiredOut, retiredIn atomic.Uint64
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
func (l *Ledger) settle(t int64, force bool, final func(*Account)) {
	minKnown := int64(math.MaxInt64)
	for _, r := range l.reqs.running {
		minKnown = min(minKnown, r.st.known)
	}
	running := len(l.reqs.running) > 0
	horizon, timeHorizon := l.cfg.Horizon, l.cfg.TimeHorizon
	if force {
		horizon, timeHorizon = -1<<62, -1<<62
	}
	l.model.prefill.solve()
	through, stall, split := l.splitDevices(t, horizon, minKnown)
	tThrough, timeStall := l.settleTimes(t, timeHorizon)
	if through == math.MaxInt64 {
		through = t // every device lost: nothing more will be split
	}
	through = min(through, tThrough)
	// With every request ended no estimate is wanted from a provisional
	// pass: each was read at its end, and a request that starts later is
	// priced by the newest split.
	prov := running && l.provisional(split)
	l.settleRequests(t, through, stall, timeStall, prov, final)
	l.publish()
}

// splitDevices learns from every ready interval of every device, solves
// the device's model over them, and then splits the learned ones. It
// returns how far every request's intervals are split on the devices that
// hold requests back (MaxInt64 when none does), how far only a stalled
// device's silence vouches for that (MaxInt64 when none stalled), and
// whether an interval was split. minKnown is the earliest time up to
// which every running request has reported.
func (l *Ledger) splitDevices(t, horizon, minKnown int64) (through, stall int64, splitAny bool) {
	through, stall = math.MaxInt64, math.MaxInt64
	learnedAny := false
	defer func() {
		if learnedAny {
			l.model.maybeFlip(func(i int) bool { return l.devs[i].lost })
		}
	}()
	for i := range l.devs {
		d := &l.devs[i]
		learned := false
		for {
			iv, teach, ok := d.ivs.nextLearn(minKnown, t, horizon, l.cfg.Horizon)
			if !ok {
				break
			}
			if teach && iv.T1 > iv.T0 {
				l.learn(d, iv)
				learned = true
			}
		}
		if learned {
			l.model.solve(d.idx)
			learnedAny = true
		}
		// While the model is not ready, intervals wait for it as long as
		// the horizon allows: the first requests of a run start together,
		// and what they did cannot be told apart until later requests
		// have started and ended at other times. With no request tracked
		// there is nothing to tell apart.
		wait := !l.model.devs[d.idx].ready && len(l.reqs.active) > 0
		for {
			iv, split, ok := d.ivs.nextSplit(wait, t, horizon)
			if !ok {
				break
			}
			if split {
				l.pub.splitMJ.Add(iv.EnergyMJ)
				l.split(d, iv, minKnown, d.ivs.newest())
				splitAny = true
			}
		}
		l.buf.kept.ok = false // the timelines move before the next pass
		if d.lost {
			continue
		}
		dThrough, stalled := d.ivs.splitThrough(l.reqs.firstRead, t, horizon)
		if stalled {
			// A device that has not stepped for a horizon (stuck, or
			// failing every read, even the first) must not hold every
			// request back: they are finalized without its energy for
			// that time, and flagged. When it steps again, its energy
			// goes to the requests active in that interval.
			stall = min(stall, dThrough-l.model.lag(d.idx))
			dThrough = t - horizon
		}
		through = min(through, dThrough-l.model.lag(d.idx))
	}
	return through, stall, splitAny
}

// attributable returns the part of e that belongs to the attributed
// processes on device d.
func attributable(d *device, e uint64) uint64 {
	if d.split && d.frac < 1 {
		return min(e, uint64(float64(e)*d.frac))
	}
	return e
}

// learn folds the interval iv of device d into the model stage: its
// features under every candidate timing (see timing.go), or under the
// chosen one alone while many requests are active.
func (l *Ledger) learn(d *device, iv interval) {
	q, m := &l.reqs, &l.model
	dm := &m.devs[d.idx]
	search := len(q.active) <= maxLagSearch
	// With nothing active every candidate sees the same features.
	idle := len(q.active) == 0 && len(q.unowned.st.pts) <= 1
	var xs [len(lags)][nFeat]float64
	var alt [nFeat]float64
	for c, lag := range lags {
		switch {
		case !search && c != dm.best:
		case idle && c > 0:
			xs[c] = xs[0]
		case c == dm.best:
			xs[c] = l.keep(d, iv, lag)
		default:
			xs[c] = buildFeatures(q.active, &q.unowned.st, m, iv.T0-lag, iv.T1-lag, m.shift, false, false, &l.buf.feat).x
		}
	}
	if search {
		lag := m.lag(d.idx)
		alt = buildFeatures(q.active, &q.unowned.st, m, iv.T0-lag, iv.T1-lag, 1-m.shift, false, false, &l.buf.feat).x
	}
	m.learn(d.idx, &xs, &alt, float64(attributable(d, iv.EnergyMJ))/1000, iv.T1-iv.T0, idle, search)
}

// split divides the energy of interval iv of device d among the requests
// active in it, with the device's current model (see divideInterval),
// and gives the shares to the requests.
//
// Invariant: every millijoule of iv.EnergyMJ goes to exactly one of a request,
// the unattributed counter, or the other-processes counter.
func (l *Ledger) split(d *device, iv interval, minKnown int64, newest bool) {
	attr := attributable(d, iv.EnergyMJ)
	l.pub.other.Add(iv.EnergyMJ - attr)
	if iv.T1 <= iv.T0 {
		l.pub.unattributed.Add(attr)
		l.onSplit(d, iv, nil, iv.EnergyMJ)
		return
	}
	f, wg, shares, rest := l.divideInterval(d, iv, attr)
	forced := iv.T1-l.model.lag(d.idx) > minKnown
	for i, mj := range shares {
		p := &f.parts[i]
		if mj > 0 {
			p.r.mj.Add(mj)
		}
		if forced && p.silent {
			p.r.setFlag(FlagForced)
		}
		if d.shared {
			p.r.setFlag(FlagShared)
		}
	}
	l.pub.unattributed.Add(rest)
	if f.x[fOutput] > 0 && wg.prices.tokJ > 0 {
		// The recent intervals price the tokens the estimates have not
		// seen: energy per token moves with the batch.
		l.model.batch.notePrice(wg.prices.tokJ, iv.T1-iv.T0)
	}
	if newest {
		l.noteNewest(d, &f, wg)
	}
	l.onSplit(d, iv, f.parts, iv.EnergyMJ-attr+rest)
}

// divideInterval is the split itself, which writes nothing but its
// scratch: the features of iv under the chosen timing, their weighing
// under the device's model, and the division of attr, the interval's
// attributable energy, into the parts' shares and the rest.
func (l *Ledger) divideInterval(d *device, iv interval, attr uint64) (featureSet, weighing, []uint64, uint64) {
	f, dm := l.splitFeatures(d, iv)
	wg := weigh(&f, dm, attr, float64(iv.T1-iv.T0), false)
	shares := slices.Grow(l.buf.shares[:0], len(f.parts))[:len(f.parts)]
	l.buf.shares = shares
	return f, wg, shares, divide(attr, wg, f.parts, shares)
}

// splitFeatures returns the features by which the interval iv of device d
// is split, under the chosen timing, and the device's model.
func (l *Ledger) splitFeatures(d *device, iv interval) (featureSet, *devModel) {
	q, m := &l.reqs, &l.model
	dm := &m.devs[d.idx]
	lag := m.lag(d.idx)
	if k := &l.buf.kept; k.ok && k.dev == d.idx && k.t0 == iv.T0-lag && k.t1 == iv.T1-lag && k.shift == m.shift {
		k.ok = false
		return k.f, dm
	}
	return buildFeatures(q.active, &q.unowned.st, m, iv.T0-lag, iv.T1-lag, m.shift, true, dm.usable, &l.buf.feat), dm
}

// keep builds the features of the interval iv of device d at the chosen
// lag for learn, with every share a split could need, and keeps them for
// that split (see keptFeatures). It returns their vector.
func (l *Ledger) keep(d *device, iv interval, lag int64) [nFeat]float64 {
	q, m, k := &l.reqs, &l.model, &l.buf.kept
	a, b := iv.T0-lag, iv.T1-lag
	k.f = buildFeatures(q.active, &q.unowned.st, m, a, b, m.shift, true, true, &k.buf)
	k.dev, k.t0, k.t1, k.shift, k.ok = d.idx, a, b, m.shift, true
	return k.f.x
}

// onSplit hands the interval iv of d, just split among parts (their
// shares in the scratch), to Config.OnSplit, with rest the mJ no part got.
func (l *Ledger) onSplit(d *device, iv interval, parts []part, rest uint64) {
	if l.cfg.OnSplit == nil {
		return
	}
	n := len(parts)
	reqs := slices.Grow(l.buf.hookReqs[:0], n)[:n]
	cov := slices.Grow(l.buf.hookCov[:0], n)[:n]
	for i := range parts {
		reqs[i] = parts[i].r
		// cov is a share of (a, b] in ns, at most b − a; the covers sum
		// to at most b − a, which truncation keeps.
		cov[i] = uint64(min(max(parts[i].cov, 0), float64(iv.T1-iv.T0)))
	}
	l.buf.hookReqs, l.buf.hookCov = reqs, cov
	l.cfg.OnSplit(d.idx, iv.T0, iv.T1, reqs, l.buf.shares[:n], rest, cov)
	clear(reqs) // hold no request past its split
}

// settleRequests is the settlement of the active requests once every
// interval up to through is split: each one that ended by then is final
// and handed to final; the others keep only the part of their timeline
// not split yet, and with prov publish their estimates.
func (l *Ledger) settleRequests(t, through, stall, timeStall int64, prov bool, final func(*Account)) {
	q := &l.reqs
	l.countRunning(t)
	kept := 0
	q.endedOut, q.endedIn = 0, 0
	for i, r := range q.active {
		if s := &r.st; s.endSeen && s.end <= through {
			l.books.finalize(r, stall, timeStall)
			if final != nil {
				final(r)
			}
			continue
		} else if s.endSeen {
			// Not retired yet: its counts are plain.
			q.endedOut += r.out.Load()
			q.endedIn += r.in.Load()
		}
		r.through.Store(max(r.start, through))
		if prov && !r.st.endSeen {
			// An ended request's estimate is read at its end, which the
			// sampler has seen: it needs nothing newer.
			l.publishEstimate(r, i)
		}
		prune(r, through)
		q.active[kept] = r
		kept++
	}
	clear(q.active[kept:])
	q.active = q.active[:kept]
	prune(&q.unowned, through)
	l.setActive(kept)
}

// Flush splits every interval pushed so far, as if the horizon had passed,
// finalizes the requests that ended by then, and then every other tracked
// request with what it has, marking it flushed; it calls final for each.
// Shutdown uses it so that nothing waits for a split that will not come.
func (l *Ledger) Flush(final func(*Account)) {
	q := &l.reqs
	if q.read {
		l.settle(q.prevRead, true, final)
	}
	l.in.drain(func(r *Account) {
		l.books.retire(r)
		r.setFlag(FlagFlushed)
		r.final.Store(true)
	})
	for _, r := range q.active {
		r.setFlag(FlagFlushed)
		l.books.release(r)
		r.final.Store(true)
		if final != nil {
			final(r)
		}
	}
	clear(q.active)
	q.active = q.active[:0]
	clear(q.running)
	q.running = q.running[:0]
	q.endedOut, q.endedIn = 0, 0
	l.setActive(0)
	// Nothing is active or waiting: the retired counts are every
	// request's.
	l.pub.tokOut.Store(l.books.retiredOut.Load())
	l.pub.tokIn.Store(l.books.retiredIn.Load())
}
