package attrib

import (
	"math"
	"slices"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
	"github.com/otelenergy/otelenergy/internal/idlepower"
	"github.com/otelenergy/otelenergy/internal/nnls"
	"github.com/otelenergy/otelenergy/ring"
)

// Terms of the power model (see the package doc).
//
// TermSM, TermSMMem and TermMem divide a process's SM and memory
// utilization by their overlap: TermSMMem is min(SM, MEM), the share of
// time a kernel ran while memory was busy; TermSM the SM time beyond it,
// TermMem the memory time beyond it. SM = TermSM + TermSMMem and
// MEM = TermSMMem + TermMem, so the older model Csm·SM + Cmem·MEM is the
// special case Csm·TermSM + (Csm+Cmem)·TermSMMem + Cmem·TermMem; the
// split's model can also give memory-bound SM less power than
// compute-bound SM (a negative Cmem before) with every coefficient, and
// every process's modelled power, non-negative.
const (
	TermStatic = iota
	TermSM
	TermMem
	TermEnc
	TermDec
	TermSMMem
	NumTerms
)

// TermNames are the terms' names, as the coefficient gauge labels them.
var TermNames = [NumTerms]string{"static", "sm", "memory", "encoder", "decoder", "sm_memory"}

// DefaultHold is how long an interval waits for the utilization samples
// that cover it: NVML's sample period is up to 1 s, and a sample is
// visible some hundreds of milliseconds after its timestamp.
const DefaultHold = 2 * time.Second

// DefaultHorizon is the time constant over which the model and the idle
// power forget.
const DefaultHorizon = 300 * time.Second

const (
	// guard is how far from any sample an interval must be to count as
	// idle, and how far an interval no sample covers looks for the
	// processes to give its energy: the counter's steps are located to
	// within about one update period, and a reading describes activity up
	// to a period before it.
	guard = int64(300 * time.Millisecond)
	// maxSpan is the longest span a sample is taken to describe: NVML's
	// longest sample period.
	maxSpan = int64(time.Second)
	// minRows is the effective number of model rows, about a second
	// each, before the model's weights are used, and minIntercept before
	// its static term is taken for the idle power.
	minRows      = 8
	minIntercept = 30
	// keepSegs is how long a sample's span is kept after the newest
	// interval split.
	keepSegs = int64(2 * time.Second)
	// maxModelJ caps a process's modelled energy in one interval (J): a
	// bound on the weights, far above any board's.
	maxModelJ = 1e6
	// minPeriod is NVML's shortest sample period (1/6 s): a shorter gap
	// between sampling instants is learned as this.
	minPeriod = int64(time.Second / 6)
	// sameInstant is how close two processes' stamps are to be one
	// sampling instant: the driver stamps each process's sample a few µs
	// apart.
	sameInstant = int64(5 * time.Millisecond)
	// keepPids is how long a process's newest sample end is kept.
	keepPids = int64(10 * time.Second)
	// huberK is how many mean absolute residuals a row's residual may
	// reach before it is down-weighed (about 3.8 standard deviations of
	// a normal noise); resDecay forgets the residuals over about 100
	// rows, so that the scale follows a board whose load changes.
	huberK = 3 * 1.25
	// huberFloorJ bounds the cutoff below: a residual of a few counter
	// quanta is never down-weighed, however well the rows before fitted.
	huberFloorJ = 0.005
	// maxOutRun is how many rows in a row may be down-weighed: more are
	// the board's power changing, which the model must follow, not one
	// glitch.
	maxOutRun = 3
	resDecay  = 0.99
)

// Bits of Board.pendNone: the listings around a pending interval.
const (
	noneAtEnd   = 1 << iota // the pass that pushed it listed no process
	noneAtStart             // the pass before did not either
)

// gapsT holds the recent gaps between sampling instants.
type gapsT = [9]int64

// Sample is one process's utilization over a span of time, on the ring's
// time scale (nanoseconds since the Monitor's epoch).
type Sample struct {
	Pid uint32
	// Key tells apart the processes that held Pid over time (the agent
	// passes the process's start time): shares go to (Pid, Key), so that
	// energy held for a process is not given to a later one on its pid.
	Key uint64
	// T1 ends the span. T0 starts it; when T0 is zero or not before T1,
	// the span starts at the board's previous sampling instant, or one
	// sample period before T1, whichever is later: NVML's sample
	// describes the time since the driver's previous sample.
	T0, T1 int64
	// SM, Mem, Enc and Dec are the utilization over the span, in percent.
	SM, Mem, Enc, Dec uint32
	// Unaligned marks a sample whose timestamp is not on the ring's
	// scale, given the span of the intervals it arrived with: it is never
	// stretched to a neighbouring interval.
	Unaligned bool
}

// Config configures a [Board].
type Config struct {
	// Hold is how long, past its end, an interval no sample has reached
	// yet waits before it is split without them; zero selects
	// DefaultHold, and a negative hold waits for nothing.
	Hold time.Duration
	// IdleWatts, when positive, is the idle power, and none is learned.
	IdleWatts float64
	// Horizon is the forgetting time constant; zero or less selects
	// DefaultHorizon.
	Horizon time.Duration
	// Dev is the board's index, as OnSplit reports it.
	Dev int
	// OnSplit, when set, is called once for each interval as it is
	// split, on Split's goroutine, before Split returns, with the
	// ledger's hook signature ([ring.OnSplit]): procs[k] got sharesMJ[k]
	// (zero shares included) and coverNS[k] of the interval's time (its
	// time shared equally among the processes with a share,
	// procshare.Cover), and restMJ is the interval's idle and
	// unattributed energy, so that Σ sharesMJ + restMJ is its energy. The
	// slices are the Board's scratch, valid only during the call. It is
	// how the agent converts each interval into emissions at the
	// intensity in force when it was metered.
	OnSplit ring.OnSplit[Proc]
}

// Proc is a process that an interval's split gave a share, as
// [Config.OnSplit] names it: its pid and its key (see [Sample]).
type Proc struct {
	Pid uint32
	Key uint64
}

// Result is what one [Board.Split] gave out.
type Result struct {
	// Pids, Keys and MJ are parallel: MJ[k] is the share of process
	// Pids[k] with Key Keys[k].
	Pids []uint32
	Keys []uint64
	MJ   []uint64
	// IdleMJ and UnattributedMJ are the idle and unattributed parts.
	IdleMJ, UnattributedMJ uint64
	// SplitMJ is the energy of the intervals split: the sum of all the
	// above.
	SplitMJ uint64
}

func (r *Result) reset() {
	r.Pids, r.Keys, r.MJ = r.Pids[:0], r.Keys[:0], r.MJ[:0]
	r.IdleMJ, r.UnattributedMJ, r.SplitMJ = 0, 0, 0
}

func (r *Result) give(pid uint32, key, mj uint64) {
	for k, p := range r.Pids {
		if p == pid && r.Keys[k] == key {
			r.MJ[k] += mj
			return
		}
	}
	r.Pids = append(r.Pids, pid)
	r.Keys = append(r.Keys, key)
	r.MJ = append(r.MJ, mj)
}

// seg is one sample's span.
type seg struct {
	pid       uint32
	slot      int32 // its (pid, key)'s index in Board.slots
	key       uint64
	t0, t1    int64
	u         [4]float64 // percent
	unaligned bool
}

// Board is one board's alignment, model and idle power. The zero value is
// not usable; create one with [New]. A Board is not safe for concurrent
// use.
type Board struct {
	cfg     Config
	hold    int64
	horizon float64 // s

	pending    []procshare.Interval
	pendNone   []uint8 // parallel to pending: noneAtEnd, noneAtStart
	pendingMJ  uint64
	segs       []seg
	frontier   int64            // the time up to which every active process has reported
	newest     int64            // the newest sample's end
	instant    int64            // the board's newest sampling instant
	period     int64            // the driver's sample period, as estimated
	gaps       gapsT            // recent gaps between sampling instants
	ngaps      int              // gaps seen
	pidEnd     map[uint32]int64 // each process's newest sample end
	listed     int              // processes in the latest listing; negative: unknown
	prevListed int              // and in the one before
	lastT1     int64            // the end of the newest interval split

	fit    nnls.Fit
	theta  [nnls.MaxTerms]float64
	usable bool
	idle   idlepower.Mean // the idle intervals' power
	prior  float64
	resAbs float64 // Σ decayed |residual| of the model's rows, clipped
	resN   float64 // Σ decayed rows in resAbs
	outRun int     // rows down-weighed one after another

	// segs is sorted by t1; maxSeg is the longest span in it, so that
	// the spans that can overlap [t0, t1) lie between the first ending
	// after t0 and the first ending at or after t1 + maxSeg.
	maxSeg int64
	slots  map[slotKey]int32 // each (pid, key) in segs, numbered
	pos    []int32           // per slot: its index in ids, valid when posGen matches
	posGen []uint32
	gen    uint32

	// scratch
	ids     []uint32
	keys    []uint64            // parallel to ids
	feat    [][NumTerms]float64 // per process, by term: percent·s; TermStatic unused
	weights []uint64
	out     []uint64
	procs   []Proc   // OnSplit's parts
	cover   []uint64 // OnSplit's device times
	even    []uint64 // procshare.Cover's scratch
}

// New returns a Board.
func New(cfg Config) *Board {
	b := &Board{cfg: cfg, hold: int64(cfg.Hold), horizon: cfg.Horizon.Seconds(), period: maxSpan}
	// Where the data cannot tell SM from another term (memory traffic
	// that tracks SM), SM takes the power: the split before the model.
	b.fit.Prefer(1 << TermSM)
	if b.hold == 0 {
		b.hold = int64(DefaultHold)
	}
	if b.horizon <= 0 {
		b.horizon = DefaultHorizon.Seconds()
	}
	b.idle.Horizon = cfg.Horizon // as b.horizon: the same seconds, zero the default
	return b
}

// Push adds counter intervals, oldest first, after those pushed before.
func (b *Board) Push(ivs []procshare.Interval) {
	for _, iv := range ivs {
		b.pending = append(b.pending, iv)
		var none uint8
		if b.listed == 0 {
			none |= noneAtEnd
		}
		if b.prevListed == 0 {
			none |= noneAtStart
		}
		b.pendNone = append(b.pendNone, none)
		b.pendingMJ += iv.EnergyMJ
	}
}

// Listed records how many processes the latest listing showed; a
// negative n means the listing failed. The intervals pushed after it
// teach the idle power only when it showed none: an interval that no
// sample covers on a board running a process is one whose samples are
// late, not an idle one. A new Board takes the board to list none.
func (b *Board) Listed(n int) { b.prevListed, b.listed = b.listed, n }

// PendingMJ returns the energy of the intervals pushed and not yet split.
func (b *Board) PendingMJ() uint64 { return b.pendingMJ }

// AddSamples adds utilization samples. It sorts ss by T1.
//
// NVML stamps each process's sample at its own instant (go-nvml #51):
// stamps within sameInstant of each other are one sampling instant, and
// a sample's span starts at its own process's previous sample when that
// is within about a period, else one period before it. The period is the
// median of the recent gaps between instants, never below NVML's
// shortest, so that neither a pair of stamps microseconds apart nor an
// idle board's skipped instants set it for good.
func (b *Board) AddSamples(ss []Sample) {
	if len(ss) == 0 {
		return
	}
	sortByT1(ss)
	if b.pidEnd == nil {
		b.pidEnd = make(map[uint32]int64)
	}
	for _, s := range ss {
		if s.Unaligned || s.T1 <= b.instant+sameInstant {
			continue
		}
		if g := s.T1 - b.instant; b.instant > 0 && g <= maxSpan {
			b.gaps[b.ngaps%len(b.gaps)] = max(g, minPeriod)
			b.ngaps++
			b.period = b.medianGap()
		}
		b.instant = s.T1
	}
	for _, s := range ss {
		t0 := s.T0
		if t0 <= 0 || t0 >= s.T1 {
			t0 = s.T1 - b.period
			// Jitter and a period estimated a little short must not
			// leave holes; a skipped instant must not be spanned.
			if prev, ok := b.pidEnd[s.Pid]; ok && prev < s.T1 && s.T1-prev <= b.period*5/4 {
				t0 = prev
			}
		}
		if !s.Unaligned {
			b.pidEnd[s.Pid] = max(b.pidEnd[s.Pid], s.T1)
		}
		b.segs = append(b.segs, seg{pid: s.Pid, slot: b.slotOf(s.Pid, s.Key), key: s.Key, t0: t0, t1: s.T1,
			u: [4]float64{float64(s.SM), float64(s.Mem), float64(s.Enc), float64(s.Dec)}, unaligned: s.Unaligned})
		b.maxSeg = max(b.maxSeg, s.T1-t0)
		// Keep segs sorted by t1: the new one is nearly always the
		// latest.
		for k := len(b.segs) - 1; k > 0 && b.segs[k].t1 < b.segs[k-1].t1; k-- {
			b.segs[k], b.segs[k-1] = b.segs[k-1], b.segs[k]
		}
		b.newest = max(b.newest, s.T1)
	}
	// The frontier: every process sampled lately has reported up to it.
	// A process not sampled within a period of the newest sample has
	// stopped (NVML omits a process with no activity) or exited, and
	// does not hold it back.
	f := b.newest
	for pid, t := range b.pidEnd {
		switch {
		case t < b.newest-keepPids:
			delete(b.pidEnd, pid)
		case t >= b.newest-b.period-sameInstant:
			f = min(f, t)
		}
	}
	b.frontier = max(b.frontier, f)
}

// medianGap returns the median of the recent gaps between sampling
// instants.
func (b *Board) medianGap() int64 {
	n := min(b.ngaps, len(b.gaps))
	var g [len(gapsT{})]int64
	copy(g[:], b.gaps[:n])
	for i := 1; i < n; i++ { // insertion sort: n ≤ 9, no allocation
		for j := i; j > 0 && g[j] < g[j-1]; j-- {
			g[j], g[j-1] = g[j-1], g[j]
		}
	}
	return g[n/2]
}

// IdleWatts returns the idle power as known now: IdleWatts when fixed;
// else the mean power of the idle intervals once they add up to
// idlepower.MinSeconds (an interval is idle when no sample's span comes
// within 300 ms of it); else the prior ([Board.SetPrior]), what identical boards
// measured; else the model's static term once about 30 s of rows are
// behind it; else 0, and the processes carry the static part.
func (b *Board) IdleWatts() float64 {
	w, _, _ := b.Idle()
	return w
}

// IdleSource says where a board's idle power comes from.
type IdleSource uint8

// The sources of [Board.IdleWatts]; its order of preference is Fixed,
// Intervals, Peers, Model.
const (
	IdleNone      IdleSource = iota // nothing learned: 0
	IdleFixed                       // Config.IdleWatts
	IdleIntervals                   // the board's own idle intervals
	IdleModel                       // the power model's static term
	IdlePeers                       // identical boards' idle intervals
)

// IdleSourceNames name the sources, as the idle gauges label them.
var IdleSourceNames = [...]string{"none", "fixed", "idle_intervals", "model", "peers"}

// Idle returns the idle power (see [Board.IdleWatts]), where it comes
// from, and the seconds of data behind it after forgetting: idle seconds
// from idle intervals, model rows (about a second each) from the model,
// zero otherwise.
func (b *Board) Idle() (watts float64, src IdleSource, seconds float64) {
	switch {
	case b.cfg.IdleWatts > 0:
		return b.cfg.IdleWatts, IdleFixed, 0
	case b.idleKnown():
		w, _ := b.idle.Watts()
		return w, IdleIntervals, b.idle.Seconds()
	case b.prior > 0:
		return b.prior, IdlePeers, 0
	case b.usable && b.fit.Count() >= minIntercept:
		return b.theta[TermStatic], IdleModel, b.fit.Count()
	}
	return 0, IdleNone, 0
}

// OwnIdle returns the idle power measured on this board's own idle
// intervals, and false until they add up to idlepower.MinSeconds.
func (b *Board) OwnIdle() (float64, bool) { return b.idle.Watts() }

// idleKnown reports whether the board's own idle intervals measured its
// idle power (package idlepower's threshold).
func (b *Board) idleKnown() bool {
	_, ok := b.idle.Watts()
	return ok
}

// SetPrior sets the idle power to use while the board has learned none
// of its own: the agent passes what identical boards beside it measured.
// Zero or less clears it.
func (b *Board) SetPrior(w float64) { b.prior = max(w, 0) }

// ModelRows returns the effective number of rows, about a second each,
// behind the power model.
func (b *Board) ModelRows() float64 { return b.fit.Count() }

// Model returns the power model's coefficients (see the package doc),
// and whether they split the energy yet.
func (b *Board) Model() (theta [NumTerms]float64, learned bool) {
	copy(theta[:], b.theta[:NumTerms])
	if b.cfg.IdleWatts > 0 || b.idleKnown() {
		theta[TermStatic] = b.IdleWatts()
	}
	return theta, b.usable
}

// Split splits the pending intervals whose samples have arrived, a sample
// ending at or after their end has been seen, or whose hold has passed
// by now (on the ring's scale), or all of them when flush is set; r
// receives the shares. It then refits the model.
func (b *Board) Split(now int64, flush bool, r *Result) {
	r.reset()
	k := 0
	for k < len(b.pending) {
		iv := b.pending[k]
		if !flush && b.hold >= 0 && iv.T1 > b.frontier && iv.T1+b.hold > now {
			break
		}
		k++
	}
	if k == 0 {
		return
	}
	staticW, src, _ := b.Idle()
	if w, ok := b.idle.Provisional(); src == IdleNone && ok {
		// Idle seconds short of a measurement (or decayed just under
		// one) beat none: without them, the processes would carry the
		// static power.
		staticW = w
	}
	var x [NumTerms]float64
	var y, dt float64
	for j, iv := range b.pending[:k] {
		d := float64(iv.T1-iv.T0) / 1e9
		// An interval no sample covers teaches the idle power only when
		// the listings around it show it could be idle (else its
		// samples may be late, or missing: a wall clock stepped back
		// hides them): when every active process has reported past it
		// and no process was listed at its start or its end (one listed
		// only at its end started since; its samples came and do not
		// cover the interval), or when its hold passed and none was
		// listed at its end. One flushed early never does.
		learn := b.pendNone[j] != 0 && iv.T1+guard <= b.frontier ||
			b.pendNone[j]&noneAtEnd != 0 && !flush && b.hold >= 0 && iv.T1+b.hold <= now
		if b.splitOne(iv, staticW, learn, r, &x) && d > 0 {
			dt += d
			y += float64(iv.EnergyMJ) / 1000
		}
		b.lastT1 = max(b.lastT1, iv.T1)
	}
	b.pending = append(b.pending[:0], b.pending[k:]...)
	b.pendNone = append(b.pendNone[:0], b.pendNone[k:]...)
	b.pendingMJ -= r.SplitMJ
	// One model row per split: its intervals together, a second or so,
	// weighed by its length (its terms scaled by 1/√Δt, so that its
	// squared residual counts once per second, as independent seconds
	// would).
	if dt > 0 {
		x[TermStatic] = dt
		sc := 1 / math.Sqrt(dt)
		for t := range x {
			x[t] *= sc
		}
		y *= sc
		b.robust(&x, &y)
		b.fit.Add(x[:], y, math.Exp(-dt/b.horizon))
		b.refit()
	}
	// Spans that no pending interval can still reach.
	cut := b.lastT1 - keepSegs
	if len(b.segs) > 0 && b.segs[0].t1 < cut {
		k, _ := slices.BinarySearchFunc(b.segs, cut, func(s seg, t int64) int { return cmpInt(s.t1, t) })
		b.segs = append(b.segs[:0], b.segs[k:]...)
		// The longest span kept; and, once the slots of processes gone
		// outnumber the spans, the slots renumbered from the spans kept.
		renumber := len(b.slots) > 2*len(b.segs)+64
		if renumber {
			clear(b.slots)
		}
		b.maxSeg = 0
		for k := range b.segs {
			sg := &b.segs[k]
			if renumber {
				sg.slot = b.slotOf(sg.pid, sg.key)
			}
			b.maxSeg = max(b.maxSeg, sg.t1-sg.t0)
		}
	}
}

// splitOne splits one interval into r. It reports whether the interval
// teaches the model, and then adds its terms to x: an interval given to
// processes whose samples do not overlap it, only come near it, does not.
func (b *Board) splitOne(iv procshare.Interval, staticW float64, learnIdle bool, r *Result, x *[NumTerms]float64) bool {
	one := [1]procshare.Interval{iv}
	d := float64(iv.T1-iv.T0) / 1e9
	b.idle.Forget(iv.T1)
	exact := b.gather(iv.T0, iv.T1, false)
	if !exact && !b.gather(iv.T0-guard, iv.T1+guard, true) {
		// No process near: idle, and the rest is unattributed. It
		// teaches the idle power only when learnIdle: an interval split
		// early (a flush) or on a busy board may be one whose samples
		// are late.
		learn := learnIdle
		if d > 0 && learn {
			b.idle.Add(d, float64(iv.EnergyMJ))
		}
		known, src, _ := b.Idle()
		if pw, ok := b.idle.Provisional(); ok && (src == IdleNone || src == IdlePeers) {
			// The board's first idle moments: until they add up to a
			// measurement, their own mean is the best idle power there
			// is, better than none or a sibling's.
			staticW = pw
		} else {
			staticW = known // this interval may have completed the measurement
		}
		w := procshare.Window(one[:], staticW, procshare.Measured, nil, nil)
		r.IdleMJ += w.IdleMJ
		r.UnattributedMJ += w.UnattributedMJ
		r.SplitMJ += iv.EnergyMJ
		if b.cfg.OnSplit != nil {
			b.cfg.OnSplit(b.cfg.Dev, iv.T0, iv.T1, nil, nil, w.IdleMJ+w.UnattributedMJ, nil)
		}
		return learn
	}
	b.weights = b.weights[:0]
	var total uint64
	for k := range b.ids {
		f := &b.feat[k]
		if exact {
			for t := TermSM; t < NumTerms; t++ {
				x[t] += f[t] / 100
			}
		}
		var w uint64
		if b.usable {
			// Modelled energy in µJ: Σ coefficient (W at 100 %) × s at 100 %.
			m := 0.0
			for t := TermSM; t < NumTerms; t++ {
				m += b.theta[t] * f[t] / 100
			}
			// Capped so that no coefficient, however absurd, overflows
			// the sum: a process's modelled energy in an interval is
			// under maxModelJ, and the weights of a million processes
			// fit in 64 bits.
			w = uint64(min(max(m, 0), maxModelJ) * 1e6)
		}
		b.weights = append(b.weights, w)
		total += w
	}
	if total == 0 {
		// Until the model is learned, or where it sees no power in what
		// the samples show: SM shares, in ‰·s.
		for k := range b.ids {
			b.weights[k] = uint64((b.feat[k][TermSM] + b.feat[k][TermSMMem]) * 1000)
		}
	}
	b.out = b.out[:0]
	for range b.ids {
		b.out = append(b.out, 0)
	}
	w := procshare.Window(one[:], staticW, procshare.Measured, b.weights, b.out)
	r.IdleMJ += w.IdleMJ
	r.UnattributedMJ += w.UnattributedMJ
	r.SplitMJ += iv.EnergyMJ
	for k, pid := range b.ids {
		if b.out[k] > 0 {
			r.give(pid, b.keys[k], b.out[k])
		}
	}
	if b.cfg.OnSplit != nil {
		b.onSplit(iv, w.IdleMJ+w.UnattributedMJ)
	}
	return exact
}

// gather collects into ids and feat each process's utilization integrated
// over [t0, t1), in percent·seconds, and reports whether any sample's
// span overlaps it; alignedOnly skips the unaligned samples.
func (b *Board) gather(t0, t1 int64, alignedOnly bool) bool {
	b.ids, b.keys, b.feat = b.ids[:0], b.keys[:0], b.feat[:0]
	b.gen++
	if b.gen == 0 { // wrapped: no stale entry may match
		clear(b.posGen)
		b.gen = 1
	}
	any := false
	lo, _ := slices.BinarySearchFunc(b.segs, t0+1, func(s seg, t int64) int { return cmpInt(s.t1, t) })
	for i := lo; i < len(b.segs); i++ {
		s := &b.segs[i]
		if s.t1-b.maxSeg >= t1 {
			break // this span and every later one start at or after t1
		}
		if alignedOnly && s.unaligned {
			continue
		}
		o := min(s.t1, t1) - max(s.t0, t0)
		if o <= 0 {
			continue
		}
		any = true
		sec := float64(o) / 1e9
		k := -1
		if b.posGen[s.slot] == b.gen {
			k = int(b.pos[s.slot])
		}
		if k < 0 {
			b.posGen[s.slot], b.pos[s.slot] = b.gen, int32(len(b.ids))
			b.ids = append(b.ids, s.pid)
			b.keys = append(b.keys, s.key)
			b.feat = append(b.feat, [NumTerms]float64{})
			k = len(b.ids) - 1
		}
		f := &b.feat[k]
		ov := min(s.u[0], s.u[1])
		f[TermSM] += (s.u[0] - ov) * sec
		f[TermSMMem] += ov * sec
		f[TermMem] += (s.u[1] - ov) * sec
		f[TermEnc] += s.u[2] * sec
		f[TermDec] += s.u[3] * sec
	}
	return any
}

// robust down-weighs a row whose residual under the current model is
// far out of line (Huber's weight, min(1, c/|r|), with c = huberK times
// the rows' mean absolute residual, itself of residuals clipped at c), so
// that one row the alignment got wrong (samples counted twice or missed
// across a clock step, a counter glitch) does not skew the model for the
// forgetting horizon: a squared loss lets one row 100 times off outweigh
// a hundred good ones. A real change of the board's power still moves the
// model, row by row.
func (b *Board) robust(x *[NumTerms]float64, y *float64) {
	if !b.usable {
		return
	}
	pred := 0.0
	for t := range x {
		pred += b.theta[t] * x[t]
	}
	r := math.Abs(*y - pred)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return
	}
	c := math.Inf(1)
	if b.resN >= minRows {
		// The floor keeps the scale above 0 where the rows fit exactly
		// (noise-free power, integer-mJ rows).
		c = max(huberK*b.resAbs/b.resN, huberFloorJ)
	}
	clip := c
	if r > c {
		b.outRun++
		if b.outRun <= maxOutRun {
			w := math.Sqrt(c / r)
			for t := range x {
				x[t] *= w
			}
			*y *= w
		} else {
			// Rows out of line one after another are the board changing
			// (a new workload, a new clock), not a glitch: each is taken
			// whole, and the scale grows with it.
			clip = r
		}
	} else {
		b.outRun = 0
	}
	b.resAbs = b.resAbs*resDecay + min(r, clip)
	b.resN = b.resN*resDecay + 1
}

// refit solves the model, the static term given when the idle power is
// known otherwise.
func (b *Board) refit() {
	if b.fit.Count() < minRows {
		return
	}
	var base [nnls.MaxTerms]float64
	given := uint(0)
	if b.cfg.IdleWatts > 0 || b.idleKnown() {
		base[TermStatic] = b.IdleWatts()
		given = 1 << TermStatic
	}
	th, ok := b.fit.Solve(base, given)
	if !ok {
		return
	}
	b.theta = th
	b.usable = false
	for t := TermSM; t < NumTerms; t++ {
		if th[t] > 0 {
			b.usable = true
		}
	}
}

// slotKey is a process on the board: its pid and key.
type slotKey struct {
	pid uint32
	key uint64
}

// slotOf returns the slot of (pid, key), numbering it when new.
func (b *Board) slotOf(pid uint32, key uint64) int32 {
	if b.slots == nil {
		b.slots = make(map[slotKey]int32)
	}
	sk := slotKey{pid, key}
	n, ok := b.slots[sk]
	if !ok {
		n = int32(len(b.slots))
		b.slots[sk] = n
		if int(n) >= len(b.pos) {
			b.pos = append(b.pos, 0)
			b.posGen = append(b.posGen, 0)
		}
	}
	return n
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortByT1(ss []Sample) {
	slices.SortFunc(ss, func(x, y Sample) int {
		switch {
		case x.T1 < y.T1:
			return -1
		case x.T1 > y.T1:
			return 1
		}
		return 0
	})
}

// onSplit hands interval iv, just split among b.ids (their shares in
// b.out), to Config.OnSplit, with rest the mJ no process got.
func (b *Board) onSplit(iv procshare.Interval, rest uint64) {
	b.procs = b.procs[:0]
	for k, pid := range b.ids {
		b.procs = append(b.procs, Proc{Pid: pid, Key: b.keys[k]})
	}
	if cap(b.cover) < len(b.out) {
		b.cover = make([]uint64, len(b.out), 2*len(b.out))
	}
	b.cover = b.cover[:len(b.out)]
	var dt uint64
	if iv.T1 > iv.T0 {
		dt = uint64(iv.T1 - iv.T0)
	}
	b.even = procshare.Cover(dt, b.out, b.cover, b.even)
	b.cfg.OnSplit(b.cfg.Dev, iv.T0, iv.T1, b.procs, b.out, rest, b.cover)
}
