package ledger

import "math"

// Prefill time from the counter, for requests no timing places.
//
// A request that reports its output once, at its end, shows when it
// ended but not when its prefill did. The ledger places such a prefill by
// the prefill time it learned for the prompt (ttft), from requests that
// showed their first token or from whole requests under continuous
// batching. When neither is known (every client reports at its end and
// the requests decode at rates of their own, or no fit has seen enough
// yet), the placement is a guess: one token's even share of the request's
// time, a prefill far shorter than a long prompt's. The prefill energy of
// the intervals the prompt really ran in then goes to the requests beside
// it.
//
// The counter can tell. Each candidate prefill time per input token in
// taus places every guessed prefill its own way, and a model per
// candidate learns the intervals under that placement, as the lag
// candidates do under theirs. The one that explains the steps clearly
// best is taken, and every guessed prefill is placed again by it. The
// first candidate is the even share, so a ledger that finds nothing
// better keeps it. This is part of the model stage (fit); the placement
// itself is made where the requests' reports are noted (placePrefill, in
// Observe, through guessPrefill).

// taus are the candidate prefill times per input token, ns: from a small
// model on a large board (tens of thousands of prompt tokens a second) to
// a large model on a small one, √2 apart, so that the one taken is within
// 19% of the true time.
var taus = [...]float64{0, 30e3, 42e3, 60e3, 85e3, 120e3, 170e3, 240e3, 340e3, 480e3, 680e3, 960e3, 1360e3, 1920e3}

// tauMargin is how much less residual per interval another candidate's
// model must leave than the chosen one's before the ledger takes it.
const tauMargin = 0.95

// guessPrefill places r's prefill without timing: base is the even
// share's end, latest the latest end its output leaves room for, in its
// prompt's length.
func (l *Ledger) guessPrefill(r *Account, base, latest int64, in uint64) {
	s := &r.st
	s.pfGuess, s.pfBase, s.pfMax, s.pfIn = true, base, latest, float64(in)
	s.pfEnd = s.guessedEnd(r.start, taus[l.fit.tau])
}

// guessedEnd returns the end of a guessed prefill at tau ns per input
// token (the even share at 0), within [start, pfMax].
func (s *sampled) guessedEnd(start int64, tau float64) int64 {
	e := s.pfBase
	if tau > 0 {
		e = start + int64(math.Min(tau*s.pfIn, float64(s.pfMax-start)))
	}
	return max(start, min(e, s.pfMax))
}

// replaceGuesses places every active guessed prefill again, at the
// prefill time the model stage chose.
func (l *Ledger) replaceGuesses() {
	for _, r := range l.active {
		if s := &r.st; s.pfGuess {
			s.pfEnd = s.guessedEnd(r.start, taus[l.fit.tau])
		}
	}
}

// tauCands are one device's models under each candidate placement of
// the guessed prefills (taus), at the chosen lag.
type tauCands struct {
	m   [len(taus)]model
	rss [len(taus)]float64 // residual per interval at the last lag search
	// live says the candidates are learning; seen is the end of the last
	// interval learned with a guessed prefill in it, and tick counts the
	// intervals seen while live, for the stride.
	live bool
	seen int64
	tick int
}

// startTaus sets every candidate to m, the chosen lag's model before the
// first guessed interval, so that they start from one history.
func (d *devFit) startTaus(m *model) {
	if d.tc == nil {
		d.tc = new(tauCands)
	}
	if d.tc.live {
		return
	}
	d.tc.live = true
	for k := range d.tc.m {
		d.tc.m[k] = *m
	}
}

// stopTaus stops every device's candidates, which learned under a
// placement of the prefill's end that maybeFlip just changed: the next
// guessed prefill starts them again from the flipped model. Until then
// the choice of prefill time stands.
func (f *fit) stopTaus() {
	for i := range f.devs {
		if tc := f.devs[i].tc; tc != nil {
			tc.live = false
		}
	}
}

// learnTaus folds the interval (a, b] of device d, with energy y (J) and
// forgetting lambda, into the candidates' models; x is its features as
// placed now, and guessed says a guessed prefill is in it. Without one,
// every candidate learns x, so that their residuals stay comparable. The
// candidates learn only while guessed prefills come (within a model's
// memory of the last): a ledger whose requests all show timing pays
// nothing for them. With many requests active (active of them), placing
// each of them every way on every interval would make a sampler pass cost
// the candidates times the requests; the candidates then learn one
// interval in a stride that grows with the requests, all the same ones,
// so that the work per pass stays about that of one placement.
func (f *fit) learnTaus(d *devFit, a, b int64, x *[nFeat]float64, guessed bool, y, lambda float64, active int, src featureSource) {
	tc := d.tc
	if tc == nil || !tc.live {
		return
	}
	if guessed {
		tc.seen = b
	}
	if b-tc.seen > DefaultForget {
		// None for a model's memory: the choice stands for the next
		// guesses, and the candidates start again from the chosen lag's
		// model when they come.
		tc.live = false
		return
	}
	tc.tick++
	w := 1.0
	if active > maxLagSearch {
		stride := 1 + active/maxLagSearch
		if tc.tick%stride != 0 {
			return
		}
		// The model learned the chosen lag only: the candidates start
		// from its history, forget as it does over what they skip, and
		// weigh each interval they learn as the stride it stands for, so
		// that they hold as many intervals' worth as the chosen model
		// does and can be solved (minIntervals) whatever the stride.
		lambda = math.Pow(lambda, float64(stride))
		w = float64(stride)
	}
	for k := range taus {
		xk := *x
		if guessed && k != f.tau {
			xk, _ = src.learnFeatures(a, b, f.shift, taus[k])
		}
		tc.m[k].add(xk, y, lambda, w)
	}
}

// solveTaus solves the candidates' models and records each one's
// residual per interval.
func (d *devFit) solveTaus() {
	tc := d.tc
	if tc == nil || !tc.live {
		return
	}
	for k := range taus {
		m := &tc.m[k]
		if d.m.idleKnown {
			m.idleKnown, m.idleW = true, d.m.idleW
		}
		m.solve()
		tc.rss[k] = math.Inf(1)
		if m.usable && m.count() > 0 {
			// Rounding leaves a near-exact fit's residual a little below
			// zero; floored as solve floors it, so that the margin
			// compares residuals, not rounding.
			tc.rss[k] = max(m.rss(m.theta), 1e-12) / m.count()
		}
	}
}

// maybeRetau takes the candidate whose models, summed over the devices
// that learn (lost says which do not), leave clearly the least residual,
// and reports whether it changed; the chosen lag's model becomes that
// candidate's. The caller places the guessed prefills again.
func (f *fit) maybeRetau(lost func(i int) bool) bool {
	live := false
	for i := range f.devs {
		if tc := f.devs[i].tc; tc != nil && tc.live {
			live = true
			break
		}
	}
	if !live {
		return false
	}
	var sum [len(taus)]float64
	n := 0
	for i := range f.devs {
		d := &f.devs[i]
		if lost(i) || d.tc == nil || !d.tc.live {
			continue
		}
		n++
		for k := range taus {
			sum[k] += d.tc.rss[k]
		}
	}
	if n == 0 || math.IsInf(sum[f.tau], 1) {
		return false
	}
	best := f.tau
	for k := range taus {
		if sum[k] < sum[best] {
			best = k
		}
	}
	if best == f.tau || !(sum[best] < tauMargin*sum[f.tau]) {
		return false
	}
	f.tau = best
	for i := range f.devs {
		d := &f.devs[i]
		if lost(i) || d.tc == nil || !d.tc.live || !d.tc.m[best].usable {
			continue
		}
		d.cands[d.best] = d.tc.m[best]
		d.m = d.cands[d.best]
	}
	return true
}

// prefillTime returns the prefill time, in s, expected for a prompt of in
// tokens: the one learned from timing (ttft), or, while none can be, the
// one the counter chose for guessed prefills; false when neither is
// known. Where a silent request's prefill is expected to end must agree
// with where it will be placed when it reports: taken as decoding from
// its start, a request that reports a long prompt and a short answer at
// its end had been given tokens it never made, and End's estimate lost
// its prefill's part taking them back.
func (l *Ledger) prefillTime(in float64) (float64, bool) {
	th, ok := l.prefillTimeCoefs()
	if !ok {
		return 0, false
	}
	return prefillSeconds(th, in), true
}

// prefillTimeCoefs returns prefillTime's coefficients, as ttft.coefs
// does, for the estimates.
func (l *Ledger) prefillTimeCoefs() ([3]float64, bool) {
	if th, ok := l.fit.ttft.coefs(); ok {
		return th, true
	}
	if l.fit.tau > 0 {
		return [3]float64{0, taus[l.fit.tau] * 1000 / nsPerSecond, 0}, true
	}
	return [3]float64{}, false
}
