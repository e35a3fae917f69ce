package ledger

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/otelenergy/otelenergy/ring"
)

// timeDev is the sampler's state for one of [Config.TimeRings].
type timeDev struct {
	ring *ring.Ring
	cur  ring.Cursor // through the ring's points split so far

	// Published.
	splitMJ      atomic.Uint64
	unattributed atomic.Uint64
	through      atomic.Int64  // split up to here; math.MinInt64 before the first point
	rate         atomic.Uint64 // float64 bits: the last interval's mJ per ns of request time
}

// newTimes returns the time rings' state.
func newTimes(rings []*ring.Ring) []timeDev {
	times := make([]timeDev, len(rings))
	for i, r := range rings {
		times[i].ring = r
		times[i].through.Store(math.MinInt64)
	}
	return times
}

// settleTimes splits every interval of the time rings pushed so far and
// returns how far they let requests become final: the oldest newest point
// among them, except that a ring that has not stepped for horizon (its
// source stalled or failing; Config.TimeHorizon) holds nothing back, and
// then timeStall is the time up to which its balances are complete. A ring's interval is
// ready as soon as its end is pushed: a split by time needs no report.
func (l *Ledger) settleTimes(t, horizon int64) (through, timeStall int64) {
	through, timeStall = math.MaxInt64, math.MaxInt64
	for i := range l.times {
		td := &l.times[i]
		for {
			j, p, ok := td.cur.Peek(td.ring.View())
			if !ok {
				break
			}
			if iv, ok := td.cur.Advance(j, p); ok {
				td.splitMJ.Add(iv.EnergyMJ)
				l.splitTime(i, iv.T0, iv.T1, iv.EnergyMJ)
			}
		}
		tThrough, _ := td.cur.Last()
		if !td.cur.Primed() {
			tThrough = l.reqs.firstRead
		} else {
			td.through.Store(tThrough)
		}
		if t-horizon > tThrough {
			timeStall = min(timeStall, tThrough)
			tThrough = t - horizon
		}
		through = min(through, tThrough)
	}
	return through, timeStall
}

// splitTime divides the energy e of time ring i over (a, b] among the
// requests active in it as the static part is split: at every instant
// equally among the requests active then (see coverage), by cumulative
// rounding, and the time with none to the ring's unattributed energy.
//
// Invariant: every millijoule of e goes to exactly one request or to the
// ring's unattributed counter.
func (l *Ledger) splitTime(i int, a, b int64, e uint64) {
	td := &l.times[i]
	if b <= a || e == 0 {
		td.unattributed.Add(e)
		return
	}
	parts := l.buf.feat.parts[:0]
	for idx, r := range l.reqs.active {
		s := &r.st
		if !s.activeIn(r.start, a, b) {
			continue
		}
		lo, hi := s.span(r.start, a, b)
		parts = append(parts, part{r: r, idx: idx, lo: lo, hi: hi})
	}
	l.buf.feat.parts = parts
	dt := float64(b - a)
	covered := coverage(parts, a, b, spanTime, true, &l.buf.feat.sweep)
	shares := slices.Grow(l.buf.shares[:0], len(parts))[:len(parts)]
	l.buf.shares = shares
	clear(shares)
	given := give(e, parts, byCoverage, dt, shares)
	var cum float64 // the requests' time, summed as give sums it
	for k := range parts {
		cum += parts[k].cov
		if shares[k] > 0 && l.cfg.TimeGive != nil {
			l.cfg.TimeGive(parts[k].r, i, shares[k])
		}
	}
	td.unattributed.Add(e - given)
	if covered > 0 && cum > 0 {
		td.rate.Store(math.Float64bits(float64(given) / cum))
	}
}

// TimeSplit returns, for time ring i, the energy of every interval split
// so far and the part of it that went to no request, in mJ: the requests'
// shares add up to split − unattributed exactly. Safe from any goroutine.
func (l *Ledger) TimeSplit(i int) (split, unattributed uint64) {
	td := &l.times[i]
	return td.splitMJ.Load(), td.unattributed.Load()
}

// TimeThrough returns the instant up to which time ring i is split, and
// its last interval's energy per nanosecond of a request's time there, in
// mJ/ns: a request's share of what is not split yet is about that rate
// times its time since. ok is false before the ring's first point. Safe
// from any goroutine.
func (l *Ledger) TimeThrough(i int) (through int64, rate float64, ok bool) {
	td := &l.times[i]
	through = td.through.Load()
	if through == math.MinInt64 {
		return 0, 0, false
	}
	return through, math.Float64frombits(td.rate.Load()), true
}
