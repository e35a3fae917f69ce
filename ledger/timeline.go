package ledger

// This file is the sampler's view of each request: the timeline of its
// reports, where its prefill ended, and its decode step. Observe notes the
// reports (ledger.go); placing a prefill teaches the model stage the
// prefill time and the batch's step and rate, and nothing else writes a
// timeline.

// point is one observed report: the cumulative counts first seen at a read,
// placed at the estimated report time t. in counts the uncached input
// tokens: a cached count that comes later lowers it.
type point struct {
	t       int64
	out, in uint64
}

// sampled is the sampler's own view of a request.
type sampled struct {
	// endSeen, seenOut and seenIn come first: they are all a read
	// touches of a running request that reported nothing new. seenOut
	// and seenIn are its latest point's counts (see addPoint).
	endSeen         bool
	seenOut, seenIn uint64
	pts             []point
	known           int64 // the latest report time; every interval up to it is known
	pfEnd           int64 // one decode step before the first output token; -1 unknown
	step            int64 // that decode step, ns
	end             int64
	firstN          uint64 // tokens of a first report that was a chunk, until the next report places the prefill
	firstT          int64
	// rhoNow is its input rate as the prefill pool of the newest interval
	// weighed counted it (its rate times its share of that interval).
	rhoNow float64
	// batch0 is the roster's request-ns of activity when the request was
	// adopted: what it is at the end, less batch0, over the request's
	// life is the mean batch it ran in.
	batch0 float64
	// inline holds the first points, so that a short request's timeline
	// costs no allocation of its own.
	inline [2]point
}

// last returns the request's latest report.
func (s *sampled) last() point { return s.pts[len(s.pts)-1] }

// stepTokens is how many tokens past the first report time a request's
// decode step; fewer, over a read interval that is about as long as a
// step, would time it to within a factor of two.
const stepTokens = 3

// observe notes what r has reported as of the read at t (its reports
// first seen now are placed at rep, the middle of the read interval): its
// end (notEnded before End) and its output and input tokens, loaded in
// that order.
func (l *Ledger) observe(r *Account, t, rep, end int64, o, in uint64) {
	s := &r.st
	if s.endSeen {
		return
	}
	ended := end != notEnded
	if c := r.cached.Load(); c != 0 {
		in -= min(c, in)
	}
	if !ended && o == s.seenOut && in == s.seenIn && t-r.start <= l.cfg.MaxAge {
		return // nothing new: the timeline stands as it is
	}
	// When the reports first seen now were made: at the middle of the
	// read, unless told better. End follows a request's last report, as
	// a rule at once, so reports seen with the end are placed at it; a
	// stamped chunk that brought the output to what the read saw, and a
	// stamped first report, are placed at their stamps.
	at := max(rep, r.start)
	if ended {
		at = end
	}
	if ct, c := r.chunkReport(); c == o && o != s.seenOut {
		at = min(max(ct, s.last().t, r.start), t)
	}
	if s.seenOut == 0 && o > 0 {
		if f, n := r.firstOutput(); n > 0 && n <= o {
			// Its tokens are placed when they came, and what the read
			// saw beyond them after.
			f = min(max(f, s.last().t), t)
			if n < o {
				l.report(r, f, n, in)
				at = max(at, f)
			} else {
				at = f
			}
		}
	}
	if ended {
		s.endSeen, s.end = true, end
	} else if t-r.start > l.cfg.MaxAge {
		s.endSeen, s.end = true, r.start+l.cfg.MaxAge
		r.setFlag(FlagExpired)
		l.pub.expired.Add(1)
	}
	if s.endSeen {
		at = min(at, s.end)
		if ended {
			l.model.ended = min(l.model.ended+1, nFeat+1)
		}
		if ended && o > 0 {
			l.model.prefill.addWhole(float64(in), float64(o), float64(s.end-r.start)/nsPerSecond, l.meanBatch(r))
		}
	}
	l.report(r, at, o, in)
	if s.endSeen && s.pfEnd < 0 {
		s.pfEnd, s.step = s.end, 0 // no output: the whole request was prefill
	}
	if s.endSeen && s.firstN > 0 {
		// It ended before reporting enough to time its step: its reports
		// since the first time it as well as they can.
		if p := s.last(); p.out > s.firstN {
			l.placeFromRate(r, p.t, p.out, p.in)
		}
		s.firstN = 0
	}
}

// report notes that r had reported o output and in uncached input tokens
// by at: a new point of its timeline, and the prefill's placement when
// they are its first output tokens or time its first report's.
func (l *Ledger) report(r *Account, at int64, o, in uint64) {
	s := &r.st
	last := s.last()
	if o == last.out && in == last.in {
		return
	}
	at = max(at, last.t)
	known := at
	switch {
	case last.out == 0 && o > 0:
		if !l.placePrefill(r, at, o, in) && !s.endSeen {
			// The first chunk hides when decode began; the next
			// report's rate tells. Until then the intervals since
			// the previous report wait.
			known = s.known
		}
	case s.firstN > 0 && o > s.firstN:
		if !l.placeFromRate(r, at, o, in) && !s.endSeen {
			known = s.known
		}
	}
	l.addPoint(r, point{t: at, out: o, in: in})
	s.known = max(s.known, known)
	if !s.endSeen || o >= 2*stepTokens {
		if rate := s.ownRate(); rate > 0 {
			l.model.batch.noteRate(rate)
		}
	}
	if in != last.in && in > 0 {
		l.model.prefill.note(float64(in))
	}
}

// placePrefill sets the end of r's prefill when its first output tokens,
// n of them, are first seen at time at, and reports whether the placement
// is final. The prefill ends one decode step before the first token, and
// the n tokens took a step each, so it ended about n steps before at; the
// request's next reports give its step, and until then the batch's
// recent step places it for now. A request that reports once, at its end,
// is placed by the prefill time learned for its uncached prompt of in
// tokens, or, before one is learned, given one token's even share of its
// time.
func (l *Ledger) placePrefill(r *Account, at int64, n, in uint64) bool {
	s := &r.st
	even := r.start + (at-r.start)/int64(n+1) // one token's even share
	sec, byPrompt := l.model.prefill.seconds(float64(in))
	step := l.model.batch.step
	if step <= 0 {
		step = float64(at-r.start) / float64(n+1)
	}
	if s.endSeen {
		// The n tokens' own rate is unknown: keep at least one token's
		// even share of (start, at] for decode.
		latest := at - (at-r.start)/int64(n+1)
		s.pfEnd = even
		if st, ok := l.model.prefill.stepSeconds(l.meanBatch(r)); ok && l.model.prefill.fromWhole() {
			s.pfEnd = min(wholePrefillEnd(r.start, at, sec, float64(n)*st), latest)
			step = st * nsPerSecond
		} else if byPrompt {
			s.pfEnd = min(r.start+int64(sec*nsPerSecond), latest)
		}
		s.step = min(int64(step), at-s.pfEnd)
		if byPrompt && in > 0 {
			l.model.batch.noteRho(float64(in) / max(float64(s.pfEnd-r.start), minPrefillNS))
		}
		return true
	}
	// The decode of n tokens took n steps of (start, at]; at most all of
	// it.
	pfEnd := at - int64(min(step*float64(n), float64(at-r.start)))
	if byPrompt && n > 2 {
		// A chunk's length at the batch's step is off by the request's
		// own rate times the chunk; the learned prefill time is not.
		pfEnd = min(r.start+int64(sec*nsPerSecond), at-(at-r.start)/int64(n+1))
	}
	s.pfEnd, s.step = max(r.start, pfEnd), int64(step)
	s.firstN, s.firstT = n, at
	return false
}

// meanBatch returns the mean number of requests active over r's life so
// far (itself included).
func (l *Ledger) meanBatch(r *Account) float64 {
	life := float64(l.reqs.prevRead - r.start)
	if life <= 0 {
		return 1
	}
	return max(1, (l.reqs.batchNS-r.st.batch0)/life)
}

// wholePrefillEnd returns the end of the prefill of a request that ran
// from start to end, whose prefill the whole-request fit puts at pf
// seconds and its decode at dec: what the fit does not explain of its
// life is laid on each in proportion to its variance, each term taken as
// uncertain in proportion to itself (as the split lays an interval's
// residual), which is the least-squares estimate of each given their sum.
func wholePrefillEnd(start, end int64, pf, dec float64) int64 {
	life := float64(end-start) / nsPerSecond
	if pf+dec <= 0 {
		return start
	}
	pf += (life - pf - dec) * pf * pf / (pf*pf + dec*dec)
	return start + int64(min(max(pf/life, 0), 1)*float64(end-start))
}

// placeFromRate places the prefill of a request from the rate of its
// reports after the first: the first report's n tokens took as long at
// that rate, and the prefill ended one step before the first of them. A
// later report that is the request's last, and smaller than the first,
// times its tokens poorly (the request may idle before it ends); the
// learned prefill time then places the prefill if it can. A placement
// that is not poor teaches the model stage the prefill time and the
// batch's step.
func (l *Ledger) placeFromRate(r *Account, at int64, o, in uint64) bool {
	s := &r.st
	dt := at - s.firstT
	if dt <= 0 || o-s.firstN < stepTokens && !s.endSeen {
		return false
	}
	perToken := float64(dt) / float64(o-s.firstN)
	byRate := s.firstT - int64(perToken*float64(s.firstN))
	poor := s.endSeen && o-s.firstN < s.firstN
	if sec, ok := l.model.prefill.seconds(float64(in)); poor && ok {
		byRate = max(r.start+int64(sec*nsPerSecond), byRate)
	}
	s.pfEnd = max(r.start, min(s.firstT, byRate))
	s.step, s.firstN = int64(perToken), 0
	if !poor {
		l.model.prefill.add(float64(in), float64(s.pfEnd-r.start)/nsPerSecond)
		l.model.batch.noteStep(perToken)
		if in > 0 {
			l.model.batch.noteRho(float64(in) / max(float64(s.pfEnd-r.start), minPrefillNS))
		}
	}
	return true
}

// addPoint appends p to r's timeline, growing it into a recycled slice
// when the inline storage is full.
func (l *Ledger) addPoint(r *Account, p point) {
	s := &r.st
	if len(s.pts) == cap(s.pts) {
		if grown, ok := l.books.reuse(len(s.pts)); ok {
			s.pts = append(grown, s.pts...)
		}
	}
	s.pts = append(s.pts, p)
	s.seenOut, s.seenIn = p.out, p.in
}

// ownRate returns the request's output tokens per ns since its prefill,
// as reported, or 0 before its prefill is placed for good.
func (s *sampled) ownRate() float64 {
	if s.pfEnd < 0 || s.firstN > 0 || len(s.pts) == 0 {
		return 0
	}
	last := s.last()
	if last.t <= s.pfEnd || last.out == 0 {
		return 0
	}
	return float64(last.out) / float64(last.t-s.pfEnd)
}

// prefillEnd returns the end of the prefill moved shift decode steps
// after pfEnd, within the request, or -1 when it is not placed.
func (s *sampled) prefillEnd(shift float64) int64 {
	if s.pfEnd < 0 {
		return -1
	}
	e := s.pfEnd + int64(shift*float64(s.step))
	if s.endSeen {
		e = min(e, s.end)
	}
	return e
}

// activeIn reports whether the request was active in (a, b].
func (s *sampled) activeIn(start, a, b int64) bool {
	return start < b && (!s.endSeen || s.end > a)
}

// span returns the request's active span clipped to (a, b].
func (s *sampled) span(start, a, b int64) (int64, int64) {
	lo, hi := max(start, a), b
	if s.endSeen {
		hi = min(hi, s.end)
	}
	return lo, max(lo, hi)
}

// outputIn returns the output tokens produced in (a, b], spreading each
// report's tokens evenly since the previous report, and the first report's
// since pfEnd, the end of prefill (-1 when not placed).
func (s *sampled) outputIn(a, b, pfEnd int64) float64 {
	var sum float64
	for m := 1; m < len(s.pts); m++ {
		p0, p1 := s.pts[m-1], s.pts[m]
		d := p1.out - p0.out
		if d == 0 || p1.t <= a {
			continue
		}
		if p0.t >= b {
			break
		}
		lo := p0.t
		if p0.out == 0 && pfEnd >= 0 {
			lo = min(max(pfEnd, p0.t), p1.t)
		}
		sum += float64(d) * overlap(lo, p1.t, a, b)
	}
	return sum
}

// overlap returns the fraction of (lo, hi] inside (a, b]; a zero-length
// (lo, hi] counts whole when hi is inside.
func overlap(lo, hi, a, b int64) float64 {
	if hi <= lo {
		if hi > a && hi <= b {
			return 1
		}
		return 0
	}
	x0, x1 := max(lo, a), min(hi, b)
	if x1 <= x0 {
		return 0
	}
	return float64(x1-x0) / float64(hi-lo)
}
