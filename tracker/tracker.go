package tracker

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
)

// ErrOutOfRange reports a raw reading above the counter's declared maximum.
// Such a reading is rejected and leaves the tracker's state unchanged.
var ErrOutOfRange = errors.New("tracker: reading above counter maximum")

// Kind says what a reading did to the series.
type Kind uint8

const (
	// First is the reading that anchors the series; it is charged nothing.
	First Kind = iota
	// Forward is a reading at or above the previous one.
	Forward
	// Wrap is a reading that passed the counter's maximum and restarted at 0.
	Wrap
	// Reset is any other backwards reading: the counter restarted, and the
	// new raw value is charged.
	Reset
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
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Step is the outcome of one reading: its kind and the non-negative delta it
// charges, in the counter's own unit.
type Step struct {
	Kind  Kind
	Delta uint64
}

// Tracker turns successive raw readings of one counter into [Step]s.
//
// The zero value tracks a counter with the full uint64 range, as NVML's
// energy counter has. A Tracker must not be copied after first use and is not
// safe for concurrent use.
type Tracker struct {
	max  uint64 // largest raw value; 0 means math.MaxUint64
	prev uint64
	seen bool
}

// New returns a Tracker for a counter whose largest value is max before it
// wraps to zero, in the counter's own unit. A max of 0 means the full uint64
// range. For a RAPL domain read in µJ, max is its max_energy_range_uj; a
// source that reports RAPL in mJ (as otelenergy sources do) must scale max
// the same way as its readings.
func New(max uint64) Tracker {
	return Tracker{max: max}
}

// Max returns the largest raw value the tracked counter takes.
func (t *Tracker) Max() uint64 {
	if t.max == 0 {
		return math.MaxUint64
	}
	return t.max
}

// Advance classifies raw against the previous reading and returns the delta
// it charges. A raw value above [Tracker.Max] returns [ErrOutOfRange] and is
// otherwise ignored.
func (t *Tracker) Advance(raw uint64) (Step, error) {
	max := t.Max()
	if raw > max {
		return Step{}, fmt.Errorf("%w: %d > %d", ErrOutOfRange, raw, max)
	}
	prev, seen := t.prev, t.seen
	t.prev, t.seen = raw, true
	switch {
	case !seen:
		return Step{Kind: First}, nil
	case raw >= prev:
		return Step{Kind: Forward, Delta: raw - prev}, nil
	case prev > max-max/4 && raw < max/4:
		// (max-prev) and raw are each below a quarter of the range, so the
		// sum plus the one step from max to 0 cannot overflow.
		return Step{Kind: Wrap, Delta: (max - prev) + raw + 1}, nil
	default:
		return Step{Kind: Reset, Delta: raw}, nil
	}
}

// Accumulator keeps the cumulative total of one counter's deltas. The total
// never decreases: it saturates at math.MaxUint64 rather than wrap.
//
// Advance must be called from one goroutine at a time; Total and the event
// counts may be read concurrently from any goroutine. An Accumulator must not
// be copied after first use.
type Accumulator struct {
	tr     Tracker
	total  atomic.Uint64
	wraps  atomic.Uint64
	resets atomic.Uint64
}

// NewAccumulator returns an Accumulator for a counter with the given maximum,
// interpreted as by [New].
func NewAccumulator(max uint64) *Accumulator {
	return &Accumulator{tr: New(max)}
}

// Advance feeds one raw reading and returns the step it produced. On error
// the total is unchanged.
func (a *Accumulator) Advance(raw uint64) (Step, error) {
	s, err := a.tr.Advance(raw)
	if err != nil {
		return s, err
	}
	switch s.Kind {
	case Wrap:
		a.wraps.Add(1)
	case Reset:
		a.resets.Add(1)
	}
	if s.Delta != 0 {
		t := a.total.Load()
		sum := t + s.Delta
		if sum < t {
			sum = math.MaxUint64
		}
		a.total.Store(sum)
	}
	return s, nil
}

// Total returns the sum of all deltas so far.
func (a *Accumulator) Total() uint64 { return a.total.Load() }

// Wraps returns how many readings were classified as [Wrap].
func (a *Accumulator) Wraps() uint64 { return a.wraps.Load() }

// Resets returns how many readings were classified as [Reset].
func (a *Accumulator) Resets() uint64 { return a.resets.Load() }
