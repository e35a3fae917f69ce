package tracker

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// ErrOutOfRange reports a raw reading above the counter's declared maximum.
// Such a reading is rejected and leaves the tracker's state unchanged.
var ErrOutOfRange = errors.New("tracker: reading above counter maximum")

// ErrTimeBackwards reports a reading whose time is earlier than the previous
// accepted reading's. Such a reading is rejected and leaves the tracker's
// state unchanged, so the energy it would have shown is charged by the next
// reading with a sane time. It is checked whether or not a power bound is
// set.
var ErrTimeBackwards = errors.New("tracker: reading time went backwards")

// MaxUpdatePeriod is the first step's allowance: the window of the first
// reading after [First] starts this long before the First reading, because
// the counter may have been about to publish a whole update period's energy
// when it was first read. It must be at least the longest time a counter
// holds one value while the device draws power; NVML's energy counter
// updates every 20 to 100 ms.
const MaxUpdatePeriod = time.Second

// MaxBoundGrowth is how far a run of glitches may raise the power bound:
// never above MaxBoundGrowth × [Limits.MaxWatts]. A counter that implies
// more is misreading, or configured with a bound too wrong to correct.
const MaxBoundGrowth = 4

// The rule that learns a bound set too low (see "Learning the bound" in
// the package doc).
const (
	learnRun    = 4   // confirmed glitches
	learnWindow = 16  // among this many consecutive steps that moved the baseline
	learnSpread = 2   // the run's implied powers agree within this factor
	learnMargin = 1.5 // the new bound over the run's highest implied power
)

// nsPerMJPerW is how many ns at 1 W make 1 mJ.
const nsPerMJPerW = 1_000_000

// runGlitch is one confirmed glitch of a run: its rise, its window in ns,
// what it charged, its implied power in W, and the count of steps that
// moved the baseline before it.
type runGlitch struct {
	rise, window, charged uint64
	watts                 float64
	move                  uint64
}

// ErrBoundExceeded reports readings that rise faster than the power bound
// allows, again and again: the bound is below what the device draws. The
// tracker returns no such error; callers that watch [Step.Raised] or count
// glitches wrap it in their report.
var ErrBoundExceeded = errors.New("tracker: readings exceed the power bound")

// Kind says what a reading did to the series.
type Kind uint8

const (
	// First is the reading that anchors the series; it is charged nothing.
	First Kind = iota
	// Forward is a reading at or above the baseline whose rise is within the
	// bound; the rise is charged.
	Forward
	// Wrap is a reading that passed the counter's maximum and restarted at 0;
	// the distance travelled through the wrap point is charged.
	Wrap
	// Reset is a backwards reading that is not a wrap, within the bound: the
	// counter restarted, and the new raw value is charged.
	Reset
	// Jitter is a backwards reading that is neither a plausible wrap nor a
	// plausible reset. It is charged nothing and the baseline stays where it
	// was. It occurs only with a power bound.
	Jitter
	// Glitch is a rise beyond the bound. It is charged at most the last
	// known power over the time since the baseline was first seen, and the
	// baseline moves to it. It occurs only with a power bound.
	Glitch
)

// String returns the kind's name in lower case.
func (k Kind) String() string {
	switch k {
	case First:
		return "first"
	case Forward:
		return "forward"
	case Wrap:
		return "wrap"
	case Reset:
		return "reset"
	case Jitter:
		return "jitter"
	case Glitch:
		return "glitch"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Step is the outcome of one reading: its kind and the non-negative delta it
// charges, in the counter's own unit.
type Step struct {
	Kind  Kind
	Delta uint64
	// Raised is set on the reading at which a run of glitches raised the
	// power bound (see [Tracker.LastRaise]); Delta then includes what the
	// run's glitches were not charged.
	Raised bool
	// Confirmed is set on the reading after a Glitch that is not its
	// recovery (see [Tracker.Advance]): the glitch was no single bad
	// reading. Confirmed glitches close together are what a bound too low
	// shows; a spike that recovers is not.
	Confirmed bool
}

// Limits are the physical limits of one counter, fixed for a [Tracker]'s
// life. The zero value is a full-range counter with no power bound.
type Limits struct {
	// CounterMax is the largest raw value before the counter wraps to 0, in
	// the counter's own unit; 0 means the full uint64 range, as NVML's
	// energy counter has. For a RAPL domain read in µJ this is its
	// max_energy_range_uj; a source that reports RAPL in mJ must scale it
	// the same way as its readings.
	CounterMax uint64
	// MaxWatts is the most power the device can draw, in W. The counter's
	// unit must be the millijoule for the bound to mean anything. 0 means
	// no power bound: every rise is a [Forward] and every backwards step a
	// [Wrap] or a [Reset], never a [Jitter] or a [Glitch]. NaN, infinite and
	// negative values are treated as 0.
	MaxWatts float64
	// MaxWattsFirm reports MaxWatts as a ceiling the device cannot pass
	// (one read from the hardware's own limits), not an estimate: a run of
	// glitches then shows a counter misreading, and never raises the bound
	// (see "Learning the bound" in the package doc). It means nothing
	// without a power bound.
	MaxWattsFirm bool
}

// Tracker turns successive raw readings of one counter into [Step]s.
//
// The zero value tracks a full-range counter with no power bound, as
// New(Limits{}) does. A Tracker must not be copied after first use and is
// not safe for concurrent use.
type Tracker struct {
	max uint64 // largest raw value; 0 means math.MaxUint64
	// The power bound is wm × 2^we W exactly, watts as a float64; wm == 0
	// means no bound. watts0 is the configured bound.
	wm            uint64
	we            int
	watts, watts0 float64
	// growth is how far learning may raise the bound over watts0:
	// MaxBoundGrowth, or 1 for a firm bound.
	growth float64

	seen   bool
	base   uint64 // the baseline: the high-water mark deltas are measured from
	baseAt int64  // when the reading that set the baseline returned
	// anchor is the time of the last reading, before the baseline was set,
	// that showed a value other than the baseline's. Until the baseline
	// first moves there is none (anchored is false) and the window starts
	// MaxUpdatePeriod before firstAt.
	anchor   int64
	anchored bool
	firstAt  int64 // when the First reading began

	lastRaw   uint64 // the previous accepted reading, whatever its kind
	lastAt    int64  // when it returned
	lastBegan int64  // when it began: its value was sampled in [lastBegan, lastAt]
	runFrom   int64  // began of the last reading before the run of readings equal to lastRaw

	// The last known power is powDelta/powWindow mJ/ns; powWindow == 0
	// means none is known.
	powDelta, powWindow uint64

	// After a Glitch, the baseline it replaced, for one reading: a counter
	// that comes back below the glitch's value, plausibly above the old
	// baseline, had one bad reading, and its series resumes from there.
	glitched    bool
	preBase     uint64
	preBaseAt   int64
	preAnchor   int64
	preAnchored bool
	preLastAt   int64 // when the reading before the glitch began
	glitchDelta uint64
	// The pending glitch's rise, window and bound, and the count of steps
	// that moved the baseline before it, for its confirmation.
	gRise, gWindow, gBound, gMove uint64

	// moves counts the steps that moved the baseline.
	moves uint64
	// The run of confirmed glitches: the last runN, oldest first, all
	// within learnWindow moves of the newest, with no recovery, Jitter or
	// Reset among them.
	run  [learnRun]runGlitch
	runN int
	// The bound's raises: how many, and the last one's from and implied
	// powers.
	raises                    uint64
	raisedFrom, raisedImplied float64
	// debt is what a Glitch charged that its recovery could not take back;
	// later steps pay it off before they charge anything.
	debt uint64
}

// New returns a Tracker for a counter with the given limits.
func New(l Limits) Tracker {
	t := Tracker{max: l.CounterMax}
	if w := l.MaxWatts; w > 0 && !math.IsInf(w, 1) {
		t.setWatts(w)
		t.watts0 = w
		t.growth = MaxBoundGrowth
		if l.MaxWattsFirm {
			t.growth = 1
		}
	}
	return t
}

// Max returns the largest raw value the tracked counter takes.
func (t *Tracker) Max() uint64 {
	if t.max == 0 {
		return math.MaxUint64
	}
	return t.max
}

// Advance classifies the raw reading taken at time at against the baseline
// and returns the delta it charges. at is in nanoseconds on a monotonic
// clock; only differences between readings' times matter, and the First
// reading may have any time.
//
// A raw value above [Tracker.Max] returns [ErrOutOfRange], and a time
// earlier than the previous accepted reading's returns [ErrTimeBackwards];
// either is otherwise ignored. The bound is MaxWatts × (at − anchor), as
// described under "Plausible steps" in the package doc; with no power bound
// it is unlimited. Given the baseline b and the bound B, the reading raw is:
//
//   - [Forward] if raw ≥ b and raw−b ≤ B, charging raw−b;
//   - [Glitch] if raw−b > B, charging min(P × (at − the time the reading
//     that set b returned), B), where P is the last known power (0 while
//     none is known);
//   - [Wrap] if raw < b, b is in the top quarter of the range, raw in the
//     bottom quarter, and the distance through the wrap point is ≤ B,
//     charging that distance;
//   - otherwise [Reset] if raw ≤ B and, with a power bound, raw ≤ b/2 (a
//     drop to near zero), charging raw;
//   - otherwise [Jitter], charging 0.
//
// Forward (with a nonzero delta), Glitch, Wrap and Reset move the baseline
// to raw; Jitter and a zero Forward keep it and its anchor. The reading
// right after a Glitch that comes back below it, at or above the baseline
// before it and within the bound from that baseline's anchor, is a Forward
// from that baseline, charged its rise less what the Glitch charged; what
// the rise could not take back is a debt that later Forward and Wrap steps
// pay before they charge anything (Reset and Glitch steps do not pay it).
// So one bad reading costs nothing and loses nothing. Four consistent
// glitches close together raise the bound, as described under "Learning the
// bound" in the package doc.
func (t *Tracker) Advance(raw uint64, at int64) (Step, error) {
	return t.AdvanceRead(raw, at, at)
}

// AdvanceRead is [Tracker.Advance] for a reading that took time: the
// counter was sampled at some unknown instant in [began, at], as when a
// read may stall before or after it reaches the hardware. The bound and
// the glitch charge are judged on the widest window the reading allows:
// the energy it shows was counted by at, and a reading's value is known
// to have appeared only after the previous reading's began. A began after
// at is taken as at; only at must not go backwards. Advance(raw, at) is
// AdvanceRead(raw, at, at).
func (t *Tracker) AdvanceRead(raw uint64, began, at int64) (Step, error) {
	began = min(began, at)
	max := t.Max()
	if raw > max {
		return Step{}, fmt.Errorf("%w: %d > %d", ErrOutOfRange, raw, max)
	}
	if !t.seen {
		t.seen, t.base, t.firstAt, t.baseAt = true, raw, began, at
		t.lastRaw, t.lastAt, t.lastBegan = raw, at, began
		return Step{Kind: First}, nil
	}
	if at < t.lastAt {
		return Step{}, fmt.Errorf("%w: %d < %d", ErrTimeBackwards, at, t.lastAt)
	}
	if raw != t.lastRaw {
		t.runFrom = t.lastBegan
	}
	prevBegan := t.lastBegan
	t.lastRaw, t.lastAt, t.lastBegan = raw, at, began

	// window and powWin are exact: at ≥ every earlier reading's time, and
	// the difference of two int64s fits in a uint64.
	var window, powWin uint64
	if t.anchored {
		window = uint64(at) - uint64(t.anchor)
		powWin = window
	} else {
		powWin = uint64(at) - uint64(t.firstAt)
		window = addSat(powWin, uint64(MaxUpdatePeriod))
	}

	pending := t.glitched
	if s, ok := t.recover(raw, at); ok {
		t.runN = 0
		return s, nil
	}
	// The reading after a Glitch that is not its recovery confirms it; a
	// run of confirmed glitches may raise the bound, which then judges
	// this reading too.
	var credit uint64
	raised := false
	if pending {
		credit, raised = t.confirm()
	}
	bound := uint64(math.MaxUint64)
	if t.wm != 0 {
		bound = millijoules(t.wm, t.we, window)
	}

	b := t.base
	var s Step
	move := true
	switch {
	case raw >= b && raw-b <= bound:
		s = Step{Kind: Forward, Delta: raw - b}
		if s.Delta == 0 {
			// The baseline did not move, so neither does its anchor; a
			// staircase counter shows most reads unchanged and its power is
			// visible only at a step. Nor does a run of glitches end.
			move = false
			break
		}
		t.notePower(s.Delta, powWin)
		s.Delta = t.pay(s.Delta)
	case raw > b:
		// The step covers the time since the baseline was first seen: a
		// staircase counter that stepped once since then drew this step's
		// energy over about that long, not over the last read interval.
		s = Step{Kind: Glitch}
		if t.powWindow != 0 {
			s.Delta = min(mulDivSat(t.powDelta, uint64(at)-uint64(t.baseAt), t.powWindow), bound)
		}
		t.glitched, t.glitchDelta, t.gRise, t.gWindow, t.gBound, t.gMove = true, s.Delta, raw-b, window, bound, t.moves
		t.preBase, t.preBaseAt, t.preAnchor, t.preAnchored, t.preLastAt = b, t.baseAt, t.anchor, t.anchored, prevBegan
	case b > max-max/4 && raw < max/4 && (max-b)+raw < bound:
		// (max-b) and raw are each below a quarter of the range, so the sum
		// plus the one step from max to 0 cannot overflow; the strict < is
		// the wrapped delta ≤ bound.
		s = Step{Kind: Wrap, Delta: (max - b) + raw + 1}
		t.notePower(s.Delta, powWin)
		s.Delta = t.pay(s.Delta)
	case raw <= bound && (t.wm == 0 || raw <= b/2):
		// A reload restarts the counter near zero: a drop to at most half
		// the baseline. A smaller step back, however plausible its value,
		// is a counter that jittered.
		s = Step{Kind: Reset, Delta: raw}
	default:
		s = Step{Kind: Jitter}
		move = false
	}
	if s.Kind == Jitter || s.Kind == Reset {
		// A step back ends a run of glitches: the counter is not simply
		// rising faster than the bound. A plausible Forward or Wrap does
		// not, so that a load that varies across the bound is learned
		// too; its glitches must still fall within learnWindow moves.
		t.runN = 0
	}
	if move {
		t.moves++
		t.base, t.baseAt, t.anchor, t.anchored = raw, at, t.runFrom, true
	}
	if credit != 0 {
		s.Delta = addSat(s.Delta, t.pay(credit))
	}
	s.Raised, s.Confirmed = raised, pending
	return s, nil
}

// confirm takes the pending Glitch as genuine: the counter did not come
// back. The last known power follows the board as far as the bound lets
// it believe: the glitch's rise, at most its bound, over its window. A run
// of learnRun confirmed glitches within learnWindow moves of the baseline,
// with no recovery, Jitter or Reset among them, whose implied powers (rise
// over window) agree within learnSpread shows a bound below what the board
// draws: the bound is raised to learnMargin × the run's highest implied
// power, at most MaxBoundGrowth × the configured bound, and confirm
// returns what the run's glitches would have charged under it beyond what
// they did.
func (t *Tracker) confirm() (credit uint64, raised bool) {
	t.notePower(min(t.gRise, t.gBound), t.gWindow)
	w := math.Inf(1)
	if t.gWindow != 0 {
		w = float64(t.gRise) / float64(t.gWindow) * nsPerMJPerW
	}
	// Glitches more than learnWindow moves before this one leave the run.
	old := 0
	for old < t.runN && t.gMove-t.run[old].move >= learnWindow {
		old++
	}
	t.runN = copy(t.run[:], t.run[old:t.runN])
	t.run[t.runN] = runGlitch{rise: t.gRise, window: t.gWindow, charged: t.glitchDelta, watts: w, move: t.gMove}
	t.runN++
	if t.runN < learnRun {
		return 0, false
	}
	t.runN = 0
	runMin, runMax := w, w
	for _, g := range t.run {
		runMin, runMax = min(runMin, g.watts), max(runMax, g.watts)
	}
	// The limit stays finite, so an infinite implied power (a rise over
	// an empty window), which says nothing about the board, is above it.
	limit := min(t.watts0*t.growth, math.MaxFloat64)
	if !(runMax <= learnSpread*runMin) || !(runMax <= limit) {
		return 0, false
	}
	to := min(runMax*learnMargin, limit)
	if !(to > t.watts) {
		return 0, false
	}
	t.raisedFrom, t.raisedImplied = t.watts, runMax
	t.setWatts(to)
	t.raises++
	for _, g := range t.run {
		// charged ≤ the old bound over the window ≤ the new one, and
		// charged < rise, a rise beyond the old bound: no underflow.
		credit = addSat(credit, min(g.rise, millijoules(t.wm, t.we, g.window))-g.charged)
	}
	return credit, true
}

// setWatts sets the power bound to w W, exactly.
func (t *Tracker) setWatts(w float64) {
	frac, exp := math.Frexp(w)
	t.wm, t.we, t.watts = uint64(math.Ldexp(frac, 53)), exp-53, w
}

// MaxWatts returns the power bound now in force, in W: Limits.MaxWatts,
// or what a run of glitches raised it to; 0 means no bound.
func (t *Tracker) MaxWatts() float64 { return t.watts }

// Raise describes the last time a run of glitches raised the bound.
type Raise struct {
	// From and To are the bound before and after, in W.
	From, To float64
	// ImpliedWatts is the highest power the run's readings implied.
	ImpliedWatts float64
	// Count is how many times the bound was raised.
	Count uint64
}

// LastRaise returns the last raise of the bound, with Count 0 if there was
// none.
func (t *Tracker) LastRaise() Raise {
	if t.raises == 0 {
		return Raise{}
	}
	return Raise{From: t.raisedFrom, To: t.watts, ImpliedWatts: t.raisedImplied, Count: t.raises}
}

// recover handles the reading after a Glitch. A reading below the
// glitch's value but at or above the baseline before it, and within the
// bound measured from that baseline's anchor, shows that the glitch was one
// bad reading: it is a Forward from the old baseline, charged what the
// counter really advanced less what the Glitch already charged. Any other
// reading confirms the glitch's baseline.
func (t *Tracker) recover(raw uint64, at int64) (Step, bool) {
	if !t.glitched {
		return Step{}, false
	}
	t.glitched = false
	if raw >= t.base || raw < t.preBase {
		return Step{}, false
	}
	var window uint64
	if t.preAnchored {
		window = uint64(at) - uint64(t.preAnchor)
	} else {
		window = addSat(uint64(at)-uint64(t.firstAt), uint64(MaxUpdatePeriod))
	}
	if raw-t.preBase > millijoules(t.wm, t.we, window) {
		return Step{}, false
	}
	rise := raw - t.preBase
	refund := min(rise, t.glitchDelta)
	t.debt = addSat(t.debt, t.glitchDelta-refund)
	if raw == t.preBase {
		// The counter never left its old baseline: keep its anchor.
		t.base, t.baseAt, t.anchor, t.anchored = raw, t.preBaseAt, t.preAnchor, t.preAnchored
	} else {
		// The new value appeared after the reading before the glitch.
		t.base, t.baseAt, t.anchor, t.anchored = raw, at, t.preLastAt, true
	}
	return Step{Kind: Forward, Delta: rise - refund}, true
}

// pay takes what a step charges toward the debt a recovered Glitch left.
func (t *Tracker) pay(d uint64) uint64 {
	p := min(d, t.debt)
	t.debt -= p
	return d - p
}

// notePower records delta over window as the last known power. A zero
// window says nothing about power and leaves the last known one.
func (t *Tracker) notePower(delta, window uint64) {
	if window != 0 {
		t.powDelta, t.powWindow = delta, window
	}
}

// millijoules returns ⌊m × 2^e W × ns ns⌋ in mJ (1 W × 1 ns = 1e-6 mJ),
// saturating at math.MaxUint64. It is exact: a float64 is m × 2^e with
// m < 2^53, so m × ns fits in 128 bits before the shift and the division.
func millijoules(m uint64, e int, ns uint64) uint64 {
	hi, lo := bits.Mul64(m, ns)
	if hi == 0 && lo == 0 {
		return 0
	}
	if e >= 0 {
		lz := bits.LeadingZeros64(hi)
		if hi == 0 {
			lz = 64 + bits.LeadingZeros64(lo)
		}
		if e > lz {
			return math.MaxUint64 // the product alone is ≥ 2^128
		}
		hi, lo = shl128(hi, lo, uint(e))
	} else {
		if -e >= 128 {
			return 0
		}
		hi, lo = shr128(hi, lo, uint(-e))
	}
	if hi >= nsPerMJPerW {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, nsPerMJPerW)
	return q
}

// shl128 and shr128 shift a 128-bit value by s < 128. A Go shift by 64 or
// more yields 0, which makes s == 0 need no case of its own.
func shl128(hi, lo uint64, s uint) (uint64, uint64) {
	if s >= 64 {
		return lo << (s - 64), 0
	}
	return hi<<s | lo>>(64-s), lo << s
}

func shr128(hi, lo uint64, s uint) (uint64, uint64) {
	if s >= 64 {
		return 0, hi >> (s - 64)
	}
	return hi >> s, lo>>s | hi<<(64-s)
}

// mulDivSat returns ⌊a × b / d⌋ for d > 0, saturating at math.MaxUint64.
func mulDivSat(a, b, d uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= d {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, d)
	return q
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// Accumulator keeps the cumulative total of one counter's deltas and counts
// its anomalies. The total never decreases: it saturates at math.MaxUint64
// rather than wrap.
//
// Advance must be called from one goroutine at a time; Total and the
// anomaly counts may be read concurrently from any goroutine, and each is
// read atomically on its own (a reader may see a Total that includes a step
// whose count it does not yet see). An Accumulator must not be copied after
// first use.
type Accumulator struct {
	tr       Tracker
	total    atomic.Uint64
	wraps    atomic.Uint64
	resets   atomic.Uint64
	jitters  atomic.Uint64
	glitches atomic.Uint64
}

// NewAccumulator returns an Accumulator for a counter with the given limits,
// interpreted as by [New].
func NewAccumulator(l Limits) *Accumulator {
	return &Accumulator{tr: New(l)}
}

// Advance feeds one raw reading taken at time at, as [Tracker.Advance]
// does, and returns the step it produced. On error the total and the counts
// are unchanged.
func (a *Accumulator) Advance(raw uint64, at int64) (Step, error) {
	return a.AdvanceRead(raw, at, at)
}

// AdvanceRead feeds one raw reading sampled at some instant in [began, at],
// as [Tracker.AdvanceRead] does.
func (a *Accumulator) AdvanceRead(raw uint64, began, at int64) (Step, error) {
	s, err := a.tr.AdvanceRead(raw, began, at)
	if err != nil {
		return s, err
	}
	switch s.Kind {
	case Wrap:
		a.wraps.Add(1)
	case Reset:
		a.resets.Add(1)
	case Jitter:
		a.jitters.Add(1)
	case Glitch:
		a.glitches.Add(1)
	}
	if s.Delta != 0 {
		// Only Advance stores, so the load-add-store cannot lose an update.
		a.total.Store(addSat(a.total.Load(), s.Delta))
	}
	return s, nil
}

// LastRaise returns the last raise of the power bound, as
// [Tracker.LastRaise]. Unlike Total it must be called from the goroutine
// that calls Advance.
func (a *Accumulator) LastRaise() Raise { return a.tr.LastRaise() }

// Total returns the sum of all deltas so far.
func (a *Accumulator) Total() uint64 { return a.total.Load() }

// Wraps returns how many readings were classified as [Wrap].
func (a *Accumulator) Wraps() uint64 { return a.wraps.Load() }

// Resets returns how many readings were classified as [Reset].
func (a *Accumulator) Resets() uint64 { return a.resets.Load() }

// Jitters returns how many readings were classified as [Jitter].
func (a *Accumulator) Jitters() uint64 { return a.jitters.Load() }

// Glitches returns how many readings were classified as [Glitch].
func (a *Accumulator) Glitches() uint64 { return a.glitches.Load() }
